package io.kvferry.prefill;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;
import io.kvferry.ucx.UcxTransportProvider;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.lang.foreign.Arena;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Over UCX's tcp transport alone every put is an emulated active message, and kvferry's tcp path
 * moves the same bytes faster: backend auto takes tcp for such a link, an explicit ucx backend keeps
 * ucx (and the prefill logs why it is slow). Runs where UCX_TLS=tcp (the suite's tls-tcp run), the
 * one setting where the emulation is certain whatever the host's devices.
 */
@Timeout(120)
class UcxEmulatedPathTest {
    private static final String TOKEN = "emulated-path-token";

    @ParameterizedTest(name = "backend {0} -> data path {1}")
    @CsvSource({"auto, tcp", "ucx, ucx"})
    void autoPassesAnEmulatedUcxPathOverForTcpAndAnExplicitUcxKeepsIt(String backend, String expected) throws Exception {
        String unavailable = new UcxTransportProvider().unavailableReason(KVFerrySettings.fromEnvironment());
        if (unavailable != null && "1".equals(System.getenv("KVFERRY_REQUIRE_UCX"))) fail("KVFERRY_REQUIRE_UCX=1 but " + unavailable);
        assumeTrue(unavailable == null, "UCX is not available: " + unavailable);
        assumeTrue("tcp".equals(System.getenv("UCX_TLS")), "runs with UCX_TLS=tcp (the ucx module's tls-tcp run)");
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             Arena pa = Arena.ofShared(); Arena da = Arena.ofShared()) {
            String addr = "127.0.0.1:" + registry.port();
            KVManagerConfig cfg = KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port()).authToken(TOKEN)
                    .connectTimeout(Duration.ofSeconds(5)).build();
            // Private pools: the decode offers no shm, so under auto ucx is the only offer.
            KVManager p = KVFerry.createManager(backend, UcxRooms.args(pa), DisaggregationMode.PREFILL, cfg);
            KVManager d = KVFerry.createManager(backend, UcxRooms.args(da), DisaggregationMode.DECODE, cfg);
            try {
                p.registerToBootstrap();
                for (long room = 1; room <= 2; room++) {
                    UcxRooms.Outcome o = UcxRooms.room(p, d, addr, room);
                    assertEquals(KVPoll.Success, o.decode());
                    assertEquals(expected, o.transport(), "room " + room);
                }
                // Both ends show why on their status pages: the faster offer passed over, or the kept path's emulation.
                for (KVManager m : List.of(p, d)) {
                    List<KVManagerInspection.Peer> peers = m.inspect().peers();
                    assertEquals(1, peers.size(), m.mode() + ": " + peers);
                    KVManagerInspection.Peer peer = peers.get(0);
                    assertEquals(expected, peer.dataPath());
                    assertTrue(peer.dataPathNote().contains("ucx") && peer.dataPathNote().contains("emulated")
                            && peer.dataPathNote().contains("over tcp"), m.mode() + ": " + peer.dataPathNote());
                }
            } finally {
                d.teardown();
                p.teardown();
            }
        }
    }
}
