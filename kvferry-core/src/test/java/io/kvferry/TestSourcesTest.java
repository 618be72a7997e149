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
 * What the suite's sources must hold for a clean clone's run to be its whole and the same every time.
 * Every jqwik property of every module runs from a fixed seed (docs/ARCHITECTURE.md, Decisions): jqwik
 * otherwise draws a new seed each run, so the suite's outcome on a clean clone would be a draw, and a
 * generator's rare input that the assertion does not handle would fail CI once in many runs.
 */
class TestSourcesTest {
    /** A property annotation opening its line, with its attributes when it has any. */
    private static final Pattern PROPERTY = Pattern.compile("^\\s*@Property\\b(\\s*\\(([^)]*)\\))?", Pattern.MULTILINE);

    @Test
    void everyPropertyNamesItsSeed() throws IOException {
        List<String> unseeded = new ArrayList<>();
        int seen = 0;
        for (Path f : testSources()) {
            Matcher m = PROPERTY.matcher(read(f));
            while (m.find()) {
                seen++;
                if (m.group(2) == null || !m.group(2).contains("seed")) unseeded.add(ROOT.relativize(f) + ": " + m.group().strip());
            }
        }
        assertTrue(seen > 50, "found only " + seen + " properties: the scan looks in the wrong place");
        assertTrue(unseeded.isEmpty(), "properties without a fixed seed: " + unseeded);
    }

    /**
     * Surefire runs only classes named Test*, *Test, *Tests or *TestCase: three property classes named
     * *Properties were never run by the suite. Every class holding a test carries such a name.
     */
    @Test
    void everyClassHoldingATestIsOneSurefireRuns() throws IOException {
        Pattern test = Pattern.compile("^\\s*@(Test|Property|ParameterizedTest|RepeatedTest|TestFactory|Example)\\b", Pattern.MULTILINE);
        Pattern runs = Pattern.compile("Test.*|.*Test|.*Tests|.*TestCase");
        List<String> skipped = new ArrayList<>();
        for (Path f : testSources()) {
            String name = f.getFileName().toString().replaceFirst("\\.java$", "");
            if (!runs.matcher(name).matches() && test.matcher(read(f)).find()) skipped.add(ROOT.relativize(f).toString());
        }
        assertTrue(skipped.isEmpty(), "test classes surefire never runs: " + skipped);
    }

    private static final Path ROOT = Path.of("..");

    /** Every module's test sources. */
    private static List<Path> testSources() throws IOException {
        List<Path> all = new ArrayList<>();
        try (Stream<Path> modules = Files.list(ROOT)) {
            for (Path testDir : modules.map(m -> m.resolve("src").resolve("test")).filter(Files::isDirectory).toList()) {
                try (Stream<Path> files = Files.walk(testDir)) {
                    all.addAll(files.filter(p -> p.toString().endsWith(".java")).toList());
                }
            }
        }
        return all;
    }

    private static String read(Path f) {
        try {
            return Files.readString(f);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
