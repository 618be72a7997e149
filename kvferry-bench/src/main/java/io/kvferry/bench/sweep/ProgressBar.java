package io.kvferry.bench.sweep;

import java.io.PrintStream;

/**
 * The sweep's progress on stderr: on a terminal one line redrawn with a carriage return; otherwise
 * (a file, a pipe, CI) one plain line per step. Never ANSI escape codes. One owner (the sweep thread).
 */
final class ProgressBar {
    static final int WIDTH = 30;

    private final PrintStream out;
    private final int total;
    private final boolean terminal;
    private final long startNanos = System.nanoTime();
    private int done;
    private int lastWidth;

    ProgressBar(PrintStream out, int total, boolean terminal) {
        this.out = out;
        this.total = Math.max(1, total);
        this.terminal = terminal;
    }

    /** Whether stderr is a terminal (then the bar redraws in place). */
    static boolean stderrIsTerminal() {
        return System.console() != null && System.console().isTerminal();
    }

    /** Step {@code done + 1} of {@code total} starts. */
    void start(String label) {
        draw(label);
    }

    /** The current step finished. */
    void finish(String label) {
        done = Math.min(total, done + 1);
        draw(label);
        if (done == total && terminal) out.println();
    }

    /** A line of its own (a warning), without breaking the bar. */
    void note(String line) {
        if (terminal && lastWidth > 0) out.print("\r" + " ".repeat(lastWidth) + "\r");
        out.println("[sweep] " + line);
        lastWidth = 0;
    }

    /** The bar as text: {@code [sweep] [#########.....................]  9/30 label, 1m05s}. */
    String render(String label) {
        int filled = (int) ((long) WIDTH * done / total);
        long s = (System.nanoTime() - startNanos) / 1_000_000_000L;
        String elapsed = s >= 60 ? (s / 60) + "m" + String.format("%02d", s % 60) + "s" : s + "s";
        return String.format("[sweep] [%s%s] %" + Integer.toString(total).length() + "d/%d %s, %s",
                "#".repeat(filled), ".".repeat(WIDTH - filled), done, total, label, elapsed);
    }

    private void draw(String label) {
        String line = render(label);
        if (terminal) {
            String pad = lastWidth > line.length() ? " ".repeat(lastWidth - line.length()) : "";
            out.print("\r" + line + pad);
            out.flush();
            lastWidth = line.length();
        } else {
            out.println(line);
        }
    }
}
