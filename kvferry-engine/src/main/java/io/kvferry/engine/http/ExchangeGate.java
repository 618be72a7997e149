package io.kvferry.engine.http;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The executor of an engine or router {@code HttpServer}: one virtual thread per exchange, at most
 * {@code maxExchanges} under way, and a deadline on reading the request.
 *
 * <p>The same design as kvferry's bootstrap registry ({@code io.kvferry.http.RequestGate}, which
 * the engine may not use: it drives kvferry through its public API only, see LayeringTest). The JDK
 * server hands a connection to the executor at its first byte and reads the request line, headers
 * and body on that thread with blocking reads that have no deadline; its own limits
 * ({@code sun.net.httpserver.maxReqTime}, {@code jdk.httpserver.maxConnections}) are JVM-wide
 * properties read once, wrong for servers that share the JVM with others. So, per server:
 * <ul>
 *   <li>a deadline on the request only: {@link #requestRead()} (called once the body is read, or at
 *       the start of a route that reads none) takes the exchange off the clock, because a response may
 *       rightly be a long token stream. A request still unread after the timeout has its thread
 *       interrupted; the server's socket is an interruptible channel, so the connection closes and the
 *       blocked read fails;</li>
 *   <li>a cap: an exchange that would be one more than {@code maxExchanges} is rejected, which the
 *       server answers by closing that connection.</li>
 * </ul>
 * Connections that have sent nothing hold no thread; the JDK closes them after its idle interval.
 */
final class ExchangeGate implements Executor {
    private static final Logger log = LoggerFactory.getLogger(ExchangeGate.class);
    private static final long WARN_EVERY_NANOS = TimeUnit.SECONDS.toNanos(10);
    /** The gate whose exchange the current thread runs, so a handler can say its request is read. */
    private static final ThreadLocal<ExchangeGate> CURRENT = new ThreadLocal<>();
    /** One sweeper for every gate in the process: a sweep is a scan of a small map. */
    private static final ScheduledExecutorService SWEEPER = Executors.newSingleThreadScheduledExecutor(
            r -> Thread.ofPlatform().daemon().name("kvferry-http-sweeper").unstarted(r));

    private final String name;
    private final int maxExchanges;
    private final long timeoutNanos;
    private final Semaphore slots;
    private final ThreadFactory threads;
    /** Threads whose request is not read yet, with the nanoTime their exchange started. */
    private final Map<Thread, Long> reading = new ConcurrentHashMap<>();
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong timedOut = new AtomicLong();
    private final AtomicLong lastWarn = new AtomicLong(System.nanoTime() - WARN_EVERY_NANOS);
    private final ScheduledFuture<?> sweeps;
    private volatile boolean closed;

    ExchangeGate(String name, int maxExchanges, Duration requestReadTimeout) {
        if (maxExchanges < 1) throw new IllegalArgumentException("maxExchanges must be >= 1, got " + maxExchanges);
        this.name = name;
        this.maxExchanges = maxExchanges;
        this.timeoutNanos = requestReadTimeout.toNanos();
        this.slots = new Semaphore(maxExchanges);
        this.threads = Thread.ofVirtual().name(name + "-", 1).factory();
        long period = Math.clamp(requestReadTimeout.toMillis() / 5, 10L, 1_000L); // overrun the deadline by little
        this.sweeps = SWEEPER.scheduleWithFixedDelay(this::sweep, period, period, TimeUnit.MILLISECONDS);
    }

    /** Takes the current thread's exchange off the request-read clock (no-op off a gate's thread). */
    static void requestRead() {
        ExchangeGate g = CURRENT.get();
        if (g != null) g.reading.remove(Thread.currentThread());
    }

    @Override
    public void execute(Runnable exchange) {
        if (closed) throw new RejectedExecutionException(name + " is closed");
        if (!slots.tryAcquire()) {
            long n = refused.incrementAndGet();
            warn("{}: {} exchanges under way, the cap: closed a connection that started one more ({} so far)", name, maxExchanges, n);
            throw new RejectedExecutionException(name + ": " + maxExchanges + " exchanges under way");
        }
        try {
            Thread t = threads.newThread(() -> {
                CURRENT.set(this);
                try {
                    exchange.run();
                } finally {
                    reading.remove(Thread.currentThread());
                    slots.release();
                }
            });
            reading.put(t, System.nanoTime());
            t.start();
        } catch (RuntimeException | Error e) {
            slots.release();
            throw e;
        }
    }

    private void sweep() {
        try {
            long now = System.nanoTime();
            reading.forEach((thread, started) -> {
                // remove(key, value): a thread that just finished reading (or a later exchange) is left alone
                if (now - started >= timeoutNanos && reading.remove(thread, started)) {
                    long n = timedOut.incrementAndGet();
                    warn("{}: closed a connection whose request was still unread after {} ms ({} so far)",
                            name, TimeUnit.NANOSECONDS.toMillis(timeoutNanos), n);
                    thread.interrupt();
                }
            });
        } catch (RuntimeException e) {
            log.warn("{}: request sweep failed", name, e); // and runs again: a throw would cancel the schedule
        }
    }

    /** Refuses new exchanges and stops sweeping; exchanges under way end with the server. */
    void close() {
        closed = true;
        sweeps.cancel(false);
    }

    /** Exchanges whose thread has not ended yet. */
    int underWay() {
        return maxExchanges - slots.availablePermits();
    }

    long refusedCount() {
        return refused.get();
    }

    long timedOutCount() {
        return timedOut.get();
    }

    /** At most one warning per ten seconds: a flood of slow clients must not become a flood of log lines. */
    private void warn(String format, Object... args) {
        long now = System.nanoTime();
        long last = lastWarn.get();
        if (now - last >= WARN_EVERY_NANOS && lastWarn.compareAndSet(last, now)) log.warn(format, args);
    }
}
