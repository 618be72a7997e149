package io.kvferry.engine.serving;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.kv.PageAllocator;
import io.kvferry.engine.kv.PrefixCache;
import io.kvferry.engine.model.LayerKind;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.runtime.ShardedModel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.stream.IntStream;

/**
 * The prefill side, in SGLang's order (sglang-pd-disaggregation.md §1): a request's senders wait in
 * the bootstrap queue until the decode sent its metadata (WaitingForInput); then it gets its pages
 * and aux row, {@code init(pages after the decode prefix, aux)}, runs chunked prefill, {@code send}s
 * the pages each chunk completed (the last chunk with the aux row: first token, logprob, logits and
 * room), and waits in the inflight queue for Success or Failed before its pages are freed.
 *
 * <p>The prefill's prefix cache (SGLang's radix cache, as a chain of full pages: {@link PrefixCache}, the class the
 * decode's cache is): a finished request's full prompt pages stay here, and a request whose prompt starts with cached
 * pages takes them read-only as the first pages of its page table and computes from the first uncached token (attention
 * reads the cached pages' KV; chunking and where a pass starts never change a value, so the answer is the same bits).
 * Only pages wholly before the first position whose logits are needed are reused: the last prompt token is always
 * computed, and so is every position from {@code logprob_start_len - 1} on. Cached pages are sent to the decode as
 * computed ones are (all but those in the decode's own prefix). A request of a model with recurrent layers (the
 * {@code hybrid} variant) cannot resume from pages alone: its recurrent state at the hit's end is needed too. As SGLang's
 * MambaRadixCache does, the request's chunked prefill stops at its last full-page boundary before the first needed
 * position, a copy of its recurrent state there (every shard's) is kept with that page's cache entry, and a hit ends at
 * the last matching page whose entry holds a snapshot; the request's state starts from it. Window layers (the
 * {@code swa} variant's ring) would need their ring pages kept likewise: the cache is off for them. A request's full prompt
 * pages join the cache once its whole prompt is computed (before its transfer ends: their KV is final then, and the
 * request keeps them referenced while its sender reads them); a request that fails or is aborted before that adds
 * nothing (no half-computed page is ever cached). Entries are reference counted by the requests using them; idle entries
 * are evicted least recently used when a request needs pages.
 *
 * <p>In-batch prefix sharing (SGLang's in-batch prefix caching check, {@code schedule_policy.py}): a ready request whose
 * prompt shares at least one full page beyond what the cache holds now with a request in the forward queue (admitted,
 * its prompt not yet computed) under the same cache salt waits in the bootstrap queue, holding nothing, until that
 * request's pages are cached, then takes them as a hit: a burst of requests with one new system prompt computes it once.
 * It waits only on requests being computed, so never for long: when the one it waits for fails or is aborted it is
 * admitted on the next pass and computes the pages itself. Once admitted it goes into the forward queue in its arrival
 * order (before later arrivals not yet started), so waiting costs it its place in no queue; requests that do not wait
 * keep their order. No waiting with the cache off.
 */
public final class PrefillEngine extends SchedulerThread {
    /**
     * @param room         the bootstrap room the router assigned (the decode uses the same)
     * @param logprobStart the first prompt position whose input token log probabilities the request asks for
     *                     (SGLang's {@code logprob_start_len}; -1: none), each with {@code topLogprobs} top ones
     * @param prefillOnly  the prompt alone, for its input log probabilities: no decode takes the room, so nothing is
     *                     sent and no first token drawn; the request ends when its last chunk is computed
     * @param cacheSalt    the request's {@code cache_salt} (null: none): it reuses, and leaves, prefix cache pages only
     *                     among requests with the same ({@link PrefixCache})
     */
    public record Request(long room, int[] prompt, Sampling sampling, int logprobStart, int topLogprobs, boolean prefillOnly, String cacheSalt) {
        /** Unsalted: the shared prefix cache. */
        public Request(long room, int[] prompt, Sampling sampling, int logprobStart, int topLogprobs, boolean prefillOnly) {
            this(room, prompt, sampling, logprobStart, topLogprobs, prefillOnly, null);
        }

