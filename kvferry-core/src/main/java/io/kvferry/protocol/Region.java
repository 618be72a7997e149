package io.kvferry.protocol;

/** Which registered destination memory a write targets. */
public enum Region {
    KV(0), AUX(1), STATE(2);

    private final int code;

    Region(int code) {
        this.code = code;
    }

    public int code() {
        return code;
    }

    public static Region fromCode(int code) throws ProtocolException {
        for (Region r : values()) {
            if (r.code == code) return r;
        }
        throw new ProtocolException("unknown write region " + code);
    }
}
