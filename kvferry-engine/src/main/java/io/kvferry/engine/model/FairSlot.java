package io.kvferry.engine.model;

import java.util.ArrayDeque;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One slot (the structured-output compiler's: one compilation at a time) that its callers wait for, each on behalf of a
 * client, handed round-robin between the clients: each client's waiters queue in arrival order, and when the holder
 * gives the slot back it goes to the first waiting client of the rotation other than the one that held it (that one goes
 * on only where no other waits); the client served goes to the rotation's tail. So a client with N specs queued delays
 * another client by at most one turn (the one running), and k clients waiting each wait at most k - 1 turns, however
 * many each sends. A waiter waits a bounded time ({@link #acquire}) and then leaves its queue. A null client is one
 * client like any other.
 *
 * <p>All of its state is under its own lock; a waiter is woken by its own condition, only when the slot is handed to it.
 */
final class FairSlot {
    private final ReentrantLock lock = new ReentrantLock();
    /** Each client's waiters, in arrival order; a client is a key only while it has one. Iteration order: the rotation. */
    private final LinkedHashMap<String, ArrayDeque<Waiter>> queues = new LinkedHashMap<>();
    private boolean held;
    /** The client holding the slot (while {@link #held}). */
    private String holder;
    private int waiting;

    private static final class Waiter {
        final Condition turn;
        boolean granted;

        Waiter(Condition turn) {
            this.turn = turn;
        }
    }

    /**
     * Takes the slot for {@code client}: at once where it is free, else in the client's turn, waiting at most
     * {@code maxWaitNanos}; false where the turn did not come by then (the waiter left its queue). Interrupted while
     * waiting: the turn given back if it came meanwhile, and the interrupt thrown.
     */
    boolean acquire(String client, long maxWaitNanos) throws InterruptedException {
        lock.lock();
        try {
            if (!held) {
                held = true;
                holder = client;
                return true;
            }
            if (maxWaitNanos <= 0) return false;
            Waiter w = new Waiter(lock.newCondition());
            queues.computeIfAbsent(client, k -> new ArrayDeque<>()).add(w);
            waiting++;
            long left = maxWaitNanos;
            try {
                while (!w.granted && left > 0) left = w.turn.awaitNanos(left);
            } catch (InterruptedException e) {
                if (w.granted) handOver();
                else leave(client, w);
                throw e;
            }
            if (w.granted) return true;
            leave(client, w);
            return false;
        } finally {
            lock.unlock();
        }
    }

    /** Gives the slot back (its holder only): to the next client's first waiter, or free where none waits. */
    void release() {
        lock.lock();
        try {
            if (!held) throw new IllegalStateException("the slot is not held");
            handOver();
        } finally {
            lock.unlock();
        }
    }

    /** Under the lock: the slot to the first waiting client of the rotation other than the holder's (else the holder's). */
    private void handOver() {
        String next = null;
        boolean found = false; // a null client is a key too: not "none"
        for (String c : queues.keySet()) {
            if (!Objects.equals(c, holder)) {
                next = c;
                found = true;
                break;
            }
        }
        if (!found && queues.containsKey(holder)) {
            next = holder;
            found = true;
        }
        if (!found) {
            held = false;
            holder = null;
            return;
        }
        ArrayDeque<Waiter> q = queues.remove(next);
        Waiter w = q.poll();
        if (!q.isEmpty()) queues.put(next, q); // to the rotation's tail
        waiting--;
        holder = next;
        w.granted = true;
        w.turn.signal();
    }

    /** Under the lock: a waiter whose time ran out leaves its client's queue. */
    private void leave(String client, Waiter w) {
        ArrayDeque<Waiter> q = queues.get(client);
        q.remove(w);
        waiting--;
        if (q.isEmpty()) queues.remove(client);
    }

    /** How many wait for the slot (all clients). */
    int waiting() {
        lock.lock();
        try {
            return waiting;
        } finally {
            lock.unlock();
        }
    }

    /** How many of {@code client}'s wait for the slot. */
    int waiting(String client) {
        lock.lock();
        try {
            ArrayDeque<Waiter> q = queues.get(client);
            return q == null ? 0 : q.size();
        } finally {
            lock.unlock();
        }
    }

    /** The client holding the slot, or null where it is free. */
    String holder() {
        lock.lock();
        try {
            return held ? holder : null;
        } finally {
            lock.unlock();
        }
    }

    /** The clients waiting, in the rotation's order, with how many each (tests, status). */
    Map<String, Integer> queued() {
        lock.lock();
        try {
            Map<String, Integer> out = new LinkedHashMap<>();
            queues.forEach((c, q) -> out.put(c, q.size()));
            return out;
        } finally {
            lock.unlock();
        }
    }
}
