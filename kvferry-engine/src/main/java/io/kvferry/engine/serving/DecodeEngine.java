package io.kvferry.engine.serving;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.Knobs;
import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.kv.PageAllocator;
import io.kvferry.engine.kv.PrefixCache;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.runtime.ShardedModel;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The decode side, in SGLang's order (sglang-pd-disaggregation.md §1): the prealloc queue (receivers
 * created and {@code init}, pages for prompt + output allocated when free, {@code send_metadata}
 * with the prompt's pages and the aux row), the transfer queue (until every rank's receiver is
 * Success: the KV landed and the aux row holds the room), then the running batch: continuous
 * batching, one token per running request per step, streamed to its sink. Attention reads the
 * pages kvferry wrote, in place.
 *
 * <p>The prefix cache ({@link PrefixCache}): a request's full prompt pages join it once its KV landed and was checked
 * (every rank's receiver Success, the aux row sound), before it decodes (the decode writes only past the prompt, so they
 * are final then); the request keeps them referenced until it ends. A request that fails or is aborted before that adds
 * nothing. A request that starts with cached pages asks the prefill only for the rest ({@code decode_prefix_len}).
 *
 * <p>In-flight prefix sharing (the decode's side of SGLang's in-batch prefix caching check, as the prefill does it): a
 * request ready for its pages whose prompt shares at least one full page beyond what the cache holds for it with a request
 * in the transfer queue (its KV on the way) under the same cache salt waits in the prealloc queue, holding no page and no
 * aux row (only its receivers, opened when it came), until that transfer ends; then it takes the pages that landed as a
 * hit and asks the prefill only for the rest, so a burst on a new prefix receives it once. It waits only on a request in
 * transfer: when that one fails or is aborted it looks the cache up again on the next pass and receives what is missing
 * itself; its own abort ends it with nothing held. A request that waits keeps no place: those behind it take pages
 * meanwhile, and once it is ready again it goes in its arrival order (before them). It waits at most half the bootstrap
 * timeout from its arrival (a transfer waited for may hang until the waiting timeout, while its own prefill fails it
 * after the bootstrap timeout without metadata); then it receives its prompt itself.
 */
public final class DecodeEngine extends SchedulerThread {
    private static final Logger log = LoggerFactory.getLogger(DecodeEngine.class);
    /** Receives a request's output on the scheduler thread: must not block. */
    public interface TokenSink {
        void onToken(int token);

        /** A token with its log probabilities (null unless the request asked for them); what the engine calls. */
        default void onToken(int token, TokenLogprobs logprobs) {
            onToken(token);
        }

        void onDone(Generation g);

        /** @param kind the transfer failure's kind; null when the request failed for another reason */
        void onError(FailureKind kind, String message);

        /** The request was refused as it came (its room is already under way here): the client's error, nothing ran. */
        default void onRefused(String message) {
            onError(null, message);
        }

        /**
         * The request failed while it ran for what the client sent ({@link OutputConstraint.Exceeded}: its grammar passed a
         * run-time bound): the client's error, {@code param} the request's field at fault as the engine names it.
         */
        default void onClientError(String param, String message) {
            onError(null, message);
        }
    }

    /**
     * @param bootstrapAddr the prefill's registry (host:port); null = the engine's {@link TransferSpec#bootstrapAddr()}
     * @param topLogprobs   -1: no log probabilities (no per-token cost); 0..{@link TokenLogprobs#MAX_TOP}: each token's
     *                      log probability and that many of the most likely tokens' (the first token's from the aux row)
     * @param cacheSalt     the request's {@code cache_salt} (null: none): it reuses, and leaves, prefix cache pages only
     *                      among requests with the same ({@link PrefixCache})
     */
    public record Request(long room, String bootstrapAddr, int[] prompt, int maxNewTokens, Sampling sampling, TokenSink sink, int topLogprobs,
                          String cacheSalt) {
        public Request {
            if (topLogprobs < -1 || topLogprobs > TokenLogprobs.MAX_TOP) {
                throw new IllegalArgumentException("top logprobs must be in [-1, " + TokenLogprobs.MAX_TOP + "], got " + topLogprobs);
            }
        }

        /** Unsalted: the shared prefix cache. */
        public Request(long room, String bootstrapAddr, int[] prompt, int maxNewTokens, Sampling sampling, TokenSink sink, int topLogprobs) {
            this(room, bootstrapAddr, prompt, maxNewTokens, sampling, sink, topLogprobs, null);
        }

        /** Without log probabilities. */
        public Request(long room, String bootstrapAddr, int[] prompt, int maxNewTokens, Sampling sampling, TokenSink sink) {
            this(room, bootstrapAddr, prompt, maxNewTokens, sampling, sink, -1);
        }
    }

