package io.kvferry.protocol;

import java.io.IOException;

/** A frame that breaks the control protocol. The connection it came on cannot be trusted any more. */
public final class ProtocolException extends IOException {
    public ProtocolException(String message) {
        super(message);
    }
}
