package io.kvferry.engine.http;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;

import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;

/**
 * What the router serves, as an operator reads it on its {@code /metrics}: requests by route and HTTP
 * status, time to first token and end-to-end latency of the requests that succeeded, tokens in and
 * out, requests running, and each backend's health and load. The names follow SGLang's serving
 * metrics ({@code time_to_first_token_seconds}, {@code e2e_request_latency_seconds},
 * {@code prompt_tokens_total}, {@code generation_tokens_total}) under {@code kvferry_router_}.
 * Thread-safe: Micrometer's meters are; the per-status counters are made once and kept.
 */
final class RouterMeters {
    static final String REQUESTS = "kvferry_router_requests";
    static final String TTFT = "kvferry_router_time_to_first_token";
    static final String E2E = "kvferry_router_e2e_request_latency";
    static final String PROMPT_TOKENS = "kvferry_router_prompt_tokens";
    static final String GENERATION_TOKENS = "kvferry_router_generation_tokens";
    static final String RUNNING = "kvferry_router_requests_running";
    static final String WAITING = "kvferry_router_requests_waiting";
    static final String BACKEND_UP = "kvferry_router_backend_up";
    static final String BACKEND_IN_FLIGHT = "kvferry_router_backend_requests_in_flight";
    static final String TENANT_RUNNING = "kvferry_router_tenant_requests_running";
    static final String TENANT_WAITING = "kvferry_router_tenant_requests_waiting";
    /** Requests a tenant's per-minute limit turned away ({@link RateLimits}), tagged {@code tenant} and {@code limit}. */
    static final String RATE_LIMITED = "kvferry_router_rate_limited";
    /** The {@code limit} tags of {@link #RATE_LIMITED}: {@code requests_per_minute}'s and {@code tokens_per_minute}'s. */
    static final String LIMIT_REQUESTS = "requests";
    static final String LIMIT_TOKENS = "tokens";
    /**
     * Requests a concurrency limit turned away (429 once no slot freed within {@code --queue-timeout-ms}; a request once,
     * however many of its choices or batch entries were: {@link Router.RequestRecord#firstAdmissionRefusal}), tagged {@code
     * limit}: {@link #LIMIT_ROUTER} or {@link #LIMIT_TENANT}; with tenants, {@code tenant} too. A meter of its own, not a
     * {@link #RATE_LIMITED} tag: that one counts a tenant's per-minute quota (and exists only with tenants); this one the
     * router's load, with or without tenants.
     */
    static final String ADMISSION_REFUSED = "kvferry_router_admission_refused";
    /** The {@code limit} tags of {@link #ADMISSION_REFUSED}: {@code --max-concurrent-requests}'s, a tenant's {@code max_concurrent_requests}'. */
    static final String LIMIT_ROUTER = "router";
    static final String LIMIT_TENANT = "tenant";
    /**
     * The {@code tenant} tag of a request no tenant's key opened (a 401), or of one whose tenant a reload removed while it
     * ran (its series went with it), on a router with tenants.
     */
    static final String NO_TENANT = "-";

    /**
     * The status counted for a request whose client went away before its answer was complete (nginx's
     * "client closed request"): no status reached it, and it was neither the router's nor a backend's failure.
     */
    static final int CLIENT_CLOSED = 499;

    /** Histogram buckets: a tiny model's TTFT is milliseconds, a long prompt's or a queued one's seconds. */
    private static final Duration[] LATENCY_BUCKETS = {
            Duration.ofMillis(5), Duration.ofMillis(10), Duration.ofMillis(25), Duration.ofMillis(50), Duration.ofMillis(100),
            Duration.ofMillis(250), Duration.ofMillis(500), Duration.ofSeconds(1), Duration.ofMillis(2500), Duration.ofSeconds(5),
            Duration.ofSeconds(10), Duration.ofSeconds(30), Duration.ofSeconds(60)};

