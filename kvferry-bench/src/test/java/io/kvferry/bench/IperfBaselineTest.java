package io.kvferry.bench;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The iperf3 baseline with stand-ins for iperf3: what it reads, and that a stuck iperf3 cannot hang the bench. */
class IperfBaselineTest {
    @TempDir
    Path dir;

    /** A client that never finishes (a stuck connection): the baseline gives up at its limit instead of waiting forever. */
    @Test
    // A hang detector, not a speed bound (the limit under test is 1 s); on its own thread, as a read of a pipe ignores interrupts.
    @Timeout(value = 120, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void aClientThatNeverFinishesIsKilledAndTheBaselineIsUnavailable() throws Exception {
        Path iperf3 = script("exec sleep 1000\n");
        assertEquals(-1, IperfBaseline.measure(iperf3.toString(), 1));
    }

    @Test
    void readsTheReceivedBandwidthOfTheJsonOutput() throws Exception {
        Path iperf3 = script("""
                case "$1" in
                  -s) exec sleep 1000 ;;
                  *) echo '{"end": {"sum_sent": {"bits_per_second": 9e10}, "sum_received": {"bits_per_second": 4.0e10}}}' ;;
                esac
                """);
        assertEquals(5.0, IperfBaseline.measure(iperf3.toString(), 60), 1e-9);
    }

    @Test
    void outputWithoutAReceivedBandwidthIsNoBaseline() {
        assertEquals(-1, IperfBaseline.parseReceivedGbps("iperf3: error - unable to connect to server"));
        assertEquals(-1, IperfBaseline.parseReceivedGbps("{\"error\": \"unable to connect\"}"));
        assertEquals(-1, IperfBaseline.parseReceivedGbps("{\"end\": {\"sum_received\": {\"bits_per_second\": 0}}}"));
        assertEquals(-1, IperfBaseline.parseReceivedGbps(""));
        assertEquals(1.0, IperfBaseline.parseReceivedGbps("{\"end\": {\"sum_received\": {\"bits_per_second\": 8e9}}}"), 1e-9);
    }

    @Test
    void aMissingExecutableIsNoBaseline() {
        assertEquals(-1, IperfBaseline.measure(dir.resolve("no-such-iperf3").toString(), 5));
    }

    private Path script(String body) throws Exception {
        Path p = dir.resolve("iperf3");
        Files.writeString(p, "#!/bin/sh\n" + body);
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwx------"));
        return p;
    }
}
