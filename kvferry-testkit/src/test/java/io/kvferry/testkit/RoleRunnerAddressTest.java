package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** kvferry prefill/decode --bootstrap: a bad port is named with the address (was: "For input string: """). */
class RoleRunnerAddressTest {
    @Test
    void aBadBootstrapPortIsNamed() {
        assertEquals("bootstrap address '127.0.0.1:' has a bad port '' (want host:port)",
                assertThrows(IllegalArgumentException.class, () -> RoleRunner.splitHostPort("127.0.0.1:")).getMessage());
        assertEquals("bootstrap address 'h:x1' has a bad port 'x1' (want host:port)",
                assertThrows(IllegalArgumentException.class, () -> RoleRunner.splitHostPort("h:x1")).getMessage());
        assertEquals("bootstrap address 'h:0' has port 0 outside [1, 65535]",
                assertThrows(IllegalArgumentException.class, () -> RoleRunner.splitHostPort("h:0")).getMessage());
        assertArrayEquals(new String[]{"::1", "8998"}, RoleRunner.splitHostPort("[::1]:8998"));
    }
}