    private final EngineSpec spec;
    private final TransferSpec transfer;
    private final KvPool[][] pools;
    private final ShardedModel model;
    private final ShardManagers managers;
    private final PageAllocator alloc;
    /** Aborts that came before their room's request (scheduler thread only). */
    private final RecentAborts recentAborts = new RecentAborts();
    private final PrefixCache prefixCache;
    private final List<Flight> prealloc = new ArrayList<>(), transferring = new ArrayList<>(), running = new ArrayList<>();
    /**
     * Failed or aborted requests whose rooms are being cleared off the scheduler thread: an unfinished room's
     * clear() returns only once no write of it can land, which for a hung prefill means waiting for its
     * ABORT_ACK (abortAckTimeout, 5 s) or for a stuck write to drain (2 s), and every running request of
     * the engine would stop for that long. Their pages come back, and their clients hear the failure, when
     * the clear returned.
     */
    private final List<Flight> releasing = new ArrayList<>();
    private final ExecutorService releaser = Executors.newThreadPerTaskExecutor(
            Thread.ofVirtual().name("kvferry-engine-decode-release-", 0).factory());
    private volatile int inFlight;
    private volatile long abortedRequests;
    /**
     * Tests only: false turns in-flight prefix sharing off, so that a burst reaches the prefill together, as requests from
     * several decodes would (the prefill's own in-batch sharing is tested so); true in service.
     */
    volatile boolean sharesInFlightPrefixes = true;
    /**
     * The longest a request waits for others' transfers of a prefix it shares, from its arrival: half the bootstrap
     * timeout (the knob as this process reads it), since its prefill fails it (bootstrap_timeout) once it has had no
     * metadata from the decode for the whole of that. A transfer waited for that hangs (its prefill stuck) is ended only
     * by the waiting timeout, far later; the waiting request then receives its prompt itself.
     */
    private final long sharedPrefixWaitNanos;
    // The running batch's step, reused (at most one running request per aux row).
    private final Flight[] batch;
    private final int[] batchTokens, batchPositions, batchRows;
    private final int[][] batchTables;
    private final EngineMeters meters;
    private final int[] queueSizes = new int[4];

    private final class Flight {
        final Request req;
        /** Prompt + output tokens this request may reach, and the pages they need. */
        final int totalTokens, totalPages;
        ShardRooms<KVReceiver> receivers;
        int[] pages, seq;
        long[] prefixKeys;
        /** The first {@code refs} of {@link #prefixKeys} are referenced by it until it ends (its hit; once landed, its cached chain). */
        int refs;
        /** The pages it frees when it ends: those of its page table that are not the cache's. */
        int[] own;
        /** It waited for another request's pages at least once (counted once); {@code waitingNow}: on the last pass. */
        boolean waited, waitingNow;
        int row = -1, generated, prefixPages;
        /** When it came to this decode (its wait for a shared prefix is bounded from then). */
        final long arrivedNanos = System.nanoTime();
        long metadataNanos, landedNanos, landedBytes;
        double firstDecodeMs;
        float[] firstLogits;
        /** Each token's log probabilities, when the request asked for them. */
        List<TokenLogprobs> logprobs;
        boolean aborted;
        /** Its sink heard the end (a room whose clear failed stays releasing after that). */
        boolean told;
        /** Its progress through its structured output (a grammar's Earley chart, a DFA's state), this thread's alone; cleared when it ends. */
        final OutputConstraint.Progress progress = new OutputConstraint.Progress();

        Flight(Request req) {
            this.req = req;
            totalTokens = Requests.totalTokens(req.prompt().length, req.maxNewTokens(), spec.weights().config);
            totalPages = spec.pagesFor(totalTokens);
        }
    }

