package io.kvferry.engine.serving;

import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.Redacted;
import io.micrometer.core.instrument.MeterRegistry;

import java.util.Set;

/**
 * How an engine reaches its peers through kvferry: the transport (tcp, shm, ucx, inproc, auto), the
 * bootstrap registry of the prefill instance (host:port; a decode may leave it null, as its requests name
 * their prefill's), the cluster token, the host its ranks listen on, the process's meter registry
 * its managers record into, and the host a prefill's ranks publish in the registry (null: the listen
 * host; it must be given when that is a wildcard such as 0.0.0.0).
 */
public record TransferSpec(String transport, String bootstrapAddr, String authToken, String listenHost, MeterRegistry meters,
                           String advertiseHost) {
    public TransferSpec(String transport, String bootstrapAddr, String authToken, String listenHost) {
        this(transport, bootstrapAddr, authToken, listenHost, KVManagerConfig.NO_METERS, null);
    }

    public TransferSpec(String transport, String bootstrapAddr, String authToken, String listenHost, MeterRegistry meters) {
        this(transport, bootstrapAddr, authToken, listenHost, meters, null);
    }

    /** This spec with the process's meter registry. */
    public TransferSpec withMeters(MeterRegistry registry) {
        return new TransferSpec(transport, bootstrapAddr, authToken, listenHost, registry, advertiseHost);
    }

    /** This spec with the host its prefill ranks publish (null: the listen host). */
    public TransferSpec withAdvertiseHost(String host) {
        return new TransferSpec(transport, bootstrapAddr, authToken, listenHost, meters, host);
    }

    public TransferSpec {
        if (meters == null) meters = KVManagerConfig.NO_METERS;
        if (transport == null || transport.isBlank()) throw new IllegalArgumentException("transport must be named");
        // A decode may leave it null: each request names its prefill's registry (the router picks the prefill).
        if (bootstrapAddr != null && bootstrapAddr.lastIndexOf(':') <= 0) {
            throw new IllegalArgumentException("bootstrap address must be host:port, got '" + bootstrapAddr + "'");
        }
        if (listenHost == null) listenHost = "127.0.0.1";
    }

    public String bootstrapHost() {
        String h = bootstrapAddr.substring(0, bootstrapAddr.lastIndexOf(':'));
        return h.startsWith("[") && h.endsWith("]") ? h.substring(1, h.length() - 1) : h;
    }

    public int bootstrapPort() {
        String p = bootstrapAddr.substring(bootstrapAddr.lastIndexOf(':') + 1);
        try {
            return Integer.parseInt(p);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bootstrap port must be a number, got '" + p + "' in " + bootstrapAddr);
        }
    }

    /** Decode pools go in shared memory when a same-host prefill may write them directly. */
    public boolean sharedDecodePools() {
        return "shm".equals(transport) || "auto".equals(transport);
    }

    /** Hides the cluster token, so the config can be logged or put in a message. */
    @Override
    public String toString() {
        return Redacted.toString(this, Set.of("authToken"));
    }
}
