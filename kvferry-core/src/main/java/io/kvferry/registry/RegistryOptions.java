package io.kvferry.registry;

import io.kvferry.api.Redacted;

import java.time.Duration;
import java.util.Objects;
import java.util.Set;

/**
 * Settings of a {@link BootstrapRegistryServer}.
 *
 * @param authToken      bearer token required by the write routes; null or blank means every write is
 *                       refused (fail closed), never that writes are open
 * @param roomEntryTtl   how long a {@code room -> dp_rank} entry lives; rooms are short-lived, so the
 *                       table must not grow with every request ever served
 * @param openWrites     explicit opt-out of auth ({@code kvferry bootstrap --no-auth}) for clusters whose SGLang
 *                       predates bootstrap auth and sends no {@code Authorization} header: every write is accepted;
 *                       logged as a warning at start. Refused together with a token (one of the two, not both)
 * @param requestTimeout the longest one request may take from its first byte to its response written
 *                       (request line, headers, body, handler, response); a connection still at it then is
 *                       closed, so slow or stalled clients ("slowloris") cannot hold the registry
 * @param maxConnections how many connections may have a request under way at once; a connection that starts
 *                       one beyond this is closed at once without an answer. Connections that have sent nothing
 *                       (new or idle keep-alive) are not counted: they hold no thread
 * @param platformRequestThreads serve each request on a platform thread instead of a virtual one. For a
 *                       registry started by a thread whose OS-level state must not spread to the rest of
 *                       the JVM, such as one inside a network namespace (the chaos harness): a virtual
 *                       thread it starts may make the JVM create a shared carrier thread from it, and that
 *                       carrier (a clone of the starting thread) stays in the namespace, so every virtual
 *                       thread later mounted on it connects from inside. Costs a thread start per request
 */
public record RegistryOptions(String authToken, Duration roomEntryTtl, boolean openWrites,
                              Duration requestTimeout, int maxConnections, boolean platformRequestThreads) {

    /** SGLang's {@code SGLANG_DISAGGREGATION_BOOTSTRAP_ENTRY_CLEANUP_INTERVAL} default. */
    public static final Duration DEFAULT_ROOM_ENTRY_TTL = Duration.ofSeconds(120);
    /** Registrations and lookups are a few hundred bytes on a cluster network: far below this. */
    public static final Duration DEFAULT_REQUEST_TIMEOUT = Duration.ofSeconds(10);
    /** Far above the ranks of one prefill instance (TP × PP × CP × DP registrations plus decode lookups). */
    public static final int DEFAULT_MAX_CONNECTIONS = 1024;
    /** The request gate keeps the timeout in nanoseconds: a longer one would overflow them. */
    public static final Duration MAX_REQUEST_TIMEOUT = Duration.ofMillis(Long.MAX_VALUE / 1_000_000);

    public RegistryOptions {
        Objects.requireNonNull(roomEntryTtl, "roomEntryTtl");
        Objects.requireNonNull(requestTimeout, "requestTimeout");
        if (roomEntryTtl.isNegative() || roomEntryTtl.isZero()) {
            throw new IllegalArgumentException("roomEntryTtl must be > 0, got " + roomEntryTtl);
        }
        if (requestTimeout.toMillis() <= 0) {
            throw new IllegalArgumentException("requestTimeout must be at least 1 ms, got " + requestTimeout);
        }
        if (requestTimeout.compareTo(MAX_REQUEST_TIMEOUT) > 0) {
            throw new IllegalArgumentException("requestTimeout must be at most " + MAX_REQUEST_TIMEOUT.toMillis() + " ms, got "
                    + requestTimeout.toMillis() + " ms");
        }
        if (maxConnections < 1) {
            throw new IllegalArgumentException("maxConnections must be >= 1, got " + maxConnections);
        }
        if (openWrites && authToken != null && !authToken.isBlank()) {
            throw new IllegalArgumentException("an auth token and open writes (--no-auth) exclude each other: drop one");
        }
    }

    public RegistryOptions(String authToken, Duration roomEntryTtl, boolean openWrites,
                           Duration requestTimeout, int maxConnections) {
        this(authToken, roomEntryTtl, openWrites, requestTimeout, maxConnections, false);
    }

    public RegistryOptions(String authToken, Duration roomEntryTtl, boolean openWrites) {
        this(authToken, roomEntryTtl, openWrites, DEFAULT_REQUEST_TIMEOUT, DEFAULT_MAX_CONNECTIONS);
    }

    public RegistryOptions(String authToken, Duration roomEntryTtl) {
        this(authToken, roomEntryTtl, false);
    }

    /** No token, every write accepted: only for clusters whose clients cannot send one. */
    public static RegistryOptions withoutAuth() {
        return new RegistryOptions(null, DEFAULT_ROOM_ENTRY_TTL, true);
    }

    public static RegistryOptions defaults(String authToken) {
        return new RegistryOptions(authToken, DEFAULT_ROOM_ENTRY_TTL);
    }

    /** These options with another request timeout. */
    public RegistryOptions withRequestTimeout(Duration timeout) {
        return new RegistryOptions(authToken, roomEntryTtl, openWrites, timeout, maxConnections, platformRequestThreads);
    }

    /** These options with another cap on connections with a request under way. */
    public RegistryOptions withMaxConnections(int max) {
        return new RegistryOptions(authToken, roomEntryTtl, openWrites, requestTimeout, max, platformRequestThreads);
    }

    /** These options with requests served on platform threads (see {@code platformRequestThreads}). */
    public RegistryOptions withPlatformRequestThreads() {
        return new RegistryOptions(authToken, roomEntryTtl, openWrites, requestTimeout, maxConnections, true);
    }

    /** Hides the token so options can be logged. */
    @Override
    public String toString() {
        return Redacted.toString(this, Set.of("authToken"));
    }
}
