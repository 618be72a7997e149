package io.kvferry.engine.http;

import java.time.Duration;

/**
 * How backends are probed and connected to.
 *
 * @param every              the time between two rounds of health checks
 * @param probeTimeout       one health check's limit
 * @param connectTimeout     the limit on connecting to a backend (a request's connect that times out is tried once more)
 * @param failuresToMarkDown health checks that time out or fail mid-exchange, in a row, that take a backend out of
 *                           rotation: one slow check says little (a burst on a fresh server fills its accept queue)
 * @param streamIdle         the longest a decode may send nothing on a request, not even its status line or a
 *                           keep-alive (it sends one every {@link DecodeServer#KEEP_ALIVE_MILLIS}): then it is taken
 *                           as hung and the request fails with a 502 naming it ({@link StalledStreams})
 */
record Probing(Duration every, Duration probeTimeout, Duration connectTimeout, int failuresToMarkDown, Duration streamIdle) {
    /**
     * Every second, 2 s a check, 10 s to connect, 3 failures in a row (the SGLang router's default failure threshold),
     * a decode stream silent for 10 s taken as hung.
     * The JDK client times a connect on its selector thread, which handles expired timers before the connections
     * that became ready: when that thread runs late (a starved machine under hundreds of streams), a connect the
     * kernel completed long before still times out. At 3 s one of 200 streams failed so on a loaded 2-core machine;
     * a black-holed backend is the health checks' to find, not this limit's.
     */
    static final Probing DEFAULT = new Probing(Duration.ofSeconds(1), Duration.ofSeconds(2), Duration.ofSeconds(10), 3, Duration.ofSeconds(10));

    /** With the default stream-idle limit. */
    Probing(Duration every, Duration probeTimeout, Duration connectTimeout, int failuresToMarkDown) {
        this(every, probeTimeout, connectTimeout, failuresToMarkDown, DEFAULT.streamIdle());
    }

    Probing {
        if (failuresToMarkDown < 1) throw new IllegalArgumentException("failuresToMarkDown must be at least 1, got " + failuresToMarkDown);
        if (streamIdle.toMillis() <= DecodeServer.KEEP_ALIVE_MILLIS) {
            throw new IllegalArgumentException("streamIdle must exceed the decodes' keep-alive interval, got " + streamIdle);
        }
    }
}
