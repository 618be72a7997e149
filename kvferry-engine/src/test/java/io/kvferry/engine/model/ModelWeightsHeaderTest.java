package io.kvferry.engine.model;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A checkpoint header with absurd dims is refused naming them, whatever the file's size. */
class ModelWeightsHeaderTest {
    @TempDir
    Path dir;

    private Path header(String name, int... h) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(28).order(ByteOrder.LITTLE_ENDIAN);
        for (int v : h) b.putInt(v);
        return Files.write(dir.resolve(name), b.array());
    }

    @Test
    void dimsWhoseSizeWrapsRoundToTheFileSizeAreRefused() throws IOException {
        // dim 2^30, hidden 2^30, 4 layers, vocab 2^31-1, seq 2^31-8: the size in bytes wraps 2^64 to exactly 28.
        Path f = header("wrap.bin", 1 << 30, 1 << 30, 4, 1, 1, Integer.MAX_VALUE, Integer.MAX_VALUE - 7);
        IOException e = assertThrows(IOException.class, () -> ModelWeights.load(f));
        assertTrue(e.getMessage().contains("dim=1073741824") && e.getMessage().contains("not a llama2.c checkpoint"), e.getMessage());
    }

    @Test
    void dimsWhoseSizeOverflowsAreRefusedWithoutAWrongByteCount() throws IOException {
        Path f = header("big.bin", 1 << 30, 172, 5, 8, 4, 512, 512);
        IOException e = assertThrows(IOException.class, () -> ModelWeights.load(f));
        assertTrue(e.getMessage().contains("describes more than"), e.getMessage());
    }
}
