package io.kvferry.bench;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/**
 * UCX's own one-sided put bandwidth ({@code ucx_perftest -t ucp_put_bw}, from Debian's ucx-utils)
 * over loopback at the bench's page size, measured in the same run as the bench, with the same
 * UCX_* environment (UCX_TLS, …) the bench's processes inherit. Note ucx_perftest puts the same
 * buffer over and over, so small messages stay in cache; the bench moves distinct pages.
 */
public final class UcxPerftestBaseline {
    private UcxPerftestBaseline() {}

    /** GB/s (10^9 B/s) of the "overall" bandwidth on the Final line, or -1 when ucx_perftest is unavailable. */
    public static double measure(long messageBytes) {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        } catch (IOException e) {
            return -1;
        }
        long iterations = Math.max(1000, Math.min(200_000, (2L << 30) / Math.max(1, messageBytes)));
        Process server = null;
        try {
            server = new ProcessBuilder("ucx_perftest", "-p", Integer.toString(port))
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            Thread.sleep(500);
            Process client = new ProcessBuilder("ucx_perftest", "127.0.0.1", "-p", Integer.toString(port), "-t", "ucp_put_bw",
                    "-s", Long.toString(messageBytes), "-n", Long.toString(iterations)).redirectErrorStream(true).start();
            String out = new String(client.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!client.waitFor(60, TimeUnit.SECONDS) || client.exitValue() != 0) return -1;
            return parseFinalOverallGbps(out);
        } catch (IOException e) {
            return -1; // not installed
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return -1;
        } finally {
            if (server != null) server.destroyForcibly();
        }
    }

    /**
     * Parses "Final: iterations p50 avg-overhead overall-overhead bw-avg bw-overall rate-avg rate-overall"
     * (bandwidth in MB/s, UCX's MB = 2^20 bytes).
     */
    static double parseFinalOverallGbps(String output) {
        for (String line : output.split("\n")) {
            String t = line.trim();
            if (!t.startsWith("Final:")) continue;
            String[] f = t.substring("Final:".length()).trim().split("\\s+");
            if (f.length < 6) return -1;
            try {
                return Double.parseDouble(f[5]) * 1048576.0 / 1e9;
            } catch (NumberFormatException e) {
                return -1;
            }
        }
        return -1;
    }
}
