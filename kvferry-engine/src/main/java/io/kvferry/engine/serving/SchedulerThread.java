package io.kvferry.engine.serving;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The one owner of an engine's mutable state (queues, page allocator, pools' contents): other
 * threads only enqueue commands, which run on this thread between scheduling steps. Started by the
 * engine's constructor, stopped and joined by its close.
 */
abstract class SchedulerThread implements AutoCloseable {
    private final BlockingQueue<Runnable> commands = new LinkedBlockingQueue<>();
    private final Thread thread;
    private volatile boolean stopping;

    SchedulerThread(String name) {
        thread = Thread.ofPlatform().daemon().name(name).unstarted(this::loop);
    }

    void start() {
        thread.start();
    }

    /** Runs {@code command} on the scheduler thread; refused once the engine is closing. */
    void execute(Runnable command) {
        if (stopping) throw new IllegalStateException("the engine is shut down");
        commands.add(command);
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
        } finally {
            shutdown();
        }
    }

    @Override
    public void close() {
        stopping = true;
        thread.interrupt();
        try {
            thread.join(30_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
