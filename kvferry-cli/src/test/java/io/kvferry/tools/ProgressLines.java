package io.kvferry.tools;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/** A bench's progress output, line by line, for tests that wait for a line (the status page's URL). */
final class ProgressLines extends OutputStream {
    private final ByteArrayOutputStream current = new ByteArrayOutputStream();
    private final List<String> lines = new ArrayList<>(); // guarded by this

    PrintStream stream() {
        return new PrintStream(this, true, StandardCharsets.UTF_8);
    }

    @Override
    public synchronized void write(int b) {
        if (b == '\n') {
            lines.add(current.toString(StandardCharsets.UTF_8));
            current.reset();
            notifyAll();
        } else {
            current.write(b);
        }
    }

    /** The first line matching, waiting up to {@code seconds} for it; null if none came. */
    synchronized String await(Predicate<String> match, long seconds) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (true) {
            for (String l : lines) if (match.test(l)) return l;
            long left = deadline - System.nanoTime();
            if (left <= 0) return null;
            TimeUnit.NANOSECONDS.timedWait(this, left);
        }
    }

    synchronized List<String> all() {
        return List.copyOf(lines);
    }

    /** The text after {@code marker} up to the next space (a URL in a progress line). */
    static String after(String line, String marker) {
        int i = line.indexOf(marker) + marker.length();
        int end = line.indexOf(' ', i);
        return end < 0 ? line.substring(i) : line.substring(i, end);
    }
}
