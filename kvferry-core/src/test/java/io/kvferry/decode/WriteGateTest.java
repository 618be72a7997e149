package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVPoll;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;
import java.util.concurrent.atomic.AtomicLongArray;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The decode's landing decisions, without sockets: what a write may touch, and when it is refused. */
class WriteGateTest {
    private static final long PAGE = 512;
    private final Arena arena = Arena.ofConfined();
    private DecodeRooms rooms;
    private RegisteredMemory memory;
    private WriteGate gate;

    @BeforeEach
    void setUp() {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(arena.allocate(8 * PAGE), PAGE);
        a.addAuxBuffer(arena.allocate(4 * 64), 64);
        a.addStateComponent(StateType.MAMBA, List.of(arena.allocate(4 * 128)), List.of(128L));
        rooms = new DecodeRooms();
        memory = RegisteredMemory.from(a);
        gate = new WriteGate(memory, rooms);
    }

    @AfterEach
    void close() {
        arena.close();
    }

    /** The link the room's writes come from, and one that is not the room's. */
    private static final String PREFILL = "10.0.0.1:7000", STRANGER = "10.0.0.9:7000";

    private DecodeRoom room(long id, int[] sortedPages, int aux, int[][] state) {
        return room(id, sortedPages, aux, state, wholeItems(memory));
    }

    /** A room whose one prefill rank (on {@link #PREFILL}) declared {@code coverage}; tracked as sendMetadata tracks it. */
    private DecodeRoom room(long id, int[] sortedPages, int aux, int[][] state, Coverage coverage) {
        DecodeRoom r = rooms.create(id, "bootstrap");
        assertTrue(r != null && r.slot.advance(KVPoll.WaitingForInput));
        PrefillLink link = new PrefillLink("bootstrap", PREFILL, null, 0);
        link.coverage = coverage;
        link.granules = LinkGranules.of(coverage, memory);
        r.targets = List.of(new DecodeRoom.Target(link, 0, 0, false));
        r.landedFrom = new AtomicLongArray(1);
        if (sortedPages != null) {
            long bits = link.granules.bits(sortedPages.length, aux >= 0, state);
            r.written = new long[(int) ((bits + 63) / 64) + 1];
            r.allowance = new DecodeRoom.Allowance(sortedPages, sortedPages, aux, state, state, new long[1], new int[][] {sortedPages},
                    new int[][] {sortedPages}, new long[] {0});
        }
        return r;
    }

    /** A page copy: every byte of every KV page, the aux row and the state slots. */
    static Coverage wholeItems(RegisteredMemory m) {
        long[] kv = m.kvItemLens();
        long[][] state = m.stateItemLens();
        long[][] none = new long[state.length][];
        for (int c = 0; c < state.length; c++) none[c] = new long[state[c].length];
        return new Coverage(kv, new long[kv.length], kv, m.auxBufferCount() > 0, true, state, none, state);
    }

    private static WriteSink.Landing landing() {
        return new WriteSink.Landing(PREFILL, null);
    }

    private String rejected(long room, Region region, int component, long offset, long length, boolean fatal) {
        return rejected(landing(), room, region, component, offset, length, fatal);
    }

    private String rejected(WriteSink.Landing from, long room, Region region, int component, long offset, long length, boolean fatal) {
        WriteRejectedException e = assertThrows(WriteRejectedException.class,
                () -> gate.begin(from, room, region, component, 0, offset, length, length, length, length));
        assertEquals(fatal, e.fatal(), e.getMessage());
        return e.getMessage();
    }

    /**
     * A refused write names the record it was judged against (null for an unknown room), so the reader
     * fails that record, not a retry that took the room's id before the refusal is acted on.
     */
    @Test
    void aRefusalNamesTheRecordItWasJudgedAgainst() {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        WriteRejectedException outside = assertThrows(WriteRejectedException.class,
                () -> gate.begin(landing(), 7, Region.KV, 0, 0, 4 * PAGE, PAGE, PAGE, PAGE, PAGE));
        assertTrue(outside.judged());
        assertSame(r, outside.room(), outside.getMessage());
        WriteRejectedException outOfBuffer = assertThrows(WriteRejectedException.class,
                () -> gate.begin(landing(), 7, Region.KV, 0, 0, memory.segmentOrNull(Region.KV, 0, 0).byteSize(), PAGE, PAGE, PAGE, PAGE));
        assertSame(r, outOfBuffer.room(), "a span outside the buffer, refused before the room's checks: " + outOfBuffer.getMessage());
        WriteRejectedException list = assertThrows(WriteRejectedException.class, () -> gate.beginList(landing(), list(7, Region.KV, 4 * PAGE, PAGE)));
        assertSame(r, list.room(), list.getMessage());
        WriteRejectedException unknown = assertThrows(WriteRejectedException.class,
                () -> gate.begin(landing(), 9, Region.KV, 0, 0, 0, PAGE, PAGE, PAGE, PAGE));
        assertTrue(unknown.judged());
        assertNull(unknown.room());
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
        rooms.get(7).slot.update(KVPoll.Success);
        assertTrue(rejected(7, Region.KV, 0, 2 * PAGE, PAGE, false).contains("already concluded"),
                "KV the engine decodes from cannot change after Success");
    }

