package io.kvferry.api;

/**
 * One setting of kvferry: its system-property key, its environment variable, its default, what it
 * means, and SGLang's equivalent where one exists. Components declare theirs as constants
 * ({@link Knobs}, and each transport provider's {@code knobs()}); docs/CONFIGURATION.md lists them all.
 *
 * @param key          the system property, {@code kvferry.…}
 * @param env          the environment variable, {@code KVFERRY_…}
 * @param defaultValue the value when neither is set (as text; empty = none)
 * @param meaning      one line for operators
 * @param sglang       SGLang's flag or variable for the same thing, or empty
 */
public record Knob(String key, String env, String defaultValue, String meaning, String sglang) {
    public Knob {
        if (key == null || !key.startsWith("kvferry.")) throw new IllegalArgumentException("knob key must start with 'kvferry.': " + key);
        if (env == null || !env.startsWith("KVFERRY_")) throw new IllegalArgumentException("knob env must start with 'KVFERRY_': " + env);
        defaultValue = defaultValue == null ? "" : defaultValue;
        sglang = sglang == null ? "" : sglang;
    }

    /** "KVFERRY_X / kvferry.x", for error messages. */
    public String names() {
        return env + " / " + key;
    }
}
