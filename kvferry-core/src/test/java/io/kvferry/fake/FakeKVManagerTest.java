package io.kvferry.fake;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;

import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The fake backend holds an engine to the real managers' call order (SenderCallOrderTest,
 * ManagerArgumentsTest and RetriedRoomIdTest hold the real ones to it): an engine whose warm-up or
 * scheduler tests run on the fake meets the same refusals and failures there as on a transport.
 */
class FakeKVManagerTest {
    private final KVManager prefill = new FakeKVManager(DisaggregationMode.PREFILL);
    private final KVManager decode = new FakeKVManager(DisaggregationMode.DECODE);

    @Test
    void aRequestDoneInTheRightOrderSucceedsOnBothSides() {
        KVReceiver r = decode.createReceiver("fake:0", 1);
        assertEquals(KVPoll.Bootstrapping, r.poll());
        r.init(0);
        assertEquals(KVPoll.WaitingForInput, r.poll());
        r.sendMetadata(new int[]{3, 4}, 0);
        assertEquals(KVPoll.Success, r.poll());

        KVSender s = prefill.createSender("fake:0", 1);
        s.init(3, 0);
        s.send(new int[]{1, 2});
        assertEquals(KVPoll.WaitingForInput, s.poll(), "two of three pages sent");
        s.send(new int[]{5}, new int[][]{{0}});
        assertEquals(KVPoll.Success, s.poll());
        s.clear();
        r.clear();
    }

    @Test
    void aManagerOfTheOtherModeAndOneTornDownRefuseToCreate() {
        assertThrows(UnsupportedOperationException.class, () -> prefill.createReceiver("fake:0", 1));
        assertThrows(UnsupportedOperationException.class, () -> decode.createSender("fake:0", 1));
        prefill.teardown();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> prefill.createSender("fake:0", 2));
        assertTrue(e.getMessage().contains("torn down"), e.getMessage());
        assertThrows(IllegalStateException.class, prefill::registerToBootstrap);
    }

    @Test
    void aSecondSenderOrReceiverOfARoomInFlightIsRefusedUntilTheFirstIsCleared() {
        KVSender first = prefill.createSender("fake:0", 7);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> prefill.createSender("fake:0", 7));
        assertTrue(e.getMessage().contains("bootstrap_room 7 is already in flight"), e.getMessage());
        first.clear();
        prefill.createSender("fake:0", 7);

        KVReceiver r = decode.createReceiver("fake:0", 7);
        assertThrows(IllegalArgumentException.class, () -> decode.createReceiver("fake:0", 7));
        r.abort();
        assertThrows(KVTransferException.class, r::failureException); // drops the room, as clear() does
        decode.createReceiver("fake:0", 7);
    }

    @Test
    void chunksBeforeInitOrAfterTheLastAreRefusedAndLeaveTheRoomAsItWas() {
        KVSender s = prefill.createSender("fake:0", 2);
        assertThrows(IllegalStateException.class, () -> s.send(new int[]{1}));
        s.init(1, 0);
        s.send(new int[]{1});
        assertEquals(KVPoll.Success, s.poll());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> s.send(new int[0]));
        assertTrue(e.getMessage().contains("room 2 after its last chunk"), e.getMessage());
        assertEquals(KVPoll.Success, s.poll());
    }

    @Test
    void badCountsAndNullChunksFailTheRoomAsBadRequestNamingThem() {
        assertFailsAsBadRequest(s -> s.init(-1, 0), "negative page count -1");
        assertFailsAsBadRequest(s -> s.init(1, -2), "aux index -2");
        assertFailsAsBadRequest(s -> {
            s.init(1, 0);
            s.send(null);
        }, "kv indices are null");
        assertFailsAsBadRequest(s -> {
            s.init(1, 0);
            s.send(new int[]{1, 2});
        }, "exceed the 1 pages declared in init");

        KVReceiver r = decode.createReceiver("fake:0", 50);
        r.init(0);
        r.sendMetadata(new int[]{3, 3}, 0);
        KVTransferException e = assertThrows(KVTransferException.class, r::failureException);
        assertEquals(FailureKind.BAD_REQUEST, e.kind());
        assertTrue(e.reason().contains("page id 3 appears twice"), e.reason());
    }

    private long nextRoom = 100;

    private void assertFailsAsBadRequest(Consumer<KVSender> misuse, String named) {
        KVSender s = prefill.createSender("fake:0", nextRoom++);
        misuse.accept(s);
        assertEquals(KVPoll.Failed, s.poll());
        s.send(new int[]{1}); // chunks of a failed room are dropped, not refused
        KVTransferException e = assertThrows(KVTransferException.class, s::failureException);
        assertEquals(FailureKind.BAD_REQUEST, e.kind());
        assertTrue(e.reason().contains(named), e.reason());
    }

    @Test
    void metadataBeforeInitOrTwiceIsRefused() {
        KVReceiver r = decode.createReceiver("fake:0", 3);
        IllegalStateException early = assertThrows(IllegalStateException.class, () -> r.sendMetadata(new int[]{1}, 0));
        assertTrue(early.getMessage().contains("call init first"), early.getMessage());
        r.init(0);
        r.sendMetadata(new int[]{1}, 0);
        IllegalStateException again = assertThrows(IllegalStateException.class, () -> r.sendMetadata(new int[]{1}, 0));
        assertTrue(again.getMessage().contains("already sent") || again.getMessage().contains("Success"), again.getMessage());
    }

    /** As the real managers: the room is given up naming the call, and the failure raised is that one, not "aborted by AbortReq". */
    @Test
    void failureExceptionOnARoomInFlightFailsItNamingTheCallAndAnAbortIsRaisedAsAnAbort() {
        KVSender s = prefill.createSender("fake:0", 4);
        KVTransferException e = assertThrows(KVTransferException.class, s::failureException);
        assertEquals(FailureKind.ABORTED, e.kind());
        assertTrue(e.reason().contains("failure_exception() was called for room 4"), e.reason());
        assertEquals(KVPoll.Failed, s.poll());

        KVReceiver r = decode.createReceiver("fake:0", 5);
        r.init(0);
        r.abort();
        assertEquals(KVPoll.Failed, r.poll());
        assertEquals("Aborted by AbortReq.", assertThrows(KVTransferException.class, r::failureException).reason());
    }

    @Test
    void aSenderClearedBeforeItsLastChunkEndsFailedAsAborted() {
        KVSender s = prefill.createSender("fake:0", 6);
        s.init(2, 0);
        s.send(new int[]{1});
        s.clear();
        assertEquals(KVPoll.Failed, s.poll());
    }
}
