package io.kvferry.testkit;


import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerStats;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.protocol.Region;

import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import java.util.Random;

/**
 * Plays the prefill scheduler of one rank: creates a sender per request, waits for decode's
 * metadata, "computes" the KV (fills fragmented source pages with {@link KvPattern}), then sends
 * it in page-aligned chunks in order, the last chunk with state and aux. Single-threaded.
 */
public final class PrefillDriver {
    /** nanoTime after which the driver stops waiting and reports what is left as hung; 0 = never. */
    private long deadlineNanos;
    private BenchConfig.Faults faults = BenchConfig.Faults.NONE;
    /** Which requests a driver aborts: a function of the workload seed (a soak varies it per cycle). */
    private final Random faultRandom;

    public PrefillDriver withFaults(BenchConfig.Faults f) {
        this.faults = f;
        return this;
    }

    /** Time a single-thread copy of each measured request's source pages before its transfer ({@link PairedMemcpy}). */
    public PrefillDriver withPairedMemcpy(boolean on) {
        this.pairedMemcpyOn = on;
        return this;
    }

    private boolean pairedMemcpyOn;
    private PairedMemcpy pairedMemcpy;

    /**
     * Parks the last {@code probe.rooms()} warm-up requests for the room-memory probe: their senders are
     * created once every earlier request concluded and the probe's baseline is taken, count as parked at
     * WaitingForInput, and send nothing until the probe measured.
     */
    public PrefillDriver withProbe(RoomMemoryProbe p) {
        this.probe = p;
        return this;
    }

    private RoomMemoryProbe probe;

    /**
     * Poll only the senders the manager's change feed hands out (and those waiting for pages), instead
     * of every sender in flight each step; off, or where the manager has no feed: every one, as SGLang.
     */
    public PrefillDriver withChangeFeed(boolean on) {
        this.changeFeedOn = on;
        return this;
    }

    private boolean changeFeedOn;

    public PrefillDriver withDeadline(long nanoTime) {
        this.deadlineNanos = nanoTime;
        return this;
    }

    /** Sleeps of an idle scheduler iteration: spinning would steal the cores the transfer needs. */
    private final IdleBackoff idle = new IdleBackoff();

    private final KVManager manager;
    private final RankPool pool;
    private final Workload workload;
    private final String bootstrapAddr;
    private final int shardRank;
    private final KvPattern pattern;
    /**
     * The manager's data-path figures when the first measured (non-warm-up) request started its
     * transfer; null until then. It is taken only once this prefill has concluded every warm-up
     * request and no write is inside a data path (a failed or aborted warm-up's write may still be
     * stopping), so the snapshot splits warm-up and measured writes exactly.
     */
    private KVManagerStats warmupStats;
    /** This driver's warm-up requests (its DP share), and how many of them concluded (driver thread only). */
    private int warmupsHere, concludedWarmups;
    /** CPU at the start of the measured window (the first measured transfer; run start without warm-up). */
    private CpuMeter.Mark cpuStart;
    /** Source pages that already hold the pattern template (see startTransfer). */
    private final BitSet templatedPages = new BitSet();

    private static final class Flight {
        final Workload.Request req;
        final KVSender sender;
        int[] pages;
        int row = -1;
        int prefixTokens = -1;
        boolean abortDecided;
        /** Concluded in this sweep: dropped from the in-flight list after it (one pass, not one shift per removal). */
        boolean concluded;
        /** Its last step waited on something no status change announces (pages, the warm-up snapshot, the probe): step it again next time. */
        boolean blocked;
        /** A probe room parked at WaitingForInput until the probe measured. */
        boolean parked;
        /** Time inside KVSender.init and send for this request, and when the last send returned. */
        long postNanos;
        long lastSendReturnedNanos;

        Flight(Workload.Request req, KVSender sender) {
            this.req = req;
            this.sender = sender;
        }
    }

