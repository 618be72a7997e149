package io.kvferry.registry;

/**
 * The registry answered 503 on every attempt: not all prefill ranks have registered yet. A separate
 * type because this is the one failure a caller may sensibly wait out and retry later, unlike a
 * refusal or an unknown rank.
 */
public final class RegistryNotReadyException extends RegistryException {
    public RegistryNotReadyException(String message, String responseBody) {
        super(message, 503, responseBody);
    }
}
