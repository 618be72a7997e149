package io.kvferry.decode;

import io.kvferry.registry.PrefillServerInfo;
import io.kvferry.registry.RegistryNotReadyException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * SGLang's {@code _resolve_prefill_dp_rank} without a registry call on the scheduler thread: the
 * router's hint; 0 without attention-DP; {@code room % dp_size} when the prefill follows the bootstrap
 * room; else the registry's {@code POST /query_dp_ranks}. Whatever needs the registry (the prefill's
 * topology, the rooms' DP groups) is asked by a lookup thread per bootstrap address, which batches
 * every room waiting at the time into one query, as SGLang's decode batches its pending requests;
 * the caller gets -1 ("not known yet, ask again") until the answer is in. So a slow or silent
 * registry holds up the rooms that need it, never the scheduler (before, each call could block it
 * for the registry's request timeout).
 *
 * <p>A room is asked about for as long as the scheduler keeps asking: one it has not asked about
 * for {@link #FORGET} (it gave up on the request) is dropped, answered or not. A prefill still
 * registering its ranks (503) is "not known yet" too, for up to the manager's prefill info timeout
 * (then it is a failure, as SGLang gives up after 15 tries). Any other failed lookup (registry unreachable,
 * silent, refusing) is thrown once, to the next caller for that address, and tried again on a call
 * after {@link #RETRY_PAUSE}.
 * Lookup threads ({@link LookupThreads}): one per address with rooms waiting, living while it has work.
 */
final class DpRankResolver {
    /** Between two queries for rooms the prefill has not published yet, and after a failed lookup. */
    static final Duration RETRY_PAUSE = Duration.ofMillis(100);
    /** A room not asked about for this long is no longer looked up (the scheduler gave up on it). */
    static final Duration FORGET = Duration.ofSeconds(10);
    /** Rooms per {@code /query_dp_ranks} body: ~21 KB, a third of the registry's body limit. */
    static final int MAX_ROOMS_PER_QUERY = 1024;

    private final LinkDirectory directory;
    /** How long a prefill may stay "still registering" before that is a failure (SGLang gives up after 15 tries). */
    private final long notReadyLimitNanos;
    private final ConcurrentHashMap<String, Address> addresses = new ConcurrentHashMap<>();
    /** The lookup threads, interrupted and joined by {@link #close}. */
    private final LookupThreads lookups;

    /** @param notReadyLimit the manager's {@code prefillInfoTimeout}: how long a prefill that registers only some ranks is waited for */
    DpRankResolver(LinkDirectory directory, int engineRank, Duration notReadyLimit) {
        this.directory = directory;
        this.notReadyLimitNanos = notReadyLimit.toNanos();
        this.lookups = new LookupThreads("kvferry-decode-dp-lookup-" + engineRank);
    }

    /** A room waiting for its DP group: when the scheduler last asked, and the answer once known (-1 before). */
    private static final class Wanted {
        volatile long askedAt;
        volatile int dp = -1;

        Wanted(long now) {
            askedAt = now;
        }
    }

    /** One bootstrap address: its waiting rooms, whether its lookup thread runs, and its last failure. */
    private static final class Address {
        final String addr;
        final ConcurrentHashMap<Long, Wanted> rooms = new ConcurrentHashMap<>();
        final AtomicBoolean running = new AtomicBoolean();
        /** The last lookup's failure, not yet handed to a caller. */
        final AtomicReference<RuntimeException> failure = new AtomicReference<>();
        volatile long failedAt;
        /** When lookups first found the prefill still registering its ranks; 0 while it is not. Lookup thread only. */
        long notReadySince;

        Address(String addr) {
            this.addr = addr;
            this.failedAt = System.nanoTime() - RETRY_PAUSE.toNanos(); // never failed: a lookup may start at once
        }
    }

    /**
     * The DP group of {@code room} at {@code addr}, or -1 while it is not known yet; never blocks on
     * the registry. Throws a lookup's failure (registry unreachable, silent or refusing) once, to the
     * first call after it.
     */
    int resolve(String addr, long room, Integer hint) {
        if (hint != null) return hint;
        if (lookups.closed()) throw new IllegalStateException("the decode KV manager was torn down");
        PrefillServerInfo info = directory.cachedTopology(addr);
        if (info != null && (info.dpSize() <= 1 || info.followBootstrapRoom())) { // the common case: one map read
            Address known = addresses.get(addr);
            if (known != null && !known.rooms.isEmpty()) known.rooms.remove(room); // asked before the topology was known
            return info.dpSize() <= 1 ? 0 : (int) Math.floorMod(room, (long) info.dpSize());
        }
        Address a = addresses.computeIfAbsent(addr, Address::new);
        long now = System.nanoTime();
        Wanted w = a.rooms.computeIfAbsent(room, r -> new Wanted(now));
        w.askedAt = now;
        int dp = w.dp;
        if (dp >= 0) {
            a.rooms.remove(room, w);
            return dp;
        }
        RuntimeException failed = a.failure.getAndSet(null);
        if (failed != null) throw failed;
        if (now - a.failedAt >= RETRY_PAUSE.toNanos() && a.running.compareAndSet(false, true)) start(a);
        return -1;
    }

    private void start(Address a) {
        boolean started = lookups.start(() -> {
            try {
                lookUp(a);
            } finally {
                a.running.set(false); // a room that came in after the last pass is asked for by its next call
            }
        });
        if (!started) a.running.set(false);
    }

    /** Fetches the topology, then queries the waiting rooms in batches until none is left unanswered (lookup thread). */
    private void lookUp(Address a) {
        while (!lookups.closed() && !Thread.currentThread().isInterrupted()) {
            if (waiting(a).isEmpty()) return;
            try {
                PrefillServerInfo info = directory.topology(a.addr);
                a.notReadySince = 0;
                if (info.dpSize() <= 1 || info.followBootstrapRoom()) return; // callers answer from the topology now
                List<Long> ask = waiting(a); // again: with the rooms that came while the topology was fetched
                if (ask.isEmpty()) return;
                Map<Long, Integer> answers = directory.queryDpRanks(a.addr, ask);
                for (Map.Entry<Long, Integer> e : answers.entrySet()) {
                    Wanted w = a.rooms.get(e.getKey());
                    if (w != null && e.getValue() >= 0) w.dp = e.getValue(); // a group beyond dp_size fails in the route's check
                }
                if (answers.size() >= ask.size()) continue; // all answered: look again for rooms that came meanwhile
            } catch (RegistryNotReadyException e) {
                // The prefill is still registering its ranks: not known yet, as for an unpublished room, for a while.
                long now = System.nanoTime();
                if (a.notReadySince == 0) a.notReadySince = now;
                if (now - a.notReadySince >= notReadyLimitNanos) {
                    a.notReadySince = 0;
                    fail(a, new RegistryNotReadyException(e.getMessage() + " (still so after "
                            + notReadyLimitNanos / 1_000_000 + " ms, the prefill info timeout)", e.responseBody()));
                    return;
                }
            } catch (RuntimeException e) {
                if (!lookups.closed()) fail(a, e);
                return;
            }
            LockSupport.parkNanos(RETRY_PAUSE.toNanos()); // the prefill has not published the others yet
        }
    }

    private static void fail(Address a, RuntimeException e) {
        a.failedAt = System.nanoTime();
        a.failure.set(e);
    }

    /** Up to a query's worth of rooms still waiting for their group; forgets those nobody asked about for {@link #FORGET}. */
    private static List<Long> waiting(Address a) {
        List<Long> ask = new ArrayList<>();
        long now = System.nanoTime();
        for (Map.Entry<Long, Wanted> e : a.rooms.entrySet()) {
            Wanted w = e.getValue();
            if (now - w.askedAt > FORGET.toNanos()) a.rooms.remove(e.getKey(), w);
            else if (w.dp < 0 && ask.size() < MAX_ROOMS_PER_QUERY) ask.add(e.getKey());
        }
        return ask;
    }

    /** Starts no more lookups and ends those under way (interrupted), waiting up to {@code joinMillis} for them in all. */
    void close(long joinMillis) {
        lookups.close(joinMillis);
    }
}
