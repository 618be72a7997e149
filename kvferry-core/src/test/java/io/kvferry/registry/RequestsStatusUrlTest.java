package io.kvferry.registry;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code kvferry_status_url} in {@code PUT /route}: the registry's status page fetches it with
 * {@code HttpClient}, so a URL that has the right shape but no request can be made to is refused at
 * registration (400 naming the field and why), not found broken on every page load.
 */
class RequestsStatusUrlTest {
    private static PrefillRankRegistration register(String statusUrl) throws BadRequestException {
        Map<String, Object> m = RawHttp.registration(1, 0, 1, 0, 7000);
        m.put("kvferry_status_url", statusUrl);
        return Requests.registration(Requests.parseObject(RawHttp.json(m).getBytes()));
    }

    @ParameterizedTest
    @ValueSource(strings = {"http://127.0.0.1:9000/status.json", "http://[::1]:9000/status.json",
            "http://prefill-0.pd.svc.cluster.local:9000/status.json", "http://localhost:1/status.json"})
    void aFetchableStatusUrlIsKept(String url) throws Exception {
        assertEquals(url, register(url).kvferryStatusUrl());
    }

    @ParameterizedTest
    @ValueSource(strings = {"http://prefill_0:9000/status.json", "http://::1:9000/status.json", "http://a%41:9000/status.json"})
    void aStatusUrlNoRequestCanBeMadeToIsRefusedNamingWhy(String url) {
        BadRequestException e = assertThrows(BadRequestException.class, () -> register(url));
        assertTrue(e.getMessage().startsWith("kvferry_status_url '" + url + "' cannot be fetched: "), e.getMessage());
    }

    @Test
    void theRegistryAnswers400NamingTheFieldAndTheHost() {
        try (BootstrapRegistryServer server = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("t"));
             RawHttp http = new RawHttp(server.port())) {
            Map<String, Object> m = RawHttp.registration(1, 0, 1, 0, 7000);
            m.put("kvferry_status_url", "http://prefill_0:9000/status.json");
            RawHttp.Reply r = http.put(RawHttp.json(m), "Bearer t");
            assertEquals(400, r.status(), r.body());
            assertTrue(r.body().contains("kvferry_status_url") && r.body().contains("no host"), r.body());
            assertEquals(0, server.registeredRanks());
        }
    }
}
