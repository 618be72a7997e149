package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVTransferException;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillServerInfo;
import io.kvferry.registry.RegistryNotReadyException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;

/**
 * SGLang's {@code _resolve_prefill_dp_rank} without a registry call on the scheduler thread: the
 * router's hint; 0 without attention-DP; {@code room % dp_size} when the prefill follows the bootstrap
 * room; else the registry's {@code POST /query_dp_ranks}. Whatever needs the registry (the prefill's
 * topology, the rooms' DP groups) is asked by a lookup thread per bootstrap address, which batches
 * every room waiting at the time into one query, as SGLang's decode batches its pending requests;
 * the caller gets -1 ("not known yet, ask again") until the answer is in — also for the first rooms
 * of a prefill whose topology is not cached yet, whatever its DP size. So a slow or silent registry
 * holds up the rooms that need it, never the scheduler (before, each call could block it for the
 * registry's request timeout).
 *
 * <p>A room is asked about for as long as the scheduler keeps asking: one it has not asked about
 * for {@link #FORGET} (it gave up on the request) is dropped, answered or not. A prefill still
 * registering its ranks (503) is "not known yet" too, for up to the manager's prefill info timeout
 * (then it is a failure, as SGLang gives up after 15 tries); so is a room whose group the prefill has not
 * published within that time while it published no other room (dead, or it never took the request), or
 * within four times that while it kept publishing others (alive but far behind). A failed lookup (that, or the registry
 * unreachable, silent or refusing) fails every room waiting for it: each is thrown the failure once,
 * on its next ask; rooms asked for later start a fresh lookup, {@link #RETRY_PAUSE} after the failure.
 * Lookup threads ({@link LookupThreads}): one per address with rooms waiting, living while it has work.
 */
final class DpRankResolver {
    /** Between two queries when the last one answered none of its rooms, and after a failed lookup. */
    static final Duration RETRY_PAUSE = Duration.ofMillis(100);
    /**
     * Between two queries when the last one answered some of its rooms: the prefill is publishing, so
     * the rest are likely moments away (SGLang's decode asks once per scheduler iteration). Bounds the
     * queries to ~1,000/s per address, each for every room waiting.
     */
    static final Duration PROGRESS_PAUSE = Duration.ofMillis(1);
    /** A room not asked about for this long is no longer looked up (the scheduler gave up on it). */
    static final Duration FORGET = Duration.ofSeconds(10);
    /** Rooms per {@code /query_dp_ranks} body: ~21 KB, a third of the registry's body limit. */
    static final int MAX_ROOMS_PER_QUERY = 1024;
    /** A room not put in a query yet (sorts first). */
    private static final long NEVER = Long.MIN_VALUE;

    private final LinkDirectory directory;
    /** How long a prefill may stay "still registering" before that is a failure (SGLang gives up after 15 tries). */
    private final long notReadyLimitNanos;
    private final ConcurrentHashMap<String, Address> addresses = new ConcurrentHashMap<>();
    /** The lookup threads, interrupted and joined at teardown. */
    final LookupThreads lookups;

    /** @param notReadyLimit the manager's {@code prefillInfoTimeout}: how long a prefill that registers only some ranks is waited for */
    DpRankResolver(LinkDirectory directory, int engineRank, Duration notReadyLimit) {
        this.directory = directory;
        this.notReadyLimitNanos = notReadyLimit.toNanos();
        this.lookups = new LookupThreads("kvferry-decode-dp-lookup-" + engineRank);
    }

    /**
     * A room waiting for its DP group: when the scheduler last asked, when it was last put in a query,
     * and the answer once known (-1 before), or the failure of the lookup it waited for.
     */
    private static final class Wanted {
        final long room;
        /** Lookup thread only: when the room was first put in a query (its wait for publication counts from there). */
        long firstQueriedAt = NEVER;
        volatile long askedAt;
        /** Lookup thread only: rooms put in a query least recently go first when more than a query's worth wait. */
        long queriedAt = NEVER;
        volatile int dp = -1;
        volatile RuntimeException failure;

        Wanted(long room, long now) {
            this.room = room;
            this.askedAt = now;
        }
    }

