package io.kvferry.bench;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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

    /** @param gbps    GB/s (10^9 B/s): the median of the rounds' "overall" bandwidth on the Final line
     *  @param command the client command line (the same in every round but for the port)
     *  @param rounds  each round's GB/s, in the order run */
    public record Result(double gbps, String command, List<Double> rounds) {}

    /** UCX_ALLOC_PRIO for ucx_perftest's buffers: private memory, as kvferry's pools are. */
    public static final String PRIVATE_BUFFERS = "mmap,heap";

    /** Rounds per baseline: one ucx_perftest run varies by ±30 % on a shared host, the median far less. */
    public static final int ROUNDS = 3;
    /** Bytes each round puts: about 2 s at this host's tcp-emulated put speed. */
    static final long BYTES_PER_ROUND = 1L << 30;
    /** A round that has not finished by then failed (its processes are killed). */
    static final long ROUND_TIMEOUT_S = 120;

    /** Null when ucx_perftest is unavailable or every round failed. */
    public static Result measure(long messageBytes, boolean peerErrorHandling) {
        List<Double> rounds = new ArrayList<>();
        String command = null;
        for (int i = 0; i < ROUNDS; i++) {
            Result r = measureOnce(messageBytes, peerErrorHandling);
            if (r == null) {
                if (rounds.isEmpty()) return null; // not installed, or UCX cannot run here
                continue;
            }
            rounds.add(r.gbps());
            command = r.command();
        }
        double median = MemcpyBaseline.median(rounds.stream().mapToDouble(Double::doubleValue).toArray());
        return new Result(median, command, List.copyOf(rounds));
    }

    /** One ucx_perftest server + client pair; null when it could not run or did not finish in time. */
    public static Result measureOnce(long messageBytes, boolean peerErrorHandling) {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        } catch (IOException e) {
            return null;
        }
        long size = Math.max(8, messageBytes);
        long iterations = Math.max(1000, Math.min(200_000, BYTES_PER_ROUND / size));
        List<String> common = new ArrayList<>(List.of("-p", Integer.toString(port), "-t", "ucp_put_bw",
                "-s", Long.toString(size), "-n", Long.toString(iterations), "-w", Long.toString(iterations / 10 + 1)));
        if (peerErrorHandling) common.add("-e");
        List<String> serverCmd = new ArrayList<>(List.of("ucx_perftest"));
        serverCmd.addAll(common);
        List<String> clientCmd = new ArrayList<>(List.of("ucx_perftest", "127.0.0.1"));
        clientCmd.addAll(common);
        String allocPrio = System.getenv("UCX_ALLOC_PRIO");
        boolean privateBuffers = allocPrio == null;
        Process server = null, client = null;
        Path out = null;
        try {
            out = Files.createTempFile("kvferry-perftest-", ".out");
            server = perftestProcess(serverCmd, privateBuffers).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            Thread.sleep(500);
            // Output to a file, not a pipe: a client that never finishes must not block the bench in a read.
            client = perftestProcess(clientCmd, privateBuffers).redirectErrorStream(true).redirectOutput(out.toFile()).start();
            if (!client.waitFor(ROUND_TIMEOUT_S, TimeUnit.SECONDS) || client.exitValue() != 0) return null;
            double gbps = parseFinalOverallGbps(Files.readString(out, StandardCharsets.UTF_8));
            String tls = System.getenv("UCX_TLS");
            String env = (tls == null ? "" : "UCX_TLS=" + tls + " ")
                    + "UCX_ALLOC_PRIO=" + (privateBuffers ? PRIVATE_BUFFERS : allocPrio) + " ";
            return gbps < 0 ? null : new Result(gbps, env + String.join(" ", clientCmd), List.of(gbps));
        } catch (IOException e) {
            return null; // not installed
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
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

    private static ProcessBuilder perftestProcess(List<String> command, boolean privateBuffers) {
        ProcessBuilder pb = new ProcessBuilder(command);
        if (privateBuffers) pb.environment().put("UCX_ALLOC_PRIO", PRIVATE_BUFFERS);
        return pb;
    }

    /**
     * Parses "Final: iterations p50 avg-overhead overall-overhead bw-avg bw-overall rate-avg rate-overall"
     * (bandwidth in MB/s, UCX's MB = 2^20 bytes).
     */
    public static double parseFinalOverallGbps(String output) {
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
