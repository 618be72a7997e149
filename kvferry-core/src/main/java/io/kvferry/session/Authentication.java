package io.kvferry.session;

import io.kvferry.api.KVManagerConfig;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.InetAddress;
import java.net.UnknownHostException;

/**
 * The rule both roles follow when no cluster token is configured (fail closed, as the registry
 * does): control connections stay on loopback, where only this host's processes reach them, unless
 * the operator explicitly chose an insecure cluster ({@code KVFERRY_INSECURE=true}).
 */
public final class Authentication {
    private static final Logger log = LoggerFactory.getLogger(Authentication.class);

    private Authentication() {}

    /** Whether a manager with this config needs no token to talk to {@code host}. */
    public static boolean tokenless(KVManagerConfig config) {
        return config.authToken() == null || config.authToken().isEmpty();
    }

    /**
     * Fails, naming the fix, when a tokenless manager would use a non-loopback {@code host} without
     * the insecure setting; logs that control connections are unauthenticated otherwise.
     *
     * @param what "prefill rank listening on" / "decode rank connecting to"
     */
    public static void requireTokenOrLoopback(KVManagerConfig config, String host, String what) {
        if (!tokenless(config)) return;
        if (isLoopback(host)) {
            log.debug("no cluster auth token: {} loopback {} accepts only this host's processes", what, host);
            return;
        }
        if (config.insecure()) {
            log.warn("no cluster auth token and insecure mode: {} {} with unauthenticated control connections", what, host);
            return;
        }
        throw new IllegalArgumentException("no cluster auth token: a " + what + " " + host + " would accept (or trust) any peer;"
                + " set the token (KVFERRY_AUTH_TOKEN, --auth-token-file, KVManagerConfig.authToken) or, for a trusted network only,"
                + " KVFERRY_INSECURE=true");
    }

    /** Whether {@code host} names only this machine (127.0.0.0/8, ::1, localhost). */
    public static boolean isLoopback(String host) {
        try {
            InetAddress[] all = InetAddress.getAllByName(host);
            for (InetAddress a : all) if (!a.isLoopbackAddress()) return false;
            return all.length > 0;
        } catch (UnknownHostException e) {
            return false;
        }
    }
}
