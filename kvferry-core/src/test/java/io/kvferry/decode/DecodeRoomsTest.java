package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

/** The decode's room records around teardown: no room is left Bootstrapping once the manager shut down. */
class DecodeRoomsTest {
    private final DecodeRooms rooms = new DecodeRooms();

    /**
     * Teardown's sweep fails (and hands over for draining) the rooms listed then; a room a
     * createReceiver racing teardown makes after the sweep fails too, instead of staying
     * Bootstrapping with no reader or timer left to move it.
     */
    @Test
    void aRoomMadeAfterShutDownFailsAsShutdownAndOneThatSucceededStaysSo() {
        DecodeRoom before = rooms.create(1, "127.0.0.1:1");
        DecodeRoom done = rooms.create(2, "127.0.0.1:1");
        rooms.succeed(done);
        List<Long> drained = new ArrayList<>();
        rooms.shutDown("torn down (test)", r -> drained.add(r.room));
        assertEquals(KVPoll.Failed, before.slot.status());
        assertEquals(FailureKind.SHUTDOWN, before.slot.current().kind());
        assertEquals(KVPoll.Success, done.slot.status());
        assertEquals(List.of(1L, 2L), drained.stream().sorted().toList());

        DecodeRoom after = rooms.create(3, "127.0.0.1:1");
        assertEquals(KVPoll.Failed, after.slot.status());
        assertEquals(FailureKind.SHUTDOWN, after.slot.current().kind());
        assertEquals("torn down (test)", after.slot.current().reason());
        assertNull(rooms.create(3, "127.0.0.1:1"), "the id stays taken by its failed record");
    }
}
