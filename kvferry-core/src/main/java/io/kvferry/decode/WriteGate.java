package io.kvferry.decode;

import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The decode side's landing gate: every two-sided write (tcp, inproc) is checked here before a byte
 * lands — inside a registered buffer, for a live room that sent its metadata, and only into that
 * room's own pages, aux row and state slots — and counted in flight, so releasing a room can wait
 * for the writes it admitted. Handed to the two-sided transports as their {@link WriteSink}; the
 * one-sided transports (shm, ucx) are fenced by {@link RoomRelease} instead. No sockets: it is
 * unit-tested directly.
 */
final class WriteGate implements WriteSink {
    private final RegisteredMemory memory;
    private final DecodeRooms rooms;
    private volatile boolean closed;

    WriteGate(RegisteredMemory memory, DecodeRooms rooms) {
        this.memory = memory;
        this.rooms = rooms;
    }

    /** Refuses every write from now on (teardown). */
    void close() {
        closed = true;
    }

    @Override
    public void begin(Landing into, long room, Region region, int component, int buffer, long offset, long length,
                      long payload) throws WriteRejectedException {
        if (closed) throw new WriteRejectedException("this decode rank was torn down", false);
        MemorySegment seg = inBounds(-1, region, component, buffer, offset, length);
        DecodeRoom r = rooms.get(room);
        int slot = admissibleSlot(into, r, room);
        DecodeRoom.Allowance a = r.allowance;
        if (length == 0) {
            admit(into, r, slot, seg, offset, 0, 0);
            return;
        }
        if (payload > length) throw new WriteRejectedException("write payload " + payload + " exceeds its span " + length, true);
        long item = memory.itemLen(region, component, buffer);
        requireAllowed(a, region, component, item, buffer, offset, length, room);
        if (region == Region.KV && payload == length) requireFirstWrite(r, slot, a, buffer, offset, length, item, into);
        markTransferring(r);
        admit(into, r, slot, seg, offset, length, payload);
    }

    @Override
    public void beginList(Landing into, WriteList list) throws WriteRejectedException {
        if (closed) throw new WriteRejectedException("this decode rank was torn down", false);
        long room = list.room();
        MemorySegment[] buffers = into.pieceBuffers();
        for (int i = 0, n = list.count(); i < n; i++) {
            Region region = list.region(i);
            int component = list.component(i), buffer = list.buffer(i);
            long offset = list.offset(i), length = list.length(i);
            buffers[i] = inBounds(i, region, component, buffer, offset, length);
        }
        DecodeRoom r = rooms.get(room);
        int slot = admissibleSlot(into, r, room);
        DecodeRoom.Allowance a = r.allowance;
        for (int i = 0, n = list.count(); i < n; i++) {
            Region region = list.region(i);
            long item = memory.itemLen(region, list.component(i), list.buffer(i));
            requireAllowed(a, region, list.component(i), item, list.buffer(i), list.offset(i), list.length(i), room);
            if (region == Region.KV) requireFirstWrite(r, slot, a, list.buffer(i), list.offset(i), list.length(i), item, into);
        }
        markTransferring(r);
        // Counted in flight once for the whole list, so clear() either refuses it or waits for all of it.
        if (!r.beginLanding()) throw new WriteRejectedException("room " + room + " was cleared", false);
        into.admitList(r, slot, list.payloadLength());
    }

    /**
     * The registered buffer a write (piece {@code piece} of a list, or -1 for a WRITE) names, once its
     * span is known to lie inside it. A missing buffer or a span larger than the buffer is fatal (the
     * sender's view of the layout is wrong); a span outside it fails only the room. Messages are
     * built only on refusal.
     */
    private MemorySegment inBounds(int piece, Region region, int component, int buffer, long offset, long length)
            throws WriteRejectedException {
        MemorySegment seg = memory.segmentOrNull(region, component, buffer);
        if (seg == null) {
            throw new WriteRejectedException((piece < 0 ? "" : what(piece) + " names ") + "no registered " + region + " buffer " + component
                    + "/" + buffer, true);
        }
        if (length > seg.byteSize()) {
            throw new WriteRejectedException(what(piece) + " of " + length + " bytes is larger than " + region + " buffer " + component + "/"
                    + buffer + " (" + seg.byteSize() + " bytes)", true);
        }
        if (offset > seg.byteSize() - length) {
            throw new WriteRejectedException(what(piece) + " [" + offset + ", +" + length + ") is outside " + region + " buffer " + component
                    + "/" + buffer + " of " + seg.byteSize() + " bytes", false);
        }
        return seg;
    }

    private static String what(int piece) {
        return piece < 0 ? "write" : "piece " + piece;
    }

    private static void markTransferring(DecodeRoom r) {
        if (!r.transferring) {
            r.transferring = true;
            r.slot.update(KVPoll.Transferring);
        }
    }

