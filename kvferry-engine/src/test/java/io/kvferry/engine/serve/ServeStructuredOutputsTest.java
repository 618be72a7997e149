package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.TestModels;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code kvferry serve}'s roles as {@link Roles} starts them: the engines get the model's tokenizer, so a structured output
 * runs across PD (an engine started without one refuses it: every constrained request was a 400 from the engines).
 */
@Timeout(120)
class ServeStructuredOutputsTest {
    @Test
    void theRolesServeStructuredOutputs() throws Exception {
        TestModels.requireStories();
        int bootstrapPort;
        try (ServerSocket s = new ServerSocket(0)) {
            bootstrapPort = s.getLocalPort();
        }
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 4, 32, "tcp", "127.0.0.1", 0,
                bootstrapPort, "serve-structured-test");
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
        }
    }
}
