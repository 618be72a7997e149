package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.SmallRankArgs;
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
import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static io.kvferry.PlayedPrefill.wholeCoverage;
import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A link whose prefill closes it right after HELLO_ACK, lost before the directory listed it: its
 * reader's removal then finds nothing to remove. The listing must not keep the dead link (it
 * counted as a peer connection and stayed in the map until a next set-up of that endpoint, which
 * for a prefill gone for good never succeeds); the room routed meanwhile must fail, not hang.
 * The order is forced: the test holds the directory's session-key entry of that endpoint, which
 * the set-up writes between starting the reader and listing the link, until the reader handled the loss.
 */
class LinkLostBeforeListedTest {
    private static final String TOKEN = "dead-link-test-token";
    private static final int PAGE_SIZE = 16;

    @Test
    void aLinkLostBeforeItWasListedLeavesNoDeadPeerAndItsRoomFails() throws Exception {
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
                    .authToken(TOKEN).connectTimeout(Duration.ofSeconds(5)).prefillInfoTimeout(Duration.ofSeconds(1)).build(),
                    Backend.of("tcp"));
            try {
                @SuppressWarnings("unchecked")
                ConcurrentHashMap<String, byte[]> sessionKeys = (ConcurrentHashMap<String, byte[]>) field(decode.directory, "sessionKeys");
                CountDownLatch prefillClosed = new CountDownLatch(1);
                // Holds the endpoint's entry (so the set-up waits right after starting the reader) until the reader
                // handled the loss: it drops the prefill's cached topology last.
                Thread holder = Thread.ofPlatform().start(() -> sessionKeys.computeIfAbsent("127.0.0.1:" + port, k -> {
                    try {
                        prefillClosed.await();
                        awaitUntil(() -> decode.directory.cachedTopology(addr) == null, "the reader handled the link's loss");
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    return null;
                }));
                awaitUntil(() -> holder.getState() == Thread.State.WAITING, "the entry is held");

                KVReceiver r = decode.createReceiver(addr, 77);
                r.init(0);
                // The prefill: accepts the link, registers it, closes it at once, and is gone for good.
                try (ControlConnection c = new ControlConnection(server.accept())) {
                    byte[] challenge = Handshake.nonce();
                    c.send(new Challenge(challenge));
                    Hello h = assertInstanceOf(Hello.class, c.read());
                    c.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory()))
                            .signed(Handshake.key(TOKEN), h.decodeNonce()));
                }
                server.close();
                prefillClosed.countDown();
                holder.join(TimeUnit.SECONDS.toMillis(30));

                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (r.poll() != KVPoll.Failed) {
                    if (System.nanoTime() - deadline > 0) fail("room 77 did not conclude");
                    Thread.sleep(5);
                }
                KVTransferException e = assertThrows(KVTransferException.class, r::failureException);
                assertEquals(FailureKind.PREFILL_UNREACHABLE, e.kind(), e.getMessage());
                for (PrefillLink l : decode.directory.links()) assertTrue(!l.connection.isClosed(), "a dead link is still listed: " + l);
                assertEquals(0, decode.stats().peerConnections(), "no prefill is connected");
            } finally {
                decode.teardown();
            }
        }
    }

    private static Object field(Object owner, String name) throws ReflectiveOperationException {
        Field f = owner.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(owner);
    }
}
