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
                      long payload, long piece, long stride) throws WriteRejectedException {
        if (closed) throw new WriteRejectedException("this decode rank was torn down", false);
        DecodeRoom r = rooms.get(room);
        try {
            MemorySegment seg = inBounds(-1, region, component, buffer, offset, length);
            int slot = admissibleSlot(into, r, room);
            DecodeRoom.Allowance a = r.allowance;
            if (length == 0) {
                admit(into, r, slot, seg, offset, 0, 0);
                return;
            }
            if (payload > length) throw new WriteRejectedException("write payload " + payload + " exceeds its span " + length, true);
            requireCovered(r, slot, a, region, component, buffer, offset, length, payload, piece, stride);
            markTransferring(r);
            admit(into, r, slot, seg, offset, length, payload);
        } catch (WriteRejectedException e) {
            throw e.judgedAgainst(r);
        }
    }

    @Override
    public void beginList(Landing into, WriteList list) throws WriteRejectedException {
        if (closed) throw new WriteRejectedException("this decode rank was torn down", false);
        long room = list.room();
        DecodeRoom r = rooms.get(room);
        try {
            MemorySegment[] buffers = into.pieceBuffers();
            for (int i = 0, n = list.count(); i < n; i++) {
                Region region = list.region(i);
                int component = list.component(i), buffer = list.buffer(i);
                long offset = list.offset(i), length = list.length(i);
                buffers[i] = inBounds(i, region, component, buffer, offset, length);
            }
            int slot = admissibleSlot(into, r, room);
            DecodeRoom.Allowance a = r.allowance;
            for (int i = 0, n = list.count(); i < n; i++) {
                long length = list.length(i);
                requireCovered(r, slot, a, list.region(i), list.component(i), list.buffer(i), list.offset(i), length, length, length, length);
            }
            markTransferring(r);
            // Counted in flight once for the whole list, so clear() either refuses it or waits for all of it.
            if (!r.beginLanding()) throw new WriteRejectedException("room " + room + " was cleared", false);
            into.admitList(r, slot, list.payloadLength());
        } catch (WriteRejectedException e) {
            throw e.judgedAgainst(r); // the room a rejection fails is the one judged here, not a retry that takes its id
        }
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
            throw WriteRejectedException.fromStranger("a write for room " + room + " came from " + into.source()
                    + ", which is not one of the room's prefill ranks");
        }
        return slot;
    }

    /**
     * A write (or one piece of a list) must lie inside what the room owns — its pages (the writing
     * link's CP share of them), its aux row, its state slots — and be exactly what the writing link
     * covers of them, cut as both sides cut it ({@link LinkGranules}): one granule, or a run of whole
     * items each one granule. Each granule may come once: a granule written twice would let the byte
     * count reach what the link owes with another never written. The bits are set as the write is
     * admitted, so the same bytes sent again, whole or in other pieces, are refused.
     *
     * @param piece  bytes per piece of a strided write (the payload for a contiguous one)
     * @param stride destination bytes from one piece to the next (not read for a contiguous write)
     */
    private void requireCovered(DecodeRoom r, int slot, DecodeRoom.Allowance a, Region region, int component, int buffer, long offset,
                                long span, long payload, long piece, long stride) throws WriteRejectedException {
        PrefillLink link = r.targets.get(slot).link();
        LinkGranules granules = link.granules;
        LinkGranules.Covered c = granules.covered(region, component, buffer);
        if (c == null) {
            throw new WriteRejectedException(link + " writes no part of " + named(region, component, buffer)
                    + " (its declared coverage), yet sent room " + r.room + " a write into it", false);
        }
        long item = c.item(), first = offset / item, items = c.items(offset, span, payload, piece, stride);
        if (items < 0) {
            throw new WriteRejectedException("a write of room " + r.room + " to " + named(region, component, buffer) + " [" + offset + ", +"
                    + span + ") with " + payload + " bytes" + (piece != payload ? " in pieces of " + piece + " every " + stride : "")
                    + " is not what " + link + " writes of it (" + c + ")", false);
        }
        if (region == Region.STATE && component >= a.sortedState().length) {
            throw new WriteRejectedException("room " + r.room + " sent no indices for state component " + component, false);
        }
        int ordinal = switch (region) {
            case KV -> runOf(a.sortedPagesOf()[slot], first, items);
            case AUX -> a.auxIndex() >= 0 && first == a.auxIndex() && items == 1 ? 0 : -1;
            case STATE -> runOf(a.sortedState()[component], first, items);
        };
        if (ordinal < 0) {
            if (region == Region.AUX) {
                throw new WriteRejectedException("aux write [" + offset + ", +" + span + ") is not inside row " + a.auxIndex() + " of room "
                        + r.room, false);
            }
            if (region == Region.KV && a.sortedPagesOf()[slot] != a.sortedPages() && runOf(a.sortedPages(), first, items) >= 0) {
                throw new WriteRejectedException("write to KV buffer " + buffer + " pages [" + first + ", " + (first + items - 1) + "] of room "
                        + r.room + " from " + link + ", whose share of the room's pages they are not", false);
            }
            throw notOwned(region == Region.KV ? "KV buffer " + buffer + " page" : "state component " + component + " index", offset, span,
                    item, r.room);
        }
        long base = a.bitBase()[slot];
        if (base < 0) return; // a link the room tracks no bits for (one-sided): the gate does not see its writes
        base += granules.firstBit(region, component, buffer, a.sortedPagesOf()[slot].length, a.auxIndex() >= 0, a.sortedState());
        long granule = c.position(offset) / c.granule();
        long twice = r.markWritten(base + ordinal * c.perItem() + granule, c.perItem() == 1 ? items : 1);
        if (twice >= 0) {
            String noun = switch (region) {
                case KV -> "page ";
                case AUX -> "row ";
                case STATE -> "slot ";
            };
            String what = c.perItem() == 1 ? noun + (first + twice) : "part " + granule + " of " + noun + first;
            throw new WriteRejectedException(named(region, component, buffer) + " " + what + " of room " + r.room + " was written twice by "
                    + link.endpoint, false);
        }
    }

    private static String named(Region region, int component, int buffer) {
        return switch (region) {
            case KV -> "KV buffer " + buffer;
            case AUX -> "aux buffer " + buffer;
            case STATE -> "state component " + component + " tensor " + buffer;
        };
    }

    /** The index in {@code sorted} of id {@code first} when ids {@code first .. first + count - 1} follow it there; else -1. */
    static int runOf(int[] sorted, long first, long count) {
        int idx = first > Integer.MAX_VALUE || count < 1 ? -1 : Arrays.binarySearch(sorted, (int) first);
        if (idx < 0 || idx + count > sorted.length) return -1;
        for (int k = 1; k < count; k++) if (sorted[idx + k] != first + k) return -1;
        return idx;
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
