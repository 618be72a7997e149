package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.KVTransferMetric;
import io.kvferry.api.RoomChoice;

import io.kvferry.session.Failures;
import io.kvferry.session.RoomFeed;
import io.kvferry.session.RoomStatusTable;

import java.util.Arrays;
import java.util.List;
import java.util.TreeSet;

/**
 * One request on one prefill rank. Owned by the scheduler thread that calls it; the transfer
 * itself runs on the room's worker in the manager.
 */
final class PrefillKVSender implements KVSender {
    private final PrefillKVManager manager;
    private final PrefillRoom room;
    private final String bootstrapAddr;
    /** Scheduler thread only: the terminal state once poll() returned it. */
    private KVPoll concluded;
    /** Failure-injection hook: this request fails once under way (decided at creation). */
    private boolean injectFailure;

    /** The room's status slot, read on every poll. */
    private final RoomStatusTable.Slot slot;
    /** When the room fails for bootstrapping too long (ticker time). */
    private final long bootstrapDeadlineTick;

    /** A dummy sender (non-zero CP rank) moves nothing: it waits for no decode and succeeds on its last chunk. */
    private final boolean dummy;
    /** This sender's place in the manager's change feed; null when the feed is off. */
    private final RoomFeed.Entry<KVSender> feedEntry;

    PrefillKVSender(PrefillKVManager manager, PrefillRoom room, String bootstrapAddr, boolean dummy) {
        this.manager = manager;
        this.room = room;
        this.bootstrapAddr = bootstrapAddr;
        this.dummy = dummy;
        slot = room.slot;
        if (dummy) slot.advance(KVPoll.WaitingForInput); // it waits for no decode
        bootstrapDeadlineTick = room.createdTick + Failures.deadlineNanos(manager.config().bootstrapTimeout());
        double p = manager.config().failureInjectionProbability();
        // a hash of the room, not a draw: a run injects into the same rooms every time (RoomChoice)
        injectFailure = RoomChoice.chosen(room.room, RoomChoice.PREFILL_FAILURE_SALT, p);
        RoomFeed<KVSender> feed = manager.feed();
        feedEntry = feed == null ? null : feed.join(this);
        if (feedEntry != null) {
            slot.watch(feedEntry);
            feedEntry.arm(bootstrapDeadlineTick); // disarmed by the first poll that finds the room past Bootstrapping
        }
    }

    @Override
    public long bootstrapRoom() {
        return room.room;
    }

    @Override
    public void init(int numKvIndices, int auxIndex) {
        if (numKvIndices < 0) {
            manager.rooms.fail(room, FailureKind.BAD_REQUEST, "init: negative page count " + numKvIndices);
            return;
        }
        long rows = manager.memory().auxRowCount();
        if (auxIndex >= 0 && auxIndex >= rows || auxIndex < -1) {
            manager.rooms.fail(room, FailureKind.BAD_REQUEST, "init: aux index " + auxIndex + " is outside the prefill metadata pool of " + rows + " rows");
            return;
        }
        room.numPages = numKvIndices;
        room.auxIndex = auxIndex;
    }

    @Override
    public void send(int[] kvIndices, int[][] stateIndices, Integer numKvTokens) {
        KVPoll st = room.slot.status();
        if (st == KVPoll.Failed) return; // chunks of a failed room are dropped, as after an abort
        if (room.numPages < 0) throw new IllegalStateException("send() before init() for room " + room.room);
        if (st == KVPoll.Bootstrapping) {
            throw new IllegalStateException("send() for room " + room.room + " before decode sent its metadata (still Bootstrapping)");
        }
        if (room.lastChunkSent) {
            // Its decode may have reused the pages, aux row and state slots since; a one-sided path would write them again.
            throw new IllegalStateException("send() for room " + room.room + " after its last chunk (all " + room.numPages
                    + " pages declared in init were sent)");
        }
        if (kvIndices == null) { // as the decode's send_metadata: the room fails naming it (it was a NullPointerException)
            manager.rooms.fail(room, FailureKind.BAD_REQUEST, "send: kv indices are null (an empty array for a chunk without pages)");
            return;
        }
        int start = room.sentPages;
        int end = start + kvIndices.length;
        if (end > room.numPages) {
            manager.rooms.fail(room, FailureKind.BAD_REQUEST, "send: pages [" + start + ", " + end + ") exceed the " + room.numPages
                    + " pages declared in init");
            return;
        }
        long pool = manager.memory().kvPageCount();
        for (int p : kvIndices) {
            if (p < 0 || p >= pool) {
                manager.rooms.fail(room, FailureKind.BAD_REQUEST, "send: page id " + p + " is outside the prefill KV pool of " + pool + " pages");
                return;
            }
        }
        if (stateIndices != null) {
            for (int c = 0; c < stateIndices.length && c < manager.memory().stateComponentCount(); c++) {
                long n = manager.memory().stateIndexCount(c);
                for (int idx : stateIndices[c] == null ? new int[0] : stateIndices[c]) {
                    if (idx < 0 || idx >= n) {
                        manager.rooms.fail(room, FailureKind.BAD_REQUEST, "send: state index " + idx + " of component " + c + " is outside its " + n + " entries");
                        return;
                    }
                }
            }
        }
        room.sentPages = end;
        boolean last = end == room.numPages;
        room.lastChunkSent = last;
        if (dummy) {
            if (last) room.slot.update(KVPoll.Success);
            return;
        }
        int[][] state = stateIndices == null ? null : deepCopy(stateIndices);
        int aux = room.auxIndex;
        KVManagerConfig cfg = manager.config();
        if (cfg.allCpRanksTransfer() && cfg.attnCpSize() > 1) {
            // SGLang §4.6: this CP rank sends the part of the chunk inside its contiguous share of the
            // request's pages; replicated state and aux come from CP rank 0 only.
            int total = room.numPages, cp = cfg.attnCpSize(), r = cfg.attnCpRank();
            int base = total / cp, extra = total % cp;
            int shareStart = r * base + Math.min(r, extra), shareEnd = shareStart + base + (r < extra ? 1 : 0);
            int from = Math.max(start, shareStart), to = Math.min(end, shareEnd);
            int[] part = from < to ? Arrays.copyOfRange(kvIndices, from - start, to - start) : new int[0];
            int sliceStart = from < to ? from : shareEnd;
            if (part.length == 0 && !last) return;
            int[][] partState = r == 0 ? state : null;
            int partAux = r == 0 ? aux : -1;
            manager.enqueue(room, new ChunkExecutor.Chunk(part, sliceStart, last, partState, partAux, shareEnd, total));
            return;
        }
        int[] pages = kvIndices.clone();
        manager.enqueue(room, ChunkExecutor.Chunk.of(pages, start, last, state, aux));
    }

