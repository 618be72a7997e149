package io.kvferry.plan;

/**
 * Where ops are cut, agreed by both sides so the decode can account for every byte a prefill rank
 * owes exactly once (docs/PROTOCOL.md, "Success means complete"). A prefill rank writes bytes
 * {@code [offset, offset + length)} of each of the {@code units} units of a destination item (a KV
 * page, an aux row, a state slot); those bytes, in order, are the item's <i>payload</i>. The payload
 * is cut into <i>granules</i>: the whole payload when it fits one op ({@link CopyPlan#MAX_OP_BYTES}),
 * else the largest whole number of units' slices that does (or plain op-sized pieces of a contiguous
 * payload whose single unit is larger than an op). Every op the planner makes is either a run of
 * whole items whose payloads each fit one granule, or exactly one granule; the decode refuses any
 * other write and refuses a granule written twice, so a count of landed bytes equal to what is owed
 * means every owed byte landed. Pure.
 */
public final class Granules {
    private Granules() {}

    /**
     * Payload bytes of one granule (the last of an item may be shorter: see {@link #perItem}).
     *
     * @param length     bytes written of each unit
     * @param units      units per item
     * @param contiguous whether the written bytes of an item are contiguous on the destination
     *                   ({@code length} is the whole unit)
     * @throws PlanException when a single non-contiguous slice is larger than one op
     */
    public static long granuleBytes(long length, long units, boolean contiguous) {
        long payload = length * units;
        if (payload <= CopyPlan.MAX_OP_BYTES) return payload;
        if (length <= CopyPlan.MAX_OP_BYTES) return CopyPlan.MAX_OP_BYTES / length * length;
        if (contiguous) return CopyPlan.MAX_OP_BYTES;
        throw new PlanException("a slice of " + length + " bytes per unit is larger than the largest op (" + CopyPlan.MAX_OP_BYTES
                + " bytes)");
    }

    /** Granules per item: 1 when the item's whole payload fits one op. */
    public static long perItem(long length, long units, boolean contiguous) {
        long g = granuleBytes(length, units, contiguous);
        return (length * units + g - 1) / g;
    }
}