        /** Without input token log probabilities: the KV goes to the decode that takes the room. */
        public Request(long room, int[] prompt, Sampling sampling) {
            this(room, prompt, sampling, -1, 0, false);
        }
    }

    /**
     * @param firstToken    the first output token (-1 for a prefill-only request)
     * @param computeMs     prefill forward time
     * @param sendMs        last send → Success on every rank
     * @param kvPages       pages sent after the decode's prefix (0: the last chunk carried only the state and the aux row)
     * @param inputLogprobs the prompt's input token log probabilities from the position asked for on (the first prompt
     *                      token's null), or null when the request did not ask ({@code PromptLogprobs})
     * @param cachedTokens  prompt tokens taken from the prefill's prefix cache, not computed (OpenAI's
     *                      {@code usage.prompt_tokens_details.cached_tokens}, SGLang's {@code meta_info.cached_tokens})
     */
    public record Result(long room, int firstToken, double computeMs, double sendMs, int kvPages, List<TokenLogprobs> inputLogprobs,
                         int cachedTokens) {
        public Result(long room, int firstToken, double computeMs, double sendMs, int kvPages, List<TokenLogprobs> inputLogprobs) {
            this(room, firstToken, computeMs, sendMs, kvPages, inputLogprobs, 0);
        }

        public Result(long room, int firstToken, double computeMs, double sendMs, int kvPages) {
            this(room, firstToken, computeMs, sendMs, kvPages, null, 0);
        }
    }

    private final EngineSpec spec;
    private final TransferSpec transfer;
    private final KvPool[][] pools;
    private final ShardedModel model;
    private final ShardManagers managers;
    private final PageAllocator alloc;
    /** The prefill's prefix cache; null when off (the flag, or a variant with window layers). Scheduler thread only. */
    private final PrefixCache prefixCache;
    /** The cache keeps recurrent state snapshots with its pages, and a hit needs one (a model with recurrent layers). */
    private final boolean snapshots;
    /** Tests only: rewrites the aux row a request's last chunk carries, as a broken prefill would write it. */
    interface AuxRowTamper {
        void rewrite(KvPool pool, int row, long room);
    }

    /** Null in service; the decode's checks of the aux row are tested through it ({@code DecodeAuxRowTest}). */
    volatile AuxRowTamper auxRowTamper;
    /** Aborts that came before their room's request (scheduler thread only). */
    private final RecentAborts recentAborts = new RecentAborts();
    private final List<Flight> bootstrap = new ArrayList<>(), forward = new ArrayList<>(), inflight = new ArrayList<>();
    /** Arrival order of the requests (scheduler thread): a request that waited for a shared prefix keeps its place by it. */
    private long arrivals;
    /** Tests only: while set, no chunk is computed (requests still arrive, are admitted or wait for a shared prefix). */
    volatile boolean holdChunks;
    private volatile int inFlight;
    private final EngineMeters meters;
    private final int[] queueSizes = new int[3];

    private final class Flight {
        final Request req;
        final CompletableFuture<Result> done;
        ShardRooms<KVSender> senders;
        int[] pages;
        /** The keys of the prompt's full pages (the prefix cache's), once it got pages. */
        long[] cacheKeys;
        /** Its first pages from the prefix cache when it got its pages (its {@code cached_tokens}, in pages). */
        int cachedPages;
        /** The first {@code refs} of {@link #cacheKeys} are referenced by it until it ends (its hit; then its whole cached chain). */
        int refs;
        /** The pages it frees when it ends: those of its page table that are not the cache's. */
        int[] own;
        /** Its computed full pages were offered to the cache. */
        boolean cacheOffered;
        /** Its place in arrival order. */
        final long arrival;
        /** A chunk of it was computed: it stays first in the forward queue until its prompt is done. */
        boolean started;
        /**
         * Where its recurrent state is copied for the cache (a page boundary: its last before the first needed position,
         * past its hit; the chunk ending there ends there), -1: nowhere; {@code snapshot}: the copy, per shard (stage·tp + rank).
         */
        int snapshotAt = -1;
        byte[][] snapshot;
        /** It waited for another request's pages at least once (counted once); {@code waitingNow}: on the last pass. */
        boolean waited, waitingNow;
        int row = -1, prefixPages, computed, sentPages;
        long computeNanos, lastSendNanos;
        /** The input token log probabilities so far (null: not asked). */
        final List<TokenLogprobs> inputLogprobs;
        /** A prefill-only request (no senders) that its client aborted. */
        boolean aborted;

