package io.kvferry.protocol;

import java.util.Arrays;

/**
 * Which bytes of the decode's memory one prefill rank writes for every room on its link, declared
 * in HELLO_ACK so the decode knows, from its own metadata alone, exactly how many bytes each prefill
 * rank owes a room (docs/PROTOCOL.md §5). Each decode item (a KV page, a state slot) is a whole
 * number of {@code unit}-byte units (a token slot when heads are sliced, a state row when state is
 * re-sliced, else the whole item); the rank writes bytes {@code [offset, offset + length)} of every
 * unit. Length 0 means the rank writes nothing of that buffer (another PP stage holds the layer).
 * Immutable once built.
 *
 * @param kvUnit     per decode KV buffer
 * @param stateUnit  per decode state component, per tensor
 * @param aux        whether this rank writes the room's aux row (every buffer, whole rows)
 * @param state      whether this rank writes the room's state (with all-CP-ranks transfer only CP rank 0 does)
 */
public record Coverage(long[] kvUnit, long[] kvOffset, long[] kvLength, boolean aux, boolean state,
                       long[][] stateUnit, long[][] stateOffset, long[][] stateLength) {

    /** A link that writes nothing (a data stripe's acknowledgement, a refusal). */
    public static final Coverage NONE = new Coverage(new long[0], new long[0], new long[0], false, false,
            new long[0][], new long[0][], new long[0][]);

    /** Bytes this rank writes into one page of decode KV buffer {@code b} whose pages are {@code item} bytes. */
    public long kvBytesPerPage(int b, long item) {
        return kvLength[b] == 0 ? 0 : kvLength[b] * (item / kvUnit[b]);
    }

    /** Bytes this rank writes into one slot of decode state tensor {@code (c, t)} of {@code item} bytes. */
    public long stateBytesPerItem(int c, int t, long item) {
        return stateLength[c][t] == 0 ? 0 : stateLength[c][t] * (item / stateUnit[c][t]);
    }

    /**
     * Null when this coverage fits the decode's memory (one entry per buffer and tensor, units that
     * divide the items, written ranges inside their units); else what does not. The decode checks
     * it before trusting the counts.
     */
    public String checkAgainst(MemoryDescriptor d) {
        if (kvUnit.length != d.kvItemLens().length) {
            return "declares " + kvUnit.length + " KV buffers, the decode has " + d.kvItemLens().length;
        }
        for (int b = 0; b < kvUnit.length; b++) {
            String bad = checkUnit(kvUnit[b], kvOffset[b], kvLength[b], d.kvItemLens()[b]);
            if (bad != null) return "KV buffer " + b + ": " + bad;
        }
        if (stateUnit.length != d.states().size()) {
            return "declares " + stateUnit.length + " state components, the decode has " + d.states().size();
        }
        for (int c = 0; c < stateUnit.length; c++) {
            long[] items = d.states().get(c).itemLens();
            if (stateUnit[c].length != items.length) {
                return "state component " + c + " declares " + stateUnit[c].length + " tensors, the decode has " + items.length;
            }
            for (int t = 0; t < items.length; t++) {
                String bad = checkUnit(stateUnit[c][t], stateOffset[c][t], stateLength[c][t], items[t]);
                if (bad != null) return "state component " + c + " tensor " + t + ": " + bad;
            }
        }
        return null;
    }

    private static String checkUnit(long unit, long offset, long length, long item) {
        if (length == 0) return null;
        if (unit <= 0 || item % unit != 0) return "unit of " + unit + " bytes does not divide the " + item + "-byte item";
        if (offset < 0 || length < 0 || offset > unit - length) {
            return "range [" + offset + ", +" + length + ") is outside its " + unit + "-byte unit";
        }
        return null;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Coverage c && Arrays.equals(c.kvUnit, kvUnit) && Arrays.equals(c.kvOffset, kvOffset)
                && Arrays.equals(c.kvLength, kvLength) && c.aux == aux && c.state == state
                && Arrays.deepEquals(c.stateUnit, stateUnit) && Arrays.deepEquals(c.stateOffset, stateOffset)
                && Arrays.deepEquals(c.stateLength, stateLength);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(kvUnit) * 31 + Arrays.hashCode(kvLength) + (aux ? 1 : 0) + (state ? 2 : 0);
    }

    @Override
    public String toString() {
        return "Coverage[kv=" + kvUnit.length + " buffers, aux=" + aux + ", state=" + state + "]";
    }
}