    public DecodeEngine(EngineSpec spec, TransferSpec transfer) {
        super("kvferry-engine-decode");
        this.spec = spec;
        this.transfer = transfer;
        // Before the pools and managers: nothing to close if a gauge cannot be registered.
        meters = new EngineMeters(transfer.meters(), "decode", List.of("prealloc", "transfer", "running", "releasing"), spec.pages(), spec.maxRequests());
        this.pools = spec.newPools(transfer.sharedDecodePools(), "decode");
        this.model = new ShardedModel(spec.model(), spec.tp(), spec.pp(), pools);
        ShardManagers m;
        try {
            m = new ShardManagers(spec, transfer, pools, DisaggregationMode.DECODE);
        } catch (RuntimeException e) {
            closePools();
            throw e;
        }
        this.managers = m;
        sharedPrefixWaitNanos = KVFerrySettings.fromEnvironment().getMillis(Knobs.BOOTSTRAP_TIMEOUT_MS, 1).toNanos() / 2;
        this.alloc = new PageAllocator(spec.pages(), spec.maxRequests());
        this.prefixCache = new PrefixCache(spec.pageSize());
        batch = new Flight[spec.maxRequests()];
        batchTokens = new int[spec.maxRequests()];
        batchPositions = new int[spec.maxRequests()];
        batchRows = new int[spec.maxRequests()];
        batchTables = new int[spec.maxRequests()][];
        start();
    }

    public EngineSpec spec() {
        return spec;
    }

    public int inFlight() {
        return inFlight;
    }

    /** Requests that ended by abort (client gone, router's abort), since start. */
    public long abortedRequests() {
        return abortedRequests;
    }

    /** Queues a request; its sink hears every token, then onDone or onError (exactly one of them). */
    public void submit(Request req) {
        Requests.validate(req.prompt(), req.maxNewTokens(), spec.weights().config);
        req.sampling().rules().checkVocab(spec.weights().config.vocabSize());
        int need = spec.pagesFor(Requests.totalTokens(req.prompt().length, req.maxNewTokens(), spec.weights().config));
        if (need > spec.pages()) {
            throw new IllegalArgumentException("the request needs " + need + " pages (prompt + max_tokens); this decode has " + spec.pages());
        }
        String addr = req.bootstrapAddr() != null ? req.bootstrapAddr() : transfer.bootstrapAddr();
        if (addr == null) throw new IllegalArgumentException("room " + req.room() + " names no bootstrap address and this decode has none");
        execute(() -> {
            if (roomUnderWay(req.room())) {
                // kvferry refuses a second receiver of a room only until the first one's KV landed; a duplicate
                // of a room that is decoding would run beside it (and an abort of the room would end both).
                req.sink().onRefused("bootstrap_room " + req.room() + " is already in flight on this decode");
                return;
            }
            if (recentAborts.take(req.room(), System.nanoTime())) {
                req.sink().onError(FailureKind.ABORTED, "Aborted by AbortReq. (before the request reached this decode)");
                return;
            }
            Flight f = new Flight(req);
            try {
                f.receivers = ShardRooms.open(spec.pp(), spec.tp(), ShardRooms.RECEIVERS, (s, r) -> {
                    KVReceiver x = managers.managers[s][r].createReceiver(addr, req.room());
                    try {
                        x.init(0);
                    } catch (RuntimeException e) {
                        x.clear();
                        throw e;
                    }
                    return x;
                });
            } catch (RuntimeException e) {
                req.sink().onError(null, e.getMessage());
                return;
            }
            inFlight++;
            prealloc.add(f);
        });
    }

    /** Whether a request of this room is accepted and not ended (scheduler thread only). */
    private boolean roomUnderWay(long room) {
        for (List<Flight> q : List.of(prealloc, transferring, running, releasing)) {
            for (Flight f : q) {
                if (f.req.room() == room) return true;
            }
        }
        return false;
    }

