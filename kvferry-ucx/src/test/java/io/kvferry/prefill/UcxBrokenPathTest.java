package io.kvferry.prefill;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.transport.DataPath;
import io.kvferry.ucx.UcxTransportProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A UCX path that broke (closed after a cancelled write did not drain, or an endpoint error) takes
 * its link down: the room that met it fails, and the decode's next rooms go over a fresh link, where
 * before every later room of that decode failed behind a healthy control connection.
 */
@Timeout(120)
class UcxBrokenPathTest {
    private static final String TOKEN = "broken-path-token";
    /** The prefill's ucx data paths to its decodes (through its fields: no API exposes a link's path). */
    @SuppressWarnings("unchecked")
    private static List<DataPath> ucxPaths(KVManager prefill) throws ReflectiveOperationException {
        Field sessionsField = PrefillKVManager.class.getDeclaredField("sessions");
        sessionsField.setAccessible(true);
        DecodeSessions sessions = (DecodeSessions) sessionsField.get(prefill);
        Field linksField = DecodeSessions.class.getDeclaredField("links");
        linksField.setAccessible(true);
        List<DataPath> out = new ArrayList<>();
        for (DecodeLink l : (Set<DecodeLink>) linksField.get(sessions)) {
            if (l.dataPath != null && "ucx".equals(l.dataPath.name())) out.add(l.dataPath);
        }
        return out;
    }

    @Test
    void aBrokenUcxPathTakesItsLinkDownAndTheNextRoomsGoOverAFreshOne() throws Exception {
        String unavailable = new UcxTransportProvider().unavailableReason(KVFerrySettings.fromEnvironment());
        if (unavailable != null && "1".equals(System.getenv("KVFERRY_REQUIRE_UCX"))) fail("KVFERRY_REQUIRE_UCX=1 but " + unavailable);
        assumeTrue(unavailable == null, "UCX is not available: " + unavailable);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             Arena pa = Arena.ofShared(); Arena da = Arena.ofShared()) {
            String addr = "127.0.0.1:" + registry.port();
            KVManagerConfig cfg = KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port()).authToken(TOKEN)
                    .connectTimeout(Duration.ofSeconds(5)).build();
            KVManager p = KVFerry.createManager("ucx", UcxRooms.args(pa), DisaggregationMode.PREFILL, cfg);
            KVManager d = KVFerry.createManager("ucx", UcxRooms.args(da), DisaggregationMode.DECODE, cfg);
            try {
                p.registerToBootstrap();
                assertEquals(KVPoll.Success, UcxRooms.room(p, d, addr, 1).decode());
                List<DataPath> paths = ucxPaths(p);
                assertFalse(paths.isEmpty());
                DataPath broken = paths.get(0);
                // What UcxDataPath.write does when a cancelled room's puts do not drain (and what an endpoint error leaves).
                broken.close();
                assertNotNull(broken.brokenReason());
                assertEquals(FailureKind.PEER_LOST, UcxRooms.room(p, d, addr, 2).decode(), "the room that met the broken path fails as on a lost link");
                assertEquals(KVPoll.Success, UcxRooms.room(p, d, addr, 3).decode(), "the next room goes over a fresh link");
                assertEquals(KVPoll.Success, UcxRooms.room(p, d, addr, 4).decode());
            } finally {
                d.teardown();
                p.teardown();
            }
        }
    }
}
