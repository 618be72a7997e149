package io.kvferry.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/**
 * Single-stream TCP bandwidth over loopback from iperf3, measured in the same run as the bench, so
 * the TCP transport can be reported as a ratio of what the kernel path gives any program here.
 */
public final class IperfBaseline {
    /** A 3-second client that has not finished by then is stuck: it is killed and the baseline is unavailable. */
    static final long CLIENT_TIMEOUT_S = 20;

    private IperfBaseline() {}

    /** GB/s received by a 3-second single-stream iperf3 run on 127.0.0.1, or -1 when iperf3 is unavailable. */
    public static double measure() {
        return measure("iperf3", CLIENT_TIMEOUT_S);
    }

    /**
     * As {@link #measure()} with the iperf3 executable named and the client's time limit given.
     *
     * @return GB/s, or -1 when it could not run, failed, did not finish within {@code clientTimeoutSeconds}, or
     *         printed no received bandwidth
     */
    static double measure(String executable, long clientTimeoutSeconds) {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        } catch (IOException e) {
            return -1;
        }
        Process server = null, client = null;
        Path out = null;
        try {
            server = new ProcessBuilder(executable, "-s", "-1", "-B", "127.0.0.1", "-p", Integer.toString(port))
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            Thread.sleep(300);
            out = Files.createTempFile("kvferry-iperf3-", ".json");
            // Output to a file, not a pipe: reading a pipe until it closes would wait forever for a client that hangs.
            client = new ProcessBuilder(executable, "-c", "127.0.0.1", "-p", Integer.toString(port), "-t", "3", "-J")
                    .redirectError(ProcessBuilder.Redirect.DISCARD).redirectOutput(out.toFile()).start();
            if (!client.waitFor(clientTimeoutSeconds, TimeUnit.SECONDS) || client.exitValue() != 0) return -1;
            return parseReceivedGbps(Files.readString(out, StandardCharsets.UTF_8));
        } catch (IOException e) {
            return -1; // not installed
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return -1;
        } finally {
            if (client != null) client.destroyForcibly();
            if (server != null) server.destroyForcibly();
            if (out != null) {
                try {
                    Files.deleteIfExists(out);
                } catch (IOException ignored) {
                    // a temp file left behind is harmless
                }
            }
        }
    }

    /** GB/s of {@code end.sum_received.bits_per_second} in iperf3's JSON (-J) output, or -1 when it has none. */
    static double parseReceivedGbps(String json) {
        JsonNode j;
        try {
            j = new ObjectMapper().readTree(json);
        } catch (IOException e) {
            return -1;
        }
        double bitsPerSecond = j == null ? -1 : j.path("end").path("sum_received").path("bits_per_second").asDouble(-1);
        return bitsPerSecond > 0 && Double.isFinite(bitsPerSecond) ? bitsPerSecond / 8 / 1e9 : -1;
    }
}
