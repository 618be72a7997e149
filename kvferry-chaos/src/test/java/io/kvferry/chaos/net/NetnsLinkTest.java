package io.kvferry.chaos.net;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The chaos link between two network namespaces: it carries TCP, delays and drops as asked, partitions, and leaves nothing behind. */
class NetnsLinkTest {
    @Test
    void impairmentSpecsParseLikeNetemAndBadOnesAreNamed() {
        LinkImpairment d = LinkImpairment.parse(LinkImpairment.DEFAULT_SPEC);
        assertEquals(500_000, d.delayNanos());
        assertEquals(0.001, d.lossFraction(), 1e-12);
        assertEquals(0, d.bytesPerSecond());
        assertEquals(125_000_000, LinkImpairment.parse("rate 1gbit").bytesPerSecond());
        assertEquals(2_000_000, LinkImpairment.parse("delay 2000us rate 2mbps").bytesPerSecond());
        assertTrue(LinkImpairment.parse("none").isNone());
        assertTrue(LinkImpairment.parse("").isNone());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LinkImpairment.parse("delay 1ms jitter 2ms"));
        assertTrue(e.getMessage().contains("unknown 'jitter'"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LinkImpairment.parse("loss 0.1"));
        assertThrows(IllegalArgumentException.class, () -> LinkImpairment.parse("loss 100%"));
        assertThrows(IllegalArgumentException.class, () -> LinkImpairment.parse("delay 5"));
        assertThrows(IllegalArgumentException.class, () -> LinkImpairment.parse("delay"));
        assertThrows(IllegalArgumentException.class, () -> LinkImpairment.parse("rate -1mbit"));
    }

    static void assumeRoot() {
        String why = Netns.unavailableReason();
        assumeTrue(why == null, () -> "skipped: " + why);
    }

    @ParameterizedTest
    @EnumSource(value = NetnsLink.Kind.class, names = {"AUTO", "VETH"})
    @Timeout(60)
    void carriesTcpAcrossTheLinkPartitionsAndCleansUp(NetnsLink.Kind kind) throws Exception {
        assumeRoot();
        // veth without impairment runs on any kernel; auto impairs (netem, or the harness's emulator without it).
        LinkImpairment imp = kind == NetnsLink.Kind.VETH ? LinkImpairment.NONE : LinkImpairment.parse(LinkImpairment.DEFAULT_SPEC);
        String p, d;
        try (NetnsLink link = NetnsLink.create(imp, kind)) {
            p = link.prefillNamespace();
            d = link.decodeNamespace();
            assertTrue(Files.exists(Path.of("/run/netns", p)) && Files.exists(Path.of("/run/netns", d)));
            double rtt = link.measureRttMillis();
            System.out.println("[netns link] " + link.info(rtt));
            if (!imp.isNone()) assertTrue(rtt >= 0.9, "the link adds 0.5 ms each way, measured rtt " + rtt + " ms");
            byte[] sent = new byte[8 << 20];
            new Random(1).nextBytes(sent);
            try (ServerSocket server = Netns.call(p, () -> new ServerSocket(0, 1, InetAddress.getByName(NetnsLink.PREFILL_ADDR)))) {
                server.setSoTimeout(10_000);
                Socket client = Netns.call(d, () -> {
                    Socket s = new Socket();
                    s.connect(new InetSocketAddress(NetnsLink.PREFILL_ADDR, server.getLocalPort()), 5000);
                    return s;
                });
                try (client; Socket accepted = server.accept(); InputStream in = accepted.getInputStream()) {
                    Thread writer = Thread.ofPlatform().start(() -> {
                        try {
                            client.getOutputStream().write(sent);
                        } catch (IOException ignored) {
                            // the assertion below reports it
                        }
                    });
                    assertArrayEquals(sent, in.readNBytes(sent.length), "bytes cross the lossy link intact (TCP retransmits)");
                    writer.join();
                    // Partition: nothing crosses while the decode's end is down; the connection survives it.
                    link.down();
                    accepted.setSoTimeout(500);
                    client.getOutputStream().write(42);
                    assertThrows(SocketTimeoutException.class, in::read, "a byte crossed a link that is down");
                    link.up();
                    accepted.setSoTimeout(10_000);
                    assertEquals(42, in.read(), "the byte arrives once the link is back (retransmitted)");
                }
            }
            if (kind == NetnsLink.Kind.AUTO && link.info(null).kind().equals("tun")) {
                assertTrue(link.info(null).packets() > 0, link.info(null).toString());
            }
        }
        assertFalse(Files.exists(Path.of("/run/netns", p)), "prefill namespace removed");
        assertFalse(Files.exists(Path.of("/run/netns", d)), "decode namespace removed");
    }
}