        Flight(Request req, CompletableFuture<Result> done, long arrival) {
            this.req = req;
            this.done = done;
            this.arrival = arrival;
            inputLogprobs = req.logprobStart() >= 0 ? new ArrayList<>() : null;
        }
    }

    /** With the prefix cache on (where the model variant allows it). */
    public PrefillEngine(EngineSpec spec, TransferSpec transfer) {
        this(spec, transfer, true);
    }

    /**
     * @param prefixCache whether computed prompts' full pages stay for later requests to reuse (off, or a variant with
     *                    window layers: every prompt is computed from its first token)
     */
    public PrefillEngine(EngineSpec spec, TransferSpec transfer, boolean prefixCache) {
        super("kvferry-engine-prefill");
        if (transfer.bootstrapAddr() == null) throw new IllegalArgumentException("a prefill engine needs its bootstrap registry's address");
        this.spec = spec;
        this.transfer = transfer;
        // Before the pools and managers: nothing to close if a gauge cannot be registered.
        meters = new EngineMeters(transfer.meters(), "prefill", List.of("bootstrap", "forward", "inflight"), spec.pages(), spec.maxRequests());
        this.pools = spec.newPools(false, "prefill");
        this.model = new ShardedModel(spec.model(), spec.tp(), spec.pp(), pools);
        ShardManagers m;
        try {
            m = new ShardManagers(spec, transfer, pools, DisaggregationMode.PREFILL);
        } catch (RuntimeException e) {
            closePools();
            throw e;
        }
        this.managers = m;
        this.alloc = new PageAllocator(spec.pages(), spec.maxRequests());
        this.prefixCache = prefixCache && cacheable(spec) ? new PrefixCache(spec.pageSize()) : null;
        this.snapshots = this.prefixCache != null && spec.model().count(LayerKind.RECURRENT, 0, spec.model().config.layers()) > 0;
        start();
    }

    /**
     * Whether the prefix cache can serve this model: a request resumes from cached pages when pages are all of its state,
     * or when the rest is a recurrent state the cache keeps snapshots of; not so for window layers (their ring).
     */
    public static boolean cacheable(EngineSpec spec) {
        return spec.model().count(LayerKind.WINDOW, 0, spec.model().config.layers()) == 0;
    }

    /** Whether this engine's prefix cache is on. */
    public boolean prefixCacheOn() {
        return prefixCache != null;
    }

    public EngineSpec spec() {
        return spec;
    }

    /** Requests accepted and not yet concluded (for the router's least-loaded choice). */
    public int inFlight() {
        return inFlight;
    }

    public CompletableFuture<Result> submit(Request req) {
        Requests.validate(req.prompt(), 1, spec.weights().config);
        req.sampling().rules().checkVocab(spec.weights().config.vocabSize());
        PromptLogprobs.check(req.logprobStart(), req.topLogprobs(), req.prompt().length);
        if (spec.pagesFor(req.prompt().length) > spec.pages()) {
            throw new IllegalArgumentException("the prompt needs " + spec.pagesFor(req.prompt().length) + " pages; this prefill has "
                    + spec.pages());
        }
        CompletableFuture<Result> done = new CompletableFuture<>();
        execute(() -> {
            if (roomUnderWay(req.room())) {
                // kvferry lets a new sender take a room id over (a retry of a failed request), so a second request
                // of a room still under way here would take its transfer: the first failed, or the decode got the
                // second one's KV. Refused instead, as the decode refuses its own duplicates.
                done.completeExceptionally(new IllegalArgumentException("bootstrap_room " + req.room()
                        + " is already in flight on this prefill"));
                return;
            }
            if (recentAborts.take(req.room(), System.nanoTime())) {
                done.completeExceptionally(new KVTransferException(req.room(), FailureKind.ABORTED,
                        "Aborted by AbortReq. (before the request reached this prefill)", false));
                return;
            }
            Flight f = new Flight(req, done, arrivals++);
            if (req.prefillOnly()) { // no decode: no senders, nothing to wait for but pages
                inFlight++;
                bootstrap.add(f);
                return;
            }
            try {
                f.senders = ShardRooms.open(spec.pp(), spec.tp(), ShardRooms.SENDERS,
                        (s, r) -> managers.managers[s][r].createSender(transfer.bootstrapAddr(), req.room(), List.of(), s, false));
            } catch (RuntimeException e) {
                done.completeExceptionally(e);
                return;
            }
            inFlight++;
            bootstrap.add(f);
        });
        return done;
    }

