package io.kvferry.testkit;


import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

class RoleOptionsTest {
    @Test
    void argsRoundTripTheHiddenRoleOptions() {
        assertEquals(List.of(), RoleOptions.NONE.args());
        assertEquals(List.of("--advertise-port", "4000,4001", "--heartbeat-ms", "200", "--heartbeat-misses", "5",
                        "--prefill-info-timeout-ms", "2000"),
                new RoleOptions(List.of(4000, 4001), 200, 5, 2000).args());
        RoleOptions o = new RoleOptions(List.of(4000), 0, 0, 0);
        assertEquals(4000, o.advertisePort(0));
        assertEquals(0, o.advertisePort(1)); // beyond the list: the bound port
        assertThrows(IllegalArgumentException.class, () -> new RoleOptions(List.of(70000), 0, 0, 0));
        assertThrows(IllegalArgumentException.class, () -> new RoleOptions(List.of(), -1, 0, 0));
        RoleOptions proxied = o.withAdvertiseHost("10.213.0.2");
        assertEquals(List.of("--advertise-port", "4000", "--advertise-host", "10.213.0.2"), proxied.args());
        assertNull(new RoleOptions(List.of(), 0, 0, 0, " ").advertiseHost(), "blank = the bound host");
    }

    @Test
    void extraArgumentsOverrideSharedOnes() {
        List<String> shared = List.of("--seed", "3", "--mla", "--requests", "16", "--exit-on-stdin-eof");
        assertEquals(List.of("--mla", "--requests", "16", "--exit-on-stdin-eof", "--seed", "5", "--heartbeat-ms", "200"),
                RoleRunner.withOverrides(shared, List.of("--seed", "5", "--heartbeat-ms", "200")));
        assertEquals(shared, RoleRunner.withOverrides(shared, List.of()));
    }
}