    /** One bootstrap address: its waiting rooms, whether its lookup thread runs, and when its last lookup failed. */
    private static final class Address {
        final String addr;
        final ConcurrentHashMap<Long, Wanted> rooms = new ConcurrentHashMap<>();
        final AtomicBoolean running = new AtomicBoolean();
        volatile long failedAt;
        /** Lookup threads only (handed over through {@link #running}): when a query last answered a room. */
        long lastAnswerNanos;

        Address(String addr, long notReadyLimitNanos) {
            this.addr = addr;
            long now = System.nanoTime();
            this.failedAt = now - RETRY_PAUSE.toNanos(); // never failed: a lookup may start at once
            this.lastAnswerNanos = now - notReadyLimitNanos; // no answer yet
        }
    }

    /**
     * The DP group of {@code room} at {@code addr}, or -1 while it is not known yet; never blocks on
     * the registry. Throws the failure of the lookup the room waited for, once.
     */
    int resolve(String addr, long room, Integer hint) {
        if (hint != null) return hint;
        if (lookups.closed()) throw new IllegalStateException("the decode KV manager was torn down");
        if (addr == null) throw new IllegalArgumentException("room " + room + ": " + BootstrapClient.addressProblem(null));
        PrefillServerInfo info = directory.cachedTopology(addr);
        if (info != null && answersItself(info)) { // the common case: one map read
            Address known = addresses.get(addr);
            if (known != null && !known.rooms.isEmpty()) known.rooms.remove(room); // asked before the topology was known
            return info.dpSize() <= 1 ? 0 : (int) Math.floorMod(room, (long) info.dpSize());
        }
        Address a = addresses.get(addr);
        if (a == null) {
            String malformed = BootstrapClient.addressProblem(addr); // once per address: no lookup of it could succeed
            if (malformed != null) throw new IllegalArgumentException("room " + room + ": " + malformed);
            if (addresses.size() >= directory.maxAddresses) forgetAddresses();
            a = addresses.computeIfAbsent(addr, x -> new Address(x, notReadyLimitNanos));
        }
        long now = System.nanoTime();
        Wanted w = a.rooms.computeIfAbsent(room, r -> new Wanted(r, now));
        w.askedAt = now;
        int dp = w.dp;
        if (dp >= 0) {
            a.rooms.remove(room, w);
            return dp;
        }
        RuntimeException failed = w.failure;
        if (failed != null) {
            a.rooms.remove(room, w); // thrown once: a later ask for the room starts afresh
            throw failed;
        }
        if (now - a.failedAt >= RETRY_PAUSE.toNanos() && a.running.compareAndSet(false, true)) start(a);
        return -1;
    }

    /**
     * Bounds {@link #addresses} as the directory bounds its maps ({@link LinkDirectory#MAX_ADDRESSES}): an entry per address
     * ever seen would grow without end. The idle ones go (no room waiting, no lookup running: nothing is lost, an entry is
     * made again on demand); if that leaves the map full, all go: a lookup still running finishes its pass for the rooms
     * it held, whose callers then ask again through a fresh entry (a fresh lookup).
     */
    private void forgetAddresses() {
        addresses.values().removeIf(a -> a.rooms.isEmpty() && !a.running.get());
        if (addresses.size() >= directory.maxAddresses) addresses.clear();
    }

    /** Bootstrap addresses with lookup state held (tests). */
    int addressCount() {
        return addresses.size();
    }

    /** Whether the topology alone gives every room's group (no attention-DP, or follow_bootstrap_room). */
    private static boolean answersItself(PrefillServerInfo info) {
        return info.dpSize() <= 1 || info.followBootstrapRoom();
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
        long notReadySince = 0; // when this thread's lookups started finding the prefill still registering; 0 while not
        while (!lookups.closed() && !Thread.currentThread().isInterrupted()) {
            if (waiting(a).isEmpty()) return;
            try {
                PrefillServerInfo info = directory.topology(a.addr);
                notReadySince = 0;
                if (answersItself(info)) {
                    a.rooms.clear(); // callers answer from the cached topology now
                    return;
                }
                List<Wanted> ask = waiting(a); // again: with the rooms that came while the topology was fetched
                if (ask.isEmpty()) return;
                int answered = query(a, ask);
                if (answered == ask.size()) continue; // all answered: look again for rooms that came meanwhile
                if (answered > 0) {
                    LockSupport.parkNanos(PROGRESS_PAUSE.toNanos());
                    continue;
                }
            } catch (RegistryNotReadyException e) {
                // The prefill is still registering its ranks: not known yet, as for an unpublished room, for a while.
                long now = System.nanoTime();
                if (notReadySince == 0) notReadySince = now;
                if (now - notReadySince >= notReadyLimitNanos) {
                    fail(a, new RegistryNotReadyException(e.getMessage() + " (still so after "
                            + notReadyLimitNanos / 1_000_000 + " ms, the prefill info timeout)", e.responseBody()));
                    return;
                }
            } catch (RuntimeException e) {
                if (!lookups.closed()) fail(a, e);
                return;
            }
            LockSupport.parkNanos(RETRY_PAUSE.toNanos()); // the prefill has published none of them yet
        }
    }

