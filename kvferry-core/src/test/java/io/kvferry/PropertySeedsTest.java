package io.kvferry;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every jqwik property of every module runs from a fixed seed (docs/ARCHITECTURE.md, Decisions): jqwik
 * otherwise draws a new seed each run, so the suite's outcome on a clean clone would be a draw, and a
 * generator's rare input that the assertion does not handle would fail CI once in many runs.
 */
class PropertySeedsTest {
    /** A property annotation opening its line, with its attributes when it has any. */
    private static final Pattern PROPERTY = Pattern.compile("^\\s*@Property\\b(\\s*\\(([^)]*)\\))?", Pattern.MULTILINE);

    @Test
    void everyPropertyNamesItsSeed() throws IOException {
        Path root = Path.of("..");
        List<String> unseeded = new ArrayList<>();
        int seen = 0;
        try (Stream<Path> modules = Files.list(root)) {
            for (Path testDir : modules.map(m -> m.resolve("src").resolve("test")).filter(Files::isDirectory).toList()) {
                try (Stream<Path> files = Files.walk(testDir)) {
                    for (Path f : files.filter(p -> p.toString().endsWith(".java")).toList()) {
                        Matcher m = PROPERTY.matcher(read(f));
                        while (m.find()) {
                            seen++;
                            if (m.group(2) == null || !m.group(2).contains("seed")) unseeded.add(root.relativize(f) + ": " + m.group().strip());
                        }
                    }
                }
            }
        }
        assertTrue(seen > 50, "found only " + seen + " properties: the scan looks in the wrong place");
        assertTrue(unseeded.isEmpty(), "properties without a fixed seed: " + unseeded);
    }

    private static String read(Path f) {
        try {
            return Files.readString(f);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
