package io.kvferry.api;

import java.net.InetSocketAddress;
import java.util.List;
import java.util.Optional;
import java.util.function.Consumer;

/**
 * One per engine rank (SGLang's {@code BaseKVManager}): owns the registered buffers, the control
 * endpoint and the transfer workers, and creates the per-request senders or receivers.
 * Create one with {@link io.kvferry.KVFerry#createManager}.
 */
public interface KVManager extends AutoCloseable {
    DisaggregationMode mode();

    /** Registers this prefill rank's endpoint with its bootstrap server (no-op on decode). */
    void registerToBootstrap();

    /** Whether {@link #teardown()} is supported (runtime PD role switch). */
    default boolean supportsRoleSwitch() {
        return true;
    }

    /** Releases transfer resources (threads, sockets); the caller keeps owning the KV pool memory. */
    void teardown();

    /** Whether decode defers freeing a failed/aborted room's pages until prefill confirms no write is in flight. */
    boolean enableDeferredDecodeKvRelease();

    /**
     * Prefill only: a sender for one request. A room whose sender is still in flight (not cleared) is
     * refused with an IllegalArgumentException, as the decode refuses a second receiver.
     */
    KVSender createSender(String bootstrapAddr, long bootstrapRoom, List<Integer> destTpRanks, int ppRank,
                          boolean reqHasDisaggPrefillDpRank);

    default KVSender createSender(String bootstrapAddr, long bootstrapRoom) {
        return createSender(bootstrapAddr, bootstrapRoom, List.of(), 0, false);
    }

    /** Decode only: a receiver for one request. */
    KVReceiver createReceiver(String bootstrapAddr, long bootstrapRoom);

    /**
     * Turns on the change feed: every sender (prefill) or receiver (decode) created after this call is
     * handed out by {@link #drainChangedSenders} / {@link #drainChangedReceivers} whenever its
     * {@code poll()} may answer something new — its status changed, a deadline its poll checks passed,
     * or it has work only its poll drives (a decode bootstrap retry). A scheduler that polls what a
     * drain hands out, instead of every request it holds, sees what polling them all would show and
     * does work in proportion to what moved, not to how many are in flight. Call it once, on the
     * scheduler thread, before creating the handles it should cover.
     *
     * @return false where this manager has no feed (then poll every handle)
     */
    default boolean enableChangeFeed() {
        return false;
    }

    /**
     * Prefill with the feed on: hands {@code sink} each sender fed since the last drain (at most
     * once per reason; a cleared sender never). Call it on the scheduler thread, each step.
     *
     * @return how many were handed out
     */
    default int drainChangedSenders(Consumer<? super KVSender> sink) {
        throw new UnsupportedOperationException("this manager has no change feed of senders");
    }

    /** Decode with the feed on: as {@link #drainChangedSenders}, for receivers. */
    default int drainChangedReceivers(Consumer<? super KVReceiver> sink) {
        throw new UnsupportedOperationException("this manager has no change feed of receivers");
    }

    /** The name of the backend serving this manager (tcp, inproc, fake). */
    String backend();

    /** This manager's public counters, read without stopping it. */
    KVManagerStats stats();

    /**
     * What this rank is doing (rooms by state with their ages, recent failures, peers), for status
     * pages; walks the room table, so call it when asked (a page refresh), never per request.
     */
    default KVManagerInspection inspect() {
        return KVManagerInspection.minimal(mode(), backend(), stats());
    }

    /** Prefill only: the control endpoint decode ranks connect to (what it registers with its bootstrap server). */
    default Optional<InetSocketAddress> controlEndpoint() {
        return Optional.empty();
    }

    /**
     * Decode only: the prefill DP group holding a room (SGLang's {@code _resolve_prefill_dp_rank}):
     * the router's hint; 0 without attention-DP; {@code room % dp_size} when the prefill follows the
     * bootstrap room; else the registry's answer. Never blocks on the registry: returns -1 while it
     * is not known yet — the prefill's topology not fetched yet (so also for the first rooms of a
     * prefill without attention-DP), the prefill still registering its ranks (for up to
     * {@code prefillInfoTimeout}), or the room not published yet; the lookups run on a thread of
     * their own: ask again on a later scheduler iteration, then call {@link KVReceiver#init} with the
     * answer. A failed lookup (the registry unreachable, silent or refusing, or the prefill still not
     * registered after {@code prefillInfoTimeout}) is thrown once to each room that waited for it, as
     * a RuntimeException naming it; a room whose group the registry has not had for
     * {@code prefillInfoTimeout} (the prefill never took it, or died first) is thrown a
     * {@link KVTransferException} of kind {@code routing}: the room has failed. An address that cannot be a
     * registry address (null, not {@code host:port}) is an IllegalArgumentException naming it, at once.
     *
     * @param hint the request's {@code disagg_prefill_dp_rank}, or null
     */
    default int resolvePrefillDpRank(String bootstrapAddr, long room, Integer hint) {
        if (hint != null) return hint;
        throw new UnsupportedOperationException("only a decode manager resolves prefill DP ranks");
    }

    @Override
    default void close() {
        teardown();
    }
}
