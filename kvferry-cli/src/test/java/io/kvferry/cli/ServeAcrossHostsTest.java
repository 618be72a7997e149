package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.chaos.net.LinkImpairment;
import io.kvferry.chaos.net.Netns;
import io.kvferry.chaos.net.NetnsLink;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@code serve} on two hosts (network namespaces joined by a veth link): the prefill on one, the decode
 * and the router on the other, so the router's calls to the prefill and the decode's kvferry link cross
 * the link. The prefill binds every address ({@code --host 0.0.0.0}) and publishes the one its peers reach
 * ({@code --advertise-host}): it used to publish 0.0.0.0, and each request failed after 15 s. With the
 * link down a request ends with an error naming what failed, and once it is back the cluster serves again
 * with every page free. Skipped without root or iproute2.
 */
class ServeAcrossHostsTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String TOKEN = "across-hosts-test-token";

    /** A role as its own process inside namespace {@code ns}. */
    private static Process spawn(String ns, String role, List<String> extra) throws IOException {
        List<String> cmd = new ArrayList<>(NetnsLink.launcher(ns));
        cmd.addAll(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
                "-Xmx256m", "-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main", "serve", "--role", role, "--port", "0"));
        if (!role.equals("router")) cmd.addAll(List.of("--transport", "tcp")); // a router moves no KV: it refuses the flag
        cmd.addAll(extra);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("KVFERRY_AUTH_TOKEN", TOKEN);
        return pb.start();
    }

    private static int port(String url) {
        return URI.create(url).getPort();
    }

    record Answer(int status, String body) {
        JsonNode json() throws IOException {
            return JSON.readTree(body);
        }
    }

    /**
     * One HTTP/1.1 exchange from inside namespace {@code ns} (a platform thread there opens the socket; the
     * JDK client's threads would stay in the root namespace).
     */
    private static Answer http(String ns, String host, int port, String method, String path, String body) throws IOException {
        return Netns.call(ns, () -> {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(host, port), 5_000);
                s.setSoTimeout(60_000);
                byte[] b = body == null ? new byte[0] : body.getBytes(StandardCharsets.UTF_8);
                OutputStream out = s.getOutputStream();
                out.write((method + " " + path + " HTTP/1.1\r\nHost: " + host + ":" + port + "\r\nConnection: close\r\n"
                        + "Content-Type: application/json\r\nContent-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
                out.write(b);
                out.flush();
                InputStream in = s.getInputStream();
                String all = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                int status = Integer.parseInt(all.substring(9, 12));
                int end = all.indexOf("\r\n\r\n");
                String rest = end < 0 ? "" : all.substring(end + 4);
                if (all.substring(0, Math.max(end, 0)).toLowerCase().contains("transfer-encoding: chunked")) rest = unchunk(rest);
                return new Answer(status, rest);
            }
        });
    }

    private static String unchunk(String s) {
        StringBuilder b = new StringBuilder();
        int i = 0;
        while (i < s.length()) {
            int nl = s.indexOf("\r\n", i);
            if (nl < 0) break;
            int n = Integer.parseInt(s.substring(i, nl).trim(), 16);
            if (n == 0) break;
            b.append(s, nl + 2, nl + 2 + n);
            i = nl + 2 + n + 2;
        }
        return b.toString();
    }

    /** Waits (30 s at most) for the router's /health to say ok: both backends seen healthy. */
    private static void awaitHealthy(String ns, int routerPort) throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        Answer a = null;
        while (System.nanoTime() < deadline) {
            a = http(ns, NetnsLink.DECODE_ADDR, routerPort, "GET", "/health", null);
            if (a.status() == 200 && a.json().path("status").asText().equals("ok")) return;
            Thread.sleep(200);
        }
        throw new AssertionError("the router never saw both backends healthy: " + a);
    }

    private static final String REQUEST = "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0}";

    @Test
    @Timeout(90)
    void aPrefillOnTheWildcardServesAcrossTheLinkFailsClearlyWhenItIsDownAndRecovers() throws Exception {
        String why = Netns.unavailableReason();
        assumeTrue(why == null, () -> "skipped: " + why);
        List<Process> procs = new ArrayList<>();
        try (NetnsLink link = NetnsLink.create(LinkImpairment.NONE, NetnsLink.Kind.VETH)) {
            String p = link.prefillNamespace(), d = link.decodeNamespace();
            Process prefill = spawn(p, "prefill", List.of("--host", "0.0.0.0", "--advertise-host", NetnsLink.PREFILL_ADDR,
                    "--bootstrap-port", "0", "--pages", "64"));
            Process decode = spawn(d, "decode", List.of("--host", NetnsLink.DECODE_ADDR, "--pages", "64"));
            procs.addAll(List.of(prefill, decode));
            int prefillPort = port(DemoCommand.awaitUrl(prefill, "prefill"));
            int decodePort = port(DemoCommand.awaitUrl(decode, "decode"));
            Process router = spawn(d, "router", List.of("--host", NetnsLink.DECODE_ADDR,
                    "--prefill", "http://" + NetnsLink.PREFILL_ADDR + ":" + prefillPort,
                    "--decode", "http://" + NetnsLink.DECODE_ADDR + ":" + decodePort));
            procs.add(router);
            int routerPort = port(DemoCommand.awaitUrl(router, "router"));
            awaitHealthy(d, routerPort);

            // What the router hands the decode: the advertised address, not the bind address.
            JsonNode health = http(d, NetnsLink.PREFILL_ADDR, prefillPort, "GET", "/health", null).json();
            assertTrue(health.path("bootstrap").asText().startsWith(NetnsLink.PREFILL_ADDR + ":"), health.toString());
            Answer ok = http(d, NetnsLink.DECODE_ADDR, routerPort, "POST", "/v1/completions", REQUEST);
            assertEquals(200, ok.status(), ok.body());
            assertTrue(ok.json().path("kvferry").path("bytes").asLong() > 0, ok.body());

            // Partition: the request ends with an error naming what failed, well within the router's timeouts.
            link.down();
            long t0 = System.nanoTime();
            Answer failed = http(d, NetnsLink.DECODE_ADDR, routerPort, "POST", "/v1/completions", REQUEST);
            double took = (System.nanoTime() - t0) / 1e9;
            assertTrue(failed.status() >= 500, failed.toString());
            String message = failed.json().path("error").path("message").asText();
            assertTrue(message.contains("prefill"), "the error names the prefill: " + failed.body());
            System.out.printf("[across hosts] link down: %d after %.1f s: %s%n", failed.status(), took, message);
            assertTrue(took < 30, "the request took " + took + " s to fail: " + message);
            link.up();

            awaitHealthy(d, routerPort);
            Answer again = http(d, NetnsLink.DECODE_ADDR, routerPort, "POST", "/v1/completions", REQUEST);
            assertEquals(200, again.status(), again.body());
            // The decode frees the request's pages on its own thread once its last chunk went out, which may be just after
            // the router answered: polled (30 s at most), not read once right after the answer.
            String free = "kvferry_engine_kv_pages{role=\"decode\",state=\"free\"} 64.0";
            long until = System.nanoTime() + 30_000_000_000L;
            String metrics = http(d, NetnsLink.DECODE_ADDR, decodePort, "GET", "/metrics", null).body();
            while (!metrics.contains(free) && System.nanoTime() < until) {
                Thread.sleep(50); // a poll interval
                metrics = http(d, NetnsLink.DECODE_ADDR, decodePort, "GET", "/metrics", null).body();
            }
            assertTrue(metrics.contains(free), metrics);
        } finally {
            for (Process pr : procs) pr.destroyForcibly();
            for (Process pr : procs) pr.waitFor();
        }
    }
}