    /** Aborts a request (client gone): it ends with onError; its pages are freed once no write can land. */
    public void abort(long room) {
        execute(() -> {
            boolean found = false;
            for (List<Flight> q : List.of(prealloc, transferring)) {
                for (Flight f : q) {
                    if (f.req.room() == room) {
                        f.receivers.abort();
                        found = true;
                    }
                }
            }
            for (Flight f : running) {
                if (f.req.room() == room) {
                    f.aborted = true;
                    found = true;
                }
            }
            for (Flight f : releasing) found |= f.req.room() == room; // ending already
            if (!found) recentAborts.remember(room, System.nanoTime()); // it may overtake the room's request
        });
    }

    /** Pages and aux rows held by requests (the prefix cache's pages not counted): 0 once every request ended. */
    public CompletableFuture<Integer> outstanding() {
        var out = new CompletableFuture<Integer>();
        execute(() -> out.complete(alloc.outstanding() - prefixCache.pages()));
        return out;
    }

    /** Pages the prefix cache holds. */
    public CompletableFuture<Integer> cachedPages() {
        var out = new CompletableFuture<Integer>();
        execute(() -> out.complete(prefixCache.pages()));
        return out;
    }

    @Override
    boolean step() {
        boolean moved = false;
        // Pages go in arrival order: once a ready request cannot get its pages, those behind it wait too (they are
        // still polled, so a failed or aborted one leaves at once). Before, a smaller request took the pages a larger
        // one waited for, and under a steady stream of small requests the large one never got them: it waited until
        // its prefill's bootstrap timeout (300 s) failed it as "timed out in KVPoll.Bootstrapping".
        boolean waiting = false;
        for (Iterator<Flight> it = prealloc.iterator(); it.hasNext(); ) {
            Flight f = it.next();
            KVPoll p = f.receivers.poll();
            if (p == KVPoll.Failed) {
                it.remove();
                fail(f);
                moved = true;
                continue;
            }
            if (p.compareTo(KVPoll.WaitingForInput) < 0 || waiting) continue;
            int total = f.totalPages, promptTokens = f.req.prompt().length;
            // Full prompt pages a later request may share. A page-aligned prompt may be all cached: then the
            // prefill's last chunk carries no page, only the state and the aux row with the first token.
            if (f.prefixKeys == null) f.prefixKeys = prefixCache.keys(f.req.prompt(), promptTokens / spec.pageSize(), f.req.cacheSalt());
            if (waitsForSharedPrefix(f)) continue; // holds nothing, and keeps no one behind it waiting
            int[] hit = prefixCache.acquire(f.req.prompt(), f.prefixKeys, f.req.cacheSalt());
            int need = total - hit.length;
            // Evict only for want of pages: a request waiting for an aux row would otherwise drain the cache, a page a pass.
            if (alloc.hasFreeRow() && alloc.freePages() < need && prefixCache.evictable() > 0) {
                alloc.freePages(prefixCache.evict(need - alloc.freePages()));
            }
            if (!alloc.canAllocate(need)) { // waits for a finished request's pages, and holds its place
                prefixCache.release(f.prefixKeys, hit.length);
                waiting = true;
                continue;
            }
            f.prefixPages = hit.length;
            f.refs = hit.length;
            if (hit.length > 0) meters.cachedTokens(hit.length * spec.pageSize());
            f.pages = Arrays.copyOf(hit, total);
            f.own = alloc.allocatePages(need);
            System.arraycopy(f.own, 0, f.pages, hit.length, need);
            f.row = alloc.allocateRow();
            int[] promptPages = Arrays.copyOfRange(f.pages, hit.length, spec.pagesFor(promptTokens));
            f.metadataNanos = System.nanoTime();
            for (int s = 0; s < spec.pp(); s++) {
                for (int r = 0; r < spec.tp(); r++) {
                    f.receivers.get(s, r).sendMetadata(promptPages, f.row, pools[s][r].stateIndices(f.row, promptTokens),
                            hit.length * spec.pageSize());
                }
            }
            it.remove();
            transferring.add(f);
            moved = true;
        }
        for (Iterator<Flight> it = transferring.iterator(); it.hasNext(); ) {
            Flight f = it.next();
            KVPoll p = f.receivers.poll();
            if (p == KVPoll.Failed) {
                it.remove();
                fail(f);
                moved = true;
            } else if (p == KVPoll.Success) {
                it.remove();
                f.landedNanos = System.nanoTime();
                for (KVReceiver x : f.receivers.all()) {
                    Long b = x.getTransferMetric().transferTotalBytes(); // what kvferry landed on this rank
                    if (b != null) f.landedBytes += b;
                }
                f.receivers.clear();
                KvPool aux = pools[0][0];
                int first = aux.firstToken(f.row);
                String wrong = auxRowFault(f, first);
                if (wrong != null) { // a broken prefill (authenticated, so not a stranger) harms only this request
                    release(f);
                    f.req.sink().onError(FailureKind.INTEGRITY, wrong);
                    moved = true;
                    continue;
                }
                offerToCache(f); // the requests waiting for its pages take them on the next pass
                f.firstLogits = aux.firstLogits(f.row);
                f.seq = Arrays.copyOf(f.req.prompt(), f.totalTokens);
                running.add(f);
                // The first token's log probability is the prefill's (aux row); its top ones come from the logits beside it.
                emit(f, first, f.req.topLogprobs() < 0 ? null
                        : TokenLogprobs.of(f.firstLogits, first, aux.firstLogprob(f.row), f.req.topLogprobs()));
                moved = true;
            }
        }
        // The running batch: one token for every running request, all computed in one pass, then the queues again.
        int n = 0;
        for (Iterator<Flight> it = running.iterator(); it.hasNext(); ) {
            Flight f = it.next();
            if (f.aborted) {
                it.remove();
                release(f);
                abortedRequests++;
                f.req.sink().onError(FailureKind.ABORTED, "Aborted by AbortReq.");
                continue;
            }
            String reason = finishReason(f);
            if (reason != null) {
                it.remove();
                finish(f, reason);
                continue;
            }
            int pos = f.req.prompt().length + f.generated - 1;
            batch[n] = f;
            batchTokens[n] = f.seq[pos];
            batchPositions[n] = pos;
            batchTables[n] = f.pages;
            batchRows[n] = f.row;
            n++;
        }
        if (n > 0) {
            long t0 = System.nanoTime();
            float[][] logits = model.forward(n, batchTokens, batchPositions, batchTables, batchRows, 0);
            double stepMs = (System.nanoTime() - t0) / 1e6;
            for (int i = 0; i < n; i++) {
                Flight f = batch[i];
                batch[i] = null;
                if (f.generated == 1) f.firstDecodeMs = stepMs;
                int token;
                try {
                    token = f.req.sampling().sample(logits[i], f.generated, f.seq, f.req.prompt().length, f.progress);
                } catch (OutputConstraint.Exceeded e) {
                    // Its grammar passed a bound of the recognizer: this request ends with that error, the batch goes on.
                    running.remove(f);
                    release(f);
                    f.told = true;
                    f.req.sink().onClientError(OutputConstraint.Exceeded.PARAM, e.getMessage());
                    continue;
                }
                emit(f, token, f.req.topLogprobs() < 0 ? null : TokenLogprobs.of(logits[i], token, f.req.topLogprobs()));
            }
            moved = true;
        }
        publish();
        return moved;
    }

