package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.TestModels;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.math.BigDecimal;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.LocalDate;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code kvferry serve}'s roles as {@link Roles} starts them: the engines get the model's tokenizer, so a structured output
 * runs across PD (an engine started without one refuses it: every constrained request was a 400 from the engines), a
 * schema with bounded numbers and a date among them.
 */
@Timeout(120)
class ServeStructuredOutputsTest {
    @Test
    void theRolesServeStructuredOutputs() throws Exception {
        TestModels.requireStories();
        // The prefill's registry binds port 0 (the engines find it through the role): a port taken from a ServerSocket(0)
        // closed at once was free for any other bind(0) until the registry's own.
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 4, 32, "tcp", "127.0.0.1", 0,
                0, "serve-structured-test");
        HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        try (Roles.Role all = Roles.all(o.withPorts(0, 0), o, o.withPorts(0, 0))) {
            for (String field : List.of("\"guided_choice\":[\"yes\",\"no\"]", "\"guided_regex\":\"(yes|no)\"")) {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + all.port() + "/v1/completions"))
                        .timeout(Duration.ofSeconds(60)).POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\","
                                + "\"max_tokens\":8,\"temperature\":0," + field + "}")).build(), HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), r.body());
                JsonNode choice = new ObjectMapper().readTree(r.body()).path("choices").path(0);
                assertTrue(List.of("yes", "no").contains(choice.path("text").asText()), r.body());
                assertEquals("stop", choice.path("finish_reason").asText(), r.body());
            }
            // Bounded numbers and a date across PD (prefill's first token, decode's rest): the answer parses and holds.
            // The language is finite (bounded digits, one optional space), so every answer ends whole within max_tokens.
            String schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":42},"
                    + "\"d\":{\"type\":\"string\",\"format\":\"date\"},\"x\":{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"maximum\":2.25}},"
                    + "\"required\":[\"n\",\"d\",\"x\"],\"additionalProperties\":false,\"title\":\"Record\"}";
            for (String sampling : List.of("\"temperature\":0", "\"temperature\":1,\"seed\":7", "\"temperature\":1.3,\"seed\":11")) {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + all.port() + "/v1/chat/completions"))
                        .timeout(Duration.ofSeconds(60)).POST(HttpRequest.BodyPublishers.ofString("{\"messages\":[{\"role\":\"user\","
                                + "\"content\":\"Once upon a time\"}],\"max_tokens\":80," + sampling + ",\"response_format\":{\"type\":"
                                + "\"json_schema\",\"json_schema\":{\"name\":\"record\",\"strict\":true,\"schema\":" + schema + "}}}")).build(),
                        HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), r.body());
                JsonNode choice = new ObjectMapper().readTree(r.body()).path("choices").path(0);
                assertEquals("stop", choice.path("finish_reason").asText(), r.body());
                JsonNode answer = new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
                        .readTree(choice.path("message").path("content").asText());
                assertTrue(answer.get("n").isIntegralNumber() && answer.get("n").asInt() >= 3 && answer.get("n").asInt() <= 42, r.body());
                LocalDate.parse(answer.get("d").asText()); // a calendar date, strictly
                BigDecimal x = answer.get("x").decimalValue();
                assertTrue(x.compareTo(new BigDecimal("-1.5")) > 0 && x.compareTo(new BigDecimal("2.25")) <= 0, r.body());
                assertEquals(3, answer.size(), r.body());
            }
        }
    }
}