    /** Attention-DP: this rank serves only the rooms with {@code room % dpSize == dpGroup} (follow_bootstrap_room). */
    private final int dpGroup;
    private final int dpSize;

    public PrefillDriver(KVManager manager, RankPool pool, Workload workload, String bootstrapAddr, int shardRank) {
        this(manager, pool, workload, bootstrapAddr, shardRank, 0, 1);
    }

    public PrefillDriver(KVManager manager, RankPool pool, Workload workload, String bootstrapAddr, int shardRank,
                         int dpGroup, int dpSize) {
        this.dpGroup = dpGroup;
        this.dpSize = dpSize;
        this.manager = manager;
        this.pool = pool;
        this.workload = workload;
        this.bootstrapAddr = bootstrapAddr;
        this.shardRank = shardRank;
        this.pattern = new KvPattern(pool.maxItemBytes(), workload.seed());
        this.faultRandom = new Random(17 * 31 + workload.seed());
    }

    public RoleReport run() {
        // Allocated (and faulted in) before any request, so no request's latency pays for it.
        if (pairedMemcpyOn && pairedMemcpy == null) pairedMemcpy = new PairedMemcpy(pool, workload.maxPagesPerRequest());
        String driverName = Thread.currentThread().getName();
        Thread.currentThread().setName(CpuMeter.PREFILL_DRIVER_PREFIX + shardRank);
        try {
            return new Run().execute();
        } finally {
            Thread.currentThread().setName(driverName);
        }
    }

    /**
     * One run's scheduler state and its steps, in small methods the JIT compiles as ordinary ones
     * (see DecodeDriver.Run: one method holding the endless loop is compiled on-stack and recompiled
     * after every uncommon trap).
     */
    private final class Run {
        final List<Workload.Request> reqs = workload.ofDpGroup(dpGroup, dpSize);
        /** The requests in flight: swept, or stepped as the manager's change feed hands out their senders. */
        final InFlight<KVSender, Flight> inflight = changeFeedOn && manager.enableChangeFeed()
                ? InFlight.<KVSender, Flight>fed(manager::drainChangedSenders, this::step, f -> f.blocked, f -> f.concluded)
                : InFlight.<KVSender, Flight>sweeping(this::step, f -> f.concluded, idle);
        final FailureTally failures = new FailureTally();
        final MicrosHistogram postMicros = new MicrosHistogram(), transferMicros = new MicrosHistogram();
        // The probe's requests by position in this driver's list (the probe needs one DP group: positions are indices).
        final int warmupCount;
        final int probeFrom;
        int next, done, ok;
        long bytes;
        final long start = System.nanoTime();
        boolean probeBaselineArrived, probeParkedArrived;

        Run() {
            int w = 0; // the list is in stream order, so its warm-ups come first
            while (w < reqs.size() && workload.isWarmup(reqs.get(w))) w++;
            warmupsHere = w;
            warmupCount = warmupsHere;
            probeFrom = probe == null ? -1 : warmupCount - probe.rooms();
            if (workload.warmup() == 0) cpuStart = CpuMeter.mark();
        }

        RoleReport execute() {
            while (done < reqs.size()) {
                if (deadlineNanos > 0 && System.nanoTime() > deadlineNanos) break; // the rest are reported as hung
                boolean moved = admit();
                moved |= inflight.stepAll();
                if (probeBaselineArrived && !probeParkedArrived && next >= warmupCount) moved |= probeParked();
                if (Thread.interrupted()) throw new IllegalStateException("prefill driver interrupted");
                idle.after(moved);
            }
            return report();
        }

