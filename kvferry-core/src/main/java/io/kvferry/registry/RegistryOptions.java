package io.kvferry.registry;

import java.time.Duration;
import java.util.Objects;

/**
 * Settings of a {@link BootstrapRegistryServer}.
 *
 * @param authToken    bearer token required by the write routes; null or blank means every write is
 *                     refused (fail closed), never that writes are open
 * @param roomEntryTtl how long a {@code room -> dp_rank} entry lives; rooms are short-lived, so the
 *                     table must not grow with every request ever served
 * @param openWrites   explicit opt-out of auth ({@code kvferry bootstrap --no-auth}) for clusters whose SGLang
 *                     predates bootstrap auth and sends no {@code Authorization} header: every write is accepted;
 *                     logged as a warning at start. Refused together with a token (one of the two, not both)
 */
public record RegistryOptions(String authToken, Duration roomEntryTtl, boolean openWrites) {

    /** SGLang's {@code SGLANG_DISAGGREGATION_BOOTSTRAP_ENTRY_CLEANUP_INTERVAL} default. */
    public static final Duration DEFAULT_ROOM_ENTRY_TTL = Duration.ofSeconds(120);

    public RegistryOptions {
        Objects.requireNonNull(roomEntryTtl, "roomEntryTtl");
        if (roomEntryTtl.isNegative() || roomEntryTtl.isZero()) {
            throw new IllegalArgumentException("roomEntryTtl must be > 0, got " + roomEntryTtl);
        }
        if (openWrites && authToken != null && !authToken.isBlank()) {
            throw new IllegalArgumentException("an auth token and open writes (--no-auth) exclude each other: drop one");
        }
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

    /** Hides the token so options can be logged. */
    @Override
    public String toString() {
        return "RegistryOptions[authToken=" + (authToken == null || authToken.isBlank() ? "<none>" : "<set>")
                + ", roomEntryTtl=" + roomEntryTtl + ", openWrites=" + openWrites + "]";
    }
}
