package io.kvferry.testkit;


import java.util.AbstractList;
import java.util.Arrays;
import java.util.List;
import java.util.RandomAccess;

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
 * @param dpRoundRobin with attention-DP on the prefill: request {@code i} goes to group {@code i % dp}
 *                     and the prefill publishes each room's group in the registry, where the decode
 *                     looks it up ({@code /register_dp_rank}, {@code /query_dp_ranks}: SGLang's
 *                     balancers other than follow_bootstrap_room); false: group {@code room % dp}, which
 *                     the decode computes (follow_bootstrap_room)
 */
public record Workload(int requests, int promptTokens, int pageSize, int chunkTokens, int concurrency,
                       int prefixEvery, long seed, int warmup, boolean dpRoundRobin) {

    /** DP groups follow the room (follow_bootstrap_room). */
    public Workload(int requests, int promptTokens, int pageSize, int chunkTokens, int concurrency, int prefixEvery, long seed,
                    int warmup) {
        this(requests, promptTokens, pageSize, chunkTokens, concurrency, prefixEvery, seed, warmup, false);
    }

    /** The same stream with requests spread over the prefill's DP groups round robin, looked up through the registry. */
    public Workload withDpRoundRobin(boolean on) {
        return new Workload(requests, promptTokens, pageSize, chunkTokens, concurrency, prefixEvery, seed, warmup, on);
    }

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

    /**
     * The stream: {@link #totalRequests()} requests, each computed from the seed and its index when
     * read (so a run of 10^8 requests holds no list of them; building one took ~30 s and GBs). Rooms
     * are distinct by construction: a keyed permutation of [1, 2^63) applied to the index.
     */
    public List<Request> generate() {
        return new Stream();
    }

    /**
     * The requests one attention-DP group serves ({@code room % dpSize == dpGroup}, or {@code index % dpSize}
     * with {@link #dpRoundRobin}), in stream order: the stream itself for one group, else the stream's
     * matching indices (4 bytes each).
     */
    public List<Request> ofDpGroup(int dpGroup, int dpSize) {
        if (dpSize <= 1) return generate();
        int[] mine = new int[totalRequests() / dpSize + 16];
        int n = 0;
        for (int i = 0; i < totalRequests(); i++) {
            long group = dpRoundRobin ? i % dpSize : Math.floorMod(room(i), (long) dpSize);
            if (group != dpGroup) continue;
            if (n == mine.length) mine = Arrays.copyOf(mine, mine.length + mine.length / 2 + 16);
            mine[n++] = i;
        }
        int[] indices = Arrays.copyOf(mine, n);
        return new Indexed(indices);
    }

    /** Request {@code index} of the stream (0-based). */
    public Request request(int index) {
        if (index < 0 || index >= totalRequests()) {
            throw new IndexOutOfBoundsException("request " + index + " of a stream of " + totalRequests());
        }
        long r = mix(seed ^ (index * 0x9E3779B97F4A7C15L)); // the index's own randomness
        int tokens = Math.max(1, promptTokens - (int) Long.remainderUnsigned(r, pageSize));
        int prefix = 0;
        if (prefixEvery > 0 && index % prefixEvery == prefixEvery - 1) {
            int fullPages = tokens / pageSize;
            if ((index / prefixEvery) % 3 == 0 && fullPages > 0) {
                // Decode already holds the whole prompt: prefill's last chunk has zero pages (state + aux only).
                tokens = fullPages * pageSize;
                prefix = tokens;
            } else {
                prefix = fullPages == 0 ? 0 : (int) Long.remainderUnsigned(mix(r), fullPages) * pageSize;
            }
        }
        return new Request(index, room(index), tokens, prefix);
    }

    private static final long LOW63 = Long.MAX_VALUE;

    /**
     * Request {@code index}'s room: a permutation of [1, 2^63) keyed by the seed, so distinct indices
     * never share a room. The steps (add, xorshift, multiply by an odd constant, all mod 2^63) are each
     * one-to-one on [0, 2^63); an image outside [1, 2^63), that is 0, is walked on through the same
     * permutation until it lands inside (cycle walking), which keeps it one-to-one on [1, 2^63).
     */
    long room(int index) {
        long x = index + 1L;
        do {
            x = permute63(x);
        } while (x == 0);
        return x;
    }

    private long permute63(long x) {
        long k = mix(seed);
        x = (x + k) & LOW63;
        x ^= x >>> 31;
        x = (x * 0x7FB5D329728EA185L) & LOW63;
        x ^= x >>> 27;
        x = (x * 0x81DADEF4BC2DD44DL) & LOW63;
        x ^= x >>> 33;
        return (x + (k >>> 1)) & LOW63;
    }

    /** SplitMix64's finaliser: a well-spread 64-bit value from any input. */
    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Some of the stream's requests, by index, computed when read. */
    private final class Indexed extends AbstractList<Request> implements RandomAccess {
        private final int[] indices;

        Indexed(int[] indices) {
            this.indices = indices;
        }

        @Override
        public Request get(int i) {
            return request(indices[i]);
        }

        @Override
        public int size() {
            return indices.length;
        }
    }

    /** The stream as a list whose elements are computed when read. */
    private final class Stream extends AbstractList<Request> implements RandomAccess {
        @Override
        public Request get(int index) {
            return request(index);
        }

        @Override
        public int size() {
            return totalRequests();
        }
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
