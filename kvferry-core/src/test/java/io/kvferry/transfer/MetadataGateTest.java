package io.kvferry.transfer;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVTransferException;
import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** SGLang's corruption guard: Success only when the aux row's bootstrap_room column holds the request's room. */
@Timeout(60)
class MetadataGateTest extends TransferTestBase {
    KVManager prefill;
    KVManager decode;
    TestRank pm;
    TestRank dm;

    void setUpPair() {
        pm = rank();
        dm = rank();
        prefill = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVArgs args = dm.args(0, PAGE_SIZE);
        args.auxRoomBuffer = 0;
        decode = KVFerry.createManager("tcp", args, DisaggregationMode.DECODE, cfg(1, 0).build());
        closeables.add(decode);
    }

    KVPoll transfer(long room, long roomWrittenByPrefill, int dstRow) {
        KVReceiver recv = decode.createReceiver(addr, room);
        bootstrap(recv, 0);
        // A stale room from a previous occupant of the row must not satisfy the gate.
        dm.aux[0].set(ValueLayout.JAVA_LONG_UNALIGNED, dstRow * 64L, room);
        recv.sendMetadata(new int[]{2, 3}, dstRow, null, 0);
        assertEquals(0L, dm.aux[0].get(ValueLayout.JAVA_LONG_UNALIGNED, dstRow * 64L), "send_metadata clears the column");
        KVSender send = prefill.createSender(addr, room);
        await(send::poll, KVPoll.WaitingForInput);
        pm.aux[0].set(ValueLayout.JAVA_LONG_UNALIGNED, 5 * 64L, roomWrittenByPrefill);
        send.init(2, 5);
        send.send(new int[]{7, 8});
        long deadline = System.nanoTime() + 10_000_000_000L;
        KVPoll st;
        while ((st = recv.poll()) != KVPoll.Success && st != KVPoll.Failed && System.nanoTime() < deadline) Thread.onSpinWait();
        if (st == KVPoll.Failed) {
            KVTransferException e = failed(recv::failureException);
            lastFailure = e.getMessage();
            lastKind = e.kind();
        }
        return st;
    }

    String lastFailure;
    FailureKind lastKind;

    @Test
    void matchingRoomPasses() {
        setUpPair();
        assertEquals(KVPoll.Success, transfer(1234, 1234, 3));
    }

    @Test
    void aDifferentRoomIsMetadataCorruption() {
        setUpPair();
        assertEquals(KVPoll.Failed, transfer(1234, 999, 3));
        assertTrue(lastFailure.contains("Metadata corruption detected - bootstrap_room mismatch (expected 1234, found 999)"),
                lastFailure);
    }

    @Test
    void aColumnNeverWrittenFailsInsteadOfHanging() {
        setUpPair();
        assertEquals(KVPoll.Failed, transfer(77, 0, 1));
        assertTrue(lastFailure.contains("Metadata not written"), lastFailure);
        assertEquals(FailureKind.INTEGRITY, lastKind);
    }

    @Test
    void theGateMustNameARealAuxBuffer() {
        TestRank r = rank();
        KVArgs args = r.args(0, PAGE_SIZE);
        args.auxRoomBuffer = 7;
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KVFerry.createManager("tcp", args, DisaggregationMode.DECODE, cfg(1, 0).build()));
        assertTrue(e.getMessage().contains("auxRoomBuffer 7"));
    }
}
