package io.kvferry.engine;

import io.kvferry.engine.model.ModelFiles;

import java.nio.file.Path;
import java.util.Optional;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The shared test checkpoint: tests that need it skip, saying so, when it is absent. */
public final class TestModels {
    private TestModels() {
    }

    public static Path requireStories() {
        Optional<Path> d = ModelFiles.findModelDir();
        assumeTrue(d.isPresent(), () -> "stories260K.bin + tok512.bin absent (looked in " + ModelFiles.searchPath()
                + "): this test needs the real checkpoint; CI has it");
        return d.get();
    }
}
