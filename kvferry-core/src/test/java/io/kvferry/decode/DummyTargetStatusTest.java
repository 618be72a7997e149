package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
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

import static io.kvferry.PlayedPrefill.awaitUntil;
import static io.kvferry.PlayedPrefill.wholeCoverage;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * MLA with decode TP below prefill TP: one prefill rank of the group writes the room, the others get a
 * dummy transfer info and write nothing, and the decode waits for one Success. A Success from a dummy
 * rank (a broken or hostile prefill holding the token) must not stand in for the writing rank's: it
 * owes 0 bytes, so its count checks out, and before the fix it concluded the room with none of its
 * KV written (a silent wrong result). It now fails the room naming the rank.
 */
class DummyTargetStatusTest {
    private static final String TOKEN = "dummy-target-status-test-token";
    private static final int PAGE_SIZE = 16;
    private static final int PAGE_BYTES = 1024;
    private static final int AUX_BYTES = 64;

    @Test
    void aSuccessFromADummyPrefillRankDoesNotConcludeTheRoom() throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel real = ServerSocketChannel.open();
             ServerSocketChannel dummy = ServerSocketChannel.open()) {
            String addr = "127.0.0.1:" + registry.port();
            register(addr, real, 0);
            register(addr, dummy, 1);
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = PAGE_SIZE;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate(8 * PAGE_BYTES, 64), PAGE_BYTES);
            args.addAuxBuffer(arena.allocate(8 * AUX_BYTES, 64), AUX_BYTES);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).mla(true)
                    .bootstrap("127.0.0.1", registry.port()).authToken(TOKEN).connectTimeout(Duration.ofSeconds(5)).build(),
                    Backend.of("tcp"));
            try {
                KVReceiver room = decode.createReceiver(addr, 77);
                room.init(0);
                // The decode opens its links in target order: prefill TP rank 0 (the one that writes), then rank 1.
                try (ControlConnection writer = handshake(real, 0);
                     ControlConnection nonWriter = handshake(dummy, 1)) {
                    awaitUntil(() -> room.poll() == KVPoll.WaitingForInput, "the room bootstrapped");
                    room.sendMetadata(new int[]{3}, 2, null, 0);
                    assertFalse(assertInstanceOf(TransferInfo.class, writer.read()).dummy());
                    assertTrue(assertInstanceOf(TransferInfo.class, nonWriter.read()).dummy());
                    // The dummy rank reports Success (0 bytes: all it owes) before the writing rank sent a byte.
                    nonWriter.send(Status.success(77, 1, 0, 0, false));
                    awaitUntil(() -> room.poll() != KVPoll.WaitingForInput && room.poll() != KVPoll.Transferring, "room 77 concluded");
                    assertEquals(KVPoll.Failed, room.poll(), "a dummy rank's Success concluded a room none of whose KV was written");
                    String reason = decode.rooms.statuses.reason(77);
                    assertTrue(reason.contains("writes nothing") && reason.contains("prefill rank 1"), reason);
                    assertEquals(FailureKind.INTEGRITY, assertThrows(KVTransferException.class, room::failureException).kind());
                }
            } finally {
                decode.teardown();
            }
        }
    }

    @Test
    void theWritingRanksSuccessStillConcludesTheRoom() throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel real = ServerSocketChannel.open();
             ServerSocketChannel dummy = ServerSocketChannel.open();
             Arena payload = Arena.ofConfined()) {
            String addr = "127.0.0.1:" + registry.port();
            register(addr, real, 0);
            register(addr, dummy, 1);
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = PAGE_SIZE;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate(8 * PAGE_BYTES, 64), PAGE_BYTES);
            args.addAuxBuffer(arena.allocate(8 * AUX_BYTES, 64), AUX_BYTES);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).mla(true)
                    .bootstrap("127.0.0.1", registry.port()).authToken(TOKEN).connectTimeout(Duration.ofSeconds(5)).build(),
                    Backend.of("tcp"));
            try {
                KVReceiver room = decode.createReceiver(addr, 78);
                room.init(0);
                try (ControlConnection writer = handshake(real, 0);
                     ControlConnection nonWriter = handshake(dummy, 1)) {
                    awaitUntil(() -> room.poll() == KVPoll.WaitingForInput, "the room bootstrapped");
                    room.sendMetadata(new int[]{3}, 2, null, 0);
                    assertInstanceOf(TransferInfo.class, writer.read());
                    assertInstanceOf(TransferInfo.class, nonWriter.read());
                    write(writer, 78, Region.KV, 3L * PAGE_BYTES, payload.allocate(PAGE_BYTES));
                    write(writer, 78, Region.AUX, 2L * AUX_BYTES, payload.allocate(AUX_BYTES));
                    writer.send(Status.success(78, 0, PAGE_BYTES + AUX_BYTES, 0, false));
                    awaitUntil(() -> room.poll() != KVPoll.WaitingForInput && room.poll() != KVPoll.Transferring, "room 78 concluded");
                    assertEquals(KVPoll.Success, room.poll(), () -> "room 78: " + decode.rooms.statuses.reason(78));
                }
            } finally {
                decode.teardown();
            }
        }
    }

    private static void register(String addr, ServerSocketChannel server, int tpRank) throws IOException {
        server.bind(new InetSocketAddress("127.0.0.1", 0));
        int port = ((InetSocketAddress) server.getLocalAddress()).getPort();
        new BootstrapClient(addr, TOKEN).registerRank(new PrefillRankRegistration(2, tpRank, 1, 0, 1, 0, 1, 0, 1, 0,
                "127.0.0.1", port, PAGE_SIZE, "bf16", "follow_bootstrap_room", false, 0));
    }

    /** Plays prefill TP rank {@code rank}'s side of the handshake of the link the decode opens to it. */
    private static ControlConnection handshake(ServerSocketChannel server, int rank) throws Exception {
        ControlConnection prefill = new ControlConnection(server.accept());
        byte[] challenge = Handshake.nonce();
        prefill.send(new Challenge(challenge));
        Hello h = assertInstanceOf(Hello.class, prefill.read());
        prefill.send(HelloAck.accept(rank, rank, "tcp", "", h.checksum(), wholeCoverage(h.memory()))
                .signed(Handshake.key(TOKEN), h.decodeNonce()));
        return prefill;
    }

    private static void write(ControlConnection prefill, long room, Region region, long offset, MemorySegment data) throws IOException {
        ByteBuffer frame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        FrameCodec.putWriteFrame(frame, room, region, 0, 0, offset, data.byteSize());
        frame.flip();
        prefill.writeFrames(new ByteBuffer[]{frame, data.asByteBuffer()}, 0, 2, frame.remaining() + data.byteSize());
    }
}
