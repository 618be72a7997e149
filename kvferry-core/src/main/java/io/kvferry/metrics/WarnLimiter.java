package io.kvferry.metrics;

import org.slf4j.Logger;
import org.slf4j.event.Level;

import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/**
 * One kind of warning a peer can trigger as fast as it sends (a refused write, a connection that failed
 * before its HELLO, a frame an authenticated peer had no business sending): logged at warn at most once a
 * second, naming how many more of the kind came since, the others at debug. A line each would flood the
 * log and drown the lines that matter. One limiter per kind; thread-safe, allocation-free when quiet. A kind that is
 * not a warning takes its level ({@link #WarnLimiter(LongSupplier, String, Level)}): a client's refused request at info, a
 * bug's unexpected exception (its stack trace the last argument, as slf4j takes one) at error.
 */
public final class WarnLimiter {
    /** Between two warnings of one kind. */
    public static final long EVERY_NANOS = 1_000_000_000L;

    private final LongSupplier clock;
    private final String kind;
    /** Clock time of the last warning. */
    private final AtomicLong last;
    private final AtomicLong quiet = new AtomicLong();
    private final AtomicLong warnings = new AtomicLong();
    /** The once-a-second line's level: warn, info or error. */
    private final Level level;

    /**
     * @param clock nanoseconds, as {@link System#nanoTime} (a manager's ticker: tests hold it still)
     * @param kind  what the lines are about, plural, as the warning names the quiet ones: "(and 12 more KIND, logged at debug)"
     */
    public WarnLimiter(LongSupplier clock, String kind) {
        this(clock, kind, false);
    }

    /** As {@link #WarnLimiter(LongSupplier, String)}, its once-a-second line at info when {@code info}, else at warn. */
    public WarnLimiter(LongSupplier clock, String kind, boolean info) {
        this(clock, kind, info ? Level.INFO : Level.WARN);
    }

    /** As {@link #WarnLimiter(LongSupplier, String)}, its once-a-second line at {@code level}: WARN, INFO or ERROR. */
    public WarnLimiter(LongSupplier clock, String kind, Level level) {
        if (level != Level.WARN && level != Level.INFO && level != Level.ERROR) {
            throw new IllegalArgumentException("a limited line is at WARN, INFO or ERROR, not " + level);
        }
        this.level = level;
        this.clock = clock;
        this.kind = kind;
        this.last = new AtomicLong(clock.getAsLong() - EVERY_NANOS);
    }

    /**
     * Logs {@code format} with {@code args} on {@code log}: at warn (info or error, for a limiter made so) when a second has
     * passed since this kind's last warning (with how many were quiet since appended), else at debug. A throwable as the
     * last argument stays last (slf4j logs its stack trace with the line): the count goes before it.
     */
    public void log(Logger log, String format, Object... args) {
        long now = clock.getAsLong(), before = last.get();
        if (now - before >= EVERY_NANOS && last.compareAndSet(before, now)) {
            long n = quiet.getAndSet(0);
            warnings.incrementAndGet();
            if (n == 0) {
                line(log, format, args);
            } else {
                Object[] more = Arrays.copyOf(args, args.length + 1);
                if (args.length > 0 && args[args.length - 1] instanceof Throwable t) { // the trace stays last
                    more[args.length - 1] = n;
                    more[args.length] = t;
                } else {
                    more[args.length] = n;
                }
                line(log, format + " (and {} more " + kind + ", logged at debug)", more);
            }
        } else {
            quiet.incrementAndGet();
            if (log.isDebugEnabled()) log.debug(format, args);
        }
    }

    private void line(Logger log, String format, Object[] args) {
        switch (level) {
            case INFO -> log.info(format, args);
            case ERROR -> log.error(format, args);
            default -> log.warn(format, args);
        }
    }

    /** Warnings logged so far (tests count them: one per second however many came). */
    public long warnings() {
        return warnings.get();
    }
}
