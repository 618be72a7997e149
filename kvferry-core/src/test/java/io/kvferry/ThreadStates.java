package io.kvferry;

import java.lang.management.LockInfo;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;

/** What a platform thread is waiting for, for tests that force an interleaving by holding a lock. */
public final class ThreadStates {
    private ThreadStates() {
    }

    /**
     * Whether {@code thread} is blocked entering {@code monitor}: not merely BLOCKED, which it may be for a
     * moment on some other lock it passes through (a connection's, a logger's) before it reaches this one.
     */
    public static boolean blockedOn(Thread thread, Object monitor) {
        if (thread == null) return false;
        ThreadInfo info = ManagementFactory.getThreadMXBean().getThreadInfo(thread.threadId());
        if (info == null || info.getThreadState() != Thread.State.BLOCKED) return false;
        LockInfo lock = info.getLockInfo();
        return lock != null && lock.getIdentityHashCode() == System.identityHashCode(monitor)
                && lock.getClassName().equals(monitor.getClass().getName());
    }
}