    /** One {@code /query_dp_ranks} for {@code ask}; how many of those rooms got their group. */
    private int query(Address a, List<Wanted> ask) {
        long now = System.nanoTime();
        List<Long> rooms = new ArrayList<>(ask.size());
        for (Wanted w : ask) {
            w.queriedAt = now;
            if (w.firstQueriedAt == NEVER) w.firstQueriedAt = now;
            rooms.add(w.room);
        }
        Map<Long, Integer> answers = directory.queryDpRanks(a.addr, rooms);
        int answered = 0;
        for (Wanted w : ask) { // only the rooms asked for count: the reply is untrusted, it may hold others or nonsense
            Integer dp = answers.get(w.room);
            if (dp == null || dp < 0) continue; // a group beyond dp_size fails in the route's check
            w.dp = dp;
            answered++;
        }
        if (answered > 0) a.lastAnswerNanos = System.nanoTime();
        return answered;
    }

    /** Fails every room waiting now with {@code e} (each is thrown it once), and pauses new lookups. */
    private static void fail(Address a, RuntimeException e) {
        for (Wanted w : a.rooms.values()) {
            if (w.dp < 0) w.failure = e;
        }
        a.failedAt = System.nanoTime();
    }

    /**
     * Up to a query's worth of rooms still waiting for their group, those queried least recently
     * first; forgets those nobody asked about for {@link #FORGET}, and fails those the registry was asked
     * about for the prefill info timeout without an answer (the prefill never took the request, or is
     * gone: without this, a room of a prefill killed before it published the room waited as long as its
     * scheduler kept asking).
     */
    private List<Wanted> waiting(Address a) {
        List<Wanted> ask = new ArrayList<>();
        long now = System.nanoTime();
        for (Wanted w : a.rooms.values()) {
            if (now - w.askedAt > FORGET.toNanos()) {
                a.rooms.remove(w.room, w);
            } else if (w.dp < 0 && w.failure == null) {
                long asked = w.firstQueriedAt == NEVER ? 0 : now - w.firstQueriedAt;
                // While the prefill keeps publishing other rooms it is alive and behind (its publisher's posts queue
                // up): wait on, up to four timeouts. A dead prefill publishes nothing: one timeout.
                boolean publishing = now - a.lastAnswerNanos < notReadyLimitNanos;
                if (asked < notReadyLimitNanos || (publishing && asked < 4 * notReadyLimitNanos)) {
                    ask.add(w);
                } else {
                    w.failure = new KVTransferException(w.room, FailureKind.ROUTING, "the prefill at " + a.addr
                            + " did not publish the DP group of room " + w.room + " within " + asked / 1_000_000
                            + " ms (the prefill info timeout " + notReadyLimitNanos / 1_000_000 + " ms" + (publishing
                            ? ", four times over while it published other rooms" : ", publishing no other room meanwhile")
                            + "): it did not take the request, or it is gone", false);
                }
            }
        }
        if (ask.size() > MAX_ROOMS_PER_QUERY) {
            ask.sort(Comparator.comparingLong((Wanted w) -> w.queriedAt));
            return new ArrayList<>(ask.subList(0, MAX_ROOMS_PER_QUERY));
        }
        return ask;
    }

    /** Starts no more lookups and interrupts those under way; teardown then joins {@link #lookups}. */
    void stop() {
        lookups.stop();
    }
}
