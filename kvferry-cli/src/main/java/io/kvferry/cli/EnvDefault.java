package io.kvferry.cli;

/**
 * A flag whose default comes from an environment variable. Picocli's {@code ${env:NAME:-default}} would
 * blame the flag for a bad value of the variable ("Invalid value for option '--timeout-ms'") and take an
 * empty one as the value; here the flag wins when given, an unset or empty variable is the default, and a
 * bad value is refused naming the variable.
 */
record EnvDefault(String flag, String env, String value) {
    /** The longest time in milliseconds that a {@code Duration} still holds in nanoseconds (about 292 years). */
    static final long MAX_MILLIS = Long.MAX_VALUE / 1_000_000;

    /** The flag's value when given (non-null), else the environment variable's. */
    static EnvDefault of(String flag, Object given, String env) {
        return given != null ? new EnvDefault(flag, null, given.toString()) : new EnvDefault(flag, env, System.getenv(env));
    }

    /** Where the value came from, for messages: {@code --timeout-ms 0} or {@code KVFERRY_STATUS_TIMEOUT_MS=0}. */
    String source() {
        return env == null ? flag + " " + value : env + "=" + value;
    }

    /** Whether the variable is the source and unset or empty (then the default applies). */
    boolean unset() {
        return env != null && (value == null || value.isBlank());
    }

    /**
     * @throws IllegalArgumentException naming the flag or the variable when the value is no whole number in [min, max]
     */
    long get(long dflt, long min, long max) {
        if (unset()) return dflt;
        long v;
        try {
            v = Long.parseLong(value.strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(source() + " is not a whole number" + (env == null ? "" : " (unset or empty: " + dflt + ")"));
        }
        if (v < min || v > max) {
            boolean noMax = max == Long.MAX_VALUE || max == Integer.MAX_VALUE, noMin = min == Long.MIN_VALUE || min == Integer.MIN_VALUE;
            // Only the bound that was crossed when the other is a type's limit: "=99999999999 must be >= -2147483648" misled.
            throw new IllegalArgumentException(source() + (v < min && noMax ? " must be >= " + min
                    : v > max && noMin ? " must be <= " + max : " is outside [" + min + ", " + max + "]"));
        }
        return v;
    }
}
