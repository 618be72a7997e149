package io.kvferry.http;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The executor of a kvferry {@code HttpServer} (the bootstrap registry's, and the operating endpoint of
 * kvferry-ops' {@code OpsServer}): one virtual thread per request (a platform one where the owner asks),
 * at most {@code maxRequests} requests under way, and none of them older than {@code timeout}. The
 * owner runs {@link #sweep()} every {@link #sweepPeriodMillis} and {@link #close} after stopping its server.
 *
 * <p>Why this shape. The JDK server (as of JDK 25, {@code sun.net.httpserver.ServerImpl}) parks new and
 * idle connections on its selector, but as soon as a connection's first byte arrives it hands the
 * connection to the executor, and the executor's thread reads the request line, the headers and (in
 * the handler) the body with blocking reads that have no deadline ({@code sun.net.httpserver.maxReqTime}
 * defaults to forever). With a fixed pool, a few clients that send {@code GET /hea} and stop hold every
 * worker; with a caller-runs queue they then hold the dispatcher too, so nothing is served until they
 * leave. Its own limits ({@code sun.net.httpserver.maxReqTime}, {@code jdk.httpserver.maxConnections})
 * are JVM-wide system properties read once when the server class loads: wrong for a library that
 * shares the JVM with its host. So the limits live here, per server:
 * <ul>
 *   <li>a virtual thread per request: a stalled client parks a virtual thread, never a worker that
 *       others wait for, so the dispatcher never blocks and legitimate requests start at once;</li>
 *   <li>a deadline: {@link #sweep()} interrupts the thread of any request under way for longer than the
 *       timeout. The server does its socket I/O on that thread through a {@code SocketChannel}, an
 *       {@link java.nio.channels.InterruptibleChannel}, so the interrupt closes the connection and the
 *       blocked read fails; the server then drops the connection from its books. This measures the whole
 *       request (first byte to response), so a client dripping a byte now and then is cut off as well;</li>
 *   <li>a cap: a request that would be one more than {@code maxConnections} is rejected, which the
 *       server answers by closing that connection; requests already under way are not touched.</li>
 * </ul>
 * Connections that have sent nothing (new, or idle between keep-alive requests) hold no thread and are
 * not counted; the JDK closes them after its idle interval ({@code sun.net.httpserver.idleInterval}, 30 s).
 */
public final class RequestGate implements Executor {
    private static final Logger log = LoggerFactory.getLogger(RequestGate.class);
    private static final long WARN_EVERY_NANOS = TimeUnit.SECONDS.toNanos(10);

    private final int maxRequests;
    private final long timeoutNanos;
    private final Semaphore slots;
    private final ThreadFactory threads;
    /** Threads of the requests under way and not yet timed out, with the nanoTime each started. */
    private final Map<Thread, Long> underWay = new ConcurrentHashMap<>();
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong timedOut = new AtomicLong();
    private final AtomicLong lastWarn = new AtomicLong(System.nanoTime() - WARN_EVERY_NANOS);
    private final String name;
    private volatile boolean closed;

    /**
     * @param name            names the request threads and the log lines
     * @param maxRequests     the cap on requests under way
     * @param timeout         the longest one request may take, first byte to response written
     * @param platformThreads each request on a platform thread (the registry's {@code RegistryOptions#platformRequestThreads} says when)
     */
    public RequestGate(String name, int maxRequests, Duration timeout, boolean platformThreads) {
        if (maxRequests < 1) throw new IllegalArgumentException("maxRequests must be >= 1, got " + maxRequests);
        if (timeout.toNanos() <= 0) throw new IllegalArgumentException("timeout must be positive, got " + timeout);
        this.name = name;
        this.maxRequests = maxRequests;
        this.timeoutNanos = timeout.toNanos();
        this.slots = new Semaphore(maxRequests);
        this.threads = platformThreads ? Thread.ofPlatform().daemon().name(name + "-req-", 1).factory()
                : Thread.ofVirtual().name(name + "-req-", 1).factory();
    }

    /** How often {@link #sweep()} should run: a small fraction of the timeout, so it is overrun by little. */
    public static long sweepPeriodMillis(Duration timeout) {
        return Math.clamp(timeout.toMillis() / 5, 10L, 1_000L);
    }

    /**
     * Runs one exchange of the server (it reads the request, calls the handler, writes the response) on a
     * virtual thread of its own. Throws {@link RejectedExecutionException} when the cap is reached or the
     * gate is closed; the server closes that connection.
     */
    @Override
    public void execute(Runnable exchange) {
        if (closed) throw new RejectedExecutionException(name + " is closed");
        if (!slots.tryAcquire()) {
            long n = refused.incrementAndGet();
            warn("{}: {} requests under way, the cap: closed a connection that started one more ({} so far)",
                    name, maxRequests, n);
            throw new RejectedExecutionException(name + ": " + maxRequests + " requests under way");
        }
        Thread t;
        try {
            t = threads.newThread(() -> {
                try {
                    exchange.run();
                } finally {
                    underWay.remove(Thread.currentThread());
                    slots.release();
                }
            });
            underWay.put(t, System.nanoTime());
            t.start();
        } catch (RuntimeException | Error e) {
            slots.release();
            throw e;
        }
    }

    /** Closes (by interrupting its thread) every request under way for longer than the timeout. */
    public void sweep() {
        try {
            sweepOnce(System.nanoTime());
        } catch (RuntimeException e) {
            log.warn("{}: request sweep failed", name, e); // and runs again: a throw would cancel the schedule
        }
    }

    private void sweepOnce(long now) {
        underWay.forEach((thread, started) -> {
            if (now - started >= timeoutNanos && underWay.remove(thread, started)) {
                long n = timedOut.incrementAndGet();
                log.debug("{}: request on {} still unfinished after {} ms: closing its connection", name, thread.getName(),
                        TimeUnit.NANOSECONDS.toMillis(now - started));
                warn("{}: closed a connection whose request took longer than {} ms ({} so far)",
                        name, TimeUnit.NANOSECONDS.toMillis(timeoutNanos), n);
                thread.interrupt();
            }
        });
    }

    /** Refuses new requests and closes those under way; waits up to {@code wait} for their threads to end. */
    public void close(Duration wait) throws InterruptedException {
        closed = true;
        underWay.keySet().forEach(Thread::interrupt);
        underWay.clear();
        if (slots.tryAcquire(maxRequests, wait.toNanos(), TimeUnit.NANOSECONDS)) slots.release(maxRequests);
    }

    /** Requests whose thread has not ended yet, timed-out ones still unwinding included. */
    public int underWay() {
        return maxRequests - slots.availablePermits();
    }

    public long refusedCount() {
        return refused.get();
    }

    public long timedOutCount() {
        return timedOut.get();
    }

    /** At most one warning per ten seconds: a flood of slow clients must not become a flood of log lines. */
    private void warn(String format, Object... args) {
        long now = System.nanoTime();
        long last = lastWarn.get();
        if (now - last >= WARN_EVERY_NANOS && lastWarn.compareAndSet(last, now)) {
            log.warn(format, args);
        }
    }
}
