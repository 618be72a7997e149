package io.kvferry.engine.http;

import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.io.JsonEOFException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.CompilerSlot;
import io.kvferry.engine.model.OutputConstraint;
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
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Structured outputs through the router, a TP2 prefill (the first token) and a TP1 decode (the rest), as vLLM's and
 * SGLang's clients send them: regex on the three routes (greedy and seeded, whole and streamed; the answer a colocated
 * run's, token for token, and a whole match when it stops), choices, JSON schemas (OpenAI's response_format, vLLM's guided_json and
 * structured_outputs), json_object; and the refusals (a bad regex, an unsupported keyword, two constraints, a bad grammar), a
 * 400 naming the field at the router and at each engine.
 */
class StructuredOutputsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String PROMPT = "Once upon a time";
    static final int MAX = 48;
    static Tokenizer tokenizer;
    static OutputConstraint.Compiler compiler;
    static EngineStack stack;
    static Router router;
    static ColocatedEngine colocated;
    static int[] promptIds;
    static ConstrainedStack fixture;

    @BeforeAll
    static void start() throws Exception {
        fixture = ConstrainedStack.open("structured-outputs-test");
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

    static String quoted(String s) throws Exception {
        return JSON.writeValueAsString(s);
    }

    static void assertWholeMatch(String regex, String text, String what) {
        assertTrue(Pattern.compile(regex).matcher(text).matches(), what + ": '" + text + "' does not match " + regex);
    }

    static void assertPrefixOfMatch(String regex, String text, String what) {
        Matcher m = Pattern.compile(regex).matcher(text);
        assertTrue(m.matches() || m.hitEnd(), what + ": '" + text + "' is not a prefix of a match of " + regex);
    }

    static final String[] REGEXES = {"(Lily|Tom|Sue) (went|saw|had) [a-z]+( [a-z]+){1,6}\\.", "[0-9]{3}-[0-9]{4}", "\\d+ (cats|dogs)"};
    /** Greedy, and seeded temperature / top-p (OpenAI's and SGLang's spelling alike). */
    static final String[] SAMPLINGS = {"\"temperature\":0", "\"temperature\":0.9,\"top_p\":0.95,\"seed\":11"};

    static Sampling sampling(int s, OutputConstraint c) {
        SamplingRules r = SamplingRules.NONE.withConstraint(c);
        return s == 0 ? new Sampling(0f, 1f, 0, -1, r) : new Sampling(0.9f, 0.95f, 11, -1, r);
    }

    @Test
    @Timeout(120)
    void regexAnswersMatchOnEveryRouteAndEqualColocated() throws Exception {
        int stops = 0;
        for (String regex : REGEXES) {
            for (int s = 0; s < SAMPLINGS.length; s++) {
                Generation ref = colocated.generate(promptIds, MAX, sampling(s, compiler.regex(regex)));
                String refText = tokenizer.decode(ref.tokens());
                String what = regex + " " + SAMPLINGS[s];
                // SGLang's /generate: the tokens are the colocated run's.
                JsonNode g = RouterCalls.ok(router.port(), "/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":" + MAX
                        + "," + SAMPLINGS[s] + ",\"regex\":" + quoted(regex) + "}}");
                int[] ids = SamplingParamsTest.ids(g.get("output_ids"));
                assertArrayEquals(ref.tokens(), ids, what);
                assertEquals(refText, g.get("text").asText(), what);
                // vLLM's guided_regex and its newer structured_outputs.regex on /v1/completions: the same text.
                for (String field : new String[]{"\"guided_regex\":" + quoted(regex), "\"structured_outputs\":{\"regex\":" + quoted(regex) + "}"}) {
                    JsonNode c = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX + ","
                            + SAMPLINGS[s] + "," + field + "}");
                    JsonNode choice = c.path("choices").path(0);
                    assertEquals(refText, choice.path("text").asText(), what + " " + field);
                    assertEquals(ref.finishReason(), choice.path("finish_reason").asText(), what + " " + field);
                }
                // Streamed: the deltas add up to the same text.
                StringBuilder streamed = new StringBuilder();
                for (JsonNode e : RouterCalls.events(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX
                        + "," + SAMPLINGS[s] + ",\"stream\":true,\"guided_regex\":" + quoted(regex) + "}")) {
                    streamed.append(e.path("choices").path(0).path("text").asText(""));
                }
                assertEquals(refText, streamed.toString(), what + " streamed");
                if (ref.finishReason().equals("stop")) {
                    stops++;
                    assertWholeMatch(regex, refText, what);
                } else {
                    assertPrefixOfMatch(regex, refText, what);
                }
                // A chat (its own prompt): a match when it stops, a prefix of one when cut.
                JsonNode chat = RouterCalls.ok(router.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT
                        + "\"}],\"max_tokens\":" + MAX + "," + SAMPLINGS[s] + ",\"guided_regex\":" + quoted(regex) + "}");
                JsonNode cc = chat.path("choices").path(0);
                String chatText = cc.path("message").path("content").asText();
                if (cc.path("finish_reason").asText().equals("stop")) assertWholeMatch(regex, chatText, "chat " + what);
                else assertPrefixOfMatch(regex, chatText, "chat " + what);
            }
        }
        assertTrue(stops >= 3, "most answers finish whole: " + stops);
    }

    @Test
    @Timeout(120)
    void aChoiceIsOneOfTheChoices() throws Exception {
        List<String> choices = List.of("yes", "no", "It was a dog.", "a (b) [c] {d} ^$.*+?|\\");
        String list = JSON.writeValueAsString(choices);
        for (String s : SAMPLINGS) {
            for (String field : new String[]{"\"guided_choice\":" + list, "\"structured_outputs\":{\"choice\":" + list + "}",
                    "\"structured_outputs\":{\"choice\":" + list + ",\"disable_fallback\":true,\"disable_additional_properties\":false}"}) {
                JsonNode c = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX + "," + s + ","
                        + field + "}");
                JsonNode choice = c.path("choices").path(0);
                assertEquals("stop", choice.path("finish_reason").asText(), c.toString());
                assertTrue(choices.contains(choice.path("text").asText()), c.toString());
            }
        }
        // The metacharacters are literals: a choice that is all of them is reached when it is the only one.
        String odd = choices.getLast();
        JsonNode c = RouterCalls.ok(router.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":" + MAX
                + ",\"temperature\":0,\"guided_choice\":[" + quoted(odd) + "]}");
        assertEquals(odd, c.path("choices").path(0).path("message").path("content").asText(), c.toString());
    }

    static final String PERSON = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":16},"
            + "\"age\":{\"type\":\"integer\"},\"pets\":{\"type\":\"array\",\"items\":{\"enum\":[\"cat\",\"dog\"]},\"maxItems\":3},"
            + "\"happy\":{\"type\":\"boolean\"},\"note\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":8},{\"type\":\"null\"}]}},"
            + "\"required\":[\"name\",\"age\",\"happy\"],\"additionalProperties\":false}";

    static void assertPerson(JsonNode p, String what) {
        assertTrue(p.isObject(), what);
        assertTrue(p.get("name").isTextual() && p.get("name").asText().length() <= 16, what);
        assertTrue(p.get("age").isIntegralNumber(), what);
        assertTrue(p.get("happy").isBoolean(), what);
        Set<String> allowed = Set.of("name", "age", "pets", "happy", "note");
        p.fieldNames().forEachRemaining(f -> assertTrue(allowed.contains(f), what + ": " + f));
        if (p.has("pets")) {
            assertTrue(p.get("pets").isArray() && p.get("pets").size() <= 3, what);
            p.get("pets").forEach(x -> assertTrue(x.asText().equals("cat") || x.asText().equals("dog"), what));
        }
        if (p.has("note")) assertTrue(p.get("note").isNull() || p.get("note").isTextual(), what);
    }

    @Test
    @Timeout(120)
    void jsonSchemaAnswersParseAndHaveTheSchemasShape() throws Exception {
        String[] fields = {
                "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"schema\":" + PERSON + ",\"strict\":true}}",
                "\"guided_json\":" + PERSON,
                "\"guided_json\":" + quoted(PERSON),
                "\"structured_outputs\":{\"json\":" + PERSON + "}",
        };
        int stops = 0;
        for (String s : SAMPLINGS) {
            for (String f : fields) {
                JsonNode c = RouterCalls.ok(router.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about Tom.\"}],"
                        + "\"max_tokens\":120," + s + "," + f + "}");
                JsonNode choice = c.path("choices").path(0);
                if (!choice.path("finish_reason").asText().equals("stop")) continue;
                stops++;
                assertPerson(JSON.readTree(choice.path("message").path("content").asText()), s + " " + f + ": " + c);
            }
            JsonNode g = RouterCalls.ok(router.port(), "/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":120," + s
                    + ",\"json_schema\":" + quoted(PERSON) + "}}");
            if (g.path("meta_info").path("finish_reason").path("type").asText().equals("stop")) {
                stops++;
                assertPerson(JSON.readTree(g.get("text").asText()), s + " /generate: " + g);
            }
        }
        assertTrue(stops >= 4, "most answers finish whole: " + stops);
    }

    /** A token whose text is exactly {@code text} (a byte token, for '}' in this vocabulary). */
    static int token(String text) {
        for (int t = 0; t < tokenizer.vocabSize(); t++) if (new String(tokenizer.tokenBytes(t), StandardCharsets.UTF_8).equals(text)) return t;
        throw new AssertionError("no token '" + text + "'");
    }

    /** Whether {@code text} is JSON cut short: every token parses until the input ends. */
    static boolean isJsonPrefix(String text) throws Exception {
        try (var p = JSON.getFactory().createParser(text)) {
            while (p.nextToken() != null) {
                // every token so far is well formed
            }
            return true;
        } catch (JsonEOFException e) {
            return true;
        } catch (JsonParseException e) {
            return e.getMessage().contains("end-of-input");
        }
    }

    @Test
    @Timeout(120)
    void jsonObjectAnswersParse() throws Exception {
        // The story model writes its story into the first key and goes on with members: cut at max_tokens, the answer is an
        // object's start; with a bias for '"' and '}' (OpenAI's logit_bias, applied before the mask) it closes its strings and
        // the object, and stops.
        String close = "\"logit_bias\":{\"" + token("\"") + "\":100,\"" + token("}") + "\":100}";
        int stops = 0;
        for (String s : SAMPLINGS) {
            for (String f : new String[]{"\"response_format\":{\"type\":\"json_object\"}", "\"structured_outputs\":{\"json_object\":true}"}) {
                for (String extra : new String[]{"", "," + close}) {
                    JsonNode c = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":100," + s + "," + f
                            + extra + "}");
                    JsonNode choice = c.path("choices").path(0);
                    String text = choice.path("text").asText();
                    assertTrue(text.startsWith("{"), c.toString());
                    if (choice.path("finish_reason").asText().equals("stop")) {
                        stops++;
                        assertTrue(JSON.readTree(text).isObject(), c.toString());
                    } else {
                        assertTrue(isJsonPrefix(text), c.toString());
                    }
                }
            }
        }
        assertTrue(stops >= 2, "the biased objects finish: " + stops);
        // text is no constraint: the plain answer.
        JsonNode plain = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":8,\"temperature\":0}");
        JsonNode text = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT
                + "\",\"max_tokens\":8,\"temperature\":0,\"response_format\":{\"type\":\"text\"}}");
        assertEquals(plain.path("choices").path(0).path("text"), text.path("choices").path(0).path("text"));
    }

    @Test
    @Timeout(60)
    void badConstraintsAreA400NamingTheFieldAtTheRouterAndAtTheEngines() throws Exception {
        String[][] openAi = {
                {"\"guided_regex\":\"(ab\"", "guided_regex", "'(' is never closed"},
                {"\"guided_regex\":\"a(?=b)\"", "guided_regex", "lookahead"},
                {"\"guided_regex\":\"(a)\\\\1\"", "guided_regex", "backreference"},
                {"\"guided_regex\":5", "guided_regex", "must be a string"},
                {"\"structured_outputs\":{\"regex\":\"a^b\"}", "structured_outputs.regex", "anchor"},
                {"\"guided_json\":{\"type\":\"object\",\"properties\":{\"mail\":{\"type\":\"string\",\"format\":\"hostname\"}}}",
                        "guided_json.properties.mail", "format \"hostname\" at #/properties/mail"},
                {"\"guided_json\":\"{nope\"", "guided_json", "is not valid JSON"},
                {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"oneOf\":[]}}}",
                        "response_format.json_schema.schema", "oneOf at # that is not a non-empty list"},
                // a fault inside the schema: param goes on into it (before: response_format)
                {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"properties\":"
                        + "{\"age\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"integer\",\"minimum\":\"3\"}]}}}}}",
                        "response_format.json_schema.schema.properties.age.anyOf[1]", "minimum \"3\" at #/properties/age/anyOf/1"},
                // the body keeps its decimals exact: these bounds are an empty range (read as doubles both were 1, and 1 passed)
                {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"properties\":"
                        + "{\"x\":{\"type\":\"number\",\"minimum\":1.00000000000000002,\"maximum\":1.00000000000000001}}}}}",
                        "response_format.json_schema.schema.properties.x", "1.00000000000000002"},
                // Together's and Fireworks' json_object with a schema: before, the schema was dropped (any object answered)
                {"\"response_format\":{\"type\":\"json_object\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}",
                        "response_format.schema", "response_format.schema is not supported"},
                {"\"response_format\":{\"type\":\"xml\"}", "response_format", "must be text, json_object or json_schema"},
                {"\"guided_choice\":[]", "guided_choice", "non-empty list of strings"},
                {"\"guided_regex\":\"a\",\"response_format\":{\"type\":\"json_object\"}", "guided_regex", "response_format and guided_regex"},
                {"\"guided_regex\":\"a\",\"guided_choice\":[\"b\"]", "guided_choice", "guided_regex and guided_choice"},
                {"\"guided_grammar\":\"root ::= x\"", "guided_grammar", "guided_grammar: the grammar has an undefined rule 'x' at line 1, column 10"},
                {"\"structured_outputs\":{\"grammar\":\"root ::= x\"}", "structured_outputs.grammar",
                        "structured_outputs.grammar: the grammar has an undefined rule 'x' at line 1, column 10"},
                {"\"guided_grammar\":\"root ::= [a-\"", "guided_grammar", "character class '[' never closed at line 1, column 10"},
                {"\"guided_grammar\":7", "guided_grammar", "guided_grammar must be a string"},
                {"\"guided_grammar\":\"root ::= \\\"a\\\"\",\"guided_regex\":\"a\"", "guided_regex", "guided_grammar and guided_regex are both set"},
                {"\"structured_outputs\":{\"regex\":\"a\",\"whitespace_pattern\":\" *\"}", "structured_outputs.whitespace_pattern", "not supported"},
                {"\"guided_whitespace_pattern\":\" *\",\"guided_json\":{}", "guided_whitespace_pattern", "whitespace is fixed"},
        };
        for (String[] c : openAi) {
            assertBadRequest("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":8," + c[0] + "}", c[1], c[2]);
            assertBadRequest("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":8," + c[0] + "}",
                    c[1], c[2]);
        }
        String[][] sglang = {
                {"\"regex\":\"[a-\"", "sampling_params.regex", "never closed"},
                {"\"regex\":\"(?<name>a)\"", "sampling_params.regex", "named group"},
                {"\"json_schema\":\"{\\\"type\\\":\\\"object\\\",\\\"patternProperties\\\":{}}\"", "sampling_params.json_schema",
                        "keyword 'patternProperties'"},
                {"\"json_schema\":{\"type\":\"object\"}", "sampling_params.json_schema", "must be a string"},
                {"\"regex\":\"a\",\"json_schema\":\"{}\"", "sampling_params.json_schema", "sampling_params.regex and sampling_params.json_schema"},
                {"\"ebnf\":\"root ::= x\"", "sampling_params.ebnf", "sampling_params.ebnf: the grammar has an undefined rule 'x' at line 1, column 10"},
                {"\"ebnf\":\"start ::= \\\"a\\\"\"", "sampling_params.ebnf", "has no root rule"},
                {"\"regex\":\"a\",\"ebnf\":\"root ::= \\\"a\\\"\"", "sampling_params.ebnf", "sampling_params.regex and sampling_params.ebnf are both set"},
        };
        for (String[] c : sglang) {
            assertBadRequest("/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":8," + c[0] + "}}", c[1], c[2]);
        }
        // The engines check what they are sent (a body that did not come through the router): a 400, never a crash.
        String ids = Arrays.toString(promptIds).replace(" ", "");
        String[][] engine = {
                {"\"regex\":\"(?=a)\"", "sampling_params.regex", "lookahead"},
                {"\"regex\":\"(a|b)*a(a|b){30}\"", "sampling_params.regex", "too complex"},
                {"\"json_schema\":\"{\\\"type\\\":\\\"string\\\",\\\"format\\\":\\\"hostname\\\"}\"", "sampling_params.json_schema", "format \"hostname\""},
                {"\"json_schema\":\"{\\\"properties\\\":{\\\"n\\\":{\\\"multipleOf\\\":-1}}}\"", "sampling_params.json_schema.properties.n",
                        "not above 0"},
                {"\"json_schema\":\"[1,2]\"", "sampling_params.json_schema", "must be a JSON object"},
                {"\"regex\":\"a\",\"json_schema\":\"{}\"", "sampling_params.json_schema", "both set"},
                {"\"ebnf\":\"root ::= x\"", "sampling_params.ebnf", "undefined rule 'x' at line 1, column 10"},
        };
        long room = 8_000;
        for (String[] c : engine) {
            for (String url : new String[]{stack.prefillUrl(), stack.decodeUrl()}) {
                String body = "{\"bootstrap_room\":" + room++ + ",\"input_ids\":" + ids + ",\"bootstrap_addr\":\"" + stack.addr
                        + "\",\"max_new_tokens\":4,\"sampling_params\":{\"temperature\":0," + c[0] + "}}";
                HttpResponse<String> r = RouterCalls.post(Integer.parseInt(url.substring(url.lastIndexOf(':') + 1)), "/generate", body);
                assertEquals(400, r.statusCode(), url + " " + body + " -> " + r.body());
                JsonNode error = JSON.readTree(r.body()).path("error");
                assertEquals(c[1], error.path("param").asText(null), url + " " + body + " -> " + r.body());
                assertTrue(error.path("message").asText().contains(c[2]), url + " " + body + " -> " + r.body());
            }
        }
        awaitPagesReturned();
    }

    /**
     * A spec the busy compiler cannot take in time is a 503 service_unavailable with Retry-After naming the field (not the
     * client's fault: not a 400, never a 500), at the router on each route and at each engine's /generate; an engine's
     * passes through the router as a 503 too (the router's error body names no engine field).
     */
    @Test
    @Timeout(60)
    void aBusyCompilerIsA503WithRetryAfterAtTheRouterAndAtTheEngines() throws Exception {
        long wait = TimeUnit.MILLISECONDS.toNanos(20);
        String[][] router503 = {
                {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":8,\"guided_regex\":\"busy[0-9]{2}\"}", "guided_regex", "the regex"},
                {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":8,\"response_format\":"
                        + "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"integer\",\"maximum\":77}}}}",
                        "response_format", "the JSON schema"},
                {"/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":8,\"regex\":\"busy[0-9]{3}\"}}", "sampling_params.regex", "the regex"},
        };
        try (CompilerSlot held = CompilerSlot.hold(router.outputs(), wait)) {
            for (String[] c : router503) assertBusy(router.port(), c[0], c[1], c[2], c[3]);
        }
        String ids = Arrays.toString(promptIds).replace(" ", "");
        long room = 9_000;
        for (OutputConstraint.Compiler engine : new OutputConstraint.Compiler[]{stack.prefillServer.outputs(), stack.decodeServer.outputs()}) {
            int port = engine == stack.prefillServer.outputs() ? stack.prefillServer.port() : stack.decodeServer.port();
            String body = "{\"bootstrap_room\":" + room++ + ",\"input_ids\":" + ids + ",\"bootstrap_addr\":\"" + stack.addr
                    + "\",\"max_new_tokens\":4,\"sampling_params\":{\"temperature\":0,\"json_schema\":\"{\\\"type\\\":\\\"boolean\\\"}\"}}";
            try (CompilerSlot held = CompilerSlot.hold(engine, wait)) {
                assertBusy(port, "/generate", body, "sampling_params.json_schema", "the JSON schema");
            }
        }
        // The router's compiler free, the engines' busy: their 503 passes through as one (it was a 500 of type service_unavailable).
        try (CompilerSlot p = CompilerSlot.hold(stack.prefillServer.outputs(), wait); CompilerSlot d = CompilerSlot.hold(stack.decodeServer.outputs(), wait)) {
            assertBusy(router.port(), "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":8,\"guided_regex\":\"held[0-9]{2}\"}", null,
                    "sampling_params.regex: the regex");
        }
        // Free again: the same spec is served.
        JsonNode g = RouterCalls.ok(router.port(), "/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":8,"
                + "\"temperature\":0,\"regex\":\"busy[0-9]{3}\"}}");
        assertWholeMatch("busy[0-9]{3}", g.path("text").asText(), "after the compiler is free");
        awaitPagesReturned();
    }

    /**
     * The engines' compilers busy, the router's free: a request of several choices (n = 2 on /v1/completions and chat) and a
     * /generate batch are 503 with the Retry-After of one choice alone (the compiler's deadline). Before, the failure renamed
     * for its choice ("choice 0: …", "text[0]: …") was rebuilt without it and said Retry-After: 1.
     */
    @Test
    @Timeout(60)
    void aBusyEngineCompilersRetryAfterIsKeptForSeveralChoicesAndABatch() throws Exception {
        long wait = TimeUnit.MILLISECONDS.toNanos(20);
        String[] several = {
                "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":8,\"n\":2,\"guided_regex\":\"twice[0-9]{2}\"}",
                "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":8,\"n\":2,\"guided_regex\":\"chat[0-9]{2}\"}",
                "/generate", "{\"text\":[\"x\",\"y\"],\"sampling_params\":{\"max_new_tokens\":8,\"regex\":\"batch[0-9]{2}\"}}",
        };
        try (CompilerSlot p = CompilerSlot.hold(stack.prefillServer.outputs(), wait); CompilerSlot d = CompilerSlot.hold(stack.decodeServer.outputs(), wait)) {
            HttpResponse<String> single = RouterCalls.post(router.port(), "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":8,\"guided_regex\":\"once[0-9]{2}\"}");
            assertEquals(503, single.statusCode(), single.body());
            String retryAfter = single.headers().firstValue("Retry-After").orElse(null);
            assertEquals(Long.toString(OutputConstraint.Busy.RETRY_AFTER_SECONDS), retryAfter, "one choice: " + single.body());
            for (int i = 0; i < several.length; i += 2) {
                HttpResponse<String> r = RouterCalls.post(router.port(), several[i], several[i + 1]);
                assertEquals(503, r.statusCode(), several[i] + " " + several[i + 1] + " -> " + r.body());
                assertEquals(retryAfter, r.headers().firstValue("Retry-After").orElse(null), several[i] + " -> " + r.body());
                JsonNode error = JSON.readTree(r.body()).path("error");
                assertEquals("service_unavailable", error.path("type").asText(), r.body());
                assertTrue(error.path("message").asText().matches("(choice [01]|text\\[[01]]): sampling_params\\.regex: the regex was not compiled: .*"),
                        r.body());
            }
        }
        awaitPagesReturned();
    }

    /**
     * Without tenants the compiler's turns are the callers' addresses, at the router (its clients') and at each engine's
     * /generate (its caller's): a spec waiting for a busy compiler is queued as 127.0.0.1's, and served once it is free.
     */
    @Test
    @Timeout(60)
    void theCompilersTurnsAreTheCallersAddresses() throws Exception {
        Object[][] cases = {
                {router.outputs(), "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":4,\"guided_regex\":\"turn[0-9]{2}\"}"},
                // through the router, whose compiler is free: the prefill's /generate waits for its own, as the router's call
                {stack.prefillServer.outputs(), "/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":4,\"regex\":\"turn[0-9]{3}\"}}"},
        };
        for (Object[] c : cases) {
            OutputConstraint.Compiler compiler = (OutputConstraint.Compiler) c[0];
            CompletableFuture<HttpResponse<String>> sent;
            try (CompilerSlot held = CompilerSlot.hold(compiler, TimeUnit.SECONDS.toNanos(60))) {
                sent = CompletableFuture.supplyAsync(() -> {
                    try {
                        return RouterCalls.post(router.port(), (String) c[1], (String) c[2]);
                    } catch (Exception e) {
                        throw new CompletionException(e);
                    }
                }, t -> Thread.ofPlatform().start(t));
                while (compiler.queued().isEmpty()) Thread.yield(); // queued: the compiler's state, not a time
                assertEquals(Map.of("address 127.0.0.1", 1), compiler.queued(), (String) c[1]);
            }
            HttpResponse<String> answer = sent.get(60, TimeUnit.SECONDS);
            assertEquals(200, answer.statusCode(), answer.body());
        }
        awaitPagesReturned();
    }

    static void assertBusy(int port, String path, String body, String param, String what) throws Exception {
        HttpResponse<String> r = RouterCalls.post(port, path, body);
        assertEquals(503, r.statusCode(), port + path + " " + body + " -> " + r.body());
        assertEquals("5", r.headers().firstValue("Retry-After").orElse(null), r.body());
        JsonNode error = JSON.readTree(r.body()).path("error");
        assertEquals("service_unavailable", error.path("type").asText(), r.body());
        assertEquals(param, error.path("param").asText(null), r.body());
        assertTrue(error.has("code") && error.get("code").isNull(), r.body());
        String field = param == null ? "" : param + ": ";
        assertTrue(error.path("message").asText().startsWith(field + what + " was not compiled: the structured-output compiler is busy"),
                r.body());
    }

    static void assertBadRequest(String path, String body, String param, String message) throws Exception {
        HttpResponse<String> r = RouterCalls.post(router.port(), path, body);
        assertEquals(400, r.statusCode(), body + " -> " + r.body());
        JsonNode error = JSON.readTree(r.body()).path("error");
        assertEquals("invalid_request_error", error.path("type").asText(), r.body());
        assertEquals(param, error.path("param").asText(null), body + " -> " + r.body());
        assertTrue(error.path("message").asText().contains(message), body + " -> " + r.body());
    }

    static void awaitPagesReturned() throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (stack.decode.outstanding().get(5, TimeUnit.SECONDS) != 0 || stack.prefill.outstanding().get(5, TimeUnit.SECONDS) != 0) {
            assertTrue(System.nanoTime() < until, "every request's pages came back");
            Thread.sleep(20);
        }
    }
}