    private static int[][] deepCopy(int[][] a) {
        int[][] c = new int[a.length][];
        for (int i = 0; i < a.length; i++) c[i] = a[i] == null ? new int[0] : a[i].clone();
        return c;
    }

    @Override
    public int popDecodePrefixLen() {
        // Before the decode's metadata came there is nothing to pop: 0, and the prefix it brings is still there to
        // pop (as SGLang's dict pop). An early call used to consume it, so the engine sent the decode's prefix again.
        if (room.prefixPopped || slot.status() == KVPoll.Bootstrapping) return 0;
        room.prefixPopped = true;
        return room.decodePrefixLen;
    }

    @Override
    public KVTransferMetric getTransferMetric() {
        long first = room.firstSendNanos, done = room.doneNanos;
        Double latency = first != 0 && done != 0 ? (done - first) / 1e9 : null;
        String only = null;
        TreeSet<String> paths = null;
        for (PrefillRoom.Destination d : room.destinations()) {
            if (d.info().dummy() || d.link().dataPath == null || d.link().dataPath.name().equals(only)) continue;
            if (only == null && paths == null) {
                only = d.link().dataPath.name();
                continue;
            }
            if (paths == null) paths = new TreeSet<>(List.of(only));
            paths.add(d.link().dataPath.name());
        }
        return new KVTransferMetric(latency, null, room.bytesSent, paths != null ? String.join("+", paths) : only);
    }

    @Override
    public KVPoll poll() {
        KVPoll st = pollOnce();
        if (feedEntry != null && st != KVPoll.Bootstrapping) feedEntry.disarm();
        return st;
    }

    private KVPoll pollOnce() {
        if (concluded != null) return concluded;
        KVPoll st = slot.status();
        if (injectFailure && st.value() >= KVPoll.WaitingForInput.value() && st != KVPoll.Success) {
            injectFailure = false;
            manager.rooms.fail(room, FailureKind.INJECTED, Failures.INJECTED);
            st = room.slot.status();
        }
        if (st.isTerminal()) {
            concluded = st; // latched, as SGLang's conclude_state
            manager.telemetry().polledConcluded(slot.sinceNanos());
            return st;
        }
        if (st == KVPoll.Bootstrapping) {
            if (manager.deadlineClock().now() - bootstrapDeadlineTick > 0) {
                long now = manager.deadlineClock().exactNow();
                manager.rooms.fail(room, FailureKind.BOOTSTRAP_TIMEOUT, Failures.timedOut(room.room, (now - room.createdTick) / 1e9,
                        "Bootstrapping"));
                return KVPoll.Failed;
            }
        }
        return st;
    }

    /**
     * As SGLang's: latches Failed, clears the room and raises its failure. Called for a room that has not
     * concluded, it gives the room up first, as {@link #clear()} does: its decodes are told now instead of
     * holding their pages until their waiting timeout.
     */
    @Override
    public void failureException() {
        if (feedEntry != null) feedEntry.leave();
        manager.rooms.failIfUnfinished(room, FailureKind.ABORTED, "failure_exception() was called for room " + room.room
                + " before its transfer concluded");
        RoomStatusTable.Entry e = room.slot.entry();
        concluded = KVPoll.Failed;
        manager.rooms.forget(room); // as SGLang: the failure is latched and the room's bookkeeping dropped
        throw KVTransferException.forRoom(room.room, e == null ? null : e.kind(), e == null ? null : e.reason());
    }

    /**
     * Drops the room. One that has not concluded fails first (aborted), so its decodes are told now, after
     * any chunk in progress, instead of waiting out their waiting timeout for bytes that will never come.
     */
    @Override
    public void clear() {
        if (feedEntry != null) feedEntry.leave();
        // Atomically unfinished: the room's last chunk may conclude it on its worker right now.
        manager.rooms.failIfUnfinished(room, FailureKind.ABORTED, "Request " + room.room
                + " was cleared on the prefill before its transfer concluded");
        manager.rooms.forget(room);
    }

    /**
     * As SGLang's: the failure is recorded and this sender's state latched Failed, even after poll()
     * returned Success. A room that had reached Success fails on this rank only: its decodes, which may
     * hold it complete and verified, are not told (PrefillRooms.notifyOnce).
     */
    @Override
    public void abort() {
        manager.rooms.fail(room, FailureKind.ABORTED, Failures.ABORTED);
        if (concluded != null) concluded = KVPoll.Failed; // unlatched, poll() reads the slot's Failed
    }

    @Override
    public String toString() {
        return "PrefillKVSender[room=" + room.room + ", bootstrap=" + bootstrapAddr + "]";
    }
}
