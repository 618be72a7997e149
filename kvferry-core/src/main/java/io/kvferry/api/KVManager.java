package io.kvferry.api;

import java.util.List;

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

    /** Prefill only: a sender for one request. */
    KVSender createSender(String bootstrapAddr, long bootstrapRoom, List<Integer> destTpRanks, int ppRank,
                          boolean reqHasDisaggPrefillDpRank);

    default KVSender createSender(String bootstrapAddr, long bootstrapRoom) {
        return createSender(bootstrapAddr, bootstrapRoom, List.of(), 0, false);
    }

    /** Decode only: a receiver for one request. */
    KVReceiver createReceiver(String bootstrapAddr, long bootstrapRoom);

    /** The name of the backend serving this manager (tcp, inproc, fake). */
    String backend();

    @Override
    default void close() {
        teardown();
    }
}
