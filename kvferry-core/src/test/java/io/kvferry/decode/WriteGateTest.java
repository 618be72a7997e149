package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVPoll;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Region;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;
import java.util.concurrent.atomic.AtomicLongArray;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The decode's landing decisions, without sockets: what a write may touch, and when it is refused. */
class WriteGateTest {
    private static final long PAGE = 512;
    private final Arena arena = Arena.ofConfined();
    private DecodeRooms rooms;
    private WriteGate gate;

    @BeforeEach
    void setUp() {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(arena.allocate(8 * PAGE), PAGE);
        a.addAuxBuffer(arena.allocate(4 * 64), 64);
        a.addStateComponent(StateType.MAMBA, List.of(arena.allocate(4 * 128)), List.of(128L));
        rooms = new DecodeRooms();
        gate = new WriteGate(RegisteredMemory.from(a), rooms);
    }

    @AfterEach
    void close() {
        arena.close();
    }

    /** The link the room's writes come from, and one that is not the room's. */
    private static final String PREFILL = "10.0.0.1:7000", STRANGER = "10.0.0.9:7000";

    private DecodeRoom room(long id, int[] sortedPages, int aux, int[][] state) {
        DecodeRoom r = new DecodeRoom(id, "bootstrap");
        assertTrue(rooms.add(r));
        rooms.statuses.update(id, KVPoll.WaitingForInput);
        r.targets = List.of(new DecodeRoom.Target(new PrefillLink("bootstrap", PREFILL, null, 0), 0, 0, false));
        r.landedFrom = new AtomicLongArray(1);
        if (sortedPages != null) {
            r.allowance = new DecodeRoom.Allowance(sortedPages, sortedPages, aux, state, state, new long[1], new int[][] {sortedPages});
        }
        return r;
    }

    private static WriteSink.Landing landing() {
        return new WriteSink.Landing(PREFILL, null);
    }

    private String rejected(long room, Region region, int component, long offset, long length, boolean fatal) {
        return rejected(landing(), room, region, component, offset, length, fatal);
    }

    private String rejected(WriteSink.Landing from, long room, Region region, int component, long offset, long length, boolean fatal) {
        WriteRejectedException e = assertThrows(WriteRejectedException.class,
                () -> gate.begin(from, room, region, component, 0, offset, length, length));
        assertEquals(fatal, e.fatal(), e.getMessage());
        return e.getMessage();
    }

    @Test
    void onlyTheRoomsOwnPrefillRanksMayWriteIt() {
        room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        String why = rejected(new WriteSink.Landing(STRANGER, null), 7, Region.KV, 0, 2 * PAGE, PAGE, false);
        assertTrue(why.contains("not one of the room's prefill ranks"), why);
    }

    @Test
    void aConcludedRoomTakesNoMoreWrites() {
        room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        rooms.statuses.update(7, KVPoll.Success);
        assertTrue(rejected(7, Region.KV, 0, 2 * PAGE, PAGE, false).contains("already concluded"),
                "KV the engine decodes from cannot change after Success");
    }

    @Test
    void landedBytesAreCountedPerSourceLink() throws WriteRejectedException {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.KV, 0, 0, 5 * PAGE, PAGE, PAGE);
        gate.end(l, true);
        gate.begin(l, 7, Region.KV, 0, 0, 2 * PAGE, PAGE, PAGE);
        gate.end(l, false);
        assertEquals(PAGE, r.landedFrom.get(0), "a write that did not land whole is not counted");
    }

    @Test
    void aRunOfOwnedPagesLandsAndIsCounted() throws WriteRejectedException {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.KV, 0, 0, 2 * PAGE, 2 * PAGE, 2 * PAGE);
        assertEquals(2 * PAGE, l.span());
        assertEquals(2 * PAGE, l.offset());
        assertEquals(2 * PAGE, l.target().remaining(), "the socket read fills exactly the write's bytes");
        assertEquals(2 * PAGE, l.target().position());
        assertEquals(KVPoll.Transferring, rooms.statuses.status(7), "the first write moves the room to Transferring");
        gate.end(l, true);
        assertEquals(2 * PAGE, r.bytesLanded.get());
        assertTrue(r.closeAndDrain(0), "no landing left in flight after end()");
    }

    @Test
    void pagesTheRoomDoesNotOwnAreRefused() {
        room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        assertTrue(rejected(7, Region.KV, 0, 3 * PAGE, 2 * PAGE, false).contains("pages [3, 4] touches memory room 7 does not own"));
        rejected(7, Region.KV, 0, 0, PAGE, false);
    }

    @Test
    void auxAndStateWritesStayInTheirRowAndSlots() throws WriteRejectedException {
        room(7, new int[]{0}, 1, new int[][]{{2}});
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.AUX, 0, 0, 64, 64, 64);
        gate.end(l, true);
        assertTrue(rejected(7, Region.AUX, 0, 128, 64, false).contains("not inside row 1"));
        gate.begin(l, 7, Region.STATE, 0, 0, 2 * 128, 128, 128);
        gate.end(l, true);
        assertTrue(rejected(7, Region.STATE, 0, 3 * 128, 128, false).contains("state component 0 index"));
    }

    @Test
    void unknownUnreadyFailedAndClearedRoomsAreRefused() {
        assertTrue(rejected(9, Region.KV, 0, 0, PAGE, false).contains("room 9 is unknown"));
        room(10, null, -1, null);
        assertTrue(rejected(10, Region.KV, 0, 0, PAGE, false).contains("has not sent its metadata"));
        room(11, new int[]{0}, -1, new int[0][]);
        rooms.statuses.fail(11, FailureKind.ABORTED, "aborted");
        assertTrue(rejected(11, Region.KV, 0, 0, PAGE, false).contains("room 11 has failed"));
        DecodeRoom cleared = room(12, new int[]{0}, -1, new int[0][]);
        assertTrue(cleared.closeAndDrain(0));
        assertTrue(rejected(12, Region.KV, 0, 0, PAGE, false).contains("was cleared"));
    }

    @Test
    void writesOutsideRegisteredMemoryAreFatalForTheLink() {
        room(7, new int[]{0}, 0, new int[0][]);
        assertTrue(rejected(7, Region.KV, 3, 0, PAGE, true).contains("no registered"));
        assertTrue(rejected(7, Region.KV, 0, 0, 9 * PAGE, true).contains("larger than"));
        assertFalse(rejected(7, Region.KV, 0, 8 * PAGE, PAGE, false).isEmpty(), "past the end of a buffer");
    }

    @Test
    void aClosedGateRefusesEverything() {
        room(7, new int[]{0}, 0, new int[0][]);
        gate.close();
        assertTrue(rejected(7, Region.KV, 0, 0, PAGE, false).contains("torn down"));
    }

    @Test
    void ownershipIsAConsecutiveRunInTheSortedIds() {
        int[] sorted = {1, 2, 4};
        Assertions.assertDoesNotThrow(() -> WriteGate.requireOwned(sorted, 64, 128, 64, "page", 1));
        assertThrows(WriteRejectedException.class, () -> WriteGate.requireOwned(sorted, 128, 128, 64, "page", 1));
        assertThrows(WriteRejectedException.class, () -> WriteGate.requireOwned(sorted, Long.MAX_VALUE - 64, 64, 64, "page", 1));
    }
}
