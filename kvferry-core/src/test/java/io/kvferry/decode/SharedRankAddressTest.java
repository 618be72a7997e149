package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.transport.Backend;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A registry (stale, wrong, or hostile: its read routes are unauthenticated, and a decode takes what it
 * answers) lists two prefill ranks of a room's route at one address. Each rank listens on its own, so
 * the decode used one link for both targets: it sent that link one TRANSFER_INFO per target (up to
 * 65,536 per room, on the scheduler thread, for a registry announcing a TP size that large) and the
 * room failed only at the prefill. The route is now refused naming both ranks and the address,
 * before any link is opened.
 */
class SharedRankAddressTest {
    private static final String TOKEN = "shared-rank-address-test-token";

    @Test
    void twoPrefillRanksAtOneAddressAreARoutingError() throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = ((InetSocketAddress) listener.getLocalAddress()).getPort();
            String addr = "127.0.0.1:" + registry.port();
            try (BootstrapClient c = new BootstrapClient(addr, TOKEN)) {
                for (int tp = 0; tp < 2; tp++) {
                    c.registerRank(new PrefillRankRegistration(2, tp, 1, 0, 1, 0, 1, 0, 1, 0, "127.0.0.1", port, 16, "bf16",
                            "follow_bootstrap_room", false, 0));
                }
            }
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = 16;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate(8 * 1024, 64), 1024);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port())
                    .authToken(TOKEN).connectTimeout(Duration.ofSeconds(2)).build(), Backend.of("tcp"));
            try {
                KVReceiver room = decode.createReceiver(addr, 31);
                room.init(0);
                awaitUntil(() -> room.poll() != KVPoll.Bootstrapping, "room 31's route was worked out");
                assertEquals(KVPoll.Failed, room.poll(), "a route through one link for two prefill ranks was taken");
                KVTransferException e = assertThrows(KVTransferException.class, room::failureException);
                assertEquals(FailureKind.ROUTING, e.kind(), e.getMessage());
                assertTrue(e.getMessage().contains("dp=0 cp=0 tp=0 pp=0 and dp=0 cp=0 tp=1 pp=0 at the same address 127.0.0.1:" + port),
                        e.getMessage());
                assertEquals(0, decode.directory.size(), "no link was opened");
            } finally {
                decode.teardown();
            }
        }
    }
}
