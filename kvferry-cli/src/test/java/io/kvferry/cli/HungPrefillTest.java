package io.kvferry.cli;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;
import io.kvferry.engine.serving.PrefillEngine;
import io.kvferry.engine.serving.TransferSpec;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A hung prefill (SIGSTOP: alive, silent) must not stall a decode's other requests. Before, the decode's
 * scheduler thread cleared a failed or aborted room itself, and an unfinished room's clear() on a one-sided
 * (shm) link waits for the prefill's ABORT_ACK (up to abortAckTimeout, 5 s by default), so one abort of a
 * room of the hung prefill froze every request of the decode, those of healthy prefills too, for that long
 * (seen live: a 4.5 s gap in the token streams of a healthy prefill's requests). Now the clear runs off the
 * scheduler thread; the room's pages come back, and its client hears the failure, when it returned.
 */
class HungPrefillTest {
    private static final String TOKEN = "kill-test"; // ServeCommandTest.spawnRole's

    private static String prop(String name, String value) {
        String old = System.getProperty(name);
        if (value == null) System.clearProperty(name);
        else System.setProperty(name, value);
        return old;
    }

    /** The role's start line (the one that says where it listens); the rest of its output is drained. */
    private static String startLine(Process p) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (!line.contains("listening on http://")) continue;
            Thread.ofVirtual().start(() -> {
                try {
                    while (in.readLine() != null) {
                        // drain
                    }
                } catch (IOException ignored) {
                    // the role ended
                }
            });
            return line;
        }
        throw new AssertionError("the prefill exited before it listened (exit " + p.waitFor() + ")");
    }

    private static void signal(Process p, String sig) throws Exception {
        assertEquals(0, new ProcessBuilder("kill", "-" + sig, Long.toString(p.pid())).inheritIO().start().waitFor(), "kill -" + sig);
    }

    private static double gauge(MeterRegistry m, String queue) {
        Gauge g = m.find("kvferry_engine_requests").tags("role", "decode", "queue", queue).gauge();
        return g == null ? -1 : g.value();
    }

    @Test
    @Timeout(180)
    void anAbortedRoomOfAHungPrefillDoesNotStallTheDecodesOtherRequests() throws Exception {
        // The stuck clear may end only when the test lets the prefill go on: no ABORT_ACK timeout, no heartbeat
        // timeout of this JVM's decode, before it.
        String ack = prop("kvferry.abortAckTimeoutMs", "600000"), misses = prop("kvferry.heartbeatMisses", "300");
        Process hung = ServeCommandTest.spawnRole("prefill", List.of("--transport", "shm"));
        MeterRegistry meters = new SimpleMeterRegistry();
        try {
            String started = startLine(hung);
            String hungUrl = started.substring(started.indexOf("listening on ") + "listening on ".length()).trim();
            HttpClient http = HttpClient.newHttpClient();
            String hungAddr = ServeCommandTest.JSON.readTree(http.send(HttpRequest.newBuilder(URI.create(hungUrl + "/health"))
                    .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString()).body()).path("bootstrap").asText();
            // By the way: the start line names the registry's bound port (spawnRole asks for --bootstrap-port 0; it said ":0").
            assertTrue(started.contains("(bootstrap registry on " + hungAddr + ")"), started + " / bootstrap " + hungAddr);
            EngineSpec spec = new EngineSpec(ModelFiles.load(null, null).weights(), 1, 1, 16, 64, 8, 64); // serve's page size
            try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
                 PrefillEngine healthy = new PrefillEngine(spec, new TransferSpec("shm", "127.0.0.1:" + registry.port(), TOKEN, "127.0.0.1"));
                 DecodeEngine d = new DecodeEngine(spec, new TransferSpec("shm", null, TOKEN, "127.0.0.1").withMeters(meters))) {
                int[] prompt = {1, 403, 407, 261, 378, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414};
                // Room 1 of the hung prefill: its link is up (shm) and its pages are offered, but no prefill request of
                // it ever comes, so it waits in the transfer queue.
                CompletableFuture<String> first = new CompletableFuture<>();
                d.submit(new DecodeEngine.Request(1, hungAddr, prompt, 4, Sampling.GREEDY, new DecodeEngine.TokenSink() {
                    @Override
                    public void onToken(int token) {
                    }

                    @Override
                    public void onDone(Generation g) {
                        first.completeExceptionally(new AssertionError("room 1 had no prefill request, yet it finished"));
                    }

                    @Override
                    public void onError(FailureKind kind, String message) {
                        first.complete(kind.label() + ": " + message);
                    }
                }));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (gauge(meters, "transfer") != 1) {
                    assertTrue(System.nanoTime() < deadline, "room 1 never reached the transfer queue");
                    Thread.sleep(5);
                }
                signal(hung, "STOP");
                try {
                    d.abort(1); // its clear now waits for an ABORT_ACK the stopped prefill cannot send
                    // Room 2 of the healthy prefill runs meanwhile, to its end.
                    healthy.submit(new PrefillEngine.Request(2, prompt, Sampling.GREEDY));
                    CompletableFuture<Generation> second = new CompletableFuture<>();
                    d.submit(new DecodeEngine.Request(2, "127.0.0.1:" + registry.port(), prompt, 4, Sampling.GREEDY, new DecodeEngine.TokenSink() {
                        @Override
                        public void onToken(int token) {
                        }

                        @Override
                        public void onDone(Generation g) {
                            second.complete(g);
                        }

                        @Override
                        public void onError(FailureKind kind, String message) {
                            second.completeExceptionally(new IllegalStateException(message));
                        }
                    }));
                    assertEquals(4, second.get(60, TimeUnit.SECONDS).tokens().length, "the healthy prefill's request");
                    assertFalse(first.isDone(), "room 1 was answered before its clear could return: " + first.getNow(null));
                    assertEquals(1, gauge(meters, "releasing"), "room 1 waits in the releasing queue, its pages held");
                } finally {
                    signal(hung, "CONT");
                }
                String why = first.get(60, TimeUnit.SECONDS);
                assertTrue(why.startsWith("aborted: "), why);
                assertEquals(0, d.outstanding().get(30, TimeUnit.SECONDS), "pages or rows still held");
                assertEquals(0, gauge(meters, "releasing"));
            }
        } finally {
            hung.destroy();
            if (!hung.waitFor(10, TimeUnit.SECONDS)) hung.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            prop("kvferry.abortAckTimeoutMs", ack);
            prop("kvferry.heartbeatMisses", misses);
        }
    }
}
