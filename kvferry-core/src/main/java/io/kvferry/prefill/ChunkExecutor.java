package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.RoomChoice;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.PageRuns;
import io.kvferry.plan.PlanException;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.Status;
import io.kvferry.metrics.LogSafe;
import io.kvferry.session.Failures;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PageDigest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;

/**
 * Moves one chunk of one room to each of its destinations, on the room's transfer strand: plans
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
    /** Whether this rank writes rooms' state: all but a non-zero CP rank under all-CP-ranks transfer. */
    private final boolean writesState;

    /** Each transfer worker's CRC (digests are computed on the worker running the room's strand). */
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
        this.writesState = !(config.allCpRanksTransfer() && config.attnCpSize() > 1 && config.attnCpRank() != 0);
    }

    void execute(PrefillRoom room, Chunk c) {
        KVPoll st = room.status();
        if (st == KVPoll.Failed || !rooms.isTracked(room.room)) return;
        if (room.firstSendNanos == 0) {
            room.firstSendNanos = System.nanoTime();
            // Chosen by the room, not drawn: a run damages the same rooms every time (its workload fixes the rooms).
            room.corruptPending = RoomChoice.chosen(room.room, RoomChoice.PREFILL_HOOK_SALT, corruptionInjection);
        }
        PrefillRoom.Destination current = null;
        try {
            List<PrefillRoom.Destination> destinations = room.orderedDestinations();
            if (room.sentTo == null) {
                room.sentTo = new long[destinations.size()];
                room.digestOf = new long[destinations.size()];
            }
            Scratch scratch = SCRATCH.get();
            for (int i = 0; i < destinations.size(); i++) {
                PrefillRoom.Destination d = destinations.get(i);
                if (d.info().dummy()) continue;
                current = d;
                sendTo(room, i, d, c, scratch);
            }
            current = null;
            if (c.last()) {
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
            if (current != null) takeDownIfBroken(current.link());
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

    /**
     * A link whose data path can no longer deliver is closed (its other rooms fail as on any link
     * loss, and its decode fences the path and connects afresh). Closed before the room's next
     * task, so no ABORT_ACK of a room whose writes may still land on the broken path leaves after it:
     * the decode fences instead of trusting an ACK.
     */
    private static void takeDownIfBroken(DecodeLink link) {
        DataPath path = link.dataPath;
        String broken = path == null ? null : path.brokenReason();
        if (broken != null) {
            log.warn("{}: the {} data path failed ({}); closing the link", link, path.name(), LogSafe.text(broken));
            link.connection.close(FailureKind.PEER_LOST, "the " + path.name() + " data path failed: " + broken);
        }
    }

    /**
     * Plans the chunk for one destination into the worker's reusable plan — its KV and, with the last
     * chunk, its aux row and state (in region order, so tcp packs them into one piece list) — and
     * moves it; after the last chunk the destination's Success STATUS follows the bytes.
     */
    private void sendTo(PrefillRoom room, int index, PrefillRoom.Destination d, Chunk c, Scratch scratch) throws IOException {
        int[] dstAll = d.info().dstKvIndices();
        int[] pages = c.pages();
        int sliceStart = c.sliceStart();
        if (sliceStart + pages.length > dstAll.length) {
            throw new PlanException("decode " + d.link().label() + " expects " + dstAll.length
                    + " pages but prefill sends pages [" + sliceStart + ", " + (sliceStart + pages.length) + ")");
        }
        int expectedEnd = c.lastPageEnd() < 0 ? dstAll.length : c.lastPageEnd();
        if (c.last() && c.totalPages() >= 0 && c.totalPages() != dstAll.length) {
            throw new PlanException("decode " + d.link().label() + " expects " + dstAll.length
                    + " pages but the prefill CP ranks send " + c.totalPages());
        }
        if (c.last() && sliceStart + pages.length != expectedEnd) {
            throw new PlanException("decode " + d.link().label() + " expects " + expectedEnd
                    + " pages but prefill's last chunk ends at page " + (sliceStart + pages.length));
        }
        HeadSlice[] slices = d.link().kvSlices;
        int[] bufferMap = d.link().kvBufferMap;
        CopyPlan plan = scratch.plan;
        plan.reset();
        PageRuns runs = scratch.runs.regroup(pages, 0, dstAll, sliceStart, pages.length).sortByDestination();
        if (slices == null) {
            TransferPlanner.appendKv(plan, runs, kvItemLens, bufferMap);
        } else {
            TransferPlanner.appendKvSliced(plan, runs, kvItemLens, d.link().hello.memory().kvItemLens(), pageSize, slices, bufferMap);
        }
        if (c.last()) {
            if (writesState && c.auxIndex() < 0 && d.info().auxIndex() >= 0 && auxItemLens.length > 0) {
                // As for state below: the row would stay unwritten, and only the decode would find out (a byte count short).
                throw new PlanException("the decode asked for aux row " + d.info().auxIndex() + " but this prefill rank's init"
                        + " named no aux row (-1); it would stay unwritten");
            }
            TransferPlanner.appendAux(plan, c.auxIndex(), d.info().auxIndex(), auxItemLens);
            // Under all-CP-ranks transfer only CP rank 0 writes the state (its coverage says so): the others owe none of it.
            int[][] dstState = writesState ? d.info().stateIndices() : null;
            if (slices == null) {
                TransferPlanner.appendState(plan, memory.stateTypes(), c.stateIndices(), dstState, stateItemLens,
                        w -> log.warn("room {}: {}", room.room, w));
            } else {
                appendStateSliced(plan, c.stateIndices(), dstState, d);
            }
        }
        runPlan(room, index, d, plan, c.last() ? scratch : null);
    }

    private void appendStateSliced(CopyPlan plan, int[][] stateIndices, int[][] dstState, PrefillRoom.Destination d) {
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
        TransferPlanner.appendStateSliced(plan, memory.stateTypes(), stateIndices, dstState,
                stateItemLens, dstItems, dims, outer, config.attnTpSize(), config.attnTpRank(), h.attnTpSize(),
                h.engineRank() % h.attnTpSize());
    }

    /**
     * Moves one plan to one destination. With {@code last} (the scratch of the room's last chunk) the
     * destination's Success STATUS — every byte written to it, and their digest — follows the plan:
     * in the same syscall on tcp, else sent right after it on the room's status connection.
     */
    private void runPlan(PrefillRoom room, int index, PrefillRoom.Destination d, CopyPlan plan, Scratch last) throws IOException {
        DecodeLink link = d.link();
        ByteBuffer status = null;
        long total = plan.totalBytes();
        if (plan.size() > 0 && link.digestInStatus) {
            // Digested from the source before the write: whatever changes the bytes on their way is caught.
            room.digestOf[index] += PageDigest.ofPlan(plan, memory, link.hello.memory(), room.room, link.checksum, CRC.get());
        }
        if (last != null && room.status() != KVPoll.Failed) {
            status = last.status.clear();
            FrameCodec.putSuccessStatusFrame(status, room.room, uniqueRank, room.sentTo[index] + total, room.digestOf[index],
                    link.digestInStatus);
            status.flip();
        }
        boolean statusSent = false;
        if (plan.size() > 0) {
            long t0 = workers.entered();
            boolean moved = false;
            long flipped = room.corruptPending && !link.dataPath.name().equals("tcp") ? flipOneByte(plan) : -1;
            try {
                statusSent = link.dataPath.write(room.room, plan, memory, room.failed(), status);
                moved = true;
                link.meters.written(plan);
            } finally {
                if (flipped >= 0) {
                    flipOneByte(plan); // the test hook restores the source: only the decode's copy is damaged
                    room.corruptPending = false;
                }
                // A failed write's time counts too (the data path was busy), its bytes do not.
                workers.exited(t0, moved ? total : 0, moved ? plan.size() : 0);
            }
            room.sentTo[index] += total;
            room.bytesSent += total;
        }
        if (status != null && !statusSent) {
            // Success carries every byte written to this destination (and their digest), so the decode
            // can tell a complete room from one that lost bytes on the way.
            link.statusConnection(room.room).send(Status.success(room.room, uniqueRank, room.sentTo[index], room.digestOf[index],
                    link.digestInStatus));
        }
    }

    /** A transfer worker's reusable planning state: nothing is allocated per chunk once it has grown. */
    private static final class Scratch {
        final CopyPlan plan = CopyPlan.reusable();
        final PageRuns runs = PageRuns.reusable();
        final ByteBuffer status = ByteBuffer.allocateDirect(FrameCodec.SUCCESS_STATUS_FRAME_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** Each transfer worker's scratch (workers are pooled threads, so it is allocated once per worker, not per task). */
    private static final ThreadLocal<Scratch> SCRATCH = ThreadLocal.withInitial(Scratch::new);

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
