package io.kvferry.api;

/**
 * The bootstrap registry of one prefill instance (SGLang's {@code BaseKVBootstrapServer(host, port)}).
 * Prefill ranks register their control endpoints with it; decode ranks look them up.
 * Create one with {@link io.kvferry.registry.BootstrapRegistryServer#start}.
 */
public interface KVBootstrapServer extends AutoCloseable {
    /** The host the server is bound to. */
    String host();

    /** The port the server listens on (the real one when 0 was asked for). */
    int port();

    /** Stops the server; idempotent. */
    @Override
    void close();
}
