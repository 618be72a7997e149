package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.KVTransferMetric;
import io.kvferry.api.RoomChoice;
import io.kvferry.metrics.HandshakeRefusal;
import io.kvferry.plan.PlanException;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RegistryException;
import io.kvferry.session.Failures;
import io.kvferry.session.RoomFeed;
import io.kvferry.session.RoomStatusTable;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.net.ConnectException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLongArray;

/** One request on one decode rank; owned by the scheduler thread that calls it. */
final class DecodeKVReceiver implements KVReceiver {
    private final DecodeKVManager manager;
    private final DecodeRoom room;
    /** Scheduler thread only: the terminal state once poll() returned it. */
    private KVPoll concluded;
    /** Failure-injection hook: this request fails once its metadata went out (decided at creation). */
    private boolean injectFailure;
    /** Scheduler thread only: init() was called and the bootstrap has not completed yet; since when. */
    private boolean initPending;
    private boolean initCalled;
    private long initPendingSince;
    private int prefillDpRank;
    /** Scheduler thread only: send_metadata went out, and when (on the manager's ticker: the waiting deadline counts from here). */
    private boolean metadataSent;
    private long metadataSentTick;
    /** Scheduler thread only: when the room fails for waiting too long (ticker time). */
    private long waitDeadlineTick;
    /** The room's status slot, read on every poll (kept here: one object fewer to touch per poll). */
    private final RoomStatusTable.Slot slot;
    private static final int[] NO_INDICES = new int[0];
    private static final int[][] NO_STATE = new int[0][];
    /** Scheduler thread only: where the room goes, once bootstrapped. */
    private LinkDirectory.Route route;
    /** Scheduler thread only: the resolution of this room's route it waits for, while bootstrapping. */
    private CompletableFuture<LinkDirectory.Route> resolution;
    /** Scheduler thread only: after a failure worth retrying, no new resolution before this (System.nanoTime). */
    private long retryAtNanos = System.nanoTime();
    /** Pause between two resolutions for a room whose prefill was not there yet. */
    private static final long RETRY_PAUSE_MILLIS = 100;
    /** This receiver's place in the manager's change feed; null when the feed is off. */
    private final RoomFeed.Entry<KVReceiver> feedEntry;

    private long now() {
        return manager.config().ticker().nanoTime();
    }

    DecodeKVReceiver(DecodeKVManager manager, DecodeRoom room) {
        this.manager = manager;
        this.room = room;
        this.slot = room.slot;
        double p = manager.config().failureInjectionProbability();
        // a hash of the room, not a draw: a run injects into the same rooms every time (RoomChoice)
        injectFailure = RoomChoice.chosen(room.room, RoomChoice.DECODE_FAILURE_SALT, p);
        RoomFeed<KVReceiver> feed = manager.feed();
        feedEntry = feed == null ? null : feed.join(this);
        if (feedEntry != null) slot.watch(feedEntry);
    }

    @Override
    public long bootstrapRoom() {
        return room.room;
    }

    @Override
    public void init(int prefillDpRank) {
        if (room.slot.status() != KVPoll.Bootstrapping || initCalled) return;
        initCalled = true;
        initPending = true;
        this.prefillDpRank = prefillDpRank;
        initPendingSince = now();
        tryBootstrap();
        if (feedEntry != null && initPending && !room.slot.status().isTerminal()) feedEntry.retryEveryDrain(); // poll retries it
    }

