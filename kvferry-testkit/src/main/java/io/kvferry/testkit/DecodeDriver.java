package io.kvferry.testkit;


import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.KVTransferMetric;
import io.kvferry.protocol.Region;

import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;

/**
 * Plays the decode scheduler of one rank: for each request, pre-allocates destination pages,
 * bootstraps a receiver and sends metadata; on Success verifies every byte of every destination
 * page, aux row and state slot against {@link KvPattern}; then frees and clears. Single-threaded.
 * Warm-up requests ({@link Workload#warmup()}) run first and are verified like the others; bytes,
 * latency and elapsed time count only the measured ones, which start after the last warm-up concluded.
 */
public final class DecodeDriver {
    /** nanoTime after which the driver stops waiting and reports what is left as hung; 0 = never. */
    private long deadlineNanos;
    private BenchConfig.Faults faults = BenchConfig.Faults.NONE;
    /** Which requests a driver aborts: a function of the workload seed (a soak varies it per cycle). */
    private final Random faultRandom;

    public DecodeDriver withFaults(BenchConfig.Faults f) {
        this.faults = f;
        return this;
    }

    public DecodeDriver withDeadline(long nanoTime) {
        this.deadlineNanos = nanoTime;
        return this;
    }

    /** The benchmark suite's settings: open-loop arrivals ({@link BenchConfig.Suite#ratePerSecond()}). */
    public DecodeDriver withSuite(BenchConfig.Suite s) {
        this.suite = s;
        return this;
    }

    /**
     * Parks the last {@code probe.rooms()} warm-up requests for the room-memory probe: they are admitted
     * once every earlier request concluded and the probe's baseline is taken, and count as parked once
     * each has sent its metadata; measured requests start after they concluded.
     */
    public DecodeDriver withProbe(RoomMemoryProbe p) {
        this.probe = p;
        return this;
    }

    private BenchConfig.Suite suite = BenchConfig.Suite.DEFAULT;
    private RoomMemoryProbe probe;

