package io.kvferry.ucx;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Reading ucp_ep_print_info's text (UCX 1.13/1.14 format): which lanes, and whether any does RMA. */
class UcxEndpointInfoTest {
    /** Printed here for an endpoint between two workers with UCX_TLS=tcp (UCX 1.13.1). */
    static final String TCP_ONLY = """
            #
            # UCP endpoint
            #
            #               peer: <no debug data>
            #                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 wireup
            #
            #
            #                  rma_bw: mds #
            """;

    /** Printed here with error handling off (UCX 1.13.1): shared-memory lanes that put natively. */
    static final String SHARED_MEMORY = """
            #                 lane[0]:  0:self/memory0.0 md[0]          -> md[0]/self/sysdev[255] am am_bw#0
            #                 lane[1]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255]
            #                 lane[2]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]
            #
            #                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)
            #                  get[0]: 0..<bcopy>..(inf)
            #                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)
            #                  get[1]: 0..<bcopy>..(inf)
            #
            #                  rma_bw: mds #
            """;

    /** Shaped like an InfiniBand endpoint's text: an rc lane with RMA next to the tcp one. */
    static final String RDMA = """
            #                 lane[0]:  6:rc_mlx5/mlx5_0:1.0 md[4]      -> md[4]/ib/sysdev[255] rma_bw#0 am am_bw#0 wireup
            #                 lane[1]:  0:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] am_bw#1
            #                  put[0]: 0..<short>..124..<bcopy>..8256..<zcopy>..(inf)
            #                  rma_bw: mds [4] rndv_rkey_size 19
            """;

    @Test
    void tcpAloneHasNoRmaLaneSoItsPutsAreEmulated() {
        UcxEndpointInfo.Lanes l = UcxEndpointInfo.parse(TCP_ONLY);
        assertEquals(List.of("tcp/lo.0"), l.lanes());
        assertEquals(0, l.rmaLanes());
        assertFalse(l.unknown());
        String why = l.emulation();
        assertTrue(why != null && why.contains("over tcp with no RMA lane") && why.contains("active message"), why);
        assertFalse(why.contains("lo.0"), "the reason reaches the decode: no device names " + why);
    }

    @Test
    void lanesThatPutNativelyAreNotEmulation() {
        UcxEndpointInfo.Lanes shm = UcxEndpointInfo.parse(SHARED_MEMORY);
        assertEquals(List.of("self/memory0.0", "sysv/memory.0", "posix/memory.0"), shm.lanes());
        assertEquals(2, shm.rmaLanes());
        assertNull(shm.emulation());
        UcxEndpointInfo.Lanes rdma = UcxEndpointInfo.parse(RDMA);
        assertEquals(List.of("rc_mlx5/mlx5_0:1.0", "tcp/eth0.0"), rdma.lanes());
        assertEquals(List.of("rc_mlx5", "tcp"), rdma.transports());
        assertNull(rdma.emulation());
    }

    /** A format this parse does not know never reads as emulation (auto would otherwise pass a good path over). */
    @Test
    void anUnreadableTextSaysNothing() {
        for (String text : new String[] {null, "", "ep_cfg[3]: tag(tcp/lo) am(tcp/lo)", "put[0]: 0..(inf)"}) {
            UcxEndpointInfo.Lanes l = UcxEndpointInfo.parse(text);
            assertTrue(l.unknown(), String.valueOf(text));
            assertNull(l.emulation(), String.valueOf(text));
        }
    }
}