    /** Whether a request of this room is accepted and not concluded (scheduler thread only). */
    private boolean roomUnderWay(long room) {
        for (List<Flight> q : List.of(bootstrap, forward, inflight)) {
            for (Flight f : q) {
                if (f.req.room() == room) return true;
            }
        }
        return false;
    }

    /** Aborts the room (client gone): its senders fail with "Aborted by AbortReq." and its pages are freed. */
    public void abort(long room) {
        execute(() -> {
            boolean found = false;
            for (List<Flight> q : List.of(bootstrap, forward, inflight)) {
                for (Flight f : q) {
                    if (f.req.room() == room) {
                        if (f.senders != null) f.senders.abort();
                        else f.aborted = true;
                        found = true;
                    }
                }
            }
            if (!found) recentAborts.remember(room, System.nanoTime()); // it may overtake the room's request
        });
    }

    /**
     * Pages and aux rows not returned (0 once every request concluded; the prefix cache's pages not counted).
     * Scheduler-owned: read through a command.
     */
    public CompletableFuture<Integer> outstanding() {
        CompletableFuture<Integer> out = new CompletableFuture<>();
        execute(() -> out.complete(alloc.outstanding() - cachePages()));
        return out;
    }

    /** Pages the prefix cache holds. */
    public CompletableFuture<Integer> cachedPages() {
        var out = new CompletableFuture<Integer>();
        execute(() -> out.complete(cachePages()));
        return out;
    }

    /** Tokens of the room's prompt computed so far while it is in the forward queue, else -1 (scheduler thread; tests). */
    int computedTokens(long room) {
        for (Flight f : forward) {
            if (f.req.room() == room) return f.computed;
        }
        return -1;
    }

    /**
     * Whether the room's request is in the bootstrap queue waiting for another request's pages of a shared prefix, as of
     * the last pass (scheduler thread; tests).
     */
    boolean waitingForSharedPrefix(long room) {
        for (Flight f : bootstrap) {
            if (f.req.room() == room) return f.waitingNow;
        }
        return false;
    }

    private int cachePages() {
        return prefixCache == null ? 0 : prefixCache.pages();
    }

