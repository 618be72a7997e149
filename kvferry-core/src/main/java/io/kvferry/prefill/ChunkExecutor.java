package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.PlanException;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.Status;
import io.kvferry.session.Failures;
import io.kvferry.transport.PageDigest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Moves one chunk of one room to each of its destinations, on the room's transfer worker: plans
 * which bytes go where (pure, {@link TransferPlanner}), hands each plan to the destination's data
 * path, and after the last chunk sends Success behind the bytes. Any error fails the room.
 */
final class ChunkExecutor {
    private static final Logger log = LoggerFactory.getLogger(ChunkExecutor.class);

    /** One chunk: pages {@code [sliceStart, sliceStart + pages.length)} of the room. */
    record Chunk(int[] pages, int sliceStart, boolean last, int[][] stateIndices, int auxIndex, int lastPageEnd, int totalPages) {
        /** A plain chunk (no CP share): the decode's page count ends it. */
        static Chunk of(int[] pages, int sliceStart, boolean last, int[][] stateIndices, int auxIndex) {
            return new Chunk(pages, sliceStart, last, stateIndices, auxIndex, -1, -1);
        }
    }

    private final RegisteredMemory memory;
    private final KVManagerConfig config;
    private final int pageSize;
    private final int uniqueRank;
    private final PrefillRooms rooms;
    private final TransferWorkers workers;
    /** Copied once: planned with on every chunk. */
    private final long[] kvItemLens;
    private final long[] auxItemLens;
    private final long[][] stateItemLens;

    /** Each transfer worker's CRC (digests are computed on the room's worker). */
    private static final ThreadLocal<SegmentCrc> CRC = ThreadLocal.withInitial(SegmentCrc::new);
    private final double corruptionInjection;

    ChunkExecutor(RegisteredMemory memory, KVManagerConfig config, int pageSize, int uniqueRank, PrefillRooms rooms,
                  TransferWorkers workers) {
        this.corruptionInjection = config.corruptionInjectionProbability();
        this.memory = memory;
        this.config = config;
        this.pageSize = pageSize;
        this.uniqueRank = uniqueRank;
        this.rooms = rooms;
        this.workers = workers;
        this.kvItemLens = memory.kvItemLens();
        this.auxItemLens = memory.auxItemLens();
        this.stateItemLens = memory.stateItemLens();
    }

    void execute(PrefillRoom room, Chunk c) {
        KVPoll st = rooms.statuses.status(room.room);
        if (st == KVPoll.Failed || !rooms.isTracked(room.room)) return;
        if (room.firstSendNanos == 0) {
            room.firstSendNanos = System.nanoTime();
            room.corruptPending = corruptionInjection > 0 && ThreadLocalRandom.current().nextDouble() < corruptionInjection;
        }
        PrefillRoom.Destination current = null;
        try {
            List<PrefillRoom.Destination> destinations = room.orderedDestinations();
            if (room.sentTo == null) {
                room.sentTo = new long[destinations.size()];
                room.digestOf = new long[destinations.size()];
            }
            for (int i = 0; i < destinations.size(); i++) {
                PrefillRoom.Destination d = destinations.get(i);
                if (d.info().dummy()) continue;
                current = d;
                sendTo(room, i, d, c);
            }
            current = null;
            if (c.last()) {
                if (rooms.statuses.status(room.room) == KVPoll.Failed) return;
                for (int i = 0; i < destinations.size(); i++) {
                    PrefillRoom.Destination d = destinations.get(i);
                    if (d.info().dummy()) continue;
                    current = d;
                    // Success carries every byte written to this destination (and their digest), so the decode
                    // can tell a complete room from one that lost bytes on the way.
                    d.link().statusConnection(room.room).send(Status.success(room.room, uniqueRank, room.sentTo[i],
                            room.digestOf[i], d.link().digestInStatus));
                }
                room.doneNanos = System.nanoTime();
                rooms.succeed(room);
            }
        } catch (IOException | RuntimeException e) {
            String to = current == null ? "" : " to " + current.link();
            String why = Failures.message(e);
            FailureKind kind = e instanceof PlanException ? FailureKind.BAD_REQUEST : FailureKind.TRANSFER_ERROR;
            if (Failures.isConnectionLoss(e)) {
                why = "Decode instance could be dead: connection closed (" + why + ")";
                kind = FailureKind.PEER_LOST;
            }
            String reason = "Failed to send kv chunk of " + room.room + to + ": " + why;
            log.debug(reason); // the room's failure line (io.kvferry.failures) reports it
            rooms.fail(room, kind, reason);
        } catch (Error e) {
            // e.g. InternalError from a mapping whose file was truncated under it: the room fails and
            // its decode is told, rather than the error being logged by the worker and the room hanging.
            String to = current == null ? "" : " to " + current.link();
            String reason = "Failed to send kv chunk of " + room.room + to + ": " + e;
            log.error(reason, e);
            rooms.fail(room, FailureKind.INTERNAL, reason);
            if (e instanceof VirtualMachineError) throw e;
        }
    }