    /**
     * Whether the ready request waits for a shared prefix: it shares at least one full prompt page beyond what the cache
     * holds for it now with a request in the transfer queue, whose full pages join the cache once they landed; same cache
     * salt only (keys compared, then the tokens). Nothing is held while it waits. Counts the request once in the engine's
     * deferrals. Not once {@link #sharedPrefixWaitNanos} passed since it came: a hung transfer holds no one back for long.
     */
    private boolean waitsForSharedPrefix(Flight f) {
        f.waitingNow = false;
        int usable = f.prefixKeys.length;
        if (usable == 0 || transferring.isEmpty() || !sharesInFlightPrefixes) return false;
        if (System.nanoTime() - f.arrivedNanos >= sharedPrefixWaitNanos) return false; // waited enough: receives it itself
        int[] prompt = f.req.prompt();
        int cached = -1;
        for (Flight l : transferring) {
            int shared = PrefixCache.sharedPages(spec.pageSize(), usable, prompt, f.prefixKeys, f.req.cacheSalt(),
                    l.req.prompt(), l.prefixKeys, l.req.cacheSalt());
            if (shared == 0) continue; // none, another salt's, or a key collision: nothing to wait for
            if (cached < 0) cached = prefixCache.cachedPages(prompt, f.prefixKeys, usable, f.req.cacheSalt(), false);
            if (shared <= cached) continue; // all it shares with that one is cached already (that one's hit, say)
            f.waitingNow = true;
            if (!f.waited) {
                f.waited = true;
                meters.prefixDeferral();
            }
            return true;
        }
        return false;
    }

