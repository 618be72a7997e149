package io.kvferry.conn;

import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Decode-side bookkeeping of one room. Targets and the write allowance are set by the scheduler
 * thread (init, send_metadata) and published through volatile fields before any prefill can
 * write; reader threads record responses and landed bytes through concurrent structures.
 */
final class DecodeRoom {
    /** One prefill rank this room waits on. */
    record Target(PrefillLink link, int tpRank, boolean dummy) {}

    /** What prefill may write for this room: sorted page ids, the aux row, sorted state indices. */
    record Allowance(int[] sortedPages, int auxIndex, int[][] sortedState) {}

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
    final AtomicBoolean abortSent = new AtomicBoolean();
    volatile boolean abortAcked;

    DecodeRoom(long room, String bootstrapAddr) {
        this.room = room;
        this.bootstrapAddr = bootstrapAddr;
    }
}