    @Override
    boolean step() {
        boolean moved = false;
        // Pages go in arrival order: once a ready request cannot get its pages, the ready ones behind it wait too
        // (all are still polled, so a failed or aborted one leaves at once). Before, a smaller prompt took the pages a
        // larger one waited for, and under a steady stream of small prompts the large one never got them until a
        // timeout failed it (the decode's prealloc queue does the same, as SGLang's queues do).
        boolean waiting = false;
        for (Iterator<Flight> it = bootstrap.iterator(); it.hasNext(); ) {
            Flight f = it.next();
            if (f.senders == null) { // prefill-only: ready at once, for its pages
                if (f.aborted) {
                    it.remove();
                    failAborted(f);
                    moved = true;
                    continue;
                }
                if (waiting || waitsForSharedPrefix(f)) continue;
                if (!allocate(f)) {
                    waiting = true;
                    continue;
                }
                it.remove();
                admit(f);
                moved = true;
                continue;
            }
            KVPoll p = f.senders.poll();
            if (p == KVPoll.Failed) {
                it.remove();
                fail(f);
                moved = true;
                continue;
            }
            if (p.compareTo(KVPoll.WaitingForInput) < 0 || waiting || waitsForSharedPrefix(f)) continue;
            int total = spec.pagesFor(f.req.prompt().length);
            if (!canAllocate(f)) { // waits for pages, and holds its place; nothing fails for want of them
                waiting = true;
                continue;
            }
            int prefix = -1;
            for (KVSender x : f.senders.all()) {
                int n = x.popDecodePrefixLen();
                if (prefix >= 0 && n != prefix) {
                    prefix = -2;
                } else if (prefix != -2) {
                    prefix = n;
                }
            }
            // The decode may hold the whole prompt (a page-aligned prompt all in its prefix cache): then the
            // last chunk carries no page, only the state and the aux row (SGLang's zero-page last chunk).
            if (prefix < 0 || prefix % spec.pageSize() != 0 || prefix > f.req.prompt().length) {
                f.senders.abort();
                it.remove();
                failWith(f, new IllegalStateException("room " + f.req.room() + ": the decode's prefix (" + prefix
                        + " tokens) is not a whole number of pages of " + spec.pageSize() + " within the prompt's "
                        + f.req.prompt().length + " tokens, or differs between ranks"));
                moved = true;
                continue;
            }
            if (!allocate(f)) throw new IllegalStateException("room " + f.req.room() + ": its pages went between the check and the take");
            f.prefixPages = prefix / spec.pageSize();
            f.sentPages = f.prefixPages;
            for (KVSender x : f.senders.all()) x.init(total - f.prefixPages, f.row);
            it.remove();
            admit(f);
            moved = true;
        }
        if (!forward.isEmpty()) {
            // One chunk per pass: the other queues are polled between chunks.
            Flight f = forward.getFirst();
            if (f.senders == null ? f.aborted : f.senders.poll() == KVPoll.Failed) {
                forward.removeFirst();
                if (f.senders == null) failAborted(f);
                else fail(f);
                moved = true;
            } else if (!holdChunks) {
                boolean computed;
                try {
                    forwardChunk(f);
                    computed = true;
                } catch (OutputConstraint.Exceeded e) {
                    // Its grammar passed a bound of the recognizer at the first token: this request fails with that error (the
                    // decode hears the abort; the router answers the prefill's error), the others go on.
                    forward.removeFirst();
                    if (f.senders != null) f.senders.abort(); // null for a prefill-only request (it samples nothing), checked as everywhere else
                    failWith(f, e);
                    computed = false;
                }
                if (computed) {
                    f.started = true;
                    if (f.computed == f.req.prompt().length) {
                        forward.removeFirst();
                        offerToCache(f); // the requests waiting for its pages take them on the next pass
                        if (f.senders != null) {
                            inflight.add(f);
                        } else { // prefill-only: done once computed, nothing sent
                            Result r = new Result(f.req.room(), -1, f.computeNanos / 1e6, 0, 0, f.inputLogprobs, f.cachedPages * spec.pageSize());
                            release(f, true);
                            f.done.complete(r);
                        }
                    }
                }
                moved = true;
            }
        }
        for (Iterator<Flight> it = inflight.iterator(); it.hasNext(); ) {
            Flight f = it.next();
            KVPoll p = f.senders.poll();
            if (p == KVPoll.Success) {
                it.remove();
                Result r = new Result(f.req.room(), pools[0][0].firstToken(f.row), f.computeNanos / 1e6,
                        (System.nanoTime() - f.lastSendNanos) / 1e6, f.pages.length - f.prefixPages, f.inputLogprobs,
                        f.cachedPages * spec.pageSize());
                release(f, true);
                f.done.complete(r);
                moved = true;
            } else if (p == KVPoll.Failed) {
                it.remove();
                fail(f);
                moved = true;
            }
        }
        publish();
        return moved;
    }

    /** The queues, pages and rows as the engine's gauges show them (scheduler thread). */
    private void publish() {
        queueSizes[0] = bootstrap.size();
        queueSizes[1] = forward.size();
        queueSizes[2] = inflight.size();
        int cached = cachePages();
        meters.publish(queueSizes, alloc.totalPages() - alloc.freePages() - cached, cached, alloc.freePages(),
                alloc.totalRows() - alloc.freeRows(), alloc.freeRows());
    }

