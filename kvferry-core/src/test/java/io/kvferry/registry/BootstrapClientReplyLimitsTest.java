package io.kvferry.registry;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A registry reply is untrusted input (the address comes with each request and GETs are not
 * authenticated): the client bounds its bytes, the time of the whole exchange, and the sizes of a
 * topology, and says which limit a reply broke and where it came from.
 */
class BootstrapClientReplyLimitsTest {
    /** One attempt, 1 s per exchange: the decode's LinkDirectory uses one attempt too (with 3 s). */
    private static final RetryPolicy ONE_SECOND = new RetryPolicy(1, Duration.ofMillis(10), Duration.ofMillis(10), Duration.ofSeconds(1));

    private final List<AutoCloseable> closeables = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (AutoCloseable c : closeables) c.close();
    }

    private interface Script {
        void answer(OutputStream out) throws Exception;
    }

    /** A raw "registry" that reads one request and answers every connection with {@code script}. */
    private String rawRegistry(Script script) throws IOException {
        ServerSocket ss = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
        closeables.add(ss);
        Thread.ofPlatform().daemon().start(() -> {
            while (!ss.isClosed()) {
                try {
                    Socket s = ss.accept();
                    Thread.ofPlatform().daemon().start(() -> {
                        try (s) {
                            s.getInputStream().read(new byte[8192]);
                            script.answer(s.getOutputStream());
                            // Closing with request bytes unread would reset the connection under the reply.
                            s.shutdownOutput();
                            s.setSoTimeout(2000);
                            s.getInputStream().skip(Long.MAX_VALUE);
                        } catch (Exception ignored) {
                            // the client hung up: what these tests expect of it
                        }
                    });
                } catch (IOException e) {
                    return;
                }
            }
        });
        return "127.0.0.1:" + ss.getLocalPort();
    }

    private BootstrapClient client(String addr, RetryPolicy policy) {
        BootstrapClient c = new BootstrapClient(addr, null, policy);
        closeables.add(c);
        return c;
    }

    private static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    private static String okJson(String body) {
        return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + body.length() + "\r\n\r\n" + body;
    }

    /** Sends {@code head} at once, then one body byte every 500 ms (50 s in all). */
    private static void dripBody(OutputStream out, String head) throws IOException, InterruptedException {
        out.write(ascii(head));
        out.flush();
        for (int i = 0; i < 100; i++) {
            Thread.sleep(500);
            out.write(' ');
            out.flush();
        }
    }

    @Test
    void bodyDrippedPastTheRequestTimeoutFailsAtTheTimeout() throws Exception {
        String addr = rawRegistry(out -> dripBody(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"));
        BootstrapClient c = client(addr, ONE_SECOND);
        long t0 = System.nanoTime();
        CompletableFuture<RuntimeException> call = CompletableFuture.supplyAsync(() -> {
            try {
                c.fetchTopology();
                return null;
            } catch (RuntimeException e) {
                return e;
            }
        });
        RuntimeException e = call.get(30, TimeUnit.SECONDS);
        long ms = (System.nanoTime() - t0) / 1_000_000;
        // The old client was still reading after 8 s (and for as long as the peer kept dripping: 50 s). The bound tells
        // the two apart with room for a loaded machine; at 4 s, a first exchange's set-up there could take the 3 s over 1.
        assertTrue(ms < 20_000, "a 1 s request timeout held the caller " + ms + " ms");
        RegistryException re = assertInstanceOf(RegistryException.class, e);
        assertTrue(re.getMessage().contains("within the request timeout of 1000 ms"), re.getMessage());
        assertTrue(re.getMessage().contains(c.baseUri().toString()), re.getMessage());
    }

    @Test
    void healthProbeGivesUpOnADrippedBody() throws Exception {
        String addr = rawRegistry(out -> dripBody(out, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"));
        BootstrapClient c = client(addr, ONE_SECOND);
        long t0 = System.nanoTime();
        assertFalse(CompletableFuture.supplyAsync(c::health).get(30, TimeUnit.SECONDS));
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(ms < 20_000, "a health probe with a 1 s timeout took " + ms + " ms (the drip lasts 50 s)");
    }

    @Test
    void replyDeclaringMoreThanTheLimitIsRefusedWithoutReadingIt() throws Exception {
        AtomicLong sent = new AtomicLong();
        long total = 200L << 20;
        String addr = rawRegistry(out -> {
            out.write(ascii("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + total + "\r\n\r\n"));
            byte[] chunk = new byte[1 << 20];
            Arrays.fill(chunk, (byte) ' ');
            for (long n = 0; n < total; n += chunk.length) {
                out.write(chunk);
                sent.addAndGet(chunk.length);
            }
        });
        BootstrapClient c = client(addr, new RetryPolicy(1, Duration.ofMillis(10), Duration.ofMillis(10), Duration.ofSeconds(10)));
        RegistryException e = assertThrows(RegistryException.class, c::fetchTopology);
        assertTrue(e.getMessage().contains("declares a body of " + total + " bytes"), e.getMessage());
        assertTrue(e.getMessage().contains("limit of " + BootstrapClient.MAX_REPLY_BYTES + " bytes"), e.getMessage());
        assertTrue(e.getMessage().contains(c.baseUri().toString()), e.getMessage());
        // The old client read all 200 MiB into a String; now only socket buffers fill before the hang-up.
        assertTrue(sent.get() < (32L << 20), "the client let the registry send " + (sent.get() >> 20) + " MiB");
    }

    @Test
    void chunkedReplyIsCutOffAtTheLimit() throws Exception {
        String addr = rawRegistry(out -> {
            out.write(ascii("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"));
            byte[] spaces = new byte[64 * 1024];
            Arrays.fill(spaces, (byte) ' ');
            byte[] head = ascii(Integer.toHexString(spaces.length) + "\r\n");
            for (int i = 0; i < 3200; i++) { // 200 MiB, never ending as far as the limit is concerned
                out.write(head);
                out.write(spaces);
                out.write(ascii("\r\n"));
            }
        });
        BootstrapClient c = client(addr, new RetryPolicy(1, Duration.ofMillis(10), Duration.ofMillis(10), Duration.ofSeconds(10)));
        RegistryException e = assertThrows(RegistryException.class, c::fetchTopology);
        assertTrue(e.getMessage().contains("sent a body of more than " + BootstrapClient.MAX_REPLY_BYTES + " bytes"), e.getMessage());
        assertTrue(e.getMessage().contains(c.baseUri().toString()), e.getMessage());
    }

    @Test
    void replyJustUnderTheLimitIsRead() throws Exception {
        // A legitimate long reply (query_dp_ranks for many rooms) with padding up to the limit still parses.
        String json = "{\"42\":0}";
        String padded = json + " ".repeat(BootstrapClient.MAX_REPLY_BYTES - json.length());
        String addr = rawRegistry(out -> out.write(ascii(okJson(padded))));
        assertEquals(0, client(addr, ONE_SECOND).queryDpRanks(List.of(42L)).get(42L));
    }

    private static String topology(int tp, int cp, int dp, int pp) {
        return "{\"attn_tp_size\":" + tp + ",\"attn_cp_size\":" + cp + ",\"dp_size\":" + dp + ",\"pp_size\":" + pp
                + ",\"page_size\":16,\"kv_cache_dtype\":\"bf16\",\"follow_bootstrap_room\":true}";
    }

    @Test
    void topologySizeOverTheRegistryLimitIsRefusedNamingTheField() throws Exception {
        String addr = rawRegistry(out -> out.write(ascii(okJson(topology(1, 1, 1, Integer.MAX_VALUE)))));
        RegistryException e = assertThrows(RegistryException.class, () -> client(addr, ONE_SECOND).fetchTopology());
        assertTrue(e.getMessage().contains("pp_size " + Integer.MAX_VALUE), e.getMessage());
        assertTrue(e.getMessage().contains("[1, " + Requests.MAX_SIZE + "]"), e.getMessage());

        String zero = rawRegistry(out -> out.write(ascii(okJson(topology(0, 1, 1, 1)))));
        e = assertThrows(RegistryException.class, () -> client(zero, ONE_SECOND).fetchTopology());
        assertTrue(e.getMessage().contains("attn_tp_size 0"), e.getMessage());
    }

    @Test
    void topologyWithMoreRanksThanTheRegistryAcceptsIsRefused() throws Exception {
        // Each size within MAX_SIZE, their product 2^32: no registration could have produced it.
        String addr = rawRegistry(out -> out.write(ascii(okJson(topology(256, 256, 256, 256)))));
        RegistryException e = assertThrows(RegistryException.class, () -> client(addr, ONE_SECOND).fetchTopology());
        assertTrue(e.getMessage().contains("dp_size*attn_cp_size*attn_tp_size*pp_size = 4294967296"), e.getMessage());
        assertTrue(e.getMessage().contains("limit of " + Requests.MAX_TOTAL_RANKS), e.getMessage());
    }
}
