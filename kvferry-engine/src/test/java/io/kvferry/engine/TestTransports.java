package io.kvferry.engine;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.Transports;

import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Which transports the engine tests can run here: ucx needs UCX (skipped with how to install it, unless KVFERRY_REQUIRE_UCX=1, as in CI). */
public final class TestTransports {
    private TestTransports() {
    }

    public static void require(String transport) {
        if (!transport.equals("ucx")) return;
        TransportProvider ucx = Transports.get("ucx");
        String why = ucx == null ? "the kvferry-ucx module is not on the class path" : ucx.unavailableReason(KVFerrySettings.fromEnvironment());
        if (why == null) return;
        String message = "UCX is not usable here (" + why + "); install it with: apt-get install -y libucx0";
        if ("1".equals(System.getenv("KVFERRY_REQUIRE_UCX"))) fail(message + " (KVFERRY_REQUIRE_UCX=1)");
        assumeTrue(false, message);
    }
}