    /**
     * Into the forward queue in arrival order: before the requests that came after it and have not started (a request
     * that waited for a shared prefix loses no place to those admitted meanwhile); the one being computed stays first.
     */
    private void admit(Flight f) {
        int i = forward.size();
        while (i > 0 && !forward.get(i - 1).started && forward.get(i - 1).arrival > f.arrival) i--;
        forward.add(i, f);
    }

    /**
     * Whether the ready request waits for a shared prefix: it shares at least one full page beyond what the cache holds
     * for it now (among the pages it may take from the cache: {@link #firstNeeded}) with a request in the forward queue,
     * whose full pages join the cache once its prompt is computed; same cache salt only (a salted request shares nothing
     * with another salt). Nothing is held while it waits. Counts the request once in the engine's deferrals.
     */
    private boolean waitsForSharedPrefix(Flight f) {
        f.waitingNow = false;
        if (prefixCache == null || forward.isEmpty()) return false;
        int[] prompt = f.req.prompt();
        int usable = firstNeeded(f.req) / spec.pageSize();
        if (usable == 0) return false;
        if (f.cacheKeys == null) f.cacheKeys = prefixCache.keys(prompt, prompt.length / spec.pageSize(), f.req.cacheSalt());
        int cached = -1;
        for (Flight l : forward) {
            if (l.cacheKeys == null) continue;
            int shared;
            if (snapshots) { // a hit ends at a page with a state snapshot: the one it will keep, at its own boundary
                int at = l.snapshotAt / spec.pageSize();
                shared = at > 0 && at <= usable && sharedPages(f, l, at) == at ? at : 0;
            } else {
                shared = sharedPages(f, l, usable);
            }
            if (shared == 0) continue; // none, another salt's, or a key collision: nothing to wait for
            if (cached < 0) cached = prefixCache.cachedPages(prompt, f.cacheKeys, usable, f.req.cacheSalt(), snapshots);
            if (shared <= cached) continue;
            f.waitingNow = true;
            if (!f.waited) {
                f.waited = true;
                meters.prefixDeferral();
            }
            return true;
        }
        return false;
    }

    /** The leading full prompt pages, at most {@code limit}, that the two requests share (keys, then tokens; same salt). */
    private int sharedPages(Flight f, Flight l, int limit) {
        return PrefixCache.sharedPages(spec.pageSize(), limit, f.req.prompt(), f.cacheKeys, f.req.cacheSalt(),
                l.req.prompt(), l.cacheKeys, l.req.cacheSalt());
    }

    /**
     * Offers the request's computed full prompt pages to the cache (once; none with the cache off): those it takes are
     * the cache's now, referenced by the request until it ends (its sender may still read them), as is the rest of the
     * cached chain; its pages the cache did not take stay its own; idle entries the insert replaced are freed now.
     */
    private void offerToCache(Flight f) {
        if (prefixCache == null || f.cacheKeys == null || f.cacheOffered) return;
        f.cacheOffered = true;
        int[] prompt = f.req.prompt();
        Set<Integer> own = new HashSet<>(), notTaken = new HashSet<>();
        for (int p : f.own) own.add(p);
        int statePage = f.snapshot != null ? f.snapshotAt / spec.pageSize() - 1 : -1;
        for (int p : prefixCache.insert(prompt, f.cacheKeys, f.pages, f.cachedPages, f.req.cacheSalt(), statePage, f.snapshot)) {
            if (own.contains(p)) notTaken.add(p);
            else alloc.freePages(new int[]{p}); // a replaced idle entry's page
        }
        int full = f.cacheKeys.length; // the pages after its full ones (the partial last page) are never offered
        f.own = IntStream.range(f.cachedPages, f.pages.length).filter(i -> i >= full || notTaken.contains(f.pages[i]))
                .map(i -> f.pages[i]).toArray();
        int held = prefixCache.acquire(prompt, f.cacheKeys, f.req.cacheSalt()).length; // its hit's entries are still there: held >= refs
        prefixCache.release(f.cacheKeys, f.refs);
        f.refs = held;
    }

