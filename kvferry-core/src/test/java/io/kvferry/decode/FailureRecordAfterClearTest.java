package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.session.RoomStatusTable;
import io.kvferry.transport.Backend;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A room failed off the scheduler thread (a link's reader) is recorded (failure line, recent failures)
 * after the failure became visible, so the scheduler may have cleared the room by then, and a retried
 * request may hold its id: the record still names the failed room's own peers (it named the newer
 * request's, or none).
 */
class FailureRecordAfterClearTest {
    private static final String TOKEN = "failure-record-test-token";

    @Test
    void aFailureRecordedAfterTheSchedulerClearedTheRoomNamesItsOwnPeers() throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN)) {
            KVArgs args = SmallRankArgs.of(arena, 16);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port())
                    .authToken(TOKEN).build(), Backend.of("tcp"));
            try {
                KVReceiver old = decode.createReceiver("127.0.0.1:1001", 42);
                RoomStatusTable.Slot slot = decode.rooms.get(42).slot;
                // A reader failed the room: the failure is visible, its record is yet to be made.
                long now = System.nanoTime();
                RoomStatusTable.Entry failed = new RoomStatusTable.Entry(KVPoll.Failed, FailureKind.PEER_LOST, "Lost connection", now, now);
                // The scheduler saw Failed, cleared the room, and a retry of the request took its id.
                old.clear();
                decode.createReceiver("127.0.0.1:1002", 42);
                // The reader goes on: the table tells the manager of the change.
                recordFailure(decode, slot, failed);
                List<KVManagerInspection.Failure> recent = decode.inspect().recentFailures();
                assertEquals("bootstrap 127.0.0.1:1001", recent.getLast().peer());
            } finally {
                decode.teardown();
            }
        }
    }

    private static void recordFailure(DecodeKVManager decode, RoomStatusTable.Slot slot, RoomStatusTable.Entry failed) {
        decode.onRoomChanged(slot, KVPoll.Bootstrapping, failed);
    }
}
