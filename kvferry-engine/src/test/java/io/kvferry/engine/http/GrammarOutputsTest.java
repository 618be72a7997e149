package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.HostileGrammars;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.RecursiveGrammars;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.http.HttpResponse;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Grammars (GBNF) through the router, a TP2 prefill (the first token) and a TP1 decode (the rest): recursive grammars
 * on /generate ({@code ebnf}), /v1/completions ({@code guided_grammar}, whole and streamed) and chat
 * ({@code structured_outputs.grammar}), the answer a colocated run's token for token, a whole match of the grammar when
 * it stops and a prefix of one when cut; and a grammar that passes a run-time bound of the recogniser, at the first
 * token (the prefill's) or later (the decode's): the request ends with an error naming the grammar, and the engines
 * serve the next request as before.
 */
class GrammarOutputsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String PROMPT = "Once upon a time";
    static final int MAX = 40;
    static Tokenizer tokenizer;
    static OutputConstraint.Compiler compiler;
    static EngineStack stack;
    static Router router;
    static ColocatedEngine colocated;
    static int[] promptIds;
    static ConstrainedStack fixture;

    @BeforeAll
    static void start() throws Exception {
        fixture = ConstrainedStack.open("grammar-outputs-test");
        tokenizer = fixture.tokenizer;
        compiler = fixture.compiler;
        stack = fixture.stack;
        router = fixture.router;
        colocated = fixture.colocated;
        promptIds = tokenizer.encode(PROMPT, true, false);
    }

    @AfterAll
    static void stop() {
        if (fixture != null) fixture.close();
    }

    /** Recursive grammars: nested parentheses inside a left-recursive list; left-recursive arithmetic; a small JSON. */
    static final List<String> GRAMMARS = RecursiveGrammars.EXAMPLES;
    /** Greedy, and seeded temperature / top-p. */
    static final String[] SAMPLINGS = {"\"temperature\":0", "\"temperature\":0.9,\"top_p\":0.95,\"seed\":11"};

    static Sampling sampling(int s, OutputConstraint c) {
        SamplingRules r = SamplingRules.NONE.withConstraint(c);
        return s == 0 ? new Sampling(0f, 1f, 0, -1, r) : new Sampling(0.9f, 0.95f, 11, -1, r);
    }

    static void assertWholeOrPrefix(OutputConstraint c, String text, boolean stopped, String what) {
        if (stopped) assertTrue(c.matches(text), what + ": '" + text + "' is not a whole match");
        else assertTrue(c.startsMatch(text), what + ": '" + text + "' is not a prefix of a match");
    }

    @Test
    @Timeout(180)
    void grammarAnswersMatchOnEveryRouteAndEqualColocated() throws Exception {
        int stops = 0;
        for (String grammar : GRAMMARS) {
            OutputConstraint c = compiler.ebnf(grammar);
            String q = JSON.writeValueAsString(grammar);
            for (int s = 0; s < SAMPLINGS.length; s++) {
                Generation ref = colocated.generate(promptIds, MAX, sampling(s, c));
                String refText = tokenizer.decode(ref.tokens());
                String what = grammar.lines().findFirst().orElseThrow() + " " + SAMPLINGS[s];
                assertWholeOrPrefix(c, refText, ref.finishReason().equals("stop"), what);
                if (ref.finishReason().equals("stop")) stops++;
                // SGLang's /generate (ebnf): the colocated run's tokens.
                JsonNode g = RouterCalls.ok(router.port(), "/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":" + MAX
                        + "," + SAMPLINGS[s] + ",\"ebnf\":" + q + "}}");
                assertArrayEquals(ref.tokens(), SamplingParamsTest.ids(g.get("output_ids")), what);
                assertEquals(refText, g.get("text").asText(), what);
                // vLLM's guided_grammar and structured_outputs.grammar on /v1/completions: the same text and finish.
                for (String field : new String[]{"\"guided_grammar\":" + q, "\"structured_outputs\":{\"grammar\":" + q + "}"}) {
                    JsonNode r = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX + ","
                            + SAMPLINGS[s] + "," + field + "}");
                    JsonNode choice = r.path("choices").path(0);
                    assertEquals(refText, choice.path("text").asText(), what + " " + field);
                    assertEquals(ref.finishReason(), choice.path("finish_reason").asText(), what + " " + field);
                }
                StringBuilder streamed = new StringBuilder();
                for (JsonNode e : RouterCalls.events(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX
                        + "," + SAMPLINGS[s] + ",\"stream\":true,\"guided_grammar\":" + q + "}")) {
                    streamed.append(e.path("choices").path(0).path("text").asText(""));
                }
                assertEquals(refText, streamed.toString(), what + " streamed");
                // A chat (its own prompt): a whole match when it stops, a prefix of one when cut.
                JsonNode chat = RouterCalls.ok(router.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT
                        + "\"}],\"max_tokens\":" + MAX + "," + SAMPLINGS[s] + ",\"structured_outputs\":{\"grammar\":" + q + "}}");
                JsonNode cc = chat.path("choices").path(0);
                assertWholeOrPrefix(c, cc.path("message").path("content").asText(), cc.path("finish_reason").asText().equals("stop"), "chat " + what);
            }
        }
        assertTrue(stops >= 2, "some answers finish whole: " + stops);
    }

    @Test
    @Timeout(180)
    void aGrammarPastARunTimeBoundEndsItsRequestWithAnErrorNamingIt() throws Exception {
        // Later than the first token: the decode's mask passes the bound; the request fails with the grammar named.
        String[] grammars = {HostileGrammars.ambiguous(), HostileGrammars.ambiguousAtOnce()};
        for (String grammar : grammars) {
            String q = JSON.writeValueAsString(grammar);
            // Not streamed: the client's grammar is at fault, a 400 naming its field as the client named it.
            for (String[] call : new String[][]{
                    {"/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":150,\"temperature\":0,\"ignore_eos\":true,\"ebnf\":" + q + "}}",
                            "sampling_params.ebnf"},
                    {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":150,\"temperature\":0,\"ignore_eos\":true,\"guided_grammar\":" + q + "}",
                            "guided_grammar"},
                    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":150,\"temperature\":0,"
                            + "\"ignore_eos\":true,\"structured_outputs\":{\"grammar\":" + q + "}}", "structured_outputs.grammar"}}) {
                HttpResponse<String> r = RouterCalls.post(router.port(), call[0], call[1]);
                String what = call[0] + ": " + r.body().substring(0, Math.min(300, r.body().length()));
                assertEquals(400, r.statusCode(), what);
                JsonNode error = JSON.readTree(r.body()).path("error");
                assertEquals("invalid_request_error", error.path("type").asText(), what);
                assertEquals(call[2], error.path("param").asText(), what);
                String message = error.path("message").asText();
                assertTrue(message.contains("the grammar (ebnf=root ::=") && message.contains("passed a bound of its recognizer at output token"),
                        message);
            }
            // Streamed: past the first token, the tokens so far then an error event naming it; at the first token (the
            // prefill's mask) no stream has begun: the error answer itself.
            String streamed = "{\"prompt\":\"x\",\"max_tokens\":150,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"guided_grammar\":" + q + "}";
            if (grammar.equals(HostileGrammars.ambiguous())) {
                List<JsonNode> events = RouterCalls.events(router.port(), "/v1/completions", streamed);
                assertTrue(events.size() > 2, "tokens before the error: " + events.size());
                JsonNode error = events.getLast().path("error");
                assertTrue(error.path("message").asText().contains("passed a bound"), events.getLast().toString());
                assertEquals("invalid_request_error", error.path("type").asText(), events.getLast().toString());
                assertEquals("guided_grammar", error.path("param").asText(), events.getLast().toString());
            } else {
                HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/completions", streamed);
                assertEquals(400, r.statusCode(), r.body());
                assertEquals("guided_grammar", JSON.readTree(r.body()).path("error").path("param").asText(), r.body());
                assertTrue(r.body().contains("passed a bound of its recognizer at output token 0"), r.body().substring(0, Math.min(300, r.body().length())));
            }
        }
        // The engines go on: a plain request and a constrained one are served as before.
        JsonNode ok = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":8,\"temperature\":0,"
                + "\"guided_grammar\":" + JSON.writeValueAsString(GRAMMARS.get(0)) + "}");
        assertTrue(compiler.ebnf(GRAMMARS.get(0)).startsMatch(ok.path("choices").path(0).path("text").asText()), ok.toString());
        assertEquals(200, RouterCalls.post(router.port(), "/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":4}}").statusCode());
    }
}
