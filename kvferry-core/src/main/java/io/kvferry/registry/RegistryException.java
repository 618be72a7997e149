package io.kvferry.registry;

/**
 * A bootstrap-registry call that did not succeed. Carries the HTTP status and body, when there was a
 * response, so callers can tell a refused registration (4xx) from an unreachable registry.
 */
public class RegistryException extends RuntimeException {
    /** {@link #statusCode()} when no HTTP response came back (connection refused, timeout). */
    public static final int NO_RESPONSE = -1;

    private final int statusCode;
    private final String responseBody;

    public RegistryException(String message, int statusCode, String responseBody, Throwable cause) {
        super(message, cause);
        this.statusCode = statusCode;
        this.responseBody = responseBody;
    }

    public RegistryException(String message, int statusCode, String responseBody) {
        this(message, statusCode, responseBody, null);
    }

    /** The last HTTP status, or {@link #NO_RESPONSE}. */
    public int statusCode() {
        return statusCode;
    }

    /** The last response body, or null when there was none. */
    public String responseBody() {
        return responseBody;
    }
}
