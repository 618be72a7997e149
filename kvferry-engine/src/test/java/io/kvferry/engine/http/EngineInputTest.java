package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An engine's /generate reached directly (whoever holds the cluster token can): hostile {@code input_ids} and
 * {@code sampling_params} are each a 400 whose {@code param} names the field and whose message says what is wrong, on the
 * prefill and on the decode alike, and nothing is held after them.
 */
class EngineInputTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static EngineStack stack;

    @BeforeAll
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        stack = EngineStack.open(new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32), "engine-input-test");
    }

    @AfterAll
    static void stop() {
        if (stack != null) stack.close();
    }

    static int port(String url) {
        return Integer.parseInt(url.substring(url.lastIndexOf(':') + 1));
    }

    static void assertRefused(String url, String body, String param, String message) throws Exception {
        HttpResponse<String> r = RouterCalls.post(port(url), "/generate", body);
        assertEquals(400, r.statusCode(), url + " " + body + " -> " + r.body());
        JsonNode error = JSON.readTree(r.body()).path("error");
        assertEquals(param, error.path("param").asText(null), url + " " + body + " -> " + r.body());
        assertTrue(error.path("message").asText().contains(message), url + " " + body + " -> " + r.body());
    }

    @Test
    @Timeout(60)
    void hostileInputIdsAndSamplingParamsAreA400NamingTheField() throws Exception {
        String[][] ids = {
                {"[]", "input_ids must hold at least one token id"},
                {"[1,-1]", "input_ids[1] must be a token id in the vocabulary [0, 512), got -1"},
                {"[1,2,9999]", "input_ids[2] must be a token id in the vocabulary [0, 512), got 9999"},
                {"[1,2147483648]", "input_ids[1] must be a token id in the vocabulary [0, 512), got 2147483648"},
                {"[1,1.5]", "input_ids[1] must be a token id in the vocabulary [0, 512), got 1.5"},
                {"\"abc\"", "input_ids must be an array of token ids"},
                {"[" + "5,".repeat(600) + "5]", "input_ids has 601 tokens; the model's context is 512"},
        };
        String[][] sampling = {
                // Refusals echo the number as sent, not the float it rounds to (Infinity, 0.0).
                {"\"temperature\":1e39", "temperature", "temperature must be >= 0 and at most 3.4028235E38 (a 32-bit float), got 1e39"},
                {"\"top_p\":1e-50", "top_p", "top_p must be in (0, 1], got 1e-50 (0 as a 32-bit float)"},
                {"\"temperature\":\"hot\"", "temperature", "temperature must be a number"},
                {"\"top_p\":0", "top_p", "top_p must be in (0, 1]"},
                {"\"top_k\":0", "top_k", "top_k must be -1 (no limit) or at least 1"},
                {"\"seed\":\"x\"", "seed", "seed must be an integer"},
                {"\"min_new_tokens\":1e10", "min_new_tokens", "min_new_tokens must be an integer"},
                {"\"logit_bias\":{\"1\":1e39}", "logit_bias", "logit_bias values must be in [-100, 100]"},
                {"\"logit_bias\":{\"700\":1}", "logit_bias", "logit_bias names token 700, outside the vocabulary"},
                {"\"stop_token_ids\":[512]", "stop_token_ids", "stop_token_ids names token 512, outside the vocabulary"},
                {"\"frequency_penalty\":9", "frequency_penalty", "frequency_penalty must be in [-2, 2]"},
                // Structured outputs: compiled by each engine, within bounds (docs/SERVING.md "Structured outputs").
                {"\"regex\":7", "regex", "sampling_params.regex must be a string"},
                {"\"regex\":\"" + "a".repeat(16_385) + "\"", "regex", "is 16385 characters long; at most 16384"},
                {"\"regex\":\"x{99999}\"", "regex", "a count above 256"},
                {"\"regex\":\"(((a|b){0,256}){256}){256}\"", "regex", "too large"},
                {"\"regex\":\"(a|b)*a(a|b){40}\"", "regex", "too complex"},
                {"\"json_schema\":\"" + "[".repeat(2_000) + "\"", "json_schema", "is not valid JSON"},
                {"\"json_schema\":\"{\\\"$ref\\\":\\\"#/$defs/a\\\",\\\"$defs\\\":{\\\"a\\\":{\\\"$ref\\\":\\\"#/$defs/a\\\"}}}\"",
                        "json_schema.$defs.a", "recursive $ref"}, // the param goes on to the fault's place in the schema
                {"\"ebnf\":\"root ::= x\"", "ebnf", "the grammar has an undefined rule 'x' at line 1, column 10"},
        };
        long room = 9_000;
        for (String url : List.of(stack.prefillUrl(), stack.decodeUrl())) {
            for (String[] c : ids) {
                assertRefused(url, "{\"bootstrap_room\":" + room++ + ",\"input_ids\":" + c[0] + ",\"bootstrap_addr\":\"" + stack.addr
                        + "\",\"max_new_tokens\":4}", "input_ids", c[1]);
            }
            for (String[] c : sampling) {
                assertRefused(url, "{\"bootstrap_room\":" + room++ + ",\"input_ids\":[1,2,3],\"bootstrap_addr\":\"" + stack.addr
                        + "\",\"max_new_tokens\":4,\"sampling_params\":{" + c[0] + "}}", "sampling_params." + c[1], c[2]);
            }
            assertRefused(url, "{\"bootstrap_room\":" + room++ + ",\"input_ids\":[1,2,3],\"bootstrap_addr\":\"" + stack.addr
                    + "\",\"max_new_tokens\":4,\"sampling_params\":[1]}", "sampling_params", "sampling_params must be an object");
        }
        // The decode knows the answer's limit: a minimum above it is refused there as the router refuses it.
        assertRefused(stack.decodeUrl(), "{\"bootstrap_room\":" + room++ + ",\"input_ids\":[1,2,3],\"bootstrap_addr\":\"" + stack.addr
                + "\",\"max_new_tokens\":4,\"sampling_params\":{\"min_new_tokens\":5}}", "sampling_params.min_new_tokens",
                "min_new_tokens (5) must be at most max_new_tokens (4)");
        assertEquals(0, stack.prefill.outstanding().get(5, TimeUnit.SECONDS));
        assertEquals(0, stack.decode.outstanding().get(5, TimeUnit.SECONDS));
        for (String url : List.of(stack.prefillUrl(), stack.decodeUrl())) {
            HttpResponse<String> h = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(url + "/health")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, h.statusCode(), h.body());
        }
    }
}