    private void forwardChunk(Flight f) {
        int[] prompt = f.req.prompt();
        int from = f.computed, to = Math.min(prompt.length, from + spec.chunkTokens());
        if (f.snapshotAt > from && f.snapshotAt < to) to = f.snapshotAt; // the state there is kept: the chunk ends there
        boolean last = to == prompt.length;
        long t0 = System.nanoTime();
        float[] logits;
        if (f.inputLogprobs == null) {
            logits = model.forward(prompt, from, to, f.pages, f.row, last);
        } else { // only a request that asked computes the logits of its chunk's positions
            int start = f.req.logprobStart();
            float[][] rows = model.forward(prompt, from, to, f.pages, f.row, PromptLogprobs.logitsFrom(start, from, to, prompt.length));
            PromptLogprobs.add(f.inputLogprobs, rows, prompt, start, from, to, f.req.topLogprobs());
            logits = last ? rows[to - from - 1] : null;
        }
        f.computed = to;
        if (to == f.snapshotAt) {
            f.snapshot = new byte[spec.pp() * spec.tp()][];
            for (int s = 0; s < spec.pp(); s++) for (int r = 0; r < spec.tp(); r++) f.snapshot[s * spec.tp() + r] = pools[s][r].snapshotRecurrent(f.row);
        }
        if (f.senders == null) { // prefill-only: no decode, no first token, nothing to send
            f.computeNanos += System.nanoTime() - t0;
            return;
        }
        if (last) {
            int token = f.req.sampling().sample(logits, 0, prompt, prompt.length);
            float lp = Sampling.logprob(logits, token);
            // The aux row is the same on every shard: whichever rank's copy the decode gets, it is right.
            for (KvPool[] s : pools) for (KvPool p : s) p.writeFirstToken(f.row, token, lp, prompt.length, logits, f.req.room());
            AuxRowTamper tamper = auxRowTamper;
            if (tamper != null) for (KvPool[] s : pools) for (KvPool p : s) tamper.rewrite(p, f.row, f.req.room());
        }
        f.computeNanos += System.nanoTime() - t0;
        // Pages whose tokens are all computed (the last chunk: every remaining page, the partial one too).
        int ready = last ? f.pages.length : to / spec.pageSize();
        int[] part = Arrays.copyOfRange(f.pages, f.sentPages, Math.max(f.sentPages, ready));
        for (int s = 0; s < spec.pp(); s++) {
            for (int r = 0; r < spec.tp(); r++) {
                KVSender x = f.senders.get(s, r);
                // The last chunk carries the request's state: its window pages and recurrent slot on this shard.
                if (x.shouldSendKvChunk(part.length, last)) x.send(part, last ? pools[s][r].stateIndices(f.row, prompt.length) : null, null);
            }
        }
        f.sentPages = Math.max(f.sentPages, ready);
        f.lastSendNanos = System.nanoTime();
    }

    private void fail(Flight f) {
        KVTransferException error = f.senders.failure();
        failWith(f, error != null ? error : new IllegalStateException("room " + f.req.room() + " failed"));
    }

    private void failAborted(Flight f) {
        failWith(f, new KVTransferException(f.req.room(), FailureKind.ABORTED, "Aborted by AbortReq.", false));
    }

    private void failWith(Flight f, Exception e) {
        release(f, false);
        f.done.completeExceptionally(e);
    }

    /**
     * The first position of the prompt whose logits the request needs (the last token's for the first output token; from
     * {@code logprob_start_len - 1} on for input log probabilities): the pages wholly before it may come from the cache.
     */
    private static int firstNeeded(Request req) {
        int n = req.prompt().length;
        return PromptLogprobs.logitsFrom(req.logprobStart(), 0, n, n); // the prompt as one chunk: its first position with logits
    }

    /** The cache's pages for the request's prompt, referenced (none without a cache); sets its keys. */
    private int[] acquireCached(Flight f) {
        if (prefixCache == null) return new int[0];
        int[] prompt = f.req.prompt();
        if (f.cacheKeys == null) f.cacheKeys = prefixCache.keys(prompt, prompt.length / spec.pageSize(), f.req.cacheSalt());
        return prefixCache.acquire(prompt, Arrays.copyOf(f.cacheKeys, firstNeeded(f.req) / spec.pageSize()), f.req.cacheSalt(), snapshots);
    }

