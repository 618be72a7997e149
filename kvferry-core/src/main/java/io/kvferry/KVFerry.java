package io.kvferry;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.Knob;
import io.kvferry.api.Knobs;
import io.kvferry.decode.DecodeKVManager;
import io.kvferry.fake.FakeKVManager;
import io.kvferry.prefill.PrefillKVManager;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import io.kvferry.transport.Backend;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.Transports;

import java.util.ArrayList;
import java.util.List;

/**
 * Entry point of the library: the equivalent of SGLang's {@code get_kv_class(backend, …)} factory.
 * Backends are chosen by name, as {@code --disaggregation-transfer-backend} does.
 */
public final class KVFerry {
    private KVFerry() {}

    /** Backend names this build serves: the built-in ones and every pluggable transport on the class path. */
    public static final List<String> BACKENDS = Backend.names();

    /**
     * Creates the KV manager of one rank.
     *
     * @param backend tcp (bytes over the control TCP connection), inproc (same JVM: direct memory copy),
     *                shm (same host: the prefill copies into the decode's shared-memory pools; the decode
     *                must allocate them with {@link io.kvferry.memory.SharedMemory}), ucx (one-sided puts
     *                through UCX, with the kvferry-ucx module on the class path), auto (shm when the peer
     *                shares the host and the pools are shared, else ucx when available, else tcp), or
     *                fake (nothing moves; requests succeed). A transport the peer cannot use falls back to
     *                tcp with the reason logged; the chosen one is in the transfer metrics.
     */
    public static KVManager createManager(String backend, KVArgs args, DisaggregationMode mode, KVManagerConfig config) {
        Backend b = Backend.of(backend);
        // A null mode made a decode manager of a rank that may have meant to be a prefill.
        if (mode == null) throw new IllegalArgumentException("disaggregation mode is null (PREFILL or DECODE)");
        if (b.kind() == Backend.Kind.FAKE) return new FakeKVManager(mode);
        if (args == null) throw new IllegalArgumentException("KVArgs is null: backend " + b.name() + " needs the rank's buffers");
        if (config == null) throw new IllegalArgumentException("KVManagerConfig is null (KVManagerConfig.builder().build() for the defaults)");
        // Both refused only later, by the registry at registration (a prefill), or never with a message (a decode's HELLO).
        if (args.kvCacheDtypeStr == null || args.kvCacheDtypeStr.isBlank()) {
            throw new IllegalArgumentException("KVArgs.kvCacheDtypeStr is " + (args.kvCacheDtypeStr == null ? "null" : "blank")
                    + ": the KV cache dtype ('auto', 'bf16', 'fp8_e4m3', …) is compared at every handshake");
        }
        if (mode == DisaggregationMode.PREFILL && (args.ppRank < 0 || args.ppRank >= config.ppSize())) {
            throw new IllegalArgumentException("KVArgs.ppRank " + args.ppRank + " is outside [0, pp_size " + config.ppSize() + ")");
        }
        return mode == DisaggregationMode.PREFILL
                ? new PrefillKVManager(args, config, b)
                : new DecodeKVManager(args, config, b);
    }

    /**
     * Every knob of this build: the transfer layer's ({@link Knobs#ALL}) and those of each transport on
     * the class path, for tools that set knobs by name ({@code kvferry --set NAME=VALUE}).
     */
    public static List<Knob> knobs() {
        List<Knob> all = new ArrayList<>(Knobs.ALL);
        for (TransportProvider p : Transports.all()) all.addAll(p.knobs());
        return List.copyOf(all);
    }

    /** Starts the bootstrap registry of a prefill instance ({@code KVBootstrapServer(host, port)}). */
    public static KVBootstrapServer startBootstrapServer(String host, int port, String authToken) {
        return BootstrapRegistryServer.start(host, port, RegistryOptions.defaults(authToken));
    }

    /** A registry with explicit options, e.g. {@link RegistryOptions#withoutAuth()} for clusters whose clients send no token. */
    public static KVBootstrapServer startBootstrapServer(String host, int port, RegistryOptions options) {
        return BootstrapRegistryServer.start(host, port, options);
    }
}
