package io.kvferry.testkit;


import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;

/**
 * The deterministic request stream both roles derive from the same options, so separate prefill
 * and decode processes agree on rooms, lengths and prefixes without talking to each other.
 *
 * @param requests     number of requests
 * @param promptTokens nominal prompt length; each request is up to one page shorter, so last pages are partial
 * @param pageSize     tokens per page
 * @param chunkTokens  chunked-prefill size (a multiple of the page size after rounding down)
 * @param concurrency  requests in flight per rank
 * @param prefixEvery  every n-th request has a decode prefix (0: none)
 * @param seed         randomness of rooms, lengths and page layouts
 * @param warmup       requests run (and verified) before the measured ones and left out of every
 *                     timing figure: the first requests pay for JIT compilation, connection set-up
 *                     and first-touch page faults. The stream holds {@code warmup + requests}.
 */
public record Workload(int requests, int promptTokens, int pageSize, int chunkTokens, int concurrency,
                       int prefixEvery, long seed, int warmup) {

    /** Without warm-up requests. */
    public Workload(int requests, int promptTokens, int pageSize, int chunkTokens, int concurrency, int prefixEvery, long seed) {
        this(requests, promptTokens, pageSize, chunkTokens, concurrency, prefixEvery, seed, 0);
    }

    /**
     * @param room         bootstrap room (unique, in [1, 2^63))
     * @param tokens       prompt length
     * @param prefixTokens tokens the decode already holds (a page multiple)
     */
    public record Request(int index, long room, int tokens, int prefixTokens) {
        public int pagesToSend(int pageSize) {
            return (tokens - prefixTokens + pageSize - 1) / pageSize;
        }

        public int prefixPages(int pageSize) {
            return prefixTokens / pageSize;
        }
    }

    public Workload {
        if (requests < 1) throw new IllegalArgumentException("--requests must be >= 1");
        if (pageSize < 1) throw new IllegalArgumentException("--page-size must be >= 1");
        if (promptTokens < 1) throw new IllegalArgumentException("--prompt-tokens must be >= 1");
        if (concurrency < 1) throw new IllegalArgumentException("--concurrency must be >= 1");
        if (chunkTokens < pageSize) throw new IllegalArgumentException("--chunk-tokens must be >= --page-size");
        if (warmup < 0) throw new IllegalArgumentException("--warmup must be >= 0");
        if ((long) requests + warmup > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("--requests " + requests + " plus --warmup " + warmup + " is more than " + Integer.MAX_VALUE
                    + " requests");
        }
        long pool = poolPages(concurrency, promptTokens, pageSize);
        if (pool > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("--concurrency " + concurrency + " requests of --prompt-tokens " + promptTokens
                    + " in pages of " + pageSize + " tokens need a pool of " + pool + " pages per rank, more than "
                    + Integer.MAX_VALUE + ": lower --concurrency or --prompt-tokens");
        }
    }

    /** Pages one rank's pool needs, computed without overflow (the constructor refuses more than an int). */
    private static long poolPages(int concurrency, int promptTokens, int pageSize) {
        long perRequest = ((long) promptTokens + pageSize - 1) / pageSize, inFlight = concurrency * perRequest;
        return inFlight + Math.max(8, inFlight / 4);
    }

    /** Warm-up plus measured requests: the length of {@link #generate()}. */
    public int totalRequests() {
        return warmup + requests;
    }

    /** Whether a request (by its index in the stream) is a warm-up one. */
    public boolean isWarmup(Request r) {
        return r.index() < warmup;
    }

    public List<Request> generate() {
        SplittableRandom rnd = new SplittableRandom(seed);
        Set<Long> rooms = new HashSet<>();
        List<Request> out = new ArrayList<>(totalRequests());
        for (int i = 0; i < totalRequests(); i++) {
            long room;
            do {
                room = rnd.nextLong(1, Long.MAX_VALUE);
            } while (!rooms.add(room));
            int tokens = Math.max(1, promptTokens - rnd.nextInt(pageSize));
            int prefix = 0;
            if (prefixEvery > 0 && i % prefixEvery == prefixEvery - 1) {
                int fullPages = tokens / pageSize;
                if ((i / prefixEvery) % 3 == 0 && fullPages > 0) {
                    // Decode already holds the whole prompt: prefill's last chunk has zero pages (state + aux only).
                    tokens = fullPages * pageSize;
                    prefix = tokens;
                } else {
                    prefix = fullPages == 0 ? 0 : rnd.nextInt(fullPages) * pageSize;
                }
            }
            out.add(new Request(i, room, tokens, prefix));
        }
        return out;
    }

    public int maxPagesPerRequest() {
        return (int) (((long) promptTokens + pageSize - 1) / pageSize);
    }

    /** Pages one rank's pool needs: room for every in-flight request plus slack. */
    public int poolPages() {
        return (int) poolPages(concurrency, promptTokens, pageSize);
    }

    public int chunkPages() {
        return Math.max(1, chunkTokens / pageSize);
    }
}
