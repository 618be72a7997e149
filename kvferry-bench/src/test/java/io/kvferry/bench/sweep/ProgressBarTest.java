package io.kvferry.bench.sweep;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The sweep's progress: plain lines when stderr is not a terminal, one redrawn line when it is; never ANSI. */
class ProgressBarTest {
    @Test
    void notATerminalGivesOnePlainLinePerUpdate() {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        ProgressBar bar = new ProgressBar(new PrintStream(buf, true, StandardCharsets.UTF_8), 4, false);
        bar.start("tcp page=16 c=1");
        bar.finish("tcp page=16 c=1");
        bar.note("iperf3 baseline unavailable");
        bar.start("shm page=16 c=1");
        String out = buf.toString(StandardCharsets.UTF_8);
        assertFalse(out.contains("\u001b"), "no ANSI escapes: " + out);
        assertFalse(out.contains("\r"), "no carriage returns in a file: " + out);
        List<String> lines = out.lines().toList();
        assertEquals(4, lines.size(), out);
        assertTrue(lines.get(0).startsWith("[sweep] [..............................] 0/4 tcp page=16 c=1, "), lines.get(0));
        assertTrue(lines.get(1).startsWith("[sweep] [#######.......................] 1/4 tcp page=16 c=1"), lines.get(1));
        assertEquals("[sweep] iperf3 baseline unavailable", lines.get(2));
    }

    @Test
    void aTerminalRedrawsOneLineInPlaceWithoutAnsi() {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        ProgressBar bar = new ProgressBar(new PrintStream(buf, true, StandardCharsets.UTF_8), 2, true);
        bar.start("a long label for the first step");
        bar.finish("a long label for the first step");
        bar.start("short");
        bar.finish("short");
        String out = buf.toString(StandardCharsets.UTF_8);
        assertFalse(out.contains("\u001b"), out);
        assertEquals(1, out.chars().filter(c -> c == '\n').count(), "one line, redrawn with \\r, ended once all steps finished: " + out);
        assertTrue(out.endsWith("\n"));
        assertTrue(out.contains("\r[sweep] [##############################] 2/2 short"), out);
    }
}