    /**
     * Whether the request's pages (those the cache does not hold) and an aux row can be had now, evicting idle cache
     * entries for want of pages; the cache's references are dropped again either way ({@link #allocate} takes them).
     */
    private boolean canAllocate(Flight f) {
        int[] hit = acquireCached(f);
        int need = spec.pagesFor(f.req.prompt().length) - hit.length;
        // Evict only for want of pages: a request waiting for an aux row would otherwise drain the cache, a page a pass.
        if (prefixCache != null && alloc.hasFreeRow() && alloc.freePages() < need && prefixCache.evictable() > 0) {
            alloc.freePages(prefixCache.evict(need - alloc.freePages()));
        }
        boolean ok = alloc.canAllocate(need);
        if (prefixCache != null) prefixCache.release(f.cacheKeys, hit.length);
        return ok;
    }

    /** Gives the request its pages (the cached ones first, referenced) and aux row when it can have them now. */
    private boolean allocate(Flight f) {
        if (!canAllocate(f)) return false;
        int[] hit = acquireCached(f);
        int total = spec.pagesFor(f.req.prompt().length), need = total - hit.length;
        f.pages = Arrays.copyOf(hit, total);
        f.own = alloc.allocatePages(need);
        System.arraycopy(f.own, 0, f.pages, hit.length, need);
        f.row = alloc.allocateRow();
        f.cachedPages = hit.length;
        f.refs = hit.length;
        f.computed = hit.length * spec.pageSize(); // the forward passes start at the first uncached token
        if (snapshots && hit.length > 0) { // the recurrent state after the hit's last token, as that page's entry kept it
            byte[][] state = (byte[][]) prefixCache.state(f.cacheKeys, hit.length - 1);
            for (int s = 0; s < spec.pp(); s++) for (int r = 0; r < spec.tp(); r++) pools[s][r].restoreRecurrent(f.row, state[s * spec.tp() + r]);
        } else {
            for (KvPool[] s : pools) for (KvPool pool : s) pool.resetState(f.row);
        }
        int snapshotAt = firstNeeded(f.req) / spec.pageSize() * spec.pageSize();
        f.snapshotAt = snapshots && snapshotAt > f.computed ? snapshotAt : -1;
        meters.promptTokens(f.req.prompt().length);
        if (hit.length > 0) meters.cachedTokens(hit.length * spec.pageSize());
        return true;
    }

    /**
     * @param finished the request's prompt is computed and its answer made: its full prompt pages join the prefix cache if
     *                 they have not yet (a request that fails or is aborted before its prompt is computed adds nothing: its
     *                 pages may be half computed; one computed already offered them, and they stay: their KV is whole)
     */
    private void release(Flight f, boolean finished) {
        if (f.senders != null) f.senders.clear();
        if (f.pages != null) {
            if (prefixCache != null && f.cacheKeys != null) {
                if (finished) offerToCache(f);
                prefixCache.release(f.cacheKeys, f.refs); // the cache's pages stay the cache's
            }
            alloc.freePages(f.own);
        }
        if (f.row >= 0) alloc.freeRow(f.row);
        f.pages = null;
        f.row = -1;
        inFlight--;
        publish(); // before the request's future completes: whoever it tells reads the gauges without it
    }

    @Override
    void shutdown() {
        for (List<Flight> q : List.of(bootstrap, forward, inflight)) {
            for (Flight f : q) {
                if (f.senders != null) f.senders.abort();
                failWith(f, new IllegalStateException("the prefill engine shut down"));
            }
            q.clear();
        }
        publish();
    }

    /** The engine's kvferry managers (one per TP rank and PP stage), for its status page. */
    public List<KVManager> kvManagers() {
        return managers.all();
    }

    @Override
    public void close() {
        super.close();
        managers.close();
        closePools();
    }

    private void closePools() {
        for (KvPool[] s : pools) for (KvPool p : s) p.close();
    }
}