    /**
     * Offers the landed request's full prompt pages to the cache: those it takes are the cache's now, referenced by the
     * request until it ends, as is the rest of the cached chain; its pages the cache did not take (cached meanwhile by
     * another request, or past a key the cache holds for another prefix) stay its own; idle entries the insert replaced
     * are freed now.
     */
    private void offerToCache(Flight f) {
        int[] prompt = f.req.prompt();
        Set<Integer> own = new HashSet<>(), notTaken = new HashSet<>();
        for (int p : f.own) own.add(p);
        for (int p : prefixCache.insert(prompt, f.prefixKeys, f.pages, f.prefixPages, f.req.cacheSalt())) {
            if (own.contains(p)) notTaken.add(p);
            else alloc.freePages(new int[]{p}); // a replaced idle entry's page
        }
        int full = f.prefixKeys.length; // the pages after its full prompt pages (the partial one, the output's) are never offered
        List<Integer> keep = new ArrayList<>();
        for (int i = f.prefixPages; i < f.pages.length; i++) {
            if (i >= full || notTaken.contains(f.pages[i])) keep.add(f.pages[i]);
        }
        f.own = keep.stream().mapToInt(Integer::intValue).toArray();
        int held = prefixCache.acquire(prompt, f.prefixKeys, f.req.cacheSalt()).length; // its hit's entries are still there: held >= refs
        prefixCache.release(f.prefixKeys, f.refs);
        f.refs = held;
    }

    /**
     * Whether the room's request is in the prealloc queue waiting for another request's pages of a shared prefix, as of
     * the last pass (scheduler thread; tests).
     */
    boolean waitingForSharedPrefix(long room) {
        for (Flight f : prealloc) {
            if (f.req.room() == room) return f.waitingNow;
        }
        return false;
    }

    /** Whether the room's request is in the transfer queue (its metadata sent, its KV not landed; scheduler thread; tests). */
    boolean inTransfer(long room) {
        for (Flight f : transferring) {
            if (f.req.room() == room) return true;
        }
        return false;
    }

    /** The queues, pages and rows as the engine's gauges show them (scheduler thread). */
    private void publish() {
        queueSizes[0] = prealloc.size();
        queueSizes[1] = transferring.size();
        queueSizes[2] = running.size();
        queueSizes[3] = releasing.size();
        int cached = prefixCache.pages();
        meters.publish(queueSizes, alloc.totalPages() - alloc.freePages() - cached, cached, alloc.freePages(),
                alloc.totalRows() - alloc.freeRows(), alloc.freeRows());
    }

    /** @param logprobs the token's log probabilities, null unless the request asked for them */
    private void emit(Flight f, int token, TokenLogprobs logprobs) {
        f.seq[f.req.prompt().length + f.generated] = token;
        f.generated++;
        if (logprobs != null) {
            if (f.logprobs == null) f.logprobs = new ArrayList<>();
            f.logprobs.add(logprobs);
        }
        f.req.sink().onToken(token, logprobs);
    }

    private String finishReason(Flight f) {
        int last = f.seq[f.req.prompt().length + f.generated - 1];
        // EOS or BOS (llama2.c's models end a story with BOS; the first token included), unless the request's rules say otherwise
        if (f.req.sampling().ends(last, f.generated - 1)) return "stop";
        if (f.req.prompt().length + f.generated >= f.totalTokens) return "length";
        return null;
    }

    private void finish(Flight f, String reason) {
        int[] out = Arrays.copyOfRange(f.seq, f.req.prompt().length, f.req.prompt().length + f.generated);
        // tcp counts what landed; one-sided transports (shm, ucx) write without telling the decode: count what it asked for.
        long bytes = f.landedBytes;
        if (bytes == 0) {
            int promptTokens = f.req.prompt().length;
            for (KvPool[] s : pools) for (KvPool p : s) bytes += p.transferBytes(spec.pagesFor(promptTokens) - f.prefixPages, promptTokens);
        }
        Generation g = new Generation(f.req.room(), out, f.firstLogits, reason,
                new Generation.Timings(0, (f.landedNanos - f.metadataNanos) / 1e6, f.firstDecodeMs, bytes), f.logprobs);
        release(f);
        f.req.sink().onDone(g);
    }

