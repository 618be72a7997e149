package io.kvferry.decode;

import io.kvferry.KVFerry;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.PrefillServerInfo;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.transport.Backend;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every request names its prefill's bootstrap address, and addresses churn (prefills restarted on new IPs) or are
 * made up by whoever sends the decode requests. The decode kept a cached topology, rank endpoints and the DP
 * lookups' state for every address it ever saw: maps that grew by an entry per address for the manager's life.
 * They are now bounded as the registry clients are ({@link LinkDirectory#MAX_ADDRESSES}, lowered here to 8): a full
 * map is emptied, and an address whose entry went is looked up again when it comes back. One registry listening on
 * every loopback address stands for many prefill instances at 127.0.0.x.
 */
class BootstrapAddressBoundTest {
    private static final String TOKEN = "address-bound-test-token";
    private static final int CAP = 8;
    private static final int ADDRESSES = 40;

    @Test
    void perAddressMapsStayBoundedAndADroppedAddressIsLookedUpAgain() throws Exception {
        try (Arena arena = Arena.ofShared();
             KVBootstrapServer registry = KVFerry.startBootstrapServer("0.0.0.0", 0, TOKEN)) {
            new BootstrapClient("127.0.0.1:" + registry.port(), TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1,
                    0, "127.0.0.1", 7000, 16, "bf16", "follow_bootstrap_room", false, 0));
            KVArgs args = new KVArgs();
            args.engineRank = 0;
            args.pageSize = 16;
            args.kvCacheDtypeStr = "bf16";
            args.addKvBuffer(arena.allocate(8 * 1024, 64), 1024);
            DecodeKVManager decode = new DecodeKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port())
                    .authToken(TOKEN).build(), Backend.of("tcp"));
            try {
                LinkDirectory directory = decode.directory;
                directory.maxAddresses = CAP;
                for (int i = 0; i < ADDRESSES; i++) {
                    String addr = address(registry, i);
                    long room = 1000 + i;
                    // First ask: the topology is not known, a lookup thread fetches it; then the topology answers (DP size 1).
                    awaitUntil(() -> decode.dpRanks.resolve(addr, room, null) == 0, "room " + room + " at " + addr + " resolved");
                    RankEndpoint ep = directory.endpoint(addr, 0, 0, 0, 0);
                    assertEquals(7000, ep.rankPort());
                    assertTrue(directory.knownPrefills() <= CAP, directory.knownPrefills() + " topologies after " + (i + 1) + " addresses");
                    assertTrue(directory.endpointCount() <= CAP, directory.endpointCount() + " endpoints after " + (i + 1) + " addresses");
                    assertTrue(directory.clientCount() <= CAP, directory.clientCount() + " registry clients after " + (i + 1) + " addresses");
                    assertTrue(decode.dpRanks.addressCount() <= CAP, decode.dpRanks.addressCount() + " DP lookup entries after " + (i + 1)
                            + " addresses");
                }
                // The first address's entries went long ago: seen again, it is looked up again and works.
                String first = address(registry, 0);
                PrefillServerInfo info = directory.topology(first);
                assertEquals(1, info.attnTpSize());
                assertEquals(7000, directory.endpoint(first, 0, 0, 0, 0).rankPort());
                awaitUntil(() -> decode.dpRanks.resolve(first, 5000, null) == 0, "room 5000 at the first address resolved");
                assertTrue(directory.knownPrefills() <= CAP && directory.endpointCount() <= CAP && decode.dpRanks.addressCount() <= CAP);
            } finally {
                decode.teardown();
            }
        }
    }

    /** The i-th distinct loopback address of the registry (it listens on all of them). */
    private static String address(KVBootstrapServer registry, int i) {
        return "127.0.0." + (2 + i) + ":" + registry.port();
    }
}
