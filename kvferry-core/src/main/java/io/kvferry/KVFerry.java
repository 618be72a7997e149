package io.kvferry;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.conn.DecodeKVManager;
import io.kvferry.conn.FakeKVManager;
import io.kvferry.conn.PrefillKVManager;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;

import java.util.List;

/**
 * Entry point of the library: the equivalent of SGLang's {@code get_kv_class(backend, …)} factory.
 * Backends are chosen by name, as {@code --disaggregation-transfer-backend} does.
 */
public final class KVFerry {
    private KVFerry() {}

    /** Backend names this build serves. */
    public static final List<String> BACKENDS = List.of("tcp", "inproc", "fake");

    /**
     * Creates the KV manager of one rank.
     *
     * @param backend tcp (bytes over the control TCP connection), inproc (same JVM: direct memory copy),
     *                or fake (nothing moves; requests succeed)
     */
    public static KVManager createManager(String backend, KVArgs args, DisaggregationMode mode, KVManagerConfig config) {
        return switch (backend) {
            case "tcp", "inproc" -> mode == DisaggregationMode.PREFILL
                    ? new PrefillKVManager(args, config, backend)
                    : new DecodeKVManager(args, config, backend);
            case "fake" -> new FakeKVManager(mode);
            default -> throw new IllegalArgumentException("unknown transfer backend '" + backend + "'; choose one of " + BACKENDS);
        };
    }

    /** Starts the bootstrap registry of a prefill instance ({@code KVBootstrapServer(host, port)}). */
    public static KVBootstrapServer startBootstrapServer(String host, int port, String authToken) {
        return BootstrapRegistryServer.start(host, port, RegistryOptions.defaults(authToken));
    }
}
