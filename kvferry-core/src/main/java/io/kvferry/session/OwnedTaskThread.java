package io.kvferry.session;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * One thread, owned by a manager from construction to teardown, that runs tasks handed to it by event
 * handlers (a lost link's revoke, a failed session's unmap) in order. Event handlers never start threads of
 * their own: such a thread could be started after teardown looked for it and outlive the manager. Here
 * {@link #submit} and {@link #close} share one lock, so a task is either accepted before close (and
 * interrupted and joined by it) or refused.
 */
public final class OwnedTaskThread {
    private static final Logger log = LoggerFactory.getLogger(OwnedTaskThread.class);
    private static final Runnable STOP = () -> { };

    private final BlockingQueue<Runnable> queue = new LinkedBlockingQueue<>();
    private final Thread thread;
    private boolean closed; // guarded by this

    public OwnedTaskThread(String name) {
        this.thread = Thread.ofPlatform().daemon().name(name).start(this::run);
    }

    /** Queues a task; false once {@link #close} began (the caller's teardown then cleans up itself). */
    public synchronized boolean submit(Runnable task) {
        if (closed) return false;
        queue.add(task);
        return true;
    }

    private synchronized boolean isClosed() {
        return closed;
    }

    private void run() {
        while (true) {
            Runnable task;
            try {
                task = queue.take();
            } catch (InterruptedException e) {
                if (isClosed()) return;
                continue;
            }
            if (task == STOP || isClosed()) return;
            try {
                task.run();
            } catch (RuntimeException e) {
                log.warn("{}: background task failed", thread.getName(), e);
            }
        }
    }

    /**
     * Refuses new tasks, interrupts the one running (tasks wait with bounded, interruptible waits), drops the
     * queued ones and joins the thread for at most {@code bound}. Returns whether the thread has ended.
     */
    public boolean close(Duration bound) {
        synchronized (this) {
            if (!closed) {
                closed = true;
                queue.clear();
                queue.add(STOP);
            }
        }
        thread.interrupt();
        try {
            thread.join(bound);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return !thread.isAlive();
    }

    public String name() {
        return thread.getName();
    }
}
