package io.kvferry.api;

/**
 * Per-request transfer figures (SGLang's {@code KVTransferMetric}). A null field means the
 * backend could not isolate that figure.
 *
 * @param transferLatencySeconds first byte handed to the transport (or metadata sent, on decode) to Success
 * @param allocLatencySeconds    time spent waiting for destination allocation, when known
 * @param transferTotalBytes     bytes moved for the request by this rank (KV + state + aux)
 * @param transport              the data path(s) the request's bytes took (tcp, inproc, shm, ucx; several
 *                               joined by '+' when its prefill ranks used different ones), or null
 */
public record KVTransferMetric(Double transferLatencySeconds, Double allocLatencySeconds, Long transferTotalBytes,
                               String transport) {
    public static final KVTransferMetric EMPTY = new KVTransferMetric(null, null, null, null);

    public KVTransferMetric(Double transferLatencySeconds, Double allocLatencySeconds, Long transferTotalBytes) {
        this(transferLatencySeconds, allocLatencySeconds, transferTotalBytes, null);
    }
}
