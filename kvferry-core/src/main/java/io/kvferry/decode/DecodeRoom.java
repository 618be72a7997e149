package io.kvferry.decode;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Decode-side bookkeeping of one room. Targets and the write allowance are set by the scheduler
 * thread (init, send_metadata) and published through volatile fields before any prefill can
 * write; reader threads record responses and landed bytes through concurrent structures.
 */
final class DecodeRoom {
    /** One prefill rank this room waits on. */
    record Target(PrefillLink link, int tpRank, int cpRank, boolean dummy) {}

    /**
     * What prefill may write for this room: its pages in token order and sorted, the aux row, state
     * indices as sent and sorted, and what each target owes (bytes, and the pages it writes).
     */
    record Allowance(int[] pages, int[] sortedPages, int auxIndex, int[][] state, int[][] sortedState, long[] owed,
                     int[][] pagesOf) {}

    final long room;
    final String bootstrapAddr;
    final long createdNanos = System.nanoTime();
    volatile List<Target> targets = List.of();
    volatile int requiredResponses = Integer.MAX_VALUE;
    volatile int requiredDstInfoNum = 1;
    volatile Allowance allowance;
    volatile long metadataSentNanos;
    volatile long successNanos;
    final Set<Integer> responded = ConcurrentHashMap.newKeySet();
    final AtomicLong bytesLanded = new AtomicLong();
    /** Bytes landed through the write gate from each target (tcp, inproc), by target index; set with the targets. */
    volatile AtomicLongArray landedFrom = new AtomicLongArray(0);
    /** Prefill CP size and whether every CP rank sends its share (from the prefill's topology). */
    volatile int prefillCpSize = 1;
    volatile boolean allCpRanks;
    final AtomicBoolean abortSent = new AtomicBoolean();
    /** Links whose prefill confirmed (ABORT_ACK) that no write of this room is in flight. */
    final Set<PrefillLink> abortAckedBy = ConcurrentHashMap.newKeySet();
    /** Set once the first write lands, so the status table is touched once per room, not per write. */
    volatile boolean transferring;

    // Guarded by this: writes between gate and retirement, and whether new ones are refused.
    private int landingsInFlight;
    private boolean closed;

    /** The index of the target whose link is {@code source} (a link endpoint key), or -1. */
    int targetIndexOf(String source) {
        List<Target> ts = targets;
        for (int i = 0; i < ts.size(); i++) {
            if (ts.get(i).link().endpoint.equals(source)) return i;
        }
        return -1;
    }

    /** Registers a write that passed the gate; false when the room no longer accepts writes. */
    synchronized boolean beginLanding() {
        if (closed) return false;
        landingsInFlight++;
        return true;
    }

    synchronized void abortAcked(PrefillLink link) {
        abortAckedBy.add(link);
        notifyAll();
    }

    /**
     * Waits until every link in {@code links} acknowledged the abort or closed, up to {@code millis};
     * returns the links that did neither.
     */
    synchronized List<PrefillLink> awaitAbortAcks(List<PrefillLink> links, long millis) {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        while (true) {
            List<PrefillLink> waiting = new ArrayList<>();
            for (PrefillLink l : links) if (!abortAckedBy.contains(l) && !l.connection.isClosed()) waiting.add(l);
            long left = (deadline - System.nanoTime()) / 1_000_000L;
            if (waiting.isEmpty() || left <= 0) return waiting;
            try {
                wait(Math.min(left, 50)); // also re-checks links closing, which do not notify
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return waiting;
            }
        }
    }

    synchronized void endLanding() {
        if (--landingsInFlight == 0) notifyAll();
    }

    /** Refuses further writes and waits up to {@code millis} for those in flight; true when none is left. */
    synchronized boolean closeAndDrain(long millis) {
        closed = true;
        long deadline = System.nanoTime() + millis * 1_000_000L;
        while (landingsInFlight > 0) {
            long left = (deadline - System.nanoTime()) / 1_000_000L;
            if (left <= 0) return false;
            try {
                wait(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return landingsInFlight == 0;
            }
        }
        return true;
    }

    DecodeRoom(long room, String bootstrapAddr) {
        this.room = room;
        this.bootstrapAddr = bootstrapAddr;
    }
}
