package io.kvferry.bench;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * UCX's own one-sided put bandwidth ({@code ucx_perftest -t ucp_put_bw}, from Debian's ucx-utils)
 * over loopback, measured in the same run as the bench and configured like the bench's data path:
 * the same UCX_* environment (UCX_TLS, …, inherited by both), the same endpoint error-handling mode
 * ({@code -e} when kvferry uses peer mode, its default: on UCX 1.13 that mode leaves out the
 * shared-memory transports, so both then run over tcp) and the bench's mean op size as the message
 * size. Its buffers are private memory like kvferry's pools ({@code UCX_ALLOC_PRIO=mmap,heap} unless
 * the environment sets UCX_ALLOC_PRIO): by default UCX allocates them in a shared segment, and with
 * error mode none on one host its puts then become cache-hot memcpys into that segment (measured
 * 44–47 GB/s, five times this host's memcpy), while kvferry's destination pool, registered by the
 * engine, can only be reached through cma. ucx_perftest puts the same buffer over and over, so its
 * source stays in cache; the bench moves distinct pages.
 */
public final class UcxPerftestBaseline {
    private UcxPerftestBaseline() {}

    /** @param gbps    GB/s (10^9 B/s) of the "overall" bandwidth on the Final line
     *  @param command the client command line */
    public record Result(double gbps, String command) {}

    /** UCX_ALLOC_PRIO for ucx_perftest's buffers: private memory, as kvferry's pools are. */
    static final String PRIVATE_BUFFERS = "mmap,heap";

    /** Null when ucx_perftest is unavailable or failed. */
    public static Result measure(long messageBytes, boolean peerErrorHandling) {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        } catch (IOException e) {
            return null;
        }
        long size = Math.max(8, messageBytes);
        long iterations = Math.max(1000, Math.min(200_000, (2L << 30) / size));
        List<String> common = new ArrayList<>(List.of("-p", Integer.toString(port), "-t", "ucp_put_bw",
                "-s", Long.toString(size), "-n", Long.toString(iterations), "-w", Long.toString(iterations / 10 + 1)));
        if (peerErrorHandling) common.add("-e");
        List<String> serverCmd = new ArrayList<>(List.of("ucx_perftest"));
        serverCmd.addAll(common);
        List<String> clientCmd = new ArrayList<>(List.of("ucx_perftest", "127.0.0.1"));
        clientCmd.addAll(common);
        String allocPrio = System.getenv("UCX_ALLOC_PRIO");
        boolean privateBuffers = allocPrio == null;
        Process server = null;
        try {
            server = perftestProcess(serverCmd, privateBuffers).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            Thread.sleep(500);
            Process client = perftestProcess(clientCmd, privateBuffers).redirectErrorStream(true).start();
            String out = new String(client.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!client.waitFor(120, TimeUnit.SECONDS) || client.exitValue() != 0) return null;
            double gbps = parseFinalOverallGbps(out);
            String tls = System.getenv("UCX_TLS");
            String env = (tls == null ? "" : "UCX_TLS=" + tls + " ")
                    + "UCX_ALLOC_PRIO=" + (privateBuffers ? PRIVATE_BUFFERS : allocPrio) + " ";
            return gbps < 0 ? null : new Result(gbps, env + String.join(" ", clientCmd));
        } catch (IOException e) {
            return null; // not installed
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        } finally {
            if (server != null) server.destroyForcibly();
        }
    }

    private static ProcessBuilder perftestProcess(List<String> command, boolean privateBuffers) {
        ProcessBuilder pb = new ProcessBuilder(command);
        if (privateBuffers) pb.environment().put("UCX_ALLOC_PRIO", PRIVATE_BUFFERS);
        return pb;
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
