package io.kvferry.transport;

import java.time.Duration;

/**
 * The revoke contract every one-sided offer shares: the first {@link #revoke} does the transport's
 * work, every later call (from the link reader, the revoker thread, {@code clear()}) returns that
 * first answer at once without doing it again.
 */
public abstract class RevocableOffer implements LinkOffer {
    private final byte[] blob;
    /** Null until the first revoke finished; guarded by this. */
    private Boolean revoked;

    protected RevocableOffer(byte[] blob) {
        this.blob = blob.clone();
    }

    @Override
    public final byte[] blob() {
        return blob.clone();
    }

    @Override
    public final synchronized boolean revoke(Duration timeout) {
        if (revoked == null) revoked = revokeOnce(timeout);
        return revoked;
    }

    /** Withdraws the permission; true once no write through it can land any more. Called at most once. */
    protected abstract boolean revokeOnce(Duration timeout);
}
