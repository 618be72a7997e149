package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.prefill.PrefillKVManager;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Transfer infos that reach a prefill after their room failed there while it still collected
 * destinations (its sender aborted): a real destination is told the room failed when its info comes,
 * whether the info is valid or not; a dummy one (it concludes locally) is not told. Each decode
 * session here is played over a raw connection; the prefill runs one worker per link, so whatever it
 * queued for a link before an ABORT goes out before that ABORT's ACK, which makes "nothing was sent"
 * as checkable as "this was sent".
 */
@Timeout(60)
class LateDestinationTest extends TransferTestBase {
    private static final long ROOM = 77, BARRIER_ROOM = 999;

    private KVManager failedRoom(TestRank pm) {
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).transferWorkers(1).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVSender s = p.createSender(addr, ROOM);
        s.abort(); // no destination yet
        await(s::poll, KVPoll.Failed);
        return p;
    }

    /** A decode session of {@code instance}, accepted by the prefill. */
    private ControlConnection session(KVManager p, String sessionId, String instance, TestRank dm) throws IOException {
        ControlConnection c = ControlConnection.connect(((PrefillKVManager) p).endpoint(), Duration.ofSeconds(5));
        closeables.add(c);
        Challenge ch = assertInstanceOf(Challenge.class, c.read());
        Hello mine = decodeHello(sessionId, RegisteredMemory.from(dm.args(0, PAGE_SIZE)).describe());
        Hello h = new Hello(mine.sessionId(), instance, mine.fingerprint(), mine.dataPath(), 0, 1, 0, 0, mine.checksum(), mine.memory(),
                List.of(), Handshake.nonce(), null, null);
        c.send(h.signed(Handshake.key(TOKEN), ch.nonce()));
        assertTrue(assertInstanceOf(HelloAck.class, c.read()).accepted());
        return c;
    }

    /** Sends {@code info}, then an ABORT of another room, and returns the statuses of {@link #ROOM} read before its ACK. */
    private static List<Status> answersTo(ControlConnection c, TransferInfo info) throws IOException {
        c.send(info);
        c.send(new Abort(BARRIER_ROOM));
        List<Status> got = new ArrayList<>();
        while (true) {
            ControlMessage m = next(c);
            if (m instanceof AbortAck ack && ack.room() == BARRIER_ROOM) return got;
            if (m instanceof Status s && s.room() == ROOM) got.add(s);
        }
    }

    /** The next control message; the bytes of data frames are read past, as a decode that drops them would. */
    private static ControlMessage next(ControlConnection c) throws IOException {
        while (true) {
            ControlMessage m = c.read();
            if (m instanceof WriteList list) {
                c.skipPayload(list.payloadLength());
            } else if (m instanceof WriteHeader w) {
                c.skipPayload(w.length());
            } else {
                return m;
            }
        }
    }

    private static TransferInfo info(int page, boolean dummy) {
        return new TransferInfo(ROOM, dummy ? new int[0] : new int[]{page}, -1, new int[0][], 2, 0, dummy);
    }

    @Test
    void aRealDestinationIsToldWhenItsInfoComesValidOrNot() throws Exception {
        TestRank dm = rank();
        KVManager p = failedRoom(rank());
        List<Status> good = answersTo(session(p, "first", "one-instance", dm), info(1, false));
        assertEquals(1, good.size(), "one Failed STATUS: " + good);
        assertEquals(KVPoll.Failed, good.get(0).status());
        assertEquals(FailureKind.ABORTED, good.get(0).kind());
        // Another rank of the same decode instance, whose info names a page the decode does not have.
        List<Status> bad = answersTo(session(p, "second", "one-instance", dm), info(1_000_000, false));
        assertEquals(1, bad.size(), "one Failed STATUS (before the fix: none, it waited for its timeout): " + bad);
        assertEquals(KVPoll.Failed, bad.get(0).status());
    }

    /**
     * A decode that sends its transfer info again after the room concluded (a bug or a hostile peer):
     * the duplicate is refused, and the room's Success on the prefill stays (it turned Failed: the
     * completed transfer was counted and logged as a bad_request failure, and a scheduler that had not
     * polled it yet would have seen Failed).
     */
    @Test
    void aDuplicateInfoAfterTheRoomSucceededLeavesItSucceeded() throws Exception {
        KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL, cfg(1, 0).build());
        closeables.add(p);
        p.registerToBootstrap();
        ControlConnection c = session(p, "decode", "one-instance", rank());
        TransferInfo info = new TransferInfo(ROOM, new int[]{1}, 0, new int[0][], 1, 0, false);
        c.send(info);
        KVSender s = p.createSender(addr, ROOM);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1, 0);
        s.send(new int[]{2});
        ControlMessage m;
        do {
            m = next(c);
        } while (!(m instanceof Status st && st.room() == ROOM && st.status() == KVPoll.Success));
        await(s::poll, KVPoll.Success);
        List<Status> got = answersTo(c, info);
        assertEquals(1, got.size(), "the duplicate is refused: " + got);
        assertEquals(KVPoll.Failed, got.get(0).status());
        // The sender latched Success when polled; the room's own record must not have failed after it either.
        assertEquals(List.of(), p.inspect().recentFailures(), "a concluded room stays Success");
        assertEquals(Map.of(), p.inspect().failuresByKind());
    }

    @Test
    void aDummyDestinationOfAFailedRoomIsNotToldItFailed() throws Exception {
        KVManager p = failedRoom(rank());
        List<Status> got = answersTo(session(p, "dummy", "one-instance", rank()), info(0, true));
        assertEquals(List.of(), got, "a dummy rank concludes locally: a Failed STATUS would fail a room its real ranks complete");
    }
}