    /**
     * One bootstrap step, never blocking on a peer: a known route is adopted at once; otherwise the
     * room waits (Bootstrapping) for its group's resolution ({@link RouteResolver#resolve}: registry
     * lookups and link set-up on a resolver thread) and adopts or judges its outcome when it is done.
     * The prefill's topology being unavailable (not registered yet, registry unreachable) or its
     * rank refusing the connection (being restarted) leaves the room Bootstrapping and poll() tries
     * again, {@value #RETRY_PAUSE_MILLIS} ms later, until {@code prefillInfoTimeout} — as SGLang
     * retries pending requests for ~15 s. Any other problem fails the room.
     */
    private void tryBootstrap() {
        String addr = room.bootstrapAddr;
        LinkDirectory.Route cached = manager.directory.route(addr, prefillDpRank);
        if (cached != null) {
            // Every room of this DP group goes to the same prefill ranks while their links live.
            adopt(cached);
            return;
        }
        if (resolution == null) {
            if (System.nanoTime() - retryAtNanos < 0) return;
            String malformed = BootstrapClient.addressProblem(addr);
            if (malformed != null) { // no lookup can succeed: the room fails now, not after prefillInfoTimeout of retries
                fail(FailureKind.BAD_REQUEST, "Could not bootstrap room " + room.room + ": " + malformed);
                return;
            }
            resolution = manager.resolver.resolve(addr, prefillDpRank);
        }
        if (!resolution.isDone()) return;
        CompletableFuture<LinkDirectory.Route> done = resolution;
        resolution = null;
        LinkDirectory.Route route;
        try {
            route = done.join();
        } catch (CompletionException | CancellationException e) {
            judge(addr, e.getCause() != null ? e.getCause() : e);
            return;
        }
        if (route.alive()) {
            adopt(route);
        } else {
            // the next resolution opens fresh links
            retryUntilTimeout("Could not bootstrap with prefill at " + addr, "a link of its route closed during the set-up");
        }
    }

    /** Fails the room for a resolution's failure, or leaves it bootstrapping when trying again can help. */
    private void judge(String addr, Throwable e) {
        switch (e) {
            case RouteResolver.TopologyUnavailable t -> {
                if (t.getCause() instanceof RegistryException re && (re.statusCode() == 400 || re.statusCode() == 401)) {
                    fail(FailureKind.PREFILL_UNREACHABLE, "Could not fetch prefill parallel info from " + addr + ": " + t.getMessage()); // retrying cannot help
                } else {
                    retryUntilTimeout("Could not fetch prefill parallel info from " + addr, t.getMessage());
                }
            }
            case RouteResolver.RouteRefused r -> fail(r.kind, r.getMessage());
            // The registry still points at a rank that is gone (a prefill being restarted): the lookups were dropped.
            case ConnectException c -> retryUntilTimeout("Could not bootstrap with prefill at " + addr, c.getMessage());
            case LinkRefusedException r -> {
                manager.telemetry.refused(HandshakeRefusal.of(r.kind()));
                fail(r.kind(), "Could not bootstrap with prefill at " + addr + ": " + r.getMessage());
            }
            case IOException io -> fail(FailureKind.PREFILL_UNREACHABLE, "Could not bootstrap with prefill at " + addr + ": " + io.getMessage());
            default -> fail(e instanceof PlanException ? FailureKind.LAYOUT_REFUSED : FailureKind.PREFILL_UNREACHABLE,
                    "Could not bootstrap with prefill at " + addr + ": " + e.getMessage());
        }
    }

    /** Leaves the room bootstrapping for another resolution a pause from now, or fails it ({@code what} after N s: why) once prefillInfoTimeout passed. */
    private void retryUntilTimeout(String what, String why) {
        double waited = (now() - initPendingSince) / 1e9;
        if (waited >= manager.config().prefillInfoTimeout().toNanos() / 1e9) {
            fail(FailureKind.PREFILL_UNREACHABLE, what + " after " + String.format("%.1f", waited) + " s: " + why);
        } else {
            retryAtNanos = System.nanoTime() + RETRY_PAUSE_MILLIS * 1_000_000L;
        }
    }

    /** Takes the room's prefill ranks from its route (registering the room on their links): the room is then WaitingForInput. */
    private void adopt(LinkDirectory.Route route) {
        this.route = route;
        room.prefillCpSize = route.prefillCpSize();
        room.allCpRanks = route.allCpRanks();
        room.landedFrom = new AtomicLongArray(route.targets().size());
        room.requiredResponses = route.requiredResponses();
        room.requiredDstInfoNum = route.requiredDstInfoNum();
        // Targets before the links list the room: a lost link fails only rooms it is a target of.
        room.targets = route.targets();
        for (DecodeRoom.Target t : route.targets()) t.link().rooms.add(room.room);
        initPending = false;
        room.slot.update(KVPoll.WaitingForInput);
        // A link lost while it was being listed: its loss closed it before walking its rooms, so either
        // that walk failed the room or the link reads closed here.
        for (DecodeRoom.Target t : route.targets()) {
            if (!t.dummy() && t.link().connection.isClosed()) {
                room.slot.failIfUnfinished(FailureKind.PEER_LOST, "Lost connection with prefill instance (bootstrap_addr: "
                        + t.link().bootstrapAddr + ") while the room was set up");
                return;
            }
        }
    }

