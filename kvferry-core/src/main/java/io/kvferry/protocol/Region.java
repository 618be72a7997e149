package io.kvferry.protocol;

/** Which registered destination memory a write targets. */
public enum Region {
    KV(0), AUX(1), STATE(2);

    /** values() clones its array on every call; decoding a WRITE frame must not allocate. */
    private static final Region[] VALUES = values();

    private final int code;

    Region(int code) {
        this.code = code;
    }

    public int code() {
        return code;
    }

    public static Region fromCode(int code) throws ProtocolException {
        for (Region r : VALUES) {
            if (r.code == code) return r;
        }
        throw new ProtocolException("unknown write region " + code);
    }
}
