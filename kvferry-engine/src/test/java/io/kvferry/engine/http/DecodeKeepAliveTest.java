package io.kvferry.engine.http;

import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A decode request that waits (here for a prefill that never runs it) begins its stream within a keep-alive
 * interval and gets a comment every interval: the router tells a waiting decode from a hung one by them, and
 * the decode learns its client left from a comment that cannot be written, aborting the room then instead of
 * at its first token (or its waiting timeout).
 */
class DecodeKeepAliveTest {
    @Test
    @Timeout(60)
    void aWaitingRequestGetsKeepAlivesAndIsAbortedWhenItsClientLeaves() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 64, 4, 32);
        try (EngineStack stack = EngineStack.open(spec, "keepalive-test")) {
            String body = "{\"bootstrap_room\":31,\"bootstrap_addr\":\"" + stack.addr + "\",\"input_ids\":[1,400,500],\"max_new_tokens\":8}";
            try (Socket s = new Socket("127.0.0.1", stack.decodeServer.port())) {
                s.setSoTimeout(20_000);
                s.getOutputStream().write(("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                        + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.UTF_8));
                BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                assertTrue(in.readLine().startsWith("HTTP/1.1 200"), "the stream begins while the request waits");
                int keepAlives = 0;
                for (String line; keepAlives < 2 && (line = in.readLine()) != null; ) {
                    assertTrue(!line.startsWith("data: "), "no event: the prefill never ran the room, got " + line);
                    if (line.equals(": keep-alive")) keepAlives++;
                }
                assertEquals(2, keepAlives);
                assertEquals(1, stack.decode.inFlight());
            } // the client leaves before any token
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (stack.decode.inFlight() > 0 && System.nanoTime() < until) Thread.sleep(20);
            assertEquals(0, stack.decode.inFlight(), "the room of a client that left is aborted");
            assertEquals(0, stack.decode.outstanding().get(10, TimeUnit.SECONDS), "and its pages come back");
        }
    }
}
