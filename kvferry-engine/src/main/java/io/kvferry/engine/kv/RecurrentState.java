package io.kvferry.engine.kv;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * One recurrent layer's per-request state on one TP rank, one slot per request: the conv state
 * {@code [kernel-1 rows][channels]} (the last inputs, oldest first) and the scan state
 * {@code [channels][stateSize]}, float32. Channels are this rank's share of the layer's width, so
 * kvferry re-slices both along the channel axis under a TP change (state_dim_per_tensor = channels;
 * state_slice_outer_counts = kernel-1 and 1). The recurrence reads and updates the slot in place.
 */
public final class RecurrentState {
    final MemorySegment conv, scan;
    public final int rows, channels, stateSize;
    final long convSlotBytes, scanSlotBytes;

    RecurrentState(MemorySegment conv, MemorySegment scan, int rows, int channels, int stateSize) {
        this.conv = conv;
        this.scan = scan;
        this.rows = rows;
        this.channels = channels;
        this.stateSize = stateSize;
        this.convSlotBytes = (long) rows * channels * Float.BYTES;
        this.scanSlotBytes = (long) channels * stateSize * Float.BYTES;
    }

    public float conv(int slot, int row, int channel) {
        return conv.get(ValueLayout.JAVA_FLOAT_UNALIGNED, slot * convSlotBytes + ((long) row * channels + channel) * Float.BYTES);
    }

    public void setConv(int slot, int row, int channel, float value) {
        conv.set(ValueLayout.JAVA_FLOAT_UNALIGNED, slot * convSlotBytes + ((long) row * channels + channel) * Float.BYTES, value);
    }

    public float scan(int slot, int channel, int n) {
        return scan.get(ValueLayout.JAVA_FLOAT_UNALIGNED, slot * scanSlotBytes + ((long) channel * stateSize + n) * Float.BYTES);
    }

    public void setScan(int slot, int channel, int n, float value) {
        scan.set(ValueLayout.JAVA_FLOAT_UNALIGNED, slot * scanSlotBytes + ((long) channel * stateSize + n) * Float.BYTES, value);
    }

    /** Bytes of one slot's state (conv, then scan): what a snapshot of it holds. */
    public long slotBytes() {
        return convSlotBytes + scanSlotBytes;
    }

    /** Copies slot {@code slot}'s state (conv, then scan) into {@code dst} at {@code offset}. */
    void save(int slot, byte[] dst, int offset) {
        MemorySegment.copy(conv, ValueLayout.JAVA_BYTE, slot * convSlotBytes, dst, offset, (int) convSlotBytes);
        MemorySegment.copy(scan, ValueLayout.JAVA_BYTE, slot * scanSlotBytes, dst, offset + (int) convSlotBytes, (int) scanSlotBytes);
    }

    /** Sets slot {@code slot}'s state to what {@link #save} copied at {@code offset}. */
    void restore(int slot, byte[] src, int offset) {
        MemorySegment.copy(src, offset, conv, ValueLayout.JAVA_BYTE, slot * convSlotBytes, (int) convSlotBytes);
        MemorySegment.copy(src, offset + (int) convSlotBytes, scan, ValueLayout.JAVA_BYTE, slot * scanSlotBytes, (int) scanSlotBytes);
    }

    /** A new request starts from zero state. */
    public void clear(int slot) {
        conv.asSlice(slot * convSlotBytes, convSlotBytes).fill((byte) 0);
        scan.asSlice(slot * scanSlotBytes, scanSlotBytes).fill((byte) 0);
    }
}
