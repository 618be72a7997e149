package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * What a prefill tells its peers on other hosts: the address in its /health (the router hands it to each
 * decode as bootstrap_addr) and the one its registry publishes for its kvferry ranks. A wildcard bind
 * (--host 0.0.0.0) was published as is, so every decode on another host connected to its own host and
 * each request failed after the prefill-info timeout (15 s); an IPv6 bind was published without brackets.
 */
@Timeout(120)
class PublishedAddressTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    private JsonNode get(String url) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(30)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), url + ": " + r.body());
        return JSON.readTree(r.body());
    }

    private HttpResponse<String> complete(String routerUrl) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create(routerUrl + "/v1/completions")).timeout(Duration.ofSeconds(60))
                .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0}")).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** Options whose prefill's registry binds port 0: the role says which port it got ({@link Roles.Role#bootstrapPort}). */
    private static Roles.Options options(String host) throws Exception {
        return new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 4, 32, "tcp", host, 0, 0,
                "published-test");
    }

    @Test
    void aWildcardPrefillIsRefusedWithoutAnAdvertisedHostAndPublishesThatOneWithIt() throws Exception {
        // The refused prefill names a port, to see it left free: one held (bound, never listening) until just before, so
        // no other bind could be given it meanwhile. A ServerSocket(0) closed at once freed it for any other process's bind(0)
        // until this test's own bind below, which then failed. What is left is the microseconds between the release and that
        // bind, in this thread, with no bind of this test's between.
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress("0.0.0.0", 0));
        Roles.Options o = options("0.0.0.0").withPorts(0, hold.getLocalPort());
        hold.close();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Roles.prefill(o).close());
        try (ServerSocket taken = new ServerSocket(o.bootstrapPort())) {
            assertTrue(taken.isBound(), "the refused prefill left its registry's port free");
        }
        assertTrue(e.getMessage().contains("--host 0.0.0.0 binds every address") && e.getMessage().contains("--advertise-host"),
                e.getMessage());
        try (Roles.Role prefill = Roles.prefill(o.withPorts(0, 0).withAdvertiseHost("127.0.0.1"));
             Roles.Role decode = Roles.decode(o.withPorts(0, 0));
             Roles.Role router = Roles.router(o.withPorts(0, 0), List.of("http://127.0.0.1:" + prefill.port()),
                     List.of("http://127.0.0.1:" + decode.port()))) {
            assertEquals("127.0.0.1:" + prefill.bootstrapPort(), get("http://127.0.0.1:" + prefill.port() + "/health").path("bootstrap").asText(),
                    "the router hands this to the decodes");
            JsonNode ranks = get("http://127.0.0.1:" + prefill.bootstrapPort() + "/status.json").path("prefill_ranks");
            assertTrue(ranks.get(0).path("endpoint").asText().startsWith("127.0.0.1:"), ranks.toString());
            HttpResponse<String> r = complete("http://127.0.0.1:" + router.port());
            assertEquals(200, r.statusCode(), r.body());
        }
    }

    @Test
    void anEmbeddedClusterOnTheWildcardReachesItsRolesOverLoopback() throws Exception {
        Roles.Options o = options("0.0.0.0");
        try (Roles.Role all = Roles.all(o.withPorts(0, 0), o, o.withPorts(0, 0))) {
            HttpResponse<String> r = complete("http://127.0.0.1:" + all.port());
            assertEquals(200, r.statusCode(), r.body());
        }
    }

    @Test
    void anIpv6PrefillPublishesItsRegistryInBrackets() throws Exception {
        assertEquals("[fd00::1]:8998", Roles.hostPort("fd00::1", 8998));
        assertEquals("[fd00::1]:8998", Roles.hostPort("[fd00::1]", 8998));
        assertEquals("10.0.0.1:8998", Roles.hostPort("10.0.0.1", 8998));
        assertTrue(Roles.isWildcard("::") && Roles.isWildcard("[::]") && Roles.isWildcard("0.0.0.0"));
        assertFalse(Roles.isWildcard("::1") || Roles.isWildcard("prefill-host") || Roles.isWildcard("10.0.0.1"));
        boolean v6;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("::1"))) {
            v6 = s.getInetAddress() instanceof Inet6Address;
        } catch (IOException e) {
            v6 = false;
        }
        assumeTrue(v6, "skipped: no IPv6 loopback (::1) here");
        Roles.Options o = options("::1");
        try (Roles.Role prefill = Roles.prefill(o); Roles.Role decode = Roles.decode(o.withPorts(0, 0));
             Roles.Role router = Roles.router(o.withPorts(0, 0), List.of("http://[::1]:" + prefill.port()),
                     List.of("http://[::1]:" + decode.port()))) {
            assertEquals("[::1]:" + prefill.bootstrapPort(), get("http://[::1]:" + prefill.port() + "/health").path("bootstrap").asText());
            HttpResponse<String> r = complete("http://[::1]:" + router.port());
            assertEquals(200, r.statusCode(), r.body());
        }
    }
}