    @Test
    void landedBytesAreCountedPerSourceLink() throws WriteRejectedException {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.KV, 0, 0, 5 * PAGE, PAGE, PAGE, PAGE, PAGE);
        gate.end(l, true);
        gate.begin(l, 7, Region.KV, 0, 0, 2 * PAGE, PAGE, PAGE, PAGE, PAGE);
        gate.end(l, false);
        assertEquals(PAGE, r.landedFrom.get(0), "a write that did not land whole is not counted");
    }

    @Test
    void aRunOfOwnedPagesLandsAndIsCounted() throws WriteRejectedException {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{0}});
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.KV, 0, 0, 2 * PAGE, 2 * PAGE, 2 * PAGE, 2 * PAGE, 2 * PAGE);
        assertEquals(2 * PAGE, l.span());
        assertEquals(2 * PAGE, l.offset());
        assertEquals(2 * PAGE, l.payload(), "the socket read fills exactly the write's bytes");
        assertEquals(8 * PAGE, l.buffer().byteSize(), "the landing names the whole destination buffer");
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
        gate.begin(l, 7, Region.AUX, 0, 0, 64, 64, 64, 64, 64);
        gate.end(l, true);
        assertTrue(rejected(7, Region.AUX, 0, 128, 64, false).contains("not inside row 1"));
        gate.begin(l, 7, Region.STATE, 0, 0, 2 * 128, 128, 128, 128, 128);
        gate.end(l, true);
        assertTrue(rejected(7, Region.STATE, 0, 3 * 128, 128, false).contains("state component 0 index"));
    }

    @Test
    void unknownUnreadyFailedAndClearedRoomsAreRefused() {
        assertTrue(rejected(9, Region.KV, 0, 0, PAGE, false).contains("room 9 is unknown"));
        room(10, null, -1, null);
        assertTrue(rejected(10, Region.KV, 0, 0, PAGE, false).contains("has not sent its metadata"));
        room(11, new int[]{0}, -1, new int[0][]);
        rooms.get(11).slot.fail(FailureKind.ABORTED, "aborted");
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

    /** A piece list of room {@code room} (pieces as region, offset, length triples in KV buffer 0 / aux 0 / state 0). */
    private static WriteList list(long room, Object... pieces) {
        WriteList l = WriteList.builder(room, pieces.length / 3);
        for (int i = 0; i < pieces.length; i += 3) l.add((Region) pieces[i], 0, 0, (Long) pieces[i + 1], (Long) pieces[i + 2]);
        return l;
    }

    private String listRejected(WriteList l, boolean fatal) {
        WriteRejectedException e = assertThrows(WriteRejectedException.class, () -> gate.beginList(landing(), l));
        assertEquals(fatal, e.fatal(), e.getMessage());
        return e.getMessage();
    }

    @Test
    void aPieceListIsAdmittedOnceWithEveryPieceCheckedAndCountedWhole() throws WriteRejectedException {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{2}});
        WriteSink.Landing l = landing();
        WriteList ok = list(7, Region.KV, 2 * PAGE, 2 * PAGE, Region.KV, 5 * PAGE, PAGE, Region.AUX, 64L, 64L,
                Region.STATE, 2 * 128L, 128L);
        gate.beginList(l, ok);
        assertEquals(3 * PAGE + 64 + 128, l.payload(), "the whole list's payload is in flight");
        for (int i = 0; i < ok.count(); i++) assertTrue(l.pieceBuffer(i) != null, "piece " + i + " has its destination buffer");
        assertEquals(KVPoll.Transferring, rooms.statuses.status(7));
        assertFalse(r.closeAndDrain(0), "the list is one landing in flight until it ends");
        gate.end(l, true);
        assertEquals(3 * PAGE + 64 + 128, r.landedFrom.get(0), "the link's landed count holds the list's bytes, exactly");
        assertEquals(3 * PAGE + 64 + 128, r.bytesLanded.get());
    }

    @Test
    void aPieceListWithOnePieceOutsideTheRoomIsRefusedWhole() {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, 1, new int[][]{{2}});
        assertTrue(listRejected(list(7, Region.KV, 2 * PAGE, PAGE, Region.KV, 4 * PAGE, PAGE), false)
                .contains("pages [4, 4] touches memory room 7 does not own"));
        // (A refused list fails its room; the pages here differ only so that each refusal is the one named.)
        assertTrue(listRejected(list(7, Region.KV, 3 * PAGE, PAGE, Region.AUX, 0L, 64L), false).contains("not inside row 1"));
        assertTrue(listRejected(list(7, Region.KV, 5 * PAGE, PAGE, Region.KV, 8 * PAGE, PAGE), false).contains("piece 1"),
                "past the end of the buffer, naming the piece");
        assertTrue(listRejected(list(7, Region.KV, 2 * PAGE, 9 * PAGE), true).contains("larger than"));
        WriteList strangerBuffer = WriteList.builder(7, 1).add(Region.KV, 0, 3, 0, PAGE);
        assertTrue(listRejected(strangerBuffer, true).contains("no registered KV buffer 0/3"));
        assertEquals(0, r.landedFrom.get(0), "nothing of a refused list is counted");
        assertTrue(r.closeAndDrain(0), "nothing of a refused list is in flight");
    }

    @Test
    void aPieceListMeetsTheSameRoomRulesAsAWrite() {
        assertTrue(listRejected(list(9, Region.KV, 0L, PAGE), false).contains("room 9 is unknown"));
        room(7, new int[]{0}, -1, new int[0][]);
        WriteList l = list(7, Region.KV, 0L, PAGE);
        WriteRejectedException e = assertThrows(WriteRejectedException.class, () -> gate.beginList(new WriteSink.Landing(STRANGER, null), l));
        assertTrue(e.getMessage().contains("not one of the room's prefill ranks"), e.getMessage());
        rooms.get(7).slot.update(KVPoll.Success);
        assertTrue(listRejected(l, false).contains("already concluded"));
    }

    /** A strided write: {@code pieces} pieces of {@code piece} bytes every {@code stride} from {@code offset} of KV buffer 0. */
    private void stridedWrite(WriteSink.Landing l, long room, long offset, long piece, long stride, long pieces)
            throws WriteRejectedException {
        gate.begin(l, room, Region.KV, 0, 0, offset, (pieces - 1) * stride + piece, pieces * piece, piece, stride);
    }

    private String stridedRejected(long room, long offset, long piece, long stride, long pieces) {
        WriteRejectedException e = assertThrows(WriteRejectedException.class, () -> stridedWrite(landing(), room, offset, piece, stride, pieces));
        assertFalse(e.fatal(), e.getMessage());
        return e.getMessage();
    }

    @Test
    void aPageSentAgainInOtherPiecesIsRefused() throws WriteRejectedException {
        room(7, new int[]{2, 3}, -1, new int[0][]);
        WriteSink.Landing l = landing();
        gate.beginList(l, list(7, Region.KV, 2 * PAGE, PAGE));
        gate.end(l, true);
        String halves = listRejected(list(7, Region.KV, 2 * PAGE, PAGE / 2, Region.KV, 2 * PAGE + PAGE / 2, PAGE / 2), false);
        assertTrue(halves.contains("is not what prefill rank 0 at " + PREFILL + " writes of it (whole 512-byte items)"), halves);
        assertTrue(listRejected(list(7, Region.KV, 2 * PAGE, PAGE), false).contains("KV buffer 0 page 2 of room 7 was written twice by "
                + PREFILL));
        assertTrue(rejected(7, Region.KV, 0, 2 * PAGE, 2 * PAGE, false).contains("page 2 of room 7 was written twice"),
                "a run that starts at a page already written");
    }

    @Test
    void auxRowsAndStateSlotsComeOnceEach() throws WriteRejectedException {
        room(7, new int[]{0}, 1, new int[][]{{2, 3}});
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.AUX, 0, 0, 64, 64, 64, 64, 64);
        gate.end(l, true);
        assertTrue(rejected(7, Region.AUX, 0, 64, 64, false).contains("aux buffer 0 row 1 of room 7 was written twice"));
        assertTrue(rejected(7, Region.AUX, 0, 64, 32, false).contains("is not what"), "half a row");
        gate.begin(l, 7, Region.STATE, 0, 0, 2 * 128, 128, 128, 128, 128);
        gate.end(l, true);
        assertTrue(rejected(7, Region.STATE, 0, 2 * 128, 2 * 128, false).contains("state component 0 tensor 0 slot 2 of room 7 was written twice"));
        gate.begin(l, 7, Region.STATE, 0, 0, 3 * 128, 128, 128, 128, 128);
        gate.end(l, true);
    }

    @Test
    void aLinkWritesOnlyWhatItsCoverageDeclares() {
        // Another PP stage's rank: none of this KV buffer, no aux row, no state.
        Coverage nothing = new Coverage(new long[]{PAGE}, new long[]{0}, new long[]{0}, false, false, new long[][]{{128}},
                new long[][]{{0}}, new long[][]{{0}});
        room(7, new int[]{2}, 1, new int[][]{{2}}, nothing);
        assertTrue(rejected(7, Region.KV, 0, 2 * PAGE, PAGE, false).contains("writes no part of KV buffer 0 (its declared coverage)"));
        assertTrue(rejected(7, Region.AUX, 0, 64, 64, false).contains("writes no part of aux buffer 0"));
        assertTrue(rejected(7, Region.STATE, 0, 2 * 128, 128, false).contains("writes no part of state component 0 tensor 0"));
    }

    @Test
    void aHeadSliceIsTakenOnlyAsTheDeclaredSliceOfWholePages() throws WriteRejectedException {
        // 16 token slots of 32 bytes per page; this rank writes bytes [8, 24) of each (its heads).
        Coverage slice = new Coverage(new long[]{32}, new long[]{8}, new long[]{16}, false, false, new long[][]{{128}},
                new long[][]{{0}}, new long[][]{{0}});
        DecodeRoom r = room(7, new int[]{2, 3, 4}, -1, new int[0][], slice);
        WriteSink.Landing l = landing();
        stridedWrite(l, 7, 2 * PAGE + 8, 16, 32, 16);
        gate.end(l, true);
        assertTrue(stridedRejected(7, 2 * PAGE + 8, 16, 32, 32).contains("page 2 of room 7 was written twice"), "pages 2-3 again");
        assertTrue(stridedRejected(7, 3 * PAGE, 16, 32, 16).contains("is not what"), "another rank's heads");
        assertTrue(stridedRejected(7, 3 * PAGE + 8, 16, 32, 8).contains("is not what"), "half the page's tokens");
        assertTrue(stridedRejected(7, 3 * PAGE + 8, 8, 32, 32).contains("is not what"), "pieces of half the slice");
        assertTrue(rejected(7, Region.KV, 0, 3 * PAGE, PAGE, false).contains("is not what"), "the whole page");
        stridedWrite(l, 7, 3 * PAGE + 8, 16, 32, 32);
        gate.end(l, true);
        assertEquals(3 * 16 * 16, r.landedFrom.get(0), "pages 2, 3 and 4, each once");
    }

    @Test
    void aCpRankWritesOnlyItsShareOfThePages() throws WriteRejectedException {
        DecodeRoom r = room(7, new int[]{2, 3, 5}, -1, new int[0][]);
        int[] share = {5};
        DecodeRoom.Allowance a = r.allowance;
        r.allowance = new DecodeRoom.Allowance(a.pages(), a.sortedPages(), -1, a.state(), a.sortedState(), a.owed(), new int[][] {share},
                new int[][] {share}, new long[] {0});
        assertTrue(rejected(7, Region.KV, 0, 2 * PAGE, PAGE, false).contains("whose share of the room's pages they are not"));
        WriteSink.Landing l = landing();
        gate.begin(l, 7, Region.KV, 0, 0, 5 * PAGE, PAGE, PAGE, PAGE, PAGE);
        gate.end(l, true);
    }

    @Test
    void ownershipIsAConsecutiveRunInTheSortedIds() {
        int[] sorted = {1, 2, 4};
        assertEquals(0, WriteGate.runOf(sorted, 1, 2));
        assertEquals(2, WriteGate.runOf(sorted, 4, 1));
        assertEquals(-1, WriteGate.runOf(sorted, 2, 2), "3 is not owned");
        assertEquals(-1, WriteGate.runOf(sorted, 4, 2), "past the last id");
        assertEquals(-1, WriteGate.runOf(sorted, Long.MAX_VALUE / 64, 1));
    }
}