    /** Counts verified successes as they happen (kvferry chaos watches recovery through it); null = none. */
    public DecodeDriver withSuccessCounter(AtomicInteger counter) {
        this.successes = counter;
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
    private final AtomicInteger progress;
    private AtomicInteger successes;

    /** One request in flight; pages and row are allocated once the handshake finished (as SGLang's prealloc queue). */
    private static final class Flight {
        final Workload.Request req;
        final KVReceiver receiver;
        int[] pages;
        int row = -1;
        boolean initialized;
        boolean abortDecided;
        /** Concluded in this sweep: dropped from the in-flight list after it (one pass, not one shift per removal). */
        boolean concluded;
        /**
         * Its last step left something no status change announces (its DP group unresolved, no free pages,
         * the abort decision after its metadata went out): step it again next time.
         */
        boolean blocked;
        /** Its DP group lookup failed it before init (the receiver was aborted); reported instead of the abort. */
        KVTransferException dpFailure;
        final long createdNanos = System.nanoTime();
        /** When the request arrived (open loop: its scheduled arrival, else when the receiver was created). */
        final long arrivalNanos;
        /** KVReceiver.init called → sendMetadata returned; 0 until then. */
        long initStartNanos;
        long prepareNanos;

        Flight(Workload.Request req, KVReceiver receiver, long arrivalNanos) {
            this.req = req;
            this.receiver = receiver;
            this.arrivalNanos = arrivalNanos;
        }
    }

    public DecodeDriver(KVManager manager, RankPool pool, Workload workload, String bootstrapAddr, int shardRank,
                        AtomicInteger progress) {
        this.manager = manager;
        this.pool = pool;
        this.workload = workload;
        this.bootstrapAddr = bootstrapAddr;
        this.shardRank = shardRank;
        this.pattern = new KvPattern(pool.maxItemBytes(), workload.seed());
        this.faultRandom = new Random(17 * 31 + workload.seed());
        this.progress = progress;
    }

    public RoleReport run() {
        String driverName = Thread.currentThread().getName();
        Thread.currentThread().setName(CpuMeter.DECODE_DRIVER_PREFIX + shardRank);
        try {
            return new Run().execute();
        } finally {
            Thread.currentThread().setName(driverName);
        }
    }

    /**
     * One run's scheduler state and its steps. The loop's work lives in small methods ({@link #admit},
     * {@link #step}, and {@link InFlight#stepAll}) so the JIT compiles them as ordinary methods: one method holding
     * the whole endless loop is compiled on-stack (OSR), and every uncommon trap in it sent the driver
     * back to the interpreter and C2 to recompile ~1.8 KB of bytecode (at 10,000 rooms in flight the
     * C2 threads took 18 % of the CPU in the measured window).
     */
    private final class Run {
        final List<Workload.Request> reqs = workload.generate();
        /** The requests in flight: swept, or stepped as the manager's change feed hands out their receivers. */
        final InFlight<KVReceiver, Flight> inflight = suite.changeFeed() && manager.enableChangeFeed()
                ? InFlight.<KVReceiver, Flight>fed(manager::drainChangedReceivers, this::step, f -> f.blocked, f -> f.concluded)
                : InFlight.<KVReceiver, Flight>sweeping(this::step, f -> f.concluded, idle);
        final FailureTally failures = new FailureTally();
        final MicrosHistogram latencies = new MicrosHistogram();
        final Map<String, Long> dataPaths = new TreeMap<>();
        final MicrosHistogram requestMicros = new MicrosHistogram(), prepareMicros = new MicrosHistogram();
        final int warmup = Math.min(workload.warmup(), reqs.size());
        // Open loop: measured request i arrives at start + offset(i - warmup), whether or not a slot is free.
        final ArrivalSchedule arrivals = suite.openLoop()
                ? new ArrivalSchedule(reqs.size() - warmup, suite.ratePerSecond(), workload.seed()) : null;
        final int probeFrom = probe == null ? -1 : warmup - probe.rooms();
        int next, done, ok, corrupted;
        long bytes;
        long start = System.nanoTime();
        boolean probeBaselineArrived, probeParkedArrived;
        CpuMeter.Mark cpuStart = warmup == 0 ? CpuMeter.mark() : null;
        /** How long an idle iteration may sleep before the next open-loop arrival; 0 = no arrival pending. */
        long sleepCap;

        RoleReport execute() {
            while (done < reqs.size()) {
                if (deadlineNanos > 0 && System.nanoTime() > deadlineNanos) break; // the rest are reported as hung
                boolean moved = admit();
                moved |= inflight.stepAll();
                if (probeBaselineArrived && !probeParkedArrived && next >= warmup) moved |= probeParked();
                if (Thread.interrupted()) throw new IllegalStateException("decode driver interrupted");
                idle.after(moved, arrivals != null && sleepCap > 0 ? sleepCap : Long.MAX_VALUE);
            }
            return report();
        }

        /** Starts new requests while there is room: creates their receivers and inits them. */
        boolean admit() {
            boolean moved = false;
            sleepCap = 0;
            while (inflight.size() < workload.concurrency() && next < reqs.size()) {
                // Measured requests start only once every warm-up request concluded, so no measured
                // transfer overlaps a warm-up one (the prefill snapshots its data-path figures then).
                if (next == warmup && done < warmup) break;
                if (next == probeFrom) {
                    // The probe's baseline: nothing in flight on this driver, then every driver of the JVM.
                    if (done < probeFrom) break;
                    if (!probeBaselineArrived) {
                        probe.arriveBaseline();
                        probeBaselineArrived = true;
                    }
                    if (!probe.baselineTaken()) break;
                }
                if (next == warmup && warmup > 0 && cpuStart == null) {
                    start = System.nanoTime();
                    cpuStart = CpuMeter.mark();
                }
                long arrival = System.nanoTime();
                if (arrivals != null && next >= warmup) {
                    arrival = start + arrivals.offsetNanos(next - warmup);
                    long wait = arrival - System.nanoTime();
                    if (wait > 0) {
                        sleepCap = wait; // idle sleeps end by the next arrival
                        break;
                    }
                }
                Workload.Request r = reqs.get(next++);
                KVReceiver recv = manager.createReceiver(bootstrapAddr, r.room());
                Flight f = new Flight(r, recv, arrival);
                if (!tryInit(f)) f.blocked = true;
                inflight.add(recv, f);
                moved = true;
            }
            return moved;
        }

        /** Polls one request and acts on its state; true when something moved. */
        boolean step(Flight f) {
            f.blocked = false;
            if (!f.initialized && !tryInit(f)) {
                if (System.nanoTime() - f.createdNanos > DP_RESOLVE_TIMEOUT_NANOS) {
                    f.receiver.abort(); // the prefill never answered where the room is: fail it, do not hang
                    f.initialized = true;
                } else {
                    f.blocked = true;
                }
                return false;
            }
            KVPoll st = f.receiver.poll();
            if (f.pages != null && !f.abortDecided) {
                // Abort after the metadata went out, so writes may be in flight: the hard case.
                f.abortDecided = true;
                if (faults.abortProbability() > 0 && faultRandom.nextDouble() < faults.abortProbability()) {
                    f.receiver.abort();
                    st = f.receiver.poll();
                }
            }
            if (st == KVPoll.WaitingForInput && f.pages == null) {
                int n = f.req.pagesToSend(workload.pageSize());
                if (!pool.canAllocate(n)) {
                    f.blocked = true;
                    return false;
                }
                long work = idle.workStarted();
                f.pages = pool.allocatePages(n);
                f.row = pool.allocateRow();
                int[][] state = pool.hasState() ? new int[][]{{f.row}} : null;
                f.receiver.sendMetadata(f.pages, f.row, state, f.req.prefixTokens());
                f.prepareNanos = System.nanoTime() - f.initStartNanos;
                idle.workDone(work);
                f.blocked = !f.abortDecided && faults.abortProbability() > 0; // the abort is decided on its next step
                return true;
            }
            if (st != KVPoll.Success && st != KVPoll.Failed) return false;
            long work = idle.workStarted();
            conclude(f, st);
            idle.workDone(work);
            return true;
        }

        /** Verifies (Success) or records the failure, then clears the receiver and frees the request's pages. */
        void conclude(Flight f, KVPoll st) {
            long concludedNanos = System.nanoTime();
            if (st == KVPoll.Success) {
                if (faults.slowDecodeMillis() > 0) LockSupport.parkNanos(faults.slowDecodeMillis() * 1_000_000L);
                if (verify(f)) {
                    ok++;
                    if (successes != null) successes.incrementAndGet();
                    KVTransferMetric metric = f.receiver.getTransferMetric();
                    if (!workload.isWarmup(f.req)) { // warm-up requests are verified but not timed
                        bytes += pool.requestBytes(f.pages.length);
                        Double lat = metric.transferLatencySeconds();
                        if (lat != null) latencies.record((long) (lat * 1e6));
                        requestMicros.record((concludedNanos - f.arrivalNanos) / 1000);
                        prepareMicros.record(f.prepareNanos / 1000);
                    }
                    dataPaths.merge(metric.transport() == null ? "none" : metric.transport(), 1L, Long::sum);
                } else {
                    corrupted++;
                    failures.failedIdx.add(f.req.index());
                    failures.reason("room " + f.req.room() + ": bytes differ from what prefill sent");
                }
            } else if (f.dpFailure != null) {
                KVTransferException e = f.dpFailure;
                failures.failed(f.req.index(), () -> {
                    throw e;
                });
            } else {
                failures.failed(f.req.index(), f.receiver::failureException);
            }
            f.receiver.clear(); // returns only once no write of the room can land: the pages are safe to reuse
            if (f.pages != null) pool.freePages(f.pages);
            if (f.row >= 0) pool.freeRow(f.row);
            f.concluded = true;
            inflight.concluded(f.receiver);
            done++;
            if (progress != null) progress.incrementAndGet();
        }

        /** Parked once every probe room still in flight has sent its metadata (a failed one concluded already). */
        boolean probeParked() {
            for (Flight f : inflight.requests()) {
                if (!f.concluded && f.req.index() >= probeFrom && f.req.index() < warmup && f.pages == null) return false;
            }
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
            return new RoleReport("decode", shardRank, ok, failures.failed, corrupted, failures.failedIdx, bytes, elapsed,
                    latencies, failures.reasons, hung, failures.firstFailureAt, 0, failures.failureTimes, null, dataPaths,
                    0, 0, 0, 0, 0, 0, new RoleFigures(requestMicros, prepareMicros, null, null, cpu, null),
                    failures.failureKinds);
        }
    }

    private static final long DP_RESOLVE_TIMEOUT_NANOS = 60_000_000_000L;

    /**
     * Resolves the prefill DP group holding the room (SGLang's decode does this before init) and
     * inits the receiver. False while it is not known yet (prefill not registered or room not
     * published): try again on a later iteration.
     */
    private boolean tryInit(Flight f) {
        int dp = 0;
        try {
            dp = manager.resolvePrefillDpRank(bootstrapAddr, f.req.room(), null);
        } catch (UnsupportedOperationException e) {
            dp = 0; // a manager without DP resolution (fake)
        } catch (KVTransferException e) {
            // The room failed before init (its DP group never published): concluded Failed with that reason.
            f.dpFailure = e;
            f.receiver.abort();
            f.initialized = true;
            return true;
        } catch (RuntimeException e) {
            // Registry not reachable, or the prefill not fully registered for the prefill info timeout: init
            // anyway; the receiver retries the lookup and fails the room with SGLang's message if the
            // prefill never shows up.
            dp = 0;
        }
        if (dp < 0) return false; // attention-DP: the prefill has not published this room yet
        f.initStartNanos = System.nanoTime();
        f.receiver.init(dp);
        f.initialized = true;
        return true;
    }

    private boolean verify(Flight f) {
        long room = f.req.room();
        int prefixPages = f.req.prefixPages(workload.pageSize());
        int[] heads = pool.globalHeads();
        long unit = pool.shape.headBytes();
        int ps = workload.pageSize();
        int[] order = PageWalk.ascending(f.pages);
        for (int b = 0; b < pool.kv.length; b++) {
            for (int j : order) {
                long firstToken = (long) (prefixPages + j) * ps;
                if (!pattern.pageMatches(pool.page(b, f.pages[j]), room, pool.globalBuffer(b), firstToken, ps, heads, unit)) return false;
            }
        }
        for (int b = 0; b < pool.aux.length; b++) {
            boolean roomColumn = b == RankPool.ROOM_BUFFER; // checked by the manager's metadata gate
            if (!pattern.matches(pool.auxRow(b, f.row), KvPattern.key(room, Region.AUX.code(), 0, b, 0, 0), roomColumn)) return false;
        }
        for (int t = 0; t < pool.state.length; t++) {
            if (!pattern.pageMatches(pool.stateSlot(t, f.row), room, 10_000 + t, 0, 1, pool.stateEntries(),
                    pool.stateEntryBytes(t))) return false;
        }
        return true;
    }
}
