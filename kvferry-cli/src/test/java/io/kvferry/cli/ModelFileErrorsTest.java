package io.kvferry.cli;

import io.kvferry.engine.model.ModelFiles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** A model or tokenizer file that is missing, a directory or no checkpoint: exit 2 and one line naming it, no stack trace. */
@Timeout(60)
class ModelFileErrorsTest {
    @TempDir
    Path dir;

    private static void assertOneLine(CliRun r, String... parts) {
        assertEquals(2, r.code(), r.err());
        assertFalse(r.err().contains("\tat "), "a stack trace: " + r.err());
        assertEquals(1, r.err().strip().lines().count(), r.err());
        for (String p : parts) assertTrue(r.err().contains(p), r.err());
    }

    @Test
    void aMissingModelFileIsOneLine() {
        Path missing = dir.resolve("missing.bin");
        assertOneLine(CliRun.of("demo", "--model-file", missing.toString()), "model file " + missing + " does not exist");
    }

    @Test
    void aDirectoryAsModelFileIsOneLine() {
        assertOneLine(CliRun.of("serve", "--model-file", dir.toString()), "model file " + dir + " is a directory");
    }

    @Test
    void aDirectoryAsTokenizerIsOneLine() {
        Optional<Path> models = ModelFiles.findModelDir();
        assumeTrue(models.isPresent(), "no stories260K checkpoint here");
        assertOneLine(CliRun.of("demo", "--model-file", models.get().resolve(ModelFiles.CHECKPOINT).toString(), "--tokenizer", dir.toString()),
                "tokenizer " + dir + " is a directory");
    }

    /** --tokenizer without --model-file is used, not ignored: a missing one is named, a bad one refused, a good one loaded. */
    @Test
    void aTokenizerWithoutAModelFileIsUsed() throws Exception {
        Path missing = dir.resolve("tok-missing.bin");
        assertOneLine(CliRun.of("demo", "--tokenizer", missing.toString()), "tokenizer " + missing + " does not exist");
        assertOneLine(CliRun.of("serve", "--tokenizer", dir.toString()), "tokenizer " + dir + " is a directory");
        Path junk = Files.write(dir.resolve("junk.bin"), new byte[10]);
        assertOneLine(CliRun.of("demo", "--tokenizer", junk.toString()), "tokenizer " + junk);
        Optional<Path> models = ModelFiles.findModelDir();
        assumeTrue(models.isPresent(), "no stories260K checkpoint here");
        Path copy = Files.copy(models.get().resolve(ModelFiles.TOKENIZER), dir.resolve("mine.bin"));
        ModelFiles.Loaded m = ModelFiles.load(null, copy);
        assertEquals(ModelFiles.load(null, null).tokenizer().encode("Once upon a time", true, false).length,
                m.tokenizer().encode("Once upon a time", true, false).length);
    }

    /** A models folder named with -Dkvferry.models that lacks the files is an error naming it, not random weights in silence. */
    @Test
    void aNamedModelsFolderWithoutTheModelIsOneLine() {
        String before = System.getProperty("kvferry.models");
        Path empty = dir.resolve("no-models");
        System.setProperty("kvferry.models", empty.toString());
        try {
            assertOneLine(CliRun.of("demo", "--max-tokens", "2"), "-Dkvferry.models=" + empty + " is not a folder here, so it holds no stories260K.bin");
            assertOneLine(CliRun.of("serve", "--role", "prefill", "--port", "0"), "-Dkvferry.models=" + empty);
        } finally {
            if (before == null) System.clearProperty("kvferry.models");
            else System.setProperty("kvferry.models", before);
        }
    }

    @Test
    void aTruncatedCheckpointIsOneLine() throws Exception {
        Path f = Files.write(dir.resolve("short.bin"), new byte[10]);
        assertOneLine(CliRun.of("demo", "--model-file", f.toString()), f + ": 10 bytes is too short");
    }
}
