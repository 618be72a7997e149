package io.kvferry.api;

/** Transfer progress of one request (room), as in SGLang's {@code KVPoll}. Ordered: a room's status only moves forward, except to {@link #Failed}, which is sticky. */
public enum KVPoll {
    Failed(0),
    Bootstrapping(1),
    WaitingForInput(2),
    Transferring(3),
    Success(4);

    private final int value;

    KVPoll(int value) {
        this.value = value;
    }

    /** The integer SGLang uses for this state (Failed=0 … Success=4). */
    public int value() {
        return value;
    }

    public boolean isTerminal() {
        return this == Failed || this == Success;
    }

    public static KVPoll fromValue(int value) {
        for (KVPoll p : values()) {
            if (p.value == value) return p;
        }
        throw new IllegalArgumentException("unknown KVPoll value " + value + " (expected 0..4)");
    }
}