    /**
     * The slot among the room's sources of a write that may land in it: the room is known, neither failed nor concluded, its metadata sent, and the
     * write's link one of its (non-dummy) prefill ranks.
     */
    private int admissibleSlot(Landing into, DecodeRoom r, long room) throws WriteRejectedException {
        if (r == null) throw new WriteRejectedException("room " + room + " is unknown on this decode rank", false);
        KVPoll status = r.slot.status();
        if (status == KVPoll.Failed) throw new WriteRejectedException("room " + room + " has failed", false);
        // After Success the engine decodes from these pages: nothing may change them any more.
        if (status == KVPoll.Success) throw new WriteRejectedException("room " + room + " has already concluded", false);
        if (r.allowance == null) throw new WriteRejectedException("room " + room + " has not sent its metadata", false);
        int slot = r.targetIndexOf(into.source());
        if (slot < 0 || r.targets.get(slot).dummy()) {
            throw new WriteRejectedException("a write for room " + room + " came from " + into.source()
                    + ", which is not one of the room's prefill ranks", false);
        }
        return slot;
    }

    /** Whether a write of {@code [offset, offset + length)} in a buffer of {@code item}-byte items stays inside what the room owns. */
    static void requireAllowed(DecodeRoom.Allowance a, Region region, int component, long item, int buffer, long offset,
                               long length, long room) throws WriteRejectedException {
        switch (region) {
            case KV -> {
                if (!owns(a.sortedPages(), offset, length, item)) throw notOwned("KV buffer " + buffer + " page", offset, length, item, room);
            }
            case AUX -> {
                long start = a.auxIndex() * item;
                if (a.auxIndex() < 0 || offset < start || offset + length > start + item) {
                    throw new WriteRejectedException("aux write [" + offset + ", +" + length + ") is not inside row "
                            + a.auxIndex() + " of room " + room, false);
                }
            }
            case STATE -> {
                if (component >= a.sortedState().length) {
                    throw new WriteRejectedException("room " + room + " sent no indices for state component " + component, false);
                }
                if (!owns(a.sortedState()[component], offset, length, item)) {
                    throw notOwned("state component " + component + " index", offset, length, item, room);
                }
            }
        }
    }

    /**
     * Whole KV pages (a write of complete items; head slices are partial and not tracked) may come from
     * a target once: a page written twice would let the byte count reach what the target owes with
     * another page never written. Called after {@link #requireAllowed}, so the pages are the room's.
     */
    private void requireFirstWrite(DecodeRoom r, int slot, DecodeRoom.Allowance a, int buffer, long offset, long length, long item,
                                   Landing into) throws WriteRejectedException {
        if (offset % item != 0 || length % item != 0) return;
        long first = offset / item, count = length / item;
        int ordinal = Arrays.binarySearch(a.sortedPages(), (int) first); // a run of consecutive owned pages (requireAllowed)
        int twice = r.markWritten(slot, memory.kvBufferCount(), buffer, ordinal, count);
        if (twice >= 0) {
            throw new WriteRejectedException("KV buffer " + buffer + " page " + (first + twice) + " of room " + r.room
                    + " was written twice by " + into.source(), false);
        }
    }

    /** The items {@code [offset, offset + length)} touches must be a run of consecutive ids in {@code sorted}. */
    static void requireOwned(int[] sorted, long offset, long length, long item, String what, long room)
            throws WriteRejectedException {
        if (!owns(sorted, offset, length, item)) throw notOwned(what, offset, length, item, room);
    }

    /** Whether the items {@code [offset, offset + length)} touches are a run of consecutive ids in {@code sorted}. */
    private static boolean owns(int[] sorted, long offset, long length, long item) {
        long first = offset / item;
        long last = (offset + length - 1) / item;
        int idx = first > Integer.MAX_VALUE ? -1 : Arrays.binarySearch(sorted, (int) first);
        boolean ok = idx >= 0 && idx + (last - first) < sorted.length;
        for (long k = 1; ok && k <= last - first; k++) ok = sorted[(int) (idx + k)] == first + k;
        return ok;
    }

    /** The refusal, built only when a write is refused (the message costs allocations). */
    private static WriteRejectedException notOwned(String what, long offset, long length, long item, long room) {
        return new WriteRejectedException("write to " + what + "s [" + offset / item + ", " + (offset + length - 1) / item
                + "] touches memory room " + room + " does not own", false);
    }

    private static void admit(Landing into, DecodeRoom r, int slot, MemorySegment buffer, long offset, long span, long payload)
            throws WriteRejectedException {
        // Counted in flight under the room's lock, so clear() either refuses this write or waits for it.
        if (!r.beginLanding()) throw new WriteRejectedException("room " + r.room + " was cleared", false);
        into.admit(r, slot, buffer, offset, span, payload);
    }

    @Override
    public void end(Landing landing, boolean landed) {
        DecodeRoom r = (DecodeRoom) landing.token();
        if (landed) {
            r.bytesLanded.addAndGet(landing.payload());
            AtomicLongArray from = r.landedFrom;
            if (landing.slot() < from.length()) from.addAndGet(landing.slot(), landing.payload());
        }
        r.endLanding();
    }
}
