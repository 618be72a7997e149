package io.kvferry.engine.http;

import java.net.URI;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/** One prefill or decode server the router sends to; {@code bootstrap} is a prefill's registry. */
final class Backend {
    final URI url;
    final boolean prefill;
    /**
     * Given on the router's command line ({@code --prefill}/{@code --decode}): configuration, never replaced by a full
     * router's add ({@link Backends#replaceable}); false for one added at run time ({@code POST /workers}, an engine's
     * registration), which re-asserts itself if it comes back.
     */
    final boolean fromCommandLine;
    final AtomicInteger inFlight = new AtomicInteger();
    /** A prefill's /generate calls under way: failed when its health checks time out in a row (it is unreachable). */
    final Set<CompletableFuture<?>> calls = ConcurrentHashMap.newKeySet();
    /** Why health checks took it out (timed out in a row), for the requests that fails; null while it answers. */
    volatile String unreachable;
    volatile boolean healthy = true;
    volatile String bootstrap;
    /** Health checks failed in a row (timed out, cut off); the health thread's (the constructor's before it). */
    int failedChecks;
    /**
     * The last health check, for the router's status page ({@link RouterStatus}): what it found ("ok", or why it failed) and
     * when (epoch ms; 0: none yet), published together as one immutable value. Written by the health thread only.
     */
    volatile Check lastCheck;

    /** One health check's result: {@code result} "ok" or why it failed, at {@code atMillis} (epoch ms). */
    record Check(String result, long atMillis) {
    }

    /**
     * When it went out of rotation ({@link #serves} false at a health check), on the router's clock
     * ({@link Backends#clock}, nanoseconds), while {@link #outOfRotation}: how long it has been out is what lets a full
     * router's add replace it ({@link Backends#replaceable}). Written by the health thread only, after each check.
     */
    volatile long outSinceNanos;
    volatile boolean outOfRotation;

    /** After a health check at {@code nowNanos}: in rotation, or out of it since its first check that found it out. */
    void rotation(long nowNanos) {
        if (serves()) {
            outOfRotation = false;
        } else if (!outOfRotation) {
            outSinceNanos = nowNanos;
            outOfRotation = true;
        }
    }

    /** Records a health check's result (the health thread's). */
    void checked(String result) {
        lastCheck = new Check(result, System.currentTimeMillis());
    }

    /**
     * In rotation: healthy, and for a prefill its registry known (learnt from a /health it answered). A
     * prefill whose checks never got an answer (a slow name lookup, a silent link) counted as healthy on
     * the router's /health while every request got "no healthy prefill instance".
     */
    boolean serves() {
        return healthy && (!prefill || bootstrap != null);
    }

    /** One given on the router's command line ({@link #fromCommandLine}). */
    Backend(String url, boolean prefill, String bootstrap) {
        this(url, prefill, bootstrap, prefill ? "--prefill" : "--decode", true);
    }

    /**
     * @param source          what gave the URL, for its errors: a flag, or the field of a {@code /workers} request
     * @param fromCommandLine given on the router's command line (else added at run time)
     */
    Backend(String url, boolean prefill, String bootstrap, String source, boolean fromCommandLine) {
        this.url = parse(url, source);
        this.prefill = prefill;
        this.bootstrap = bootstrap;
        this.fromCommandLine = fromCommandLine;
    }

    /** {@link #fromCommandLine} as {@code /status.json} and {@code /workers} name it: {@code command_line} or {@code added}. */
    String origin() {
        return fromCommandLine ? "command_line" : "added";
    }

    static URI parse(String url, boolean prefill) {
        return parse(url, prefill ? "--prefill" : "--decode");
    }

    /** An absolute http(s) URL with a host, or an IllegalArgumentException naming {@code flag} (where it came from) and the value. */
    static URI parse(String url, String flag) {
        URI u;
        try {
            u = URI.create(url.endsWith("/") ? url.substring(0, url.length() - 1) : url);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(flag + " '" + url + "' is not a URL: " + e.getMessage(), e);
        }
        if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null) {
            throw new IllegalArgumentException(flag + " '" + url + "' must be an http:// URL with a host, e.g. http://10.0.0.1:30000");
        }
        if (u.getPort() > 65535) { // URI accepts any digits; the client would fail each request with "port out of range"
            throw new IllegalArgumentException(flag + " '" + url + "': port " + u.getPort() + " is not in [1, 65535]");
        }
        return u;
    }

    @Override
    public String toString() {
        return (prefill ? "prefill " : "decode ") + url;
    }
}
