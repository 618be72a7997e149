package io.kvferry.engine.serving;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;

import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * What an engine's scheduler holds, as an operator reads it on the engine's {@code /metrics}: requests in
 * each of its queues, KV pages used by requests, kept by the prefix cache and free, aux rows used and free
 * (SGLang's {@code num_running_reqs}, {@code num_prealloc_queue_reqs}, {@code num_transfer_queue_reqs},
 * {@code num_bootstrap_queue_reqs}, {@code num_inflight_queue_reqs}, {@code token_usage}). The scheduler
 * thread publishes after every pass ({@link #publish}); the gauges read the last values, so a scrape never
 * touches scheduler-owned state. Once every request ended, the request gauges and the used pages and rows
 * are 0: what an operator checks after clients went away in bulk or a peer failed. Both engines' prefix caches
 * show their pages ({@code state="cached"}), and the prompt tokens they served from cache, not computed (prefill) or not
 * received (decode), count in {@code kvferry_engine_cached_tokens} (SGLang's {@code cached_tokens_total}); the prefill
 * counts every request's prompt tokens in {@code kvferry_engine_prompt_tokens} when it takes the request (its pages), so
 * cached ÷ prompt tokens is its cache's hit ratio (the decode has no such counter); {@code kvferry_engine_prefix_deferrals}
 * counts the requests that waited for another request in flight to compute (prefill) or receive (decode) a prefix they
 * share.
 */
final class EngineMeters {
    static final String REQUESTS = "kvferry_engine_requests";
    static final String PAGES = "kvferry_engine_kv_pages";
    static final String ROWS = "kvferry_engine_aux_rows";
    static final String CACHED_TOKENS = "kvferry_engine_cached_tokens";
    static final String PROMPT_TOKENS = "kvferry_engine_prompt_tokens";
    static final String PREFIX_DEFERRALS = "kvferry_engine_prefix_deferrals";

    private final AtomicInteger[] queued;
    private final AtomicInteger pagesUsed = new AtomicInteger(), pagesCached = new AtomicInteger(), pagesFree = new AtomicInteger();
    private final AtomicInteger rowsUsed = new AtomicInteger(), rowsFree = new AtomicInteger();
    private final Counter cachedTokens;
    /** The prefill's only: null on the decode. */
    private final Counter promptTokens;
    private final Counter prefixDeferrals;

    /**
     * @param role   {@code prefill} or {@code decode} (the tag that tells the engines apart in one registry)
     * @param queues the engine's queues in the order {@link #publish} is given their sizes
     */
    EngineMeters(MeterRegistry registry, String role, List<String> queues, int pages, int rows) {
        queued = new AtomicInteger[queues.size()];
        pagesFree.set(pages);
        rowsFree.set(rows);
        for (int i = 0; i < queued.length; i++) {
            queued[i] = new AtomicInteger();
            Gauge.builder(REQUESTS, queued[i], AtomicInteger::get).strongReference(true)
                    .description("Engine: requests in each scheduler queue (0 in every queue once all ended)")
                    .tags("role", role, "queue", queues.get(i)).register(registry);
        }
        page(registry, role, "used", pagesUsed);
        page(registry, role, "free", pagesFree);
        page(registry, role, "cached", pagesCached);
        cachedTokens = Counter.builder(CACHED_TOKENS)
                .description("Engine: prompt tokens served from the prefix cache (prefill: not computed; decode: not received)")
                .tags("role", role).register(registry);
        promptTokens = !"prefill".equals(role) ? null : Counter.builder(PROMPT_TOKENS)
                .description("Engine: prompt tokens of the requests the prefill took (cached or computed)")
                .tags("role", role).register(registry);
        prefixDeferrals = Counter.builder(PREFIX_DEFERRALS)
                .description("Engine: requests that waited for another request in flight to compute (prefill) or receive (decode)"
                        + " a prefix they share (then a cache hit)")
                .tags("role", role).register(registry);
        Gauge.builder(ROWS, rowsUsed, AtomicInteger::get).strongReference(true).description("Engine: aux rows (one per request in flight) by state")
                .tags("role", role, "state", "used").register(registry);
        Gauge.builder(ROWS, rowsFree, AtomicInteger::get).strongReference(true).description("Engine: aux rows (one per request in flight) by state")
                .tags("role", role, "state", "free").register(registry);
    }

    private static void page(MeterRegistry registry, String role, String state, AtomicInteger value) {
        Gauge.builder(PAGES, value, AtomicInteger::get).strongReference(true)
                .description("Engine: KV pages by state: used by requests, cached (the engine's prefix cache), free")
                .tags("role", role, "state", state).register(registry);
    }

    /** Scheduler thread: the queues' sizes (in the constructor's order), then pages and rows. */
    void publish(int[] queueSizes, int used, int cached, int free, int rowsInUse, int rowsLeft) {
        for (int i = 0; i < queued.length; i++) set(queued[i], queueSizes[i]);
        set(pagesUsed, used);
        set(pagesCached, cached);
        set(pagesFree, free);
        set(rowsUsed, rowsInUse);
        set(rowsFree, rowsLeft);
    }

    /** Scheduler thread: a request's prompt tokens served from the prefix cache. */
    void cachedTokens(int n) {
        cachedTokens.increment(n);
    }

    /** Prefill's scheduler thread: a request's prompt tokens, when it takes the request. */
    void promptTokens(int n) {
        promptTokens.increment(n);
    }

    /** Scheduler thread: a request waits (the first time) for another's pages of a prefix they share. */
    void prefixDeferral() {
        prefixDeferrals.increment();
    }

    /** A volatile write only when the value changed: an idle scheduler passes thousands of times a second. */
    private static void set(AtomicInteger a, int v) {
        if (a.getPlain() != v) a.set(v);
    }
}
