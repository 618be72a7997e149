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
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicReference;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static io.kvferry.PlayedPrefill.wholeCoverage;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A prefill rank that completes the handshake and then never reads again (a hostile one, or a broken
 * one whose reader is stuck while its timer still sends heartbeats, so the decode's heartbeat timeout
 * never fires). The decode writes each room's TRANSFER_INFO (and a clear's ABORT) on the scheduler
 * thread; once the socket buffers are full that write blocked forever, and with it the scheduler and
 * every room of every prefill. The decode's write-stall watchdog now cuts such a link after the
 * write-stall timeout, as the prefill's does: the blocked send fails, its room and the link's rooms
 * fail (peer_lost, naming the stall), and the scheduler goes on.
 */
class NonReadingPrefillTest {
    private static final String TOKEN = "non-reading-prefill-test-token";
    private static final int PAGE_SIZE = 16;
    private static final int PAGE_BYTES = 64;
    /** 64 KiB of page ids per TRANSFER_INFO: a few hundred fill any loopback socket's buffers. */
    private static final int PAGES = 16_384;
    private static final int ROOMS = 2_000;

    @Test
    void aPrefillThatStopsReadingCannotBlockTheDecodesScheduler() throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            String addr = "127.0.0.1:" + registry.port();
            new BootstrapClient(addr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, "127.0.0.1",
                    ((InetSocketAddress) server.getLocalAddress()).getPort(), PAGE_SIZE, "bf16", "follow_bootstrap_room", false, 0));
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = PAGE_SIZE;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate((long) PAGES * PAGE_BYTES, 64), PAGE_BYTES);
            // Heartbeats far apart: the link's silence is never what cuts it here (a stuck prefill's timer keeps beating).
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port())
                    .authToken(TOKEN).connectTimeout(Duration.ofSeconds(2)).heartbeat(Duration.ofSeconds(60), 10)
                    .writeStallTimeout(Duration.ofMillis(300)).build(), Backend.of("tcp"));
            int[] pages = new int[PAGES];
            for (int i = 0; i < PAGES; i++) pages[i] = i;
            AtomicReference<KVReceiver> blocked = new AtomicReference<>();
            AtomicReference<Throwable> failed = new AtomicReference<>();
            // The decode's scheduler: a room after another, each sending its metadata, until one fails.
            Thread scheduler = Thread.ofPlatform().name("played-scheduler").start(() -> {
                try {
                    for (int i = 0; i < ROOMS; i++) {
                        KVReceiver room = decode.createReceiver(addr, 1000 + i);
                        room.init(0);
                        awaitUntil(() -> room.poll() != KVPoll.Bootstrapping, "room " + (1000 + i) + " bootstrapped");
                        if (room.poll() == KVPoll.Failed) {
                            blocked.set(room);
                            return;
                        }
                        room.sendMetadata(pages, -1, null, 0);
                        if (room.poll() == KVPoll.Failed) {
                            blocked.set(room);
                            return;
                        }
                    }
                } catch (Throwable t) {
                    failed.set(t);
                }
            });
            try (ControlConnection prefill = new ControlConnection(server.accept())) {
                prefill.send(new Challenge(Handshake.nonce()));
                Hello h = assertInstanceOf(Hello.class, prefill.read());
                prefill.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory()))
                        .signed(Handshake.key(TOKEN), h.decodeNonce()));
                // ... and never reads again.
                awaitUntil(() -> !scheduler.isAlive(), "the decode's scheduler got past a prefill that stopped reading");
                scheduler.join();
                if (failed.get() != null) throw new AssertionError(failed.get());
                KVReceiver room = blocked.get();
                assertNotNull(room, "every room's metadata went out: the socket never filled");
                KVTransferException e = assertThrows(KVTransferException.class, room::failureException);
                assertEquals(FailureKind.PEER_LOST, e.kind(), e.getMessage());
                // Its send failed naming the stall, or the link's loss failed it first (SGLang's words for a lost prefill).
                assertTrue(e.getMessage().contains("no write progress") || e.getMessage().contains("Lost connection with prefill instance"),
                        e.getMessage());
            } finally {
                decode.teardown();
            }
        }
    }
}