    @Override
    public void sendMetadata(int[] kvIndices, int auxIndex, int[][] stateIndices, int decodePrefixLen) {
        KVPoll st = room.slot.status();
        if (st == KVPoll.Failed) return;
        if (st != KVPoll.WaitingForInput || room.allowance != null) {
            throw new IllegalStateException("send_metadata for room " + room.room + " in state " + st
                    + (room.allowance != null ? " (already sent)" : " (call init first)"));
        }
        // Owned copies, made once: the pages in token order (kept, and sent) and sorted (checked, then the gate's).
        int[] pages = kvIndices == null ? null : kvIndices.clone();
        int[] sortedPages = pages == null ? null : pages.clone();
        if (sortedPages != null) Arrays.sort(sortedPages);
        int[][] state = stateIndices == null ? NO_STATE : new int[stateIndices.length][];
        for (int c = 0; c < state.length; c++) state[c] = stateIndices[c] == null ? NO_INDICES : stateIndices[c].clone();
        int[][] sortedState = new int[state.length][];
        for (int c = 0; c < state.length; c++) {
            sortedState[c] = state[c].length == 0 ? NO_INDICES : state[c].clone();
            Arrays.sort(sortedState[c]);
        }
        String problem = checkIndices(sortedPages, auxIndex, stateIndices == null ? null : sortedState, decodePrefixLen);
        if (problem != null) {
            fail(FailureKind.BAD_REQUEST, problem);
            return;
        }
        String gap = uncovered(auxIndex, state);
        if (gap != null) {
            fail(FailureKind.LAYOUT_REFUSED, "the prefill ranks of room " + room.room + " would leave part of it unwritten: " + gap);
            return;
        }
        int targets = room.targets.size();
        long[] owed = new long[targets];
        int[][] pagesOf = new int[targets][], sortedPagesOf = new int[targets][];
        long[] bitBase = new long[targets];
        long bits = 0;
        for (int i = 0; i < targets; i++) {
            DecodeRoom.Target t = room.targets.get(i);
            bitBase[i] = -1;
            if (t.dummy()) {
                pagesOf[i] = sortedPagesOf[i] = NO_INDICES;
                continue;
            }
            if (room.allCpRanks) {
                int[] share = Completeness.cpShare(pages.length, room.prefillCpSize, t.cpRank());
                pagesOf[i] = Arrays.copyOfRange(pages, share[0], share[0] + share[1]);
                sortedPagesOf[i] = pagesOf[i].clone();
                Arrays.sort(sortedPagesOf[i]);
            } else {
                pagesOf[i] = pages;
                sortedPagesOf[i] = sortedPages;
            }
            owed[i] = Completeness.owed(t.link().coverage, manager.memory(), pagesOf[i].length, auxIndex, state);
            if (t.link().oneSided() == null) {
                // Lands through the gate: its granules get bits (docs/PROTOCOL.md, "Success means complete").
                bitBase[i] = bits;
                bits += t.link().granules.bits(pagesOf[i].length, auxIndex >= 0, sortedState);
            }
        }
        int roomBuffer = manager.memory().auxRoomBuffer();
        if (roomBuffer >= 0 && auxIndex >= 0) {
            // The gate reads this column at Success: clear what a previous occupant of the row left.
            manager.memory().slice(Region.AUX, 0, roomBuffer, auxIndex * manager.memory().auxItemLen(roomBuffer), 8)
                    .set(ValueLayout.JAVA_LONG_UNALIGNED, 0, 0L);
        }
        room.written = bits > 0 ? new long[(int) ((bits + 63) >>> 6)] : null;
        // Published before any info leaves, so the first write already finds its allowance.
        room.allowance = new DecodeRoom.Allowance(pages, sortedPages, auxIndex, state, sortedState, owed, pagesOf, sortedPagesOf, bitBase);
        room.metadataSentNanos = System.nanoTime();
        // The room's own slot, and only while it is still WaitingForInput: a reader may fail it right now, and
        // the time since that failure is no allocation figure.
        RoomStatusTable.Entry bootstrapped = room.slot.entry();
        if (bootstrapped != null && bootstrapped.status() == KVPoll.WaitingForInput) {
            manager.telemetry.allocated(room.metadataSentNanos - bootstrapped.sinceNanos());
        }
        metadataSentTick = now();
        waitDeadlineTick = metadataSentTick + Failures.deadlineNanos(manager.config().waitingTimeout());
        metadataSent = true;
        if (feedEntry != null) {
            feedEntry.arm(waitDeadlineTick);
            if (injectFailure) feedEntry.signal(); // the injected failure fires on the next poll
        }
        for (DecodeRoom.Target t : room.targets) {
            // Encoded as it is sent and not kept: it may share the allowance's arrays, which nothing changes.
            TransferInfo info = t.dummy()
                    ? new TransferInfo(room.room, NO_INDICES, -1, NO_STATE, room.requiredDstInfoNum, decodePrefixLen, true)
                    : new TransferInfo(room.room, pages, auxIndex, state, room.requiredDstInfoNum, decodePrefixLen, false);
            try {
                t.link().connection.send(info);
            } catch (IOException e) {
                String closed = t.link().connection.closeReason(); // this side cut it (a stalled write): say why
                fail(FailureKind.PEER_LOST, "Failed to send metadata to " + t.link() + ": " + (closed != null ? closed : e.getMessage()));
                return;
            }
        }
    }