    /**
     * What is wrong with the aux row the prefill wrote for the request, or null: the first token must be in the vocabulary
     * (the sampler, the rules and the logprobs index by it, on this thread, for every request of the batch). That the row
     * names the request's room kvferry checks itself before Success (SGLang's bootstrap_room check: the room fails as
     * integrity, "bootstrap_room mismatch").
     */
    private String auxRowFault(Flight f, int first) {
        int vocab = spec.weights().config.vocabSize();
        if (first < 0 || first >= vocab) {
            return "room " + f.req.room() + ": the prefill's first token " + first + " is outside the vocabulary [0, " + vocab + ")";
        }
        return null;
    }

    private void fail(Flight f) {
        // Both calls below end the room: failureException() clears it, as SGLang's does, and clear() returns once no
        // write of the room can land, so the pages are safe to reuse after them. On a hung prefill that takes seconds
        // (an ABORT_ACK that never comes, a write stuck mid-landing), so they run off this thread; the receivers are
        // no longer touched here.
        releasing.add(f);
        publish();
        releaser.execute(() -> {
            KVTransferException e = null;
            boolean cleared = false;
            try {
                e = f.receivers.failure();
                f.receivers.clear();
                cleared = true;
            } catch (RuntimeException | Error x) {
                // A write of the room may still land: its pages stay held (the releasing gauge shows them), never reused.
                log.error("room {}: clearing it failed; its pages stay held", f.req.room(), x);
            }
            FailureKind kind = e != null ? e.kind() : FailureKind.UNKNOWN;
            String message = e != null ? e.getMessage() : "room " + f.req.room() + " failed";
            boolean free = cleared;
            try {
                execute(() -> {
                    if (!releasing.contains(f)) return; // the engine's shutdown answered it
                    if (free) {
                        releasing.remove(f);
                        release(f);
                    }
                    f.told = true;
                    f.req.sink().onError(kind, message);
                });
            } catch (IllegalStateException stopped) {
                // the engine stopped: its shutdown answers the request
            }
        });
    }

    /**
     * Ends the request's hold: its references to cached pages and its own pages (its full prompt pages joined the cache
     * when its KV landed, and stay; a request that ended before that added nothing: its pages may be half written).
     */
    private void release(Flight f) {
        f.progress.clear();
        if (f.pages != null) {
            prefixCache.release(f.prefixKeys, f.refs); // the cache's pages stay the cache's
            alloc.freePages(f.own);
        }
        if (f.row >= 0) alloc.freeRow(f.row);
        f.pages = null;
        f.row = -1;
        inFlight--;
        publish(); // before the request's sink hears its end: whoever it tells reads the gauges without it
    }

    @Override
    void shutdown() {
        for (List<Flight> q : List.of(prealloc, transferring)) {
            for (Flight f : q) {
                f.receivers.abort();
                f.receivers.clear();
                release(f);
                f.req.sink().onError(null, "the decode engine shut down");
            }
            q.clear();
        }
        for (Flight f : running) {
            release(f);
            f.req.sink().onError(null, "the decode engine shut down");
        }
        running.clear();
        // Rooms still being cleared: their clients hear the engine stopped; nothing reuses their pages any more, and
        // close() waits for the clears before the pools go.
        for (Flight f : releasing) {
            release(f);
            if (!f.told) f.req.sink().onError(null, "the decode engine shut down");
        }
        releasing.clear();
        publish();
    }

    /** The engine's kvferry managers (one per TP rank and PP stage), for its status page. */
    public List<KVManager> kvManagers() {
        return managers.all();
    }

    @Override
    public void close() {
        super.close();
        releaser.close(); // the clears under way: no write of their rooms lands once they returned
        managers.close();
        closePools();
    }

    private void closePools() {
        for (KvPool[] s : pools) for (KvPool p : s) p.close();
    }
}