    private final MeterRegistry registry;
    private final Map<String, Counter> requests = new ConcurrentHashMap<>();
    private final Timer ttft;
    private final Timer e2e;
    private final Counter promptTokens;
    private final Counter generationTokens;
    private final AtomicInteger running = new AtomicInteger();
    /** Requests answered since start by HTTP status (statuses are bounded: 100-599), for the status page. */
    private final Map<Integer, LongAdder> byStatus = new ConcurrentHashMap<>();
    /** Prompt and generated tokens of the requests that succeeded since start, for the status page (whatever the tenant). */
    private final LongAdder promptTotal = new LongAdder();
    private final LongAdder generatedTotal = new LongAdder();
    /** The recent TTFTs and end-to-end latencies, for the status page's p50/p99 over a window ({@link RecentLatencies}). */
    final RecentLatencies recentTtft = new RecentLatencies();
    final RecentLatencies recentE2e = new RecentLatencies();
    /** Whether the request and token meters carry a {@code tenant} tag: only on a router with tenants (their names bound it). */
    private final boolean byTenant;
    /** Per tenant (byTenant): its prompt and generated token counters. */
    private final Map<String, Counter[]> tokensByTenant = new ConcurrentHashMap<>();
    /** Per tenant (byTenant): its requests in the router now (waiting for its slot included). */
    private final Map<String, AtomicInteger> runningByTenant = new ConcurrentHashMap<>();
    /** Per tenant (byTenant): its rate-limited counters, {requests, tokens}, made with its other meters (0 until one counts). */
    private final Map<String, Counter[]> rateLimitedByTenant = new ConcurrentHashMap<>();
    /** The {@link #ADMISSION_REFUSED} counters by limit and (byTenant) tenant tag ({@link #key}'s form, the limit for the route). */
    private final Map<String, Counter> admissionRefused = new ConcurrentHashMap<>();

    /** @param registry where the meters go; null for nowhere (a registry of its own nobody reads) */
    RouterMeters(MeterRegistry registry) {
        this(registry, false);
    }

    /**
     * @param byTenant whether the router has tenants: its request and token counters then carry a {@code tenant} tag (each
     *                 series of a tenant named in its file, {@link #NO_TENANT} for requests no key opened), and each tenant
     *                 has gauges of its requests running and waiting; without, the meters are as they were (untagged)
     */
    RouterMeters(MeterRegistry registry, boolean byTenant) {
        this.byTenant = byTenant;
        this.registry = registry != null ? registry : new SimpleMeterRegistry();
        ttft = Timer.builder(TTFT).description("Router: request arrival to the first token from the decode, requests that produced one")
                .serviceLevelObjectives(LATENCY_BUCKETS).register(this.registry);
        e2e = Timer.builder(E2E).description("Router: request arrival to its last token, requests that succeeded")
                .serviceLevelObjectives(LATENCY_BUCKETS).register(this.registry);
        promptTokens = byTenant ? null : promptTokens(null);
        generationTokens = byTenant ? null : generationTokens(null);
        Gauge.builder(RUNNING, running, AtomicInteger::get).description("Router: requests in the router now, from their arrival to their answer (those waiting for a slot included)").register(this.registry);
    }

    /** Gauges of one backend: 1 while in rotation, 0 while its health checks keep it out; requests it is serving. */
    void backend(Backend b) {
        String role = b.prefill ? "prefill" : "decode";
        Gauge.builder(BACKEND_UP, b, x -> x.serves() ? 1 : 0).description("Router: 1 while the backend is in rotation")
                .tags("role", role, "backend", b.url.toString()).register(registry);
        Gauge.builder(BACKEND_IN_FLIGHT, b, x -> x.inFlight.get()).description("Router: requests the backend is serving for this router")
                .tags("role", role, "backend", b.url.toString()).register(registry);
    }

    /** Removes a backend's gauges (it left the router's pool): a series for it would read 0 "down" for ever. */
    void forget(Backend b) {
        String role = b.prefill ? "prefill" : "decode";
        for (String name : new String[]{BACKEND_UP, BACKEND_IN_FLIGHT}) {
            Meter m = registry.find(name).tags("role", role, "backend", b.url.toString()).meter();
            if (m != null) registry.remove(m);
        }
    }

    /** The gauge of requests waiting for an admission slot (only a router with a limit has one). */
    void admission(Semaphore slots) {
        Gauge.builder(WAITING, slots, Semaphore::getQueueLength).description("Router: requests waiting for a slot (--max-concurrent-requests)")
                .register(registry);
        if (!byTenant) refusedCounter(LIMIT_ROUTER, null); // its series is there from the start (with tenants, each one's is made at its first)
    }

    /**
     * A request of {@code tenant} (null: none, or a router without tenants) turned away by a concurrency {@code limit}
     * ({@link #LIMIT_ROUTER}, {@link #LIMIT_TENANT}): 429 after {@code --queue-timeout-ms}.
     */
    void admissionRefused(String tenant, String limit) {
        refusedCounter(limit, tenant).increment();
    }

