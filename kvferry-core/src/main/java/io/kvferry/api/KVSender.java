package io.kvferry.api;

/**
 * The prefill side of one request on one rank (SGLang's {@code BaseKVSender}). Created by
 * {@link KVManager#createSender}. Called from the prefill scheduler thread; {@link #send} never
 * blocks on the network.
 */
public interface KVSender {
    /** Records how many pages will be sent in total and the metadata (aux) row; sends nothing. */
    void init(int numKvIndices, int auxIndex);

    /** As {@link #init(int, int)} for a request without an aux row. */
    default void init(int numKvIndices) {
        init(numKvIndices, -1);
    }

    /**
     * Enqueues one chunk: the next {@code kvIndices.length} pages of the request, in order. The
     * chunk that reaches the page count given to {@link #init} is the last one; it also carries the
     * state (at {@code stateIndices}, one index array per state component) and the aux row. A send()
     * after the last chunk is refused with an IllegalStateException (the room is left as it is): its
     * decode may have reused those pages, rows and slots by then.
     *
     * @param numKvTokens exact token count of this chunk when the last page is partial; null if unknown
     */
    void send(int[] kvIndices, int[][] stateIndices, Integer numKvTokens);

    default void send(int[] kvIndices, int[][] stateIndices) {
        send(kvIndices, stateIndices, null);
    }

    default void send(int[] kvIndices) {
        send(kvIndices, null, null);
    }

    /**
     * Returns and forgets the prefix length (tokens) that decode already holds; 0 if none, or if the
     * decode's metadata has not come yet (a later call then returns it).
     */
    int popDecodePrefixLen();

    /** Whether a chunk of this many pages should be sent; a zero-page last chunk still carries state and aux. */
    default boolean shouldSendKvChunk(int numPages, boolean lastChunk) {
        return numPages > 0 || lastChunk;
    }

    KVTransferMetric getTransferMetric();

    KVPoll poll();

    /** Throws the {@link KVTransferException} describing why this room failed. */
    void failureException();

    /** Drops this room's bookkeeping. A cleared room is never resurrected. */
    void clear();

    /**
     * Fails the room with "Aborted by AbortReq."; queued chunks are skipped. After Success too, as
     * SGLang's (poll() then returns Failed), but on this rank only: the decode keeps its completed room.
     */
    void abort();

    long bootstrapRoom();
}
