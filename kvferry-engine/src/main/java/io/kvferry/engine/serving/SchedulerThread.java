package io.kvferry.engine.serving;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The one owner of an engine's mutable state (queues, page allocator, pools' contents): other
 * threads only enqueue commands, which run on this thread between scheduling steps. Started by the
 * engine's constructor, stopped and joined by its close. A command or step that throws is a defect:
 * the engine then stops as at close (every request in flight fails, new ones are refused) and its
 * {@link #failure()} says why, so /health reports it instead of a live-looking engine whose requests
 * would wait forever.
 */
abstract class SchedulerThread implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(SchedulerThread.class);
    private final BlockingQueue<Runnable> commands = new LinkedBlockingQueue<>();
    private final Thread thread;
    private volatile boolean stopping;
    private volatile String failure;

    SchedulerThread(String name) {
        thread = Thread.ofPlatform().daemon().name(name).unstarted(this::loop);
    }

    void start() {
        thread.start();
    }

    /**
     * Runs {@code command} on the scheduler thread; refused once the engine is closing. A command accepted
     * here always runs, before {@link #shutdown()} when the engine stops (so a request queued then is failed
     * by it, never left waiting forever).
     */
    void execute(Runnable command) {
        synchronized (commands) { // against the final drain: nothing is added after it
            if (stopping) throw new IllegalStateException(failure != null ? "the engine stopped: " + failure : "the engine is shut down");
            commands.add(command);
        }
    }

    /** Why the scheduler thread stopped on its own (an unexpected error), or null while it runs or after close. */
    public String failure() {
        return failure;
    }

    boolean onSchedulerThread() {
        return Thread.currentThread() == thread;
    }

    /** One scheduling pass over the engine's queues; true when it moved anything. */
    abstract boolean step();

    /** Called on the scheduler thread when it stops: fail what is left, free its pages. */
    abstract void shutdown();

    private void loop() {
        try {
            while (!stopping) {
                Runnable c;
                while ((c = commands.poll()) != null) c.run();
                if (!step()) {
                    // Nothing moved: the queues wait on the network. A short wait keeps polling cheap.
                    c = commands.poll(200, TimeUnit.MICROSECONDS);
                    if (c != null) c.run();
                }
            }
        } catch (InterruptedException e) {
            // close
        } catch (RuntimeException | Error e) {
            failure = e.toString();
            stopping = true;
            log.error("{}: the scheduler thread stopped on an unexpected error; the engine refuses new requests", thread.getName(), e);
        } finally {
            synchronized (commands) {
                stopping = true;
            }
            Thread.interrupted(); // close()'s interrupt has done its job; the commands left run undisturbed
            // Commands accepted before the stop (a request's submit, an abort) run now, so shutdown() fails what they queued.
            for (Runnable c; (c = commands.poll()) != null; ) {
                try {
                    c.run();
                } catch (RuntimeException | Error e) {
                    log.warn("{}: a command queued before the engine stopped failed: {}", thread.getName(), e.toString());
                }
            }
            shutdown();
        }
    }

    @Override
    public void close() {
        synchronized (commands) {
            stopping = true;
        }
        thread.interrupt();
        try {
            thread.join(30_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