    private Counter refusedCounter(String limit, String tenant) {
        String t = !byTenant ? null : tenant == null ? NO_TENANT : tenant;
        Counter c = admissionRefused.get(key(limit, 0, t));
        if (c != null) return c;
        synchronized (this) { // as finished: a series made only for a tenant still configured (forgetTenant holds this too)
            String tag = byTenant ? tag(tenant) : null;
            return admissionRefused.computeIfAbsent(key(limit, 0, tag), k -> {
                Counter.Builder b = Counter.builder(ADMISSION_REFUSED).description("Router: requests a concurrency limit turned away (429 past "
                        + "--queue-timeout-ms): limit=router --max-concurrent-requests, limit=tenant a tenant's max_concurrent_requests").tag("limit", limit);
                return (tag == null ? b : b.tag("tenant", tag)).register(registry);
            });
        }
    }

    private Counter promptTokens(String tenant) {
        Counter.Builder b = Counter.builder(PROMPT_TOKENS).description("Router: prompt tokens of requests that succeeded");
        return (tenant == null ? b : b.tag("tenant", tenant)).register(registry);
    }

    private Counter generationTokens(String tenant) {
        Counter.Builder b = Counter.builder(GENERATION_TOKENS).description("Router: tokens generated for requests that succeeded");
        return (tenant == null ? b : b.tag("tenant", tenant)).register(registry);
    }

    /**
     * A tenant's gauges: its requests being served now (waiting for a slot included, as {@link #RUNNING}'s), and those
     * waiting for one of its slots ({@code max_concurrent_requests}; 0 without a limit), read from {@code tenants}.
     */
    void tenant(String name, Tenants tenants) {
        AtomicInteger n = runningByTenant.computeIfAbsent(name, k -> new AtomicInteger());
        Gauge.builder(TENANT_RUNNING, n, AtomicInteger::get).description("Router: a tenant's requests in the router now, those waiting for its slot included (--tenants-file)")
                .tag("tenant", name).register(registry);
        Gauge.builder(TENANT_WAITING, tenants, t -> t.waiting(name))
                .description("Router: a tenant's requests waiting for one of its slots (its max_concurrent_requests)")
                .tag("tenant", name).register(registry);
        rateLimitedByTenant.put(name, new Counter[]{rateLimitedCounter(name, LIMIT_REQUESTS), rateLimitedCounter(name, LIMIT_TOKENS)});
        refusedCounter(LIMIT_TENANT, name); // its series from the start: any tenant may get a max_concurrent_requests
    }

    private Counter rateLimitedCounter(String tenant, String limit) {
        return Counter.builder(RATE_LIMITED).description("Router: requests a tenant's requests_per_minute or tokens_per_minute turned away "
                + "(429, or 400 for one that could never fit its tokens_per_minute)").tags("tenant", tenant, "limit", limit).register(registry);
    }

    /** A request of {@code tenant} turned away by its {@code limit} ({@link #LIMIT_REQUESTS}, {@link #LIMIT_TOKENS}). */
    void rateLimited(String tenant, String limit) {
        Counter[] c = rateLimitedByTenant.get(tenant);
        if (c != null) c[limit.equals(LIMIT_REQUESTS) ? 0 : 1].increment(); // none: removed by a reload meanwhile
    }

    /**
     * Removes every meter of a tenant gone from the file: the tagged series stay bounded by the file's names. Its requests
     * still under way are counted under {@link #NO_TENANT} when they end ({@link #tag}): none makes a series of it again.
     */
    synchronized void forgetTenant(String name) {
        runningByTenant.remove(name);
        tokensByTenant.remove(name);
        rateLimitedByTenant.remove(name);
        requests.keySet().removeIf(k -> k.endsWith(' ' + name));
        admissionRefused.keySet().removeIf(k -> k.endsWith(' ' + name));
        for (Meter m : registry.find(TENANT_RUNNING).tag("tenant", name).meters()) registry.remove(m);
        for (Meter m : registry.find(TENANT_WAITING).tag("tenant", name).meters()) registry.remove(m);
        for (String counter : new String[]{REQUESTS, PROMPT_TOKENS, GENERATION_TOKENS, RATE_LIMITED, ADMISSION_REFUSED}) {
            for (Meter m : registry.find(counter).tag("tenant", name).meters()) registry.remove(m);
        }
    }

    void started() {
        running.incrementAndGet();
    }

    /**
     * A request that a tenant's key opened, counted as running for that tenant: the count it went into (null: the tenant has
     * none, gone in a reload), which the request takes off when it ends, whatever reloads did meanwhile.
     */
    AtomicInteger tenantStarted(String tenant) {
        AtomicInteger n = runningByTenant.get(tenant);
        if (n != null) n.incrementAndGet();
        return n;
    }