    /** Whether the room's writing prefill ranks together cover all it asks for; why not, or null. */
    private String uncovered(int auxIndex, int[][] state) {
        boolean needsAux = auxIndex >= 0 && manager.memory().auxBufferCount() > 0;
        int components = manager.memory().stateComponentCount();
        long mask = 0;
        for (int c = 0; c < state.length && c < components && c < 64; c++) if (state[c].length > 0) mask |= 1L << c;
        LinkDirectory.CoverageMemo memo = route == null || components > 64 ? null : route.memo();
        LinkDirectory.CoverageMemo.Verdict last = memo == null ? null : memo.last;
        if (last != null && last.needsAux() == needsAux && last.stateMask() == mask) return last.gap();
        List<Coverage> writers = new ArrayList<>();
        for (DecodeRoom.Target t : room.targets) if (!t.dummy()) writers.add(t.link().coverage);
        boolean[] stateNeeded = new boolean[components];
        for (int c = 0; c < state.length && c < stateNeeded.length; c++) stateNeeded[c] = state[c].length > 0;
        String gap = writers.isEmpty() ? null : manager.coverageVerdict(writers, needsAux, stateNeeded);
        if (memo != null) memo.last = new LinkDirectory.CoverageMemo.Verdict(needsAux, mask, gap);
        return gap;
    }

    /** Checks the metadata's indices, given sorted copies ({@code state} null when none were sent). */
    private String checkIndices(int[] sorted, int auxIndex, int[][] state, int prefix) {
        if (sorted == null) return "send_metadata: kv indices are null";
        if (prefix < 0) return "send_metadata: negative decode_prefix_len " + prefix;
        long pool = manager.memory().kvPageCount();
        for (int i = 0; i < sorted.length; i++) {
            if (sorted[i] < 0 || sorted[i] >= pool) {
                return "send_metadata: page id " + sorted[i] + " is outside the decode KV pool of " + pool + " pages";
            }
            if (i > 0 && sorted[i] == sorted[i - 1]) return "send_metadata: page id " + sorted[i] + " appears twice";
        }
        long rows = manager.memory().auxRowCount();
        if (auxIndex < -1 || auxIndex >= 0 && auxIndex >= rows) {
            return "send_metadata: aux index " + auxIndex + " is outside the decode metadata pool of " + rows + " rows";
        }
        if (state != null) {
            if (state.length > manager.memory().stateComponentCount()) {
                return "send_metadata: " + state.length + " state index lists for " + manager.memory().stateComponentCount()
                        + " registered state components";
            }
            for (int c = 0; c < state.length; c++) {
                long n = manager.memory().stateIndexCount(c);
                int[] s = state[c];
                for (int i = 0; i < s.length; i++) {
                    if (s[i] < 0 || s[i] >= n) return "send_metadata: state index " + s[i] + " of component " + c + " is outside its " + n + " entries";
                    if (i > 0 && s[i] == s[i - 1]) return "send_metadata: state index " + s[i] + " of component " + c + " appears twice";
                }
            }
        }
        return null;
    }

