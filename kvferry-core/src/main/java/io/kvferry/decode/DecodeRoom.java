package io.kvferry.decode;

import io.kvferry.session.RoomStatusTable;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
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
     * indices as sent and sorted, what each target owes (bytes, and the pages it writes, in token
     * order and sorted), and where each target's bits start in {@link #written} (-1: not tracked).
     */
    record Allowance(int[] pages, int[] sortedPages, int auxIndex, int[][] state, int[][] sortedState, long[] owed,
                     int[][] pagesOf, int[][] sortedPagesOf, long[] bitBase) {}

    final long room;
    final String bootstrapAddr;
    /** The room's status in its manager's table, read and changed without lookups. */
    final RoomStatusTable.Slot slot;
    final long createdNanos = System.nanoTime();
    volatile List<Target> targets = List.of();
    volatile int requiredResponses = Integer.MAX_VALUE;
    volatile int requiredDstInfoNum = 1;
    volatile Allowance allowance;
    volatile long metadataSentNanos;
    volatile long successNanos;
    final AtomicLong bytesLanded = new AtomicLong();
    /** Bytes landed through the write gate from each target (tcp, inproc), by target index; set with the targets. */
    volatile AtomicLongArray landedFrom = new AtomicLongArray(0);
    /** Prefill CP size and whether every CP rank sends its share (from the prefill's topology). */
    volatile int prefillCpSize = 1;
    volatile boolean allCpRanks;
    final AtomicBoolean abortSent = new AtomicBoolean();
    /** Guarded by this: links whose prefill confirmed (ABORT_ACK) that no write of this room is in flight; made on the first. */
    private List<PrefillLink> abortAckedBy;
    /** Guarded by this: the prefill unique ranks that reported Success, and how many. */
    private int[] responded;
    private int respondedCount;
    /** Set once the first write lands, so the status table is touched once per room, not per write. */
    volatile boolean transferring;
    /**
     * One bit per granule a two-sided target owes the room ({@link LinkGranules}: per KV buffer and
     * page of its share, per aux buffer, per state tensor and slot), from that target's
     * {@link Allowance#bitBase}: a granule written twice cannot stand in for one never written (byte
     * counts alone would add up). Set with the allowance (null when no target lands through the
     * gate); the gate sets bits with atomic ORs, from every reader thread.
     */
    volatile long[] written;
    private static final VarHandle BITS = MethodHandles.arrayElementVarHandle(long[].class);

    /** Marks bits {@code [first, first + count)}; returns the offset in the run of the first one marked before, or -1. */
    long markWritten(long first, long count) {
        long[] bits = written;
        if (bits == null) return -1;
        for (long k = 0; k < count; k++) {
            long bit = first + k, mask = 1L << (bit & 63);
            if (((long) BITS.getAndBitwiseOr(bits, (int) (bit >>> 6), mask) & mask) != 0) return k;
        }
        return -1;
    }

    // Guarded by this: writes between gate and retirement, and whether new ones are refused.
    private int landingsInFlight;
    private boolean closed;

    /** The index of the target on {@code link}, or -1. */
    int targetIndexOf(PrefillLink link) {
        List<Target> ts = targets;
        for (int i = 0; i < ts.size(); i++) {
            if (ts.get(i).link() == link) return i;
        }
        return -1;
    }

    /** Records a Success from a prefill rank; returns how many distinct ranks have reported Success. */
    synchronized int respond(int prefillUniqueRank) {
        if (hasResponded(prefillUniqueRank)) return respondedCount;
        if (responded == null) responded = new int[Math.max(1, targets.size())];
        if (respondedCount == responded.length) responded = Arrays.copyOf(responded, 2 * respondedCount);
        responded[respondedCount++] = prefillUniqueRank;
        return respondedCount;
    }

    /** Whether that prefill rank reported Success already. */
    synchronized boolean hasResponded(int prefillUniqueRank) {
        for (int i = 0; i < respondedCount; i++) if (responded[i] == prefillUniqueRank) return true;
        return false;
    }

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
        if (abortAckedBy == null) abortAckedBy = new ArrayList<>(2);
        if (!abortAckedBy.contains(link)) abortAckedBy.add(link);
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
            for (PrefillLink l : links) {
                if ((abortAckedBy == null || !abortAckedBy.contains(l)) && !l.connection.isClosed()) waiting.add(l);
            }
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

    DecodeRoom(long room, String bootstrapAddr, RoomStatusTable.Slot slot) {
        this.room = room;
        this.bootstrapAddr = bootstrapAddr;
        this.slot = slot;
        slot.own(this); // the failure record names this room's peers, even once it was cleared
    }
}