    /** As {@link #finished(String, int, String)}, on a router without tenants. */
    void finished(String route, int status) {
        finished(route, status, null);
    }

    /**
     * One request answered on {@code route} with {@code status} ({@link #CLIENT_CLOSED} when its client went away), of
     * {@code tenant} (null: none, or a router without tenants).
     */
    void finished(String route, int status, String tenant) {
        running.decrementAndGet();
        byStatus.computeIfAbsent(status, k -> new LongAdder()).increment();
        String t = !byTenant ? null : tenant == null ? NO_TENANT : tenant;
        Counter c = requests.get(key(route, status, t));
        if (c == null) {
            synchronized (this) { // a series made only for a tenant still configured (forgetTenant holds this too)
                String tag = byTenant ? tag(tenant) : null;
                c = requests.computeIfAbsent(key(route, status, tag), k -> {
                    Counter.Builder b = Counter.builder(REQUESTS)
                            .description("Router: requests answered, by route and HTTP status (499: the client went away first)")
                            .tags("route", route, "status", Integer.toString(status));
                    return (tag == null ? b : b.tag("tenant", tag)).register(registry);
                });
            }
        }
        c.increment(); // a tenant's removed meanwhile: its count goes with its series
    }

    /** Requests in the router now, from arrival to answer (waiting for a slot included): {@link #RUNNING}'s value. */
    int running() {
        return running.get();
    }

    /** Requests answered since start, by HTTP status, in status order: a copy (no lock; counts a moment apart may differ by one). */
    Map<Integer, Long> answeredByStatus() {
        Map<Integer, Long> out = new TreeMap<>();
        byStatus.forEach((status, n) -> out.put(status, n.sum()));
        return out;
    }

    long promptTokensTotal() {
        return promptTotal.sum();
    }

    long generatedTokensTotal() {
        return generatedTotal.sum();
    }

    /**
     * The requests {@code tenant}'s {@code limit} ({@link #LIMIT_REQUESTS}, {@link #LIMIT_TOKENS}) turned away since its meters
     * were made (the router's start, or the reload that added it), as its {@link #RATE_LIMITED} series; 0 if unknown.
     */
    long rateLimitedCount(String tenant, String limit) {
        Counter[] c = rateLimitedByTenant.get(tenant);
        return c == null ? 0 : (long) c[limit.equals(LIMIT_REQUESTS) ? 0 : 1].count();
    }

    /** A tenant's requests in the router now (waiting for its slot included), as its {@link #TENANT_RUNNING} gauge; 0 if unknown. */
    int tenantRunning(String name) {
        AtomicInteger n = runningByTenant.get(name);
        return n == null ? 0 : n.get();
    }

    private static String key(String route, int status, String tenant) {
        return route + ' ' + status + (tenant == null ? "" : " " + tenant);
    }

    /** The {@code tenant} tag of a request of {@code tenant} (null: none): {@link #NO_TENANT} unless it is configured now. Under this. */
    private String tag(String tenant) {
        return tenant != null && runningByTenant.containsKey(tenant) ? tenant : NO_TENANT;
    }

    void firstToken(long sinceArrivalNanos) {
        ttft.record(sinceArrivalNanos, TimeUnit.NANOSECONDS);
        recentTtft.record(sinceArrivalNanos);
    }

    void succeeded(long sinceArrivalNanos, int prompt, int generated) {
        succeeded(sinceArrivalNanos, prompt, generated, null);
    }

    /** A request that succeeded: its latency, and its tokens (on a router with tenants, counted for {@code tenant}). */
    void succeeded(long sinceArrivalNanos, int prompt, int generated, Tenants.Tenant tenant) {
        e2e.record(sinceArrivalNanos, TimeUnit.NANOSECONDS);
        recentE2e.record(sinceArrivalNanos);
        promptTotal.add(prompt);
        generatedTotal.add(generated);
        Counter p = promptTokens, g = generationTokens;
        if (byTenant) {
            Counter[] c = tokensByTenant.get(tenant == null ? NO_TENANT : tenant.name);
            if (c == null) {
                synchronized (this) { // as finished: no series for a tenant gone
                    c = tokensByTenant.computeIfAbsent(tag(tenant == null ? null : tenant.name), k -> new Counter[]{promptTokens(k), generationTokens(k)});
                }
            }
            p = c[0];
            g = c[1];
        }
        p.increment(prompt);
        g.increment(generated);
    }
}
