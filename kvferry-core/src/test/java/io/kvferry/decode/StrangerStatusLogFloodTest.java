package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
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
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;

import static io.kvferry.PlayedPrefill.wholeCoverage;
import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

/**
 * A prefill rank linked to this decode (it holds the cluster token) sends STATUS frames for a room that is not
 * its own, as fast as it likes. Each was ignored with a WARN line: an authenticated peer could write log lines at
 * wire rate. Now one warning a second names how many more came (the rest at debug), as the prefill limits the
 * warnings an unauthenticated peer can cause. The manager's ticker is held still: however many, one warning;
 * the next second, one more.
 */
class StrangerStatusLogFloodTest {
    private static final String TOKEN = "stranger-status-test-token";
    private static final int PAGE_SIZE = 16;
    private static final int PAGE_BYTES = 1024;
    private static final int AUX_BYTES = 64;
    private static final int FLOOD = 200;

    @Test
    void statusesForAnotherPrefillsRoomWarnOnceASecond() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000_000L);
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registryA = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             KVBootstrapServer registryB = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel serverA = ServerSocketChannel.open();
             ServerSocketChannel serverB = ServerSocketChannel.open()) {
            String addrA = register(registryA, serverA), addrB = register(registryB, serverB);
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = PAGE_SIZE;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate(8 * PAGE_BYTES, 64), PAGE_BYTES);
            args.addAuxBuffer(arena.allocate(8 * AUX_BYTES, 64), AUX_BYTES);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registryA.port())
                    .authToken(TOKEN).connectTimeout(Duration.ofSeconds(5)).ticker(now::get).build(), Backend.of("tcp"));
            try (Arena payload = Arena.ofConfined()) {
                KVReceiver roomA = decode.createReceiver(addrA, 88);
                roomA.init(0);
                try (ControlConnection prefillA = accept(serverA, roomA, new int[]{1}, 0)) {
                    KVReceiver roomB = decode.createReceiver(addrB, 89);
                    roomB.init(0);
                    try (ControlConnection prefillB = accept(serverB, roomB, new int[]{2}, 1)) {
                        for (int i = 0; i < FLOOD; i++) {
                            prefillB.send(new Status(88, KVPoll.Failed, FailureKind.TRANSFER_ERROR, 0, "not yours " + i));
                        }
                        // B's own room, after the flood on the same connection: once it succeeded, every status before it was read.
                        write(prefillB, 89, Region.KV, 2L * PAGE_BYTES, payload.allocate(PAGE_BYTES));
                        write(prefillB, 89, Region.AUX, AUX_BYTES, payload.allocate(AUX_BYTES));
                        prefillB.send(Status.success(89, 0, PAGE_BYTES + AUX_BYTES, 0, false));
                        awaitUntil(() -> roomB.poll() != KVPoll.Transferring && roomB.poll() != KVPoll.WaitingForInput, "room 89 concluded");
                        assertEquals(KVPoll.Success, roomB.poll(), () -> "room 89: " + decode.rooms.statuses.reason(89));
                        assertNotEquals(KVPoll.Failed, roomA.poll(), "another prefill's status failed room 88");
                        assertEquals(1, decode.reader.strangerStatusWarnings(), "warnings for " + FLOOD + " stray statuses within one second");
                        now.addAndGet(1_000_000_000L);
                        prefillB.send(new Status(88, KVPoll.Failed, FailureKind.TRANSFER_ERROR, 0, "not yours, a second later"));
                        awaitUntil(() -> decode.reader.strangerStatusWarnings() == 2, "one more warning the next second");
                        assertNotEquals(KVPoll.Failed, roomA.poll(), "another prefill's status failed room 88");
                    }
                }
            } finally {
                decode.teardown();
            }
        }
    }

    private static String register(KVBootstrapServer registry, ServerSocketChannel server) throws IOException {
        server.bind(new InetSocketAddress("127.0.0.1", 0));
        int port = ((InetSocketAddress) server.getLocalAddress()).getPort();
        String addr = "127.0.0.1:" + registry.port();
        new BootstrapClient(addr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                "127.0.0.1", port, PAGE_SIZE, "bf16", "follow_bootstrap_room", false, 0));
        return addr;
    }

    /** Plays a prefill rank's side of the link the decode opens for {@code room}, up to its transfer info. */
    private static ControlConnection accept(ServerSocketChannel server, KVReceiver room, int[] pages, int auxRow) throws Exception {
        ControlConnection prefill = new ControlConnection(server.accept());
        byte[] challenge = Handshake.nonce();
        prefill.send(new Challenge(challenge));
        Hello h = assertInstanceOf(Hello.class, prefill.read());
        prefill.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory()))
                .signed(Handshake.key(TOKEN), h.decodeNonce()));
        awaitUntil(() -> room.poll() == KVPoll.WaitingForInput, "the room bootstrapped");
        room.sendMetadata(pages, auxRow, null, 0);
        assertInstanceOf(TransferInfo.class, prefill.read());
        return prefill;
    }

    private static void write(ControlConnection prefill, long room, Region region, long offset, MemorySegment data) throws IOException {
        ByteBuffer frame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        FrameCodec.putWriteFrame(frame, room, region, 0, 0, offset, data.byteSize());
        frame.flip();
        prefill.writeFrames(new ByteBuffer[]{frame, data.asByteBuffer()}, 0, 2, frame.remaining() + data.byteSize());
    }
}