        /** Starts new requests while there is room: creates their senders. */
        boolean admit() {
            boolean moved = false;
            while (inflight.size() < workload.concurrency() && next < reqs.size()) {
                if (next == probeFrom) {
                    if (done < probeFrom) break; // the baseline wants nothing in flight here
                    if (!probeBaselineArrived) {
                        probe.arriveBaseline();
                        probeBaselineArrived = true;
                    }
                    if (!probe.baselineTaken()) break;
                }
                if (probe != null && next == warmupCount && !probe.measured()) break; // nothing beyond the parked rooms
                Workload.Request r = reqs.get(next++);
                Flight f = new Flight(r, manager.createSender(bootstrapAddr, r.room()));
                inflight.add(f.sender, f);
                moved = true;
            }
            return moved;
        }

        /** Polls one request and acts on its state; true when something moved. */
        boolean step(Flight f) {
            if (!f.abortDecided) {
                f.abortDecided = true;
                if (faults.abortProbability() > 0 && faultRandom.nextDouble() < faults.abortProbability()) f.sender.abort();
            }
            KVPoll st = f.sender.poll();
            f.blocked = false;
            if (st == KVPoll.WaitingForInput && f.pages == null) {
                boolean probeRoom = probeBaselineArrived && f.req.index() >= probeFrom && f.req.index() < warmupCount;
                if (probeRoom && !probe.measured()) {
                    f.parked = true; // the decode's metadata is here, nothing is sent until the probe measured
                    f.blocked = true;
                    return false;
                }
                long work = idle.workStarted();
                boolean started = startTransfer(f);
                idle.workDone(work);
                f.blocked = !started;
                return started;
            }
            if (st != KVPoll.Success && st != KVPoll.Failed) return false;
            long work = idle.workStarted();
            conclude(f, st);
            idle.workDone(work);
            return true;
        }

        /** Records the outcome, then clears the sender and frees the request's pages. */
        void conclude(Flight f, KVPoll st) {
            long concludedNanos = System.nanoTime();
            if (st == KVPoll.Success) {
                ok++;
                Long b = f.sender.getTransferMetric().transferTotalBytes();
                if (!workload.isWarmup(f.req)) bytes += b == null ? 0 : b;
                if (!workload.isWarmup(f.req) && f.pages != null) {
                    postMicros.record(f.postNanos / 1000);
                    transferMicros.record((concludedNanos - f.lastSendReturnedNanos) / 1000);
                }
            } else {
                failures.failed(f.req.index(), f.sender::failureException);
            }
            f.sender.clear();
            if (workload.isWarmup(f.req)) concludedWarmups++;
            if (f.pages != null) pool.freePages(f.pages);
            if (f.row >= 0) pool.freeRow(f.row);
            f.concluded = true;
            inflight.concluded(f.sender);
            done++;
        }

        /** Parked once every probe room still in flight waits at WaitingForInput (a failed one concluded already). */
        boolean probeParked() {
            int probeInFlight = 0, probeWaiting = 0;
            for (Flight f : inflight.requests()) {
                if (f.concluded || f.req.index() < probeFrom || f.req.index() >= warmupCount) continue;
                probeInFlight++;
                if (f.parked) probeWaiting++;
            }
            if (probeWaiting != probeInFlight) return false;
            probe.arriveParked();
            probeParkedArrived = true;
            return true;
        }

        RoleReport report() {
            double elapsed = (System.nanoTime() - start) / 1e9;
            CpuMeter.Window cpu = cpuStart == null ? null : CpuMeter.between(cpuStart, CpuMeter.mark());
            int hung = reqs.size() - done;
            for (Flight f : inflight.requests()) failures.failedIdx.add(f.req.index());
            for (int i = next; i < reqs.size(); i++) failures.failedIdx.add(reqs.get(i).index());
            RoleReport report = new RoleReport("prefill", shardRank, ok, failures.failed, 0, failures.failedIdx, bytes, elapsed,
                    null, failures.reasons, hung, failures.firstFailureAt, 0, failures.failureTimes, null)
                    .withFailureKinds(failures.failureKinds);
            KVManagerStats st = manager.stats();
            if (warmupStats != null) st = st.minus(warmupStats);
            else if (workload.warmup() > 0) st = st.withoutDataPath(); // nothing measured
            report = report.withDataPathStats(st.dataPathBytes(), st.dataPathBusyNanos(), st.dataPathOps(),
                    st.dataPathActiveNanos());
            if (pairedMemcpy != null) {
                report = report.withPairedMemcpy(pairedMemcpy.bytes(), pairedMemcpy.nanos());
                pairedMemcpy.close();
            }
            return report.withFigures(new RoleFigures(null, null, postMicros, transferMicros, cpu, null));
        }
    }

