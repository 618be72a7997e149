package io.kvferry.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/**
 * Single-stream TCP bandwidth over loopback from iperf3, measured in the same run as the bench, so
 * the TCP transport can be reported as a ratio of what the kernel path gives any program here.
 */
public final class IperfBaseline {
    private IperfBaseline() {}

    /** GB/s received by a 3-second single-stream iperf3 run on 127.0.0.1, or -1 when iperf3 is unavailable. */
    public static double measure() {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        } catch (IOException e) {
            return -1;
        }
        Process server = null;
        try {
            server = new ProcessBuilder("iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", Integer.toString(port))
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            Thread.sleep(300);
            Process client = new ProcessBuilder("iperf3", "-c", "127.0.0.1", "-p", Integer.toString(port), "-t", "3", "-J")
                    .redirectErrorStream(false).start();
            String out = new String(client.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!client.waitFor(20, TimeUnit.SECONDS) || client.exitValue() != 0) return -1;
            JsonNode j = new ObjectMapper().readTree(out);
            double bitsPerSecond = j.path("end").path("sum_received").path("bits_per_second").asDouble(-1);
            return bitsPerSecond <= 0 ? -1 : bitsPerSecond / 8 / 1e9;
        } catch (IOException e) {
            return -1; // not installed
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return -1;
        } finally {
            if (server != null) server.destroyForcibly();
        }
    }
}
