package io.kvferry.engine.model;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * Finds the test checkpoint (stories260K.bin + tok512.bin) and builds what an engine runs on: the
 * checkpoint when present, else seeded random weights of its shape with a synthetic byte tokenizer
 * (a fresh clone runs; the text is noise, the math and the transfers are real).
 */
public final class ModelFiles {
    public static final String CHECKPOINT = "stories260K.bin";
    public static final String TOKENIZER = "tok512.bin";
    public static final long RANDOM_SEED = 260;

    /** Weights and tokenizer, with a line saying which they are. */
    public record Loaded(ModelWeights weights, Tokenizer tokenizer, boolean real, String description) {
    }

    private ModelFiles() {
    }

    /** Where stories260K may be: -Dkvferry.models, $KVFERRY_MODELS, then ../shared/models and ../../shared/models. */
    public static List<Path> searchPath() {
        List<Path> dirs = new ArrayList<>();
        String prop = System.getProperty("kvferry.models");
        if (prop != null && !prop.isBlank()) dirs.add(Path.of(prop));
        String env = System.getenv("KVFERRY_MODELS");
        if (env != null && !env.isBlank()) dirs.add(Path.of(env));
        dirs.add(Path.of("..", "shared", "models"));
        dirs.add(Path.of("..", "..", "shared", "models"));
        return dirs;
    }

    /**
     * A models folder the user named (-Dkvferry.models, KVFERRY_MODELS) must hold both files: one that does not
     * (a typo, a folder not mounted) silently ran random weights, and its text was noise.
     */
    static void requireNamedModelDirs() throws IOException {
        String[][] named = {{"-Dkvferry.models", System.getProperty("kvferry.models")}, {"KVFERRY_MODELS", System.getenv("KVFERRY_MODELS")}};
        for (String[] n : named) {
            if (n[1] == null || n[1].isBlank()) continue;
            Path d = Path.of(n[1]);
            if (!Files.isRegularFile(d.resolve(CHECKPOINT)) || !Files.isRegularFile(d.resolve(TOKENIZER))) {
                throw new IOException(n[0] + "=" + n[1] + (Files.isDirectory(d) ? " names a folder without " : " is not a folder here, so it holds no ")
                        + CHECKPOINT + " and " + TOKENIZER + ": name the folder that holds both, or leave it unset");
            }
        }
    }

    /** The folder holding both files, if any. */
    public static Optional<Path> findModelDir() {
        for (Path d : searchPath()) {
            if (Files.isRegularFile(d.resolve(CHECKPOINT)) && Files.isRegularFile(d.resolve(TOKENIZER))) return Optional.of(d.toAbsolutePath().normalize());
        }
        return Optional.empty();
    }

    /** Fails naming {@code what} and the path unless it is a readable regular file (not missing, not a directory). */
    static void requireRegularFile(Path file, String what) throws IOException {
        if (!Files.exists(file)) throw new IOException(what + " " + file + " does not exist");
        if (Files.isDirectory(file)) throw new IOException(what + " " + file + " is a directory, not a file");
        if (!Files.isRegularFile(file)) throw new IOException(what + " " + file + " is not a regular file");
        if (!Files.isReadable(file)) throw new IOException(what + " " + file + " is not readable");
    }

    /**
     * @param checkpoint an explicit llama2.c checkpoint (its tokenizer: {@code tokenizer}, or tok512.bin
     *                   beside it), or null to find stories260K or fall back to random weights
     * @param tokenizer  an explicit tokenizer, or null for the one beside the checkpoint; without a checkpoint it
     *                   replaces tok512.bin of the stories260K found (or the random weights' synthetic one), and
     *                   must have stories260K's vocabulary size
     */
    public static Loaded load(Path checkpoint, Path tokenizer) throws IOException {
        if (checkpoint != null) {
            ModelWeights w = ModelWeights.load(checkpoint);
            Path tok = tokenizer != null ? tokenizer : checkpoint.resolveSibling(TOKENIZER);
            if (tokenizer == null && !Files.exists(tok)) {
                throw new IOException("no tokenizer for " + checkpoint + ": " + tok + " does not exist (pass --tokenizer)");
            }
            return new Loaded(w, Tokenizer.load(tok, w.config.vocabSize()), true, "checkpoint " + checkpoint + " (" + w.config + ")");
        }
        // A tokenizer given alone is used, not ignored: a missing or bad one is an error naming it, before any search.
        if (tokenizer != null) requireRegularFile(tokenizer, "tokenizer");
        requireNamedModelDirs();
        Optional<Path> dir = findModelDir();
        if (dir.isPresent()) return load(dir.get().resolve(CHECKPOINT), tokenizer != null ? tokenizer : dir.get().resolve(TOKENIZER));
        LlamaConfig shape = LlamaConfig.stories260K();
        Tokenizer tok = tokenizer != null ? Tokenizer.load(tokenizer, shape.vocabSize()) : Tokenizer.synthetic(shape.vocabSize());
        return new Loaded(ModelWeights.random(shape, RANDOM_SEED), tok, false,
                "random weights of stories260K's shape (seed " + RANDOM_SEED + "): " + CHECKPOINT + " not found in " + searchPath()
                        + (tokenizer != null ? ", tokenizer " + tokenizer : "") + "; the text is noise, the transfers are real");
    }
}