    private boolean startTransfer(Flight f) {
        if (f.prefixTokens < 0) f.prefixTokens = f.sender.popDecodePrefixLen(); // pop once, even if we must wait for pages
        int prefixTokens = f.prefixTokens;
        int numPages = (f.req.tokens() - prefixTokens + workload.pageSize() - 1) / workload.pageSize();
        if (!pool.canAllocate(numPages)) return false;
        if (warmupStats == null && !workload.isWarmup(f.req) && workload.warmup() > 0) {
            KVManagerStats now = manager.stats();
            if (concludedWarmups < warmupsHere || now.writesInDataPath() > 0) return false; // retried on the next pass
            warmupStats = now;
            cpuStart = CpuMeter.mark(); // the measured window starts with the first measured transfer
        }
        f.pages = pool.allocatePages(numPages);
        f.row = pool.allocateRow();
        long room = f.req.room();
        int prefixPages = prefixTokens / workload.pageSize();
        int[] heads = pool.globalHeads();
        long unit = pool.shape.headBytes();
        int ps = workload.pageSize();
        // Source pages are written only here, so after their first fill only the stamps change:
        // the bench then spends its CPU on the transfer, as a GPU-fed prefill would.
        int[] order = PageWalk.ascending(f.pages);
        for (int b = 0; b < pool.kv.length; b++) {
            for (int j : order) {
                boolean templated = templatedPages.get(f.pages[j]);
                long firstToken = (long) (prefixPages + j) * ps;
                pattern.fillPage(pool.page(b, f.pages[j]), room, pool.globalBuffer(b), firstToken, ps, heads, unit, templated);
            }
        }
        for (int page : f.pages) templatedPages.set(page);
        for (int b = 0; b < pool.aux.length; b++) {
            // Aux rows are the same on every prefill rank (several may write one decode row).
            pattern.fill(pool.auxRow(b, f.row), KvPattern.key(room, Region.AUX.code(), 0, b, 0, 0));
        }
        pool.auxRow(RankPool.ROOM_BUFFER, f.row).set(ValueLayout.JAVA_LONG_UNALIGNED, 0, room);
        for (int t = 0; t < pool.state.length; t++) {
            // One unit per global entry of the TP-sharded dimension, so any TP resharding is verifiable.
            pattern.fillPage(pool.stateSlot(t, f.row), room, 10_000 + t, 0, 1, pool.stateEntries(), pool.stateEntryBytes(t), false);
        }
        if (pairedMemcpy != null && !workload.isWarmup(f.req)) pairedMemcpy.copy(pool, f.pages);
        long postStart = System.nanoTime();
        f.sender.init(numPages, f.row);
        f.postNanos += System.nanoTime() - postStart;
        int[][] state = pool.hasState() ? new int[][]{{f.row}} : null;
        int chunk = workload.chunkPages();
        int sent = 0;
        do {
            int end = Math.min(numPages, sent + chunk);
            boolean last = end == numPages;
            int[] part = Arrays.copyOfRange(f.pages, sent, end);
            if (f.sender.shouldSendKvChunk(part.length, last)) {
                long t0 = System.nanoTime();
                f.sender.send(part, last ? state : null);
                f.lastSendReturnedNanos = System.nanoTime();
                f.postNanos += f.lastSendReturnedNanos - t0;
            }
            sent = end;
        } while (sent < numPages);
        return true;
    }
}
