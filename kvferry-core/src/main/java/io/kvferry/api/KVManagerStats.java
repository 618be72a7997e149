package io.kvferry.api;

/**
 * Public counters of one {@link KVManager}, for tools and operators (never cast to an implementation).
 *
 * <p>The data-path figures are prefill-side (decode ranks report 0): bytes the data paths moved and
 * the time transfer workers spent inside them, summed over workers, so {@code bytes / busyNanos} is
 * the per-worker data-path bandwidth; {@code ops} counts plan ops (a run of pages of one buffer, an
 * aux row, a state slot), so {@code bytes / ops} is the mean message size; {@code activeNanos} is the
 * wall time during which at least one write was inside a data path, so {@code bytes / activeNanos}
 * is the rank's aggregate bandwidth while it moved data.
 *
 * @param trackedRooms      rooms the manager still holds state for (0 once every request was cleared)
 * @param peerConnections   decode sessions connected to this prefill rank, or prefill links open from this decode rank
 * @param writesInDataPath  writes inside a data path right now (a failed room's write may still be stopping)
 */
public record KVManagerStats(int trackedRooms, int peerConnections, long dataPathBytes, long dataPathBusyNanos,
                             long dataPathOps, long dataPathActiveNanos, int writesInDataPath) {
    public static final KVManagerStats EMPTY = new KVManagerStats(0, 0, 0, 0, 0, 0, 0);

    /** The data-path counters that grew since {@code earlier} (a snapshot of the same manager); gauges are this snapshot's. */
    public KVManagerStats minus(KVManagerStats earlier) {
        return new KVManagerStats(trackedRooms, peerConnections, dataPathBytes - earlier.dataPathBytes,
                dataPathBusyNanos - earlier.dataPathBusyNanos, dataPathOps - earlier.dataPathOps,
                dataPathActiveNanos - earlier.dataPathActiveNanos, writesInDataPath);
    }

    /** These gauges with every data-path counter at zero (a window in which nothing was measured). */
    public KVManagerStats withoutDataPath() {
        return new KVManagerStats(trackedRooms, peerConnections, 0, 0, 0, 0, writesInDataPath);
    }
}
