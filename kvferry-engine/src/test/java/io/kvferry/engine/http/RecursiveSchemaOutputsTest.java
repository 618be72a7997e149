package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.Iterator;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * JSON schemas whose {@code $ref}s recurse (a tree node whose kids are nodes, a linked list, mutual recursion) through
 * the router, a TP2 prefill (the
 * first token) and a TP1 decode (the rest), served by its grammar ({@code JsonSchemaGrammar}) under the kind
 * {@code json_schema}: on /generate ({@code sampling_params.json_schema}) the colocated run's tokens, on /v1/completions
 * ({@code response_format} json_schema) its text and finish; each answer JSON valid for the schema when it stops, a prefix
 * of a match when cut; a chat's answer alike.
 */
class RecursiveSchemaOutputsTest {
    static final String PROMPT = "Once upon a time";
    static final int MAX = 48;
    static final String SCHEMA = "{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
            + "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Node\"},\"maxItems\":2}},\"required\":[\"name\"]}},"
            + "\"$ref\":\"#/$defs/Node\"}";
    /** A linked list whose next is a node or null, both required: the model must choose at each step. */
    static final String LIST = "{\"$defs\":{\"L\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
            + "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/L\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/L\"}";
    /** Mutual recursion B -> A -> B from a forced first level (stories260K answers {"next": 3}: the recursion is offered, not taken). */
    static final String NEST = "{\"$defs\":{\"B\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},{\"$ref\":\"#/$defs/A\"}]},"
            + "\"A\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/B\"}},\"required\":[\"next\"]}},"
            + "\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/B\"}},\"required\":[\"next\"]}";
    static Tokenizer tokenizer;
    static OutputConstraint.Compiler compiler;
    static EngineStack stack;
    static Router router;
    static ColocatedEngine colocated;
    static int[] promptIds;
    static ConstrainedStack fixture;

    @BeforeAll
    static void start() throws Exception {
        fixture = ConstrainedStack.open("recursive-schema-test");
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

    /** The schema's meaning, checked here apart from the compiler: a name of at most 8 characters, at most 2 kids, each a node. */
    static boolean validNode(JsonNode v) {
        if (!v.isObject() || !v.path("name").isTextual() || v.get("name").textValue().codePointCount(0, v.get("name").textValue().length()) > 8) {
            return false;
        }
        for (Iterator<String> it = v.fieldNames(); it.hasNext(); ) {
            String k = it.next();
            if (!k.equals("name") && !k.equals("kids")) return false;
        }
        JsonNode kids = v.get("kids");
        if (kids == null) return true;
        if (!kids.isArray() || kids.size() > 2) return false;
        for (JsonNode k : kids) if (!validNode(k)) return false;
        return true;
    }

    /** {@link #LIST}'s meaning: v an integer 0..9, next a node or null, nothing else. */
    static boolean validList(JsonNode v) {
        if (!v.isObject() || v.size() != 2 || !v.path("v").isInt() || v.get("v").intValue() < 0 || v.get("v").intValue() > 9) return false;
        JsonNode next = v.get("next");
        return next != null && (next.isNull() || validList(next));
    }

    /** {@link #NEST}'s meaning: an object whose one member next is an integer 0..9 or such an object. */
    static boolean validNest(JsonNode v) {
        if (!v.isObject() || v.size() != 1 || !v.has("next")) return false;
        JsonNode n = v.get("next");
        return n.isInt() ? n.intValue() >= 0 && n.intValue() <= 9 : validNest(n);
    }

    static void assertValidOrPrefix(OutputConstraint c, String schema, String text, boolean stopped, String what) throws Exception {
        if (stopped) {
            assertTrue(c.matches(text), what + ": '" + text + "' is not a whole match");
            JsonNode v = GrammarOutputsTest.JSON.readTree(text);
            assertTrue(schema.equals(SCHEMA) ? validNode(v) : schema.equals(LIST) ? validList(v) : validNest(v), what + ": '" + text + "' is not valid for the schema");
        } else {
            assertTrue(c.startsMatch(text), what + ": '" + text + "' is not a prefix of a match");
        }
    }

    @Test
    @Timeout(180)
    void recursiveSchemaAnswersAreValidAndEqualColocated() throws Exception {
        int stops = 0;
        for (String schema : new String[]{SCHEMA, LIST, NEST}) {
            OutputConstraint c = compiler.jsonSchema(schema);
            assertEquals(OutputConstraint.Kind.JSON_SCHEMA, c.kind(), "the kind the client sent");
            String q = GrammarOutputsTest.JSON.writeValueAsString(schema);
            for (int s = 0; s < GrammarOutputsTest.SAMPLINGS.length; s++) {
                String sampling = (schema.equals(SCHEMA) ? "tree " : schema.equals(LIST) ? "list " : "nest ") + GrammarOutputsTest.SAMPLINGS[s];
                Generation ref = colocated.generate(promptIds, MAX, GrammarOutputsTest.sampling(s, c));
                String refText = tokenizer.decode(ref.tokens());
                assertValidOrPrefix(c, schema, refText, ref.finishReason().equals("stop"), sampling);
                if (ref.finishReason().equals("stop")) stops++;
                JsonNode g = RouterCalls.ok(router.port(), "/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":" + MAX
                        + "," + GrammarOutputsTest.SAMPLINGS[s] + ",\"json_schema\":" + q + "}}");
                assertArrayEquals(ref.tokens(), SamplingParamsTest.ids(g.get("output_ids")), sampling);
                assertEquals(refText, g.get("text").asText(), sampling);
                JsonNode r = RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX 
                    + "," + GrammarOutputsTest.SAMPLINGS[s]
                        + ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"tree\",\"schema\":" + schema + "}}}");
                JsonNode choice = r.path("choices").path(0);
                assertEquals(refText, choice.path("text").asText(), sampling + " response_format");
                assertEquals(ref.finishReason(), choice.path("finish_reason").asText(), sampling + " response_format");
                JsonNode chat = RouterCalls.ok(router.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT
                        + "\"}],\"max_tokens\":" + MAX + "," + GrammarOutputsTest.SAMPLINGS[s] + ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"tree\","
                        + "\"schema\":" + schema + "}}}");
                JsonNode cc = chat.path("choices").path(0);
                assertValidOrPrefix(c, schema, cc.path("message").path("content").asText(), cc.path("finish_reason").asText().equals("stop"), "chat " + sampling);
            }
        }
        assertTrue(stops >= 2, "some answers finish whole: " + stops);
    }

    @Test
    void aRecursionThatNeverEndsIsA400NamingIt() throws Exception {
        String never = "{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"c\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"c\"]}},\"$ref\":\"#/$defs/N\"}";
        var r = RouterCalls.post(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":8,"
                + "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":" + never + "}}}");
        assertEquals(400, r.statusCode(), r.body());
        assertTrue(r.body().contains("matches no text at all"), r.body());
    }
}
