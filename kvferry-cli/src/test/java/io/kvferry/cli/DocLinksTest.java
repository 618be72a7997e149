package io.kvferry.cli;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The README and docs/ point at files that exist: a relative Markdown link ({@code [text](path)} or an image) names a
 * file of the repository, and a {@code #heading} after it names a heading of that file (GitHub's anchor rule: lower
 * case, punctuation but hyphens dropped, spaces as hyphens). The README's reference sections moved into docs/ once;
 * a link left behind by such a move, or a renamed heading, fails here.
 */
class DocLinksTest {
    private static final Path ROOT = Path.of("..");
    private static final Pattern LINK = Pattern.compile("\\]\\(([^)\\s]+)\\)");

    private static List<Path> documents() throws IOException {
        List<Path> docs = new ArrayList<>();
        docs.add(ROOT.resolve("README.md"));
        try (Stream<Path> s = Files.list(ROOT.resolve("docs"))) {
            s.filter(p -> p.toString().endsWith(".md")).sorted().forEach(docs::add);
        }
        return docs;
    }

    /** GitHub's anchor of a heading line's text. */
    static String anchor(String heading) {
        return heading.strip().toLowerCase().replaceAll("[^\\p{L}\\p{N} _-]", "").replace(' ', '-');
    }

    private static TreeSet<String> anchors(Path md) throws IOException {
        TreeSet<String> out = new TreeSet<>();
        boolean fenced = false;
        for (String line : Files.readAllLines(md)) {
            if (line.startsWith("```")) fenced = !fenced;
            if (!fenced && line.startsWith("#")) out.add(anchor(line.replaceFirst("^#+", "")));
        }
        return out;
    }

    @Test
    void everyRelativeLinkNamesAFileAndHeadingThatExist() throws IOException {
        List<Path> docs = documents();
        assertTrue(docs.size() >= 5, "README and docs/*.md found: " + docs);
        TreeSet<String> broken = new TreeSet<>();
        for (Path md : docs) {
            Matcher m = LINK.matcher(Files.readString(md));
            while (m.find()) {
                String target = m.group(1);
                if (target.matches("^[a-z]+:.*")) continue; // http:, https:, mailto:
                int hash = target.indexOf('#');
                String file = hash < 0 ? target : target.substring(0, hash);
                Path to = file.isEmpty() ? md : md.getParent().resolve(file).normalize();
                if (!Files.exists(to)) {
                    broken.add(md.getFileName() + ": " + target + " (no such file)");
                } else if (hash >= 0 && to.toString().endsWith(".md") && !anchors(to).contains(target.substring(hash + 1))) {
                    broken.add(md.getFileName() + ": " + target + " (no such heading)");
                }
            }
        }
        assertEquals(new TreeSet<>(), broken, "links in README.md and docs/ that lead nowhere");
    }

    @Test
    void theAnchorRuleIsGithubs() {
        assertEquals("across-hosts", anchor(" Across hosts"));
        assertEquals("routes-parameters-errors", anchor("Routes, parameters, errors"));
        assertEquals("the-benchmark-kvferry-bench-and-the-bench-roles", anchor("The benchmark: `kvferry bench` and the bench roles"));
    }
}