    private void sendTo(PrefillRoom room, int index, PrefillRoom.Destination d, Chunk c) throws IOException {
        int[] dstAll = d.info().dstKvIndices();
        int[] pages = c.pages();
        int sliceStart = c.sliceStart();
        if (sliceStart + pages.length > dstAll.length) {
            throw new PlanException("decode session " + d.link().sessionId() + " expects " + dstAll.length
                    + " pages but prefill sends pages [" + sliceStart + ", " + (sliceStart + pages.length) + ")");
        }
        int expectedEnd = c.lastPageEnd() < 0 ? dstAll.length : c.lastPageEnd();
        if (c.last() && c.totalPages() >= 0 && c.totalPages() != dstAll.length) {
            throw new PlanException("decode session " + d.link().sessionId() + " expects " + dstAll.length
                    + " pages but the prefill CP ranks send " + c.totalPages());
        }
        if (c.last() && sliceStart + pages.length != expectedEnd) {
            throw new PlanException("decode session " + d.link().sessionId() + " expects " + expectedEnd
                    + " pages but prefill's last chunk ends at page " + (sliceStart + pages.length));
        }
        int[] dst = Arrays.copyOfRange(dstAll, sliceStart, sliceStart + pages.length);
        HeadSlice[] slices = d.link().kvSlices;
        int[] bufferMap = d.link().kvBufferMap;
        runPlan(room, index, d, slices == null
                ? TransferPlanner.planKv(pages, dst, kvItemLens, bufferMap)
                : TransferPlanner.planKvSliced(pages, dst, kvItemLens, d.link().hello.memory().kvItemLens(),
                        pageSize, slices, bufferMap));
        if (c.last()) {
            runPlan(room, index, d, slices == null
                    ? TransferPlanner.planState(memory.stateTypes(), c.stateIndices(), d.info().stateIndices(),
                            stateItemLens, w -> log.warn("room {}: {}", room.room, w))
                    : planStateSliced(c.stateIndices(), d));
            runPlan(room, index, d, TransferPlanner.planAux(c.auxIndex(), d.info().auxIndex(), auxItemLens));
        }
    }

    private CopyPlan planStateSliced(int[][] stateIndices, PrefillRoom.Destination d) {
        Hello h = d.link().hello;
        int n = memory.stateComponentCount();
        long[][] dstItems = new long[n][];
        int[][] dims = new int[n][], outer = new int[n][];
        for (int c = 0; c < n; c++) {
            dstItems[c] = h.memory().states().get(c).itemLens();
            dims[c] = new int[memory.stateTensorCount(c)];
            outer[c] = new int[memory.stateTensorCount(c)];
            for (int t = 0; t < dims[c].length; t++) {
                dims[c][t] = memory.stateDim(c, t);
                outer[c][t] = memory.stateOuterCount(c, t);
            }
        }
        return TransferPlanner.planStateSliced(memory.stateTypes(), stateIndices, d.info().stateIndices(),
                stateItemLens, dstItems, dims, outer, config.attnTpSize(), config.attnTpRank(), h.attnTpSize(),
                h.engineRank() % h.attnTpSize());
    }

    private void runPlan(PrefillRoom room, int index, PrefillRoom.Destination d, CopyPlan plan) throws IOException {
        if (plan.size() == 0) return;
        DecodeLink link = d.link();
        if (link.digestInStatus) {
            // Digested from the source before the write: whatever changes the bytes on their way is caught.
            room.digestOf[index] += PageDigest.ofPlan(plan, memory, link.hello.memory(), room.room, link.checksum, CRC.get());
        }
        long t0 = workers.entered();
        boolean moved = false;
        long flipped = room.corruptPending && !link.dataPath.name().equals("tcp") ? flipOneByte(plan) : -1;
        try {
            link.dataPath.write(room.room, plan, memory, room.failed(rooms.statuses));
            moved = true;
            d.link().meters.written(plan);
        } finally {
            if (flipped >= 0) {
                flipOneByte(plan); // the test hook restores the source: only the decode's copy is damaged
                room.corruptPending = false;
            }
            // A failed write's time counts too (the data path was busy), its bytes do not.
            workers.exited(t0, moved ? plan.totalBytes() : 0, moved ? plan.size() : 0);
        }
        room.sentTo[index] += plan.totalBytes();
        room.bytesSent += plan.totalBytes();
    }

    /**
     * Test hook ({@code corruptionInjectionProbability}, the chaos {@code corrupt} scenario): flips one
     * byte in the middle of the plan's first op in the source; called again it flips it back. Only
     * on links whose checksums are digested before the write (tcp is corrupted by the fault proxy
     * instead: its CRC is taken as each frame leaves). Returns the byte's offset.
     */
    private long flipOneByte(CopyPlan plan) {
        MemorySegment seg = memory.segmentOrNull(plan.region(0), plan.component(0), plan.buffer(0));
        long at = plan.srcOffset(0) + plan.pieceLength(0) / 2;
        seg.set(ValueLayout.JAVA_BYTE, at, (byte) (seg.get(ValueLayout.JAVA_BYTE, at) ^ 0x5A));
        return at;
    }
}
