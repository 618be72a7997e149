package io.kvferry.decode;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.transport.Backend;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every request names its prefill's bootstrap address (the router's choice, or whoever sends the decode
 * requests), and prefill instances come and go on new addresses (a restarted pod gets a new IP). The
 * decode kept a registry client per address it ever saw, each with its own JDK HttpClient, which starts
 * a selector thread: one platform thread per address, for the manager's life. Many distinct addresses
 * (churn, or a sender that makes them up) grew the decode's threads without bound. Its registry clients
 * now share one HttpClient.
 */
class BootstrapAddressChurnTest {
    private static final int ADDRESSES = 40;

    private static long selectorThreads() {
        return Thread.getAllStackTraces().keySet().stream().filter(t -> t.isAlive() && t.getName().contains("SelectorManager")).count();
    }

    /**
     * A port nothing listens on, held for the test: bound on the wildcard address and never listening, so a lookup there is
     * refused at once on any loopback address, and no server can bind that port on any address meanwhile. It was bound on
     * 127.0.0.1 and closed at once: the next bind(0), another process's or a lookup's own ephemeral port, could take it, and
     * then a "dead" registry answered or a lookup hung.
     */
    private static Socket heldPort() throws IOException {
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress("0.0.0.0", 0));
        return hold;
    }

    @Test
    void manyBootstrapAddressesDoNotCostAThreadEach() throws Exception {
        try (Arena arena = Arena.ofShared()) {
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = 16;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate(8 * 1024, 64), 1024);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", 1)
                    .authToken("churn-test-token").prefillInfoTimeout(Duration.ZERO).build(), Backend.of("tcp"));
            try (Socket hold = heldPort()) {
                long before = selectorThreads();
                int port = hold.getLocalPort();
                for (int i = 0; i < ADDRESSES; i++) {
                    // Distinct addresses, all loopback, where nothing listens.
                    KVReceiver room = decode.createReceiver("127.0.0." + (2 + i) + ":" + port, 500 + i);
                    room.init(0);
                    awaitUntil(() -> room.poll() == KVPoll.Failed, "the lookup of room " + (500 + i) + "'s registry failed");
                }
                assertEquals(ADDRESSES, decode.directory.clientCount(), "a registry client per address");
                long grown = selectorThreads() - before;
                assertTrue(grown <= 1, ADDRESSES + " bootstrap addresses started " + grown + " HttpClient selector threads");
            } finally {
                decode.teardown();
            }
        }
    }
}
