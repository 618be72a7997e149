package io.kvferry.engine.kv;

import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.ModelWeights;
import io.kvferry.engine.serve.Roles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A pool sized beyond the machine (kvferry serve --pages 2000000000) is refused naming its size, and a role gives back what it started. */
@Timeout(60)
class KvPoolSizeTest {
    @Test
    void aPoolLargerThanTheMachineIsRefusedNamingItsSize() {
        Model model = Model.llama(ModelWeights.random(LlamaConfig.stories260K(), 1));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new KvPool(model, 16, 2_000_000_000, 256, 0, 5, 1, false, "test"));
        assertTrue(e.getMessage().contains("2000000000 pages of 16 tokens") && e.getMessage().contains("lower --pages"), e.getMessage());
    }

    @Test
    void aRoleWhosePoolDoesNotFitClosesItsRegistry() throws Exception {
        // The port is held (bound, never listening) until just before the role binds its registry there, so no other bind
        // can be given it meanwhile. A ServerSocket(0) closed at once freed it for any other process's bind(0) until the
        // role's own (then the role failed on the port, not on its pool) or this test's below. What is left is microseconds,
        // in this thread, with no bind of this test's between: release, the role's registry, its close, the bind below.
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int bootstrapPort = hold.getLocalPort();
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 2_000_000_000, 8, 32, "tcp",
                "127.0.0.1", 0, bootstrapPort, "pool-size-test");
        hold.close();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Roles.prefill(o));
        assertTrue(e.getMessage().contains("2000000000 pages of 16 tokens"), "refused for its pool, its registry started: " + e.getMessage());
        try (ServerSocket again = new ServerSocket(bootstrapPort, 1, InetAddress.getLoopbackAddress())) {
            assertTrue(again.isBound()); // the registry the failed role had started is closed
        }
    }
}
