package io.kvferry.api;

/**
 * The decode side of one request on one rank (SGLang's {@code BaseKVReceiver}). Created by
 * {@link KVManager#createReceiver}. Called from the decode scheduler thread. An engine may hand a
 * failed room's {@link #failureException()} and {@link #clear()} (which waits until no write of the
 * room can land: seconds when its prefill hangs) to another thread once its scheduler no longer calls
 * this receiver, as the reference decode engine does, unless it turned the manager's change feed on:
 * the feed's handles belong to the scheduler thread.
 */
public interface KVReceiver {
    /**
     * Starts resolving the prefill ranks to talk to and registering this rank's buffers with them
     * (once per prefill rank), and returns without waiting for any peer: {@link #poll()} answers
     * Bootstrapping until that is done, then WaitingForInput (at once when an earlier room of the
     * same prefill instance and DP group already did it), or Failed naming why. Registry lookups
     * and link set-up run on a resolver thread, so a silent prefill never holds the caller. A bootstrap
     * address that cannot be a registry address (null, not {@code host:port}) fails the room at once
     * ({@code bad_request}), naming it.
     */
    void init(int prefillDpRank);

    /**
     * Tells every target prefill rank where this request's KV goes.
     *
     * @param kvIndices       destination page ids, in token order, after the decode prefix
     * @param auxIndex        destination metadata row, or -1 for none
     * @param stateIndices    destination indices per state component, or null
     * @param decodePrefixLen tokens decode already holds (prefill skips them), or 0
     */
    void sendMetadata(int[] kvIndices, int auxIndex, int[][] stateIndices, int decodePrefixLen);

    default void sendMetadata(int[] kvIndices, int auxIndex) {
        sendMetadata(kvIndices, auxIndex, null, 0);
    }

    KVPoll poll();

    /** Throws the {@link KVTransferException} describing why this room failed. */
    void failureException();

    /** Drops this room's bookkeeping. */
    void clear();

    /** Fails the room with "Aborted by AbortReq." and tells the prefill ranks. */
    void abort();

    /** Bytes that landed for this request on this rank, and metadata-sent → Success latency. */
    KVTransferMetric getTransferMetric();

    long bootstrapRoom();
}