    @Override
    public KVPoll poll() {
        KVPoll st = pollOnce();
        if (feedEntry != null) {
            if (!initPending || st.isTerminal()) feedEntry.stopRetrying();
            if (st != KVPoll.WaitingForInput && st != KVPoll.Transferring) feedEntry.disarm();
        }
        return st;
    }

    private KVPoll pollOnce() {
        if (concluded != null) return concluded;
        KVPoll st = slot.status();
        if (injectFailure && metadataSent && !st.isTerminal()) {
            injectFailure = false;
            fail(FailureKind.INJECTED, Failures.INJECTED);
            notifyAbort(); // the prefill stops and acknowledges, as after an abort
            st = room.slot.status();
        }
        if (st.isTerminal()) {
            concluded = st; // latched: a late failure cannot turn a Success the scheduler saw into Failed
            manager.telemetry.polledConcluded(slot.sinceNanos());
            return st;
        }
        if (st == KVPoll.Bootstrapping && initPending) {
            tryBootstrap();
            st = room.slot.status();
        }
        if ((st == KVPoll.WaitingForInput || st == KVPoll.Transferring) && metadataSent) {
            if (manager.deadlineClock().now() - waitDeadlineTick > 0) {
                long now = now();
                fail(FailureKind.WAITING_TIMEOUT, Failures.timedOut(room.room, (now - metadataSentTick) / 1e9, "WaitingForInput"));
                notifyAbort();
                return KVPoll.Failed;
            }
        }
        return st;
    }

    private void fail(FailureKind kind, String reason) {
        room.slot.fail(kind, reason);
    }

    @Override
    public String toString() {
        return "DecodeKVReceiver[room=" + room.room + ", bootstrap=" + room.bootstrapAddr + "]";
    }

    private void notifyAbort() {
        manager.release.notifyAbort(room);
    }

    /**
     * As SGLang's: latches Failed, clears the room and raises its failure. Called for a room that has not
     * concluded, it fails the room first naming the call, so the failure is recorded and raised as what it is.
     */
    @Override
    public void failureException() {
        room.slot.failIfUnfinished(FailureKind.ABORTED, "failure_exception() was called for room " + room.room
                + " before its transfer concluded");
        RoomStatusTable.Entry e = room.slot.entry();
        concluded = KVPoll.Failed;
        if (feedEntry != null) feedEntry.leave();
        manager.release.forget(room); // as SGLang: the failure is latched and the room's bookkeeping dropped
        throw KVTransferException.forRoom(room.room, e == null ? null : e.kind(), e == null ? null : e.reason());
    }

    @Override
    public void clear() {
        if (feedEntry != null) feedEntry.leave();
        manager.release.forget(room);
    }

    @Override
    public void abort() {
        fail(FailureKind.ABORTED, Failures.ABORTED);
        notifyAbort();
    }

    @Override
    public KVTransferMetric getTransferMetric() {
        return metricOf(room, slot.status());
    }

    /** A room's transfer figures (its receiver's metric, and what the manager's telemetry records at Success). */
    static KVTransferMetric metricOf(DecodeRoom room, KVPoll status) {
        long sent = room.metadataSentNanos, done = room.successNanos;
        Double latency = sent != 0 && done != 0 ? (done - sent) / 1e9 : null;
        String only = null;
        TreeSet<String> paths = null;
        for (DecodeRoom.Target t : room.targets) {
            if (t.dummy() || t.link().dataPath.equals(only)) continue;
            if (only == null && paths == null) {
                only = t.link().dataPath;
                continue;
            }
            if (paths == null) paths = new TreeSet<>(List.of(only));
            paths.add(t.link().dataPath);
        }
        // Once concluded, every prefill rank delivered exactly what it owed (checked at its STATUS); before, only the
        // bytes that landed through the gate are known (one-sided writes bypass this rank).
        DecodeRoom.Allowance a = room.allowance;
        Long bytes;
        if (a != null && status == KVPoll.Success) {
            long owed = 0;
            for (long o : a.owed()) owed += o;
            bytes = owed;
        } else {
            bytes = room.bytesLanded.get();
        }
        return new KVTransferMetric(latency, null, bytes, paths != null ? String.join("+", paths) : only);
    }
}
