package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.ThreadStates;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.session.RoomStatusTable;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static io.kvferry.PlayedPrefill.wholeCoverage;
import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A reader that fails a room (its link lost, a write of it refused) while another reader of the room
 * (a TCP stripe's, another prefill rank's) concludes it: only a room that has not concluded fails,
 * atomically, so a room verified complete stays Success. The order is forced: the test holds the
 * room's status slot, lets the reader reach the room's failure, and concludes the room itself right
 * then, as that other reader would. Also: a reader that acts on a room it found by id (a refused
 * write, a lost link's rooms) never fails a retry that took that id after the room was cleared.
 */
class LinkLossAfterSuccessTest {
    private static final String TOKEN = "late-loss-test-token";
    private static final int PAGE_SIZE = 16;
    private static final long ROOM = 88;

    @Test
    void aRoomThatSucceededWhileItsLinkWasBeingLostStaysSuccess() throws Exception {
        withRoomAwaitingKv((decode, r, prefill, addr) -> {
            PrefillLink link = decode.directory.links().iterator().next();
            RoomStatusTable.Slot slot = decode.rooms.statuses.slot(ROOM);
            synchronized (slot) {
                prefill.close(); // the link is lost...
                awaitUntil(() -> ThreadStates.blockedOn(link.reader, slot), "the reader reached the room's failure");
                slot.advance(KVPoll.Success); // ...while another reader of the room concludes it
            }
            link.reader.join(TimeUnit.SECONDS.toMillis(30));
            assertEquals(KVPoll.Success, r.poll(), "a room concluded before its link's loss reached it was failed");
        });
    }

    /** The same for a write the gate refuses (a page not the room's) while another reader concludes the room. */
    @Test
    void aRoomThatSucceededWhileAWriteForItWasRefusedStaysSuccess() throws Exception {
        withRoomAwaitingKv((decode, r, prefill, addr) -> {
            PrefillLink link = decode.directory.links().iterator().next();
            RoomStatusTable.Slot slot = decode.rooms.statuses.slot(ROOM);
            try (Arena payload = Arena.ofConfined()) {
                MemorySegment page = payload.allocate(1024);
                ByteBuffer frame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
                FrameCodec.putWriteFrame(frame, ROOM, Region.KV, 0, 0, 5 * 1024L, page.byteSize()); // page 5: the room asked for page 1
                frame.flip();
                synchronized (slot) {
                    prefill.writeFrames(new ByteBuffer[]{frame, page.asByteBuffer()}, 0, 2, frame.remaining() + page.byteSize());
                    awaitUntil(() -> ThreadStates.blockedOn(link.reader, slot), "the reader reached the room's failure");
                    slot.advance(KVPoll.Success);
                }
            }
            awaitUntil(() -> !ThreadStates.blockedOn(link.reader, slot), "the reader went on");
            synchronized (slot) { // the reader took the slot: its change, if any, is made once it let go
                assertEquals(KVPoll.Success, slot.status(), "a room concluded before a refused write's failure reached it was failed");
            }
            assertEquals(KVPoll.Success, r.poll());
            prefill.close();
        });
    }

    /**
     * A write of the room passed the gate's checks and waits for the room's slot (to mark it
     * Transferring) when the scheduler clears the room and a retry takes its id on the same prefill
     * rank; the write is then refused ("was cleared"). That refusal is the cleared room's: the retry
     * goes on (it was failed by id, WRITE_REJECTED). A Failed STATUS for the retry from the prefill then
     * shows the retry's first failure, and is the barrier that the refused write was acted on.
     */
    @Test
    void aWriteRefusedForAClearedRoomLeavesTheRetryOfItsIdAlone() throws Exception {
        withRoomAwaitingKv((decode, r, prefill, addr) -> {
            PrefillLink link = decode.directory.links().iterator().next();
            RoomStatusTable.Slot slot = decode.rooms.get(ROOM).slot;
            KVReceiver retry;
            try (Arena payload = Arena.ofConfined()) {
                MemorySegment page = payload.allocate(1024);
                ByteBuffer frame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
                FrameCodec.putWriteFrame(frame, ROOM, Region.KV, 0, 0, 1024L, page.byteSize()); // page 1: the room's own
                frame.flip();
                synchronized (slot) {
                    prefill.writeFrames(new ByteBuffer[]{frame, page.asByteBuffer()}, 0, 2, frame.remaining() + page.byteSize());
                    awaitUntil(() -> ThreadStates.blockedOn(link.reader, slot), "the write passed the gate's checks");
                    r.clear();
                    retry = decode.createReceiver(addr, ROOM);
                    retry.init(0);
                    awaitUntil(() -> retry.poll() == KVPoll.WaitingForInput, "the retry bootstrapped on the same prefill rank");
                }
            }
            prefill.send(new Status(ROOM, KVPoll.Failed, FailureKind.TRANSFER_ERROR, 0, "the barrier"));
            awaitUntil(() -> retry.poll() == KVPoll.Failed, "the barrier's STATUS reached the retry");
            KVTransferException e = assertThrows(KVTransferException.class, retry::failureException);
            assertEquals(FailureKind.TRANSFER_ERROR, e.kind(), "the cleared room's refused write failed its retry: " + e.getMessage());
        });
    }

    /**
     * A lost link's reader walks the ids of the rooms the link held; one of them was cleared and taken by a
     * retry that is not on this link (not bootstrapped yet), its entry still in the walk (the clear takes it
     * out after the record). The retry is not the lost link's to fail.
     */
    @Test
    void aLostLinkLeavesARetryOfAnIdItHeldAlone() throws Exception {
        withRoomAwaitingKv((decode, r, prefill, addr) -> {
            PrefillLink link = decode.directory.links().iterator().next();
            r.clear();
            KVReceiver retry = decode.createReceiver(addr, ROOM);
            link.rooms.add(ROOM); // what the walk may still read: the cleared room's entry
            prefill.close();
            link.reader.join(TimeUnit.SECONDS.toMillis(30));
            assertEquals(false, link.reader.isAlive(), "the lost link's reader ended");
            assertEquals(KVPoll.Bootstrapping, retry.poll(), "the link's loss failed a room it had no part in");
        });
    }

    /**
     * An ABORT_ACK for a room that sent no ABORT (a buggy prefill, or one answering a cleared room whose
     * id a retry took) does not count: a release of the room that aborts it later must wait for the ACK of
     * its own ABORT (on a one-sided link its pages are reused once every rank acknowledged).
     */
    @Test
    void aStrayAbortAckDoesNotStandInForTheAnswerToTheRoomsOwnAbort() throws Exception {
        withRoomAwaitingKv((decode, r, prefill, addr) -> {
            PrefillLink link = decode.directory.links().iterator().next();
            DecodeRoom room = decode.rooms.get(ROOM);
            prefill.send(new AbortAck(ROOM, 0));
            // A barrier on the same connection: the reader handles frames in order.
            prefill.send(new Status(ROOM, KVPoll.Failed, FailureKind.TRANSFER_ERROR, 0, "the barrier"));
            awaitUntil(() -> r.poll() == KVPoll.Failed, "the barrier reached the room");
            assertEquals(List.of(link), room.awaitAbortAcks(List.of(link), 0), "a stray ABORT_ACK was taken as the room's");
        });
    }

    private interface RoomAwaitingKv {
        void run(DecodeKVManager decode, KVReceiver receiver, ControlConnection prefill, String bootstrapAddr) throws Exception;
    }

    /** A decode rank with room {@link #ROOM} bootstrapped and its metadata sent to a prefill rank the test plays. */
    private static void withRoomAwaitingKv(RoomAwaitingKv body) throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = ((InetSocketAddress) server.getLocalAddress()).getPort();
            String addr = "127.0.0.1:" + registry.port();
            new BootstrapClient(addr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                    "127.0.0.1", port, PAGE_SIZE, "bf16", "follow_bootstrap_room", false, 0));
            KVArgs args = SmallRankArgs.of(arena, PAGE_SIZE);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port())
                    .authToken(TOKEN).connectTimeout(Duration.ofSeconds(5)).build(), Backend.of("tcp"));
            try {
                KVReceiver r = decode.createReceiver(addr, ROOM);
                r.init(0);
                try (ControlConnection prefill = new ControlConnection(server.accept())) {
                    byte[] challenge = Handshake.nonce();
                    prefill.send(new Challenge(challenge));
                    Hello h = assertInstanceOf(Hello.class, prefill.read());
                    prefill.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory()))
                            .signed(Handshake.key(TOKEN), h.decodeNonce()));
                    awaitUntil(() -> r.poll() == KVPoll.WaitingForInput, "the room bootstrapped");
                    r.sendMetadata(new int[]{1}, 0, null, 0);
                    assertInstanceOf(TransferInfo.class, prefill.read());
                    body.run(decode, r, prefill, addr);
                }
            } finally {
                decode.teardown();
            }
        }
    }
}
