package io.kvferry.transport;

import java.util.concurrent.ConcurrentHashMap;

/** The decode managers of this JVM, by session id, so a prefill in the same JVM can use {@link InprocDataPath}. */
public final class InprocRegistry {
    private static final ConcurrentHashMap<String, WriteSink> SINKS = new ConcurrentHashMap<>();

    private InprocRegistry() {}

    public static void register(String sessionId, WriteSink sink) {
        SINKS.put(sessionId, sink);
    }

    public static void unregister(String sessionId) {
        SINKS.remove(sessionId);
    }

    /** The sink of a decode manager in this JVM, or null. */
    public static WriteSink lookup(String sessionId) {
        return SINKS.get(sessionId);
    }
}
