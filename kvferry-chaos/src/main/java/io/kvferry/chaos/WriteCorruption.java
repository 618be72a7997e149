package io.kvferry.chaos;

import io.kvferry.api.RoomChoice;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Which rooms a corrupting {@link FaultProxy} damages ({@code kvferry chaos --scenario corrupt} over
 * tcp): each room is chosen with probability {@code probability}, a pure function of the room and the
 * seed, and a chosen room gets exactly one byte flipped, in the payload of the first of its WRITEs
 * that carries bytes (whichever prefill rank's connection sends it first). Shared by every connection
 * of every proxy of a run, so {@link #rooms()} is the number of rooms damaged on purpose.
 */
public final class WriteCorruption {
    /** The byte a flip XORs with (never 0, so the byte always changes). */
    static final int FLIP_MASK = 0x5A;

    private final double probability;
    private final long seed;
    private final Set<Long> flipped = ConcurrentHashMap.newKeySet();
    private final AtomicLong malformedStreams = new AtomicLong();

    public WriteCorruption(double probability, long seed) {
        if (!(probability >= 0 && probability <= 1)) {
            throw new IllegalArgumentException("corruption probability must be in [0, 1], got " + probability);
        }
        this.probability = probability;
        this.seed = seed;
    }

    /** Whether the room is one this run damages. */
    public boolean chosen(long room) {
        return RoomChoice.chosen(room, seed, probability);
    }

    /**
     * Called for a WRITE with payload bytes: true exactly once per chosen room, for the write that
     * gets the flip.
     */
    boolean claim(long room) {
        return chosen(room) && flipped.add(room);
    }

    /** Rooms that got a byte flipped so far. */
    public int rooms() {
        return flipped.size();
    }

    /** Streams that stopped parsing (not kvferry frames): passed through untouched from there on. */
    public long malformedStreams() {
        return malformedStreams.get();
    }

    void malformed() {
        malformedStreams.incrementAndGet();
    }
}
