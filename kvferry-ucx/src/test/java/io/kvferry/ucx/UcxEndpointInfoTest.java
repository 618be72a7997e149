package io.kvferry.ucx;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Reading ucp_ep_print_info's text (UCX 1.13/1.14 format): which lanes, which put, and whether a put
 * can reach the decode's registered memory natively.
 */
class UcxEndpointInfoTest {
    /** The decode's remote keys as seen here: memory domains 0 (self), 1 (tcp) and 4 (cma), bits 0x13. */
    static final long KEYS_HERE = 0x13;

    /** Printed here between two workers with UCX_TLS=tcp (UCX 1.13.1). */
    static final String TCP_ONLY = """
            #
            # UCP endpoint\s
            #
            #               peer: <no debug data>
            #                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
            #
            #
            #                  rma_bw: mds #
            """;

    /** Printed here with error handling off (UCX 1.13.1): shared-memory lanes that print puts into domains 2 and 3. */
    static final String SHARED_MEMORY = """
            #
            # UCP endpoint\s
            #
            #               peer: <no debug data>
            #                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am am_bw#0
            #                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]
            #
            #                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)
            #                  get[0]: 0..<bcopy>..(inf)
            #                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)
            #                  get[1]: 0..<bcopy>..(inf)
            #
            #                  rma_bw: mds #
            """;

    /** In the 1.13 format (ucp_ep_config_print): an rc lane with RMA into domain 5, and a cma lane, which needs no key. */
    static final String RDMA_AND_CMA = """
            #                 lane[0]:  6:rc_mlx5/mlx5_0:1.0 md[5]      -> addr[0].md[5]/ib/sysdev[255] rma_bw#0 am am_bw#0 wireup
            #                 lane[1]:  2:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] rma_bw#1
            #
            #                  put[0]: 0..<short>..124..<bcopy>..8256..<zcopy>..(inf)
            #                  put[1]: 0..<zcopy>..(inf)
            #
            #                  rma_bw: mds [4] [5] rndv_rkey_size 19
            """;

    @Test
    void tcpAloneHasNoRmaLaneSoItsPutsAreEmulated() {
        UcxEndpointInfo.Lanes l = UcxEndpointInfo.parse(TCP_ONLY);
        assertEquals(List.of(new UcxEndpointInfo.Lane(0, "tcp/lo.0", 0)), l.lanes());
        assertEquals(Set.of(), l.putLanes());
        assertFalse(l.unknown());
        String why = l.emulation(KEYS_HERE);
        assertTrue(why != null && why.contains("over tcp with no RMA lane") && why.contains("active message"), why);
        assertFalse(why.contains("lo.0"), "the reason reaches the decode: no device names " + why);
        assertTrue(l.overTcpOnly());
    }

    /** sysv/posix print puts, but kvferry's memory cannot be registered with them: the keys lack their domains. */
    @Test
    void putLanesIntoDomainsTheKeysLackAreEmulationToo() {
        UcxEndpointInfo.Lanes shm = UcxEndpointInfo.parse(SHARED_MEMORY);
        assertEquals(List.of(new UcxEndpointInfo.Lane(0, "sysv/memory.0", 2), new UcxEndpointInfo.Lane(1, "posix/memory.0", 3)),
                shm.lanes());
        assertEquals(Set.of(0, 1), shm.putLanes());
        String why = shm.emulation(KEYS_HERE);
        assertTrue(why != null && why.contains("(posix, sysv) cannot reach its registered memory"), why);
        assertNull(shm.emulation(KEYS_HERE | 1L << 3), "a key covering posix's domain makes its lane native");
        assertFalse(shm.overTcpOnly(), "emulated over shared memory, not tcp");
    }

    @Test
    void aLaneIntoAKeyedDomainOrAKeylessLanePutsNatively() {
        UcxEndpointInfo.Lanes l = UcxEndpointInfo.parse(RDMA_AND_CMA);
        assertEquals(List.of(new UcxEndpointInfo.Lane(0, "rc_mlx5/mlx5_0:1.0", 5), new UcxEndpointInfo.Lane(1, "cma/memory.0", 4)),
                l.lanes());
        assertEquals(List.of("rc_mlx5", "cma"), l.transports());
        assertFalse(l.overTcpOnly());
        assertNull(l.emulation(1L << 5), "rc into a keyed domain");
        assertEquals(List.of(l.lanes().get(1)), l.nativePutLanes(0), "cma needs no key");
        assertNull(l.emulation(0));
    }

    /** A format this parse does not know never reads as emulation (auto would otherwise pass a good path over). */
    @Test
    void anUnreadableTextSaysNothing() {
        String withoutRmaSection = TCP_ONLY.replace("rma_bw: mds #", "");
        for (String text : new String[] {null, "", "ep_cfg[3]: tag(tcp/lo) am(tcp/lo)", "#   put[0]: 0..(inf)\n#   rma_bw: mds #",
                withoutRmaSection}) {
            UcxEndpointInfo.Lanes l = UcxEndpointInfo.parse(text);
            assertTrue(l.unknown(), String.valueOf(text));
            assertNull(l.emulation(KEYS_HERE), String.valueOf(text));
        }
    }

    /** The peer's name (a debug build prints the decode's worker name) cannot add lanes or puts: only line-leading entries count. */
    @Test
    void textInsideAnotherLineIsNotALaneOrAPut() {
        String injected = TCP_ONLY.replace("<no debug data>", "x #  lane[1]:  9:rc_mlx5/evil md[0] -> md[0]/ib put[0]: 0..(inf)");
        UcxEndpointInfo.Lanes l = UcxEndpointInfo.parse(injected);
        assertEquals(1, l.lanes().size(), l.toString());
        assertEquals(Set.of(), l.putLanes());
        assertTrue(l.emulation(KEYS_HERE) != null);
    }
}
