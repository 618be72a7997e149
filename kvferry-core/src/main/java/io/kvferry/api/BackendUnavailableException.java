package io.kvferry.api;

/**
 * A transfer backend named explicitly cannot run here: its transport is not installed, one of its settings
 * is bad, or it could not start. The message names the backend and why; a command line shows it as the
 * user's error (one line), where a library caller sees the IllegalStateException it always got.
 */
public final class BackendUnavailableException extends IllegalStateException {
    public BackendUnavailableException(String message) {
        super(message);
    }

    public BackendUnavailableException(String message, Throwable cause) {
        super(message, cause);
    }
}
