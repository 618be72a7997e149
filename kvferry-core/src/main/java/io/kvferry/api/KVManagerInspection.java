package io.kvferry.api;

import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * What one {@link KVManager} is doing, for status pages and tools ({@link KVManager#inspect()}): a
 * snapshot taken off the hot path (it walks the rank's room table and links), never cast to an
 * implementation. Ages are in milliseconds at the time of the snapshot; wire strings in it (session
 * ids, reasons) are already escaped for display.
 *
 * @param role           prefill or decode
 * @param backend        the backend the manager was created with (tcp, shm, ucx, auto, inproc, fake)
 * @param endpoint       prefill: the advertised control endpoint {@code host:port}; decode: null
 * @param roomsByState   rooms this rank tracks, by {@link KVPoll} name
 * @param oldestRooms    the longest-lived rooms not yet concluded (Bootstrapping, WaitingForInput, Transferring),
 *                       oldest first, at most {@link #MAX_ROOMS}
 * @param recentFailures the latest room failures, newest first, at most {@link #MAX_FAILURES}
 * @param failuresByKind every failure since the manager started, by {@link FailureKind#label()}
 * @param peers          prefill: connected decode sessions; decode: its links to prefill ranks
 * @param bytesMoved     bytes this rank moved: prefill, what its data paths wrote; decode, what landed in
 *                       succeeded rooms through two-sided paths (one-sided ones bypass it)
 * @param roomsConcluded rooms that reached Success here since the manager started
 */
public record KVManagerInspection(String role, int tpRank, int ppRank, int dpRank, int cpRank, String backend, String endpoint,
                                  Map<String, Integer> roomsByState, List<Room> oldestRooms, List<Failure> recentFailures,
                                  Map<String, Long> failuresByKind, List<Peer> peers, long bytesMoved, long roomsConcluded,
                                  KVManagerStats stats) {
    public static final int MAX_ROOMS = 20;
    public static final int MAX_FAILURES = 50;

    /**
     * A room in flight.
     *
     * @param state         its {@link KVPoll} name
     * @param ageMillis     since the room was created on this rank
     * @param inStateMillis since it entered its current state
     * @param peers         the peers it waits on (decode sessions or prefill ranks), or empty
     */
    public record Room(long room, String state, long ageMillis, long inStateMillis, String peers) {}

    /**
     * One room failure.
     *
     * @param kind          {@link FailureKind#label()}
     * @param stage         the state the room was in when it failed, lower-case
     * @param peer          the peer(s) involved, or empty
     * @param atEpochMillis when (wall clock)
     */
    public record Failure(long room, String kind, String stage, String reason, String peer, long atEpochMillis) {}

    /**
     * A link to a peer rank.
     *
     * @param name     prefill: the decode's session id; decode: "prefill rank N"
     * @param address  the peer's {@code host:port}
     * @param dataPath the data path bytes take on it (tcp, shm, ucx, inproc)
     * @param dataPathNote why offered transports were passed over for it, or why the one kept is slower
     *                 than tcp (UCX emulating its puts over tcp under an explicit ucx backend); empty when neither
     * @param rooms    rooms that currently use it
     * @param stripes  extra TCP data connections
     * @param silentMillis since the last byte arrived on its control connection
     */
    public record Peer(String name, String address, String dataPath, String dataPathNote, int rooms, int stripes, long silentMillis) {}

    /** What a manager without rooms or peers of its own reports (the fake backend). */
    public static KVManagerInspection minimal(DisaggregationMode mode, String backend, KVManagerStats stats) {
        return new KVManagerInspection(mode.name().toLowerCase(Locale.ROOT), 0, 0, 0, 0, backend, null, Map.of(),
                List.of(), List.of(), Map.of(), List.of(), stats.dataPathBytes(), 0, stats);
    }
}
