package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.http.HttpClient;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Several completions per request, through real engines: a list of prompts and {@code n} samples each, every choice a PD
 * request of its own, answered in OpenAI's order (index = prompt index * n + sample index) with the usage summed; a
 * seeded request's samples are single requests' with the seeds seed, seed + 1, …; a stream's chunks, per index, add up to
 * the answer; log probabilities and echo per choice; bad input is a 400 naming the field; a choice that fails is named.
 */
class SeveralChoicesTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final List<String> PROMPTS = List.of("Once upon a time", "The little dog", "Lily and Tom went");
    static EngineStack stack;
    static Router router;
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    @BeforeAll
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, "several-choices-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
    }

    @AfterAll
    static void stop() {
        if (router != null) router.close();
        if (stack != null) stack.close();
    }

    static HttpResponse<String> post(int port, String path, String body) throws Exception {
        return RouterCalls.post(port, path, body);
    }

    static JsonNode ok(String path, String body) throws Exception {
        return RouterCalls.ok(router.port(), path, body);
    }

    static String quoted(String s) throws Exception {
        return JSON.writeValueAsString(s);
    }

    /** The one choice of a single request, its index left out (compared with a choice of a batch). */
    static JsonNode single(String path, String body) throws Exception {
        JsonNode a = ok(path, body);
        assertEquals(1, a.path("choices").size(), a.toString());
        ObjectNode c = (ObjectNode) a.path("choices").get(0).deepCopy();
        c.remove("index");
        return c;
    }

    static JsonNode withoutIndex(JsonNode choice) {
        ObjectNode c = choice.deepCopy();
        c.remove("index");
        return c;
    }

    /** The streamed text of each choice, by index, and the stream's data lines. */
    static List<StringBuilder> streamedTexts(String path, String body, int choices, List<String> data) throws Exception {
        HttpResponse<String> r = post(router.port(), path, body);
        assertEquals(200, r.statusCode(), r.body());
        List<StringBuilder> texts = new ArrayList<>();
        for (int i = 0; i < choices; i++) texts.add(new StringBuilder());
        r.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).forEach(data::add);
        assertEquals("[DONE]", data.getLast(), r.body());
        assertEquals(1, data.stream().filter("[DONE]"::equals).count(), "one [DONE]: " + r.body());
        for (String d : data.subList(0, data.size() - 1)) {
            JsonNode chunk = JSON.readTree(d);
            assertTrue(chunk.path("error").isMissingNode(), d);
            for (JsonNode c : chunk.path("choices")) {
                JsonNode text = c.has("text") ? c.path("text") : c.path("delta").path("content");
                texts.get(c.path("index").intValue()).append(text.asText(""));
            }
        }
        return texts;
    }

    @Test
    @Timeout(120)
    void aBatchOfPromptsTimesNIsSixSingleRequestsInOpenAisOrder() throws Exception {
        String params = ",\"max_tokens\":8,\"temperature\":0";
        JsonNode batch = ok("/v1/completions", "{\"prompt\":" + JSON.writeValueAsString(PROMPTS) + ",\"n\":2" + params + "}");
        JsonNode choices = batch.path("choices");
        assertEquals(6, choices.size(), batch.toString());
        int prompt = 0, completion = 0;
        for (int p = 0; p < PROMPTS.size(); p++) {
            String body = "{\"prompt\":" + quoted(PROMPTS.get(p)) + params + "}";
            JsonNode one = single("/v1/completions", body);
            JsonNode usage = ok("/v1/completions", body).path("usage");
            prompt += 2 * usage.path("prompt_tokens").intValue();
            completion += 2 * usage.path("completion_tokens").intValue();
            for (int j = 0; j < 2; j++) {
                int index = p * 2 + j;
                assertEquals(index, choices.get(index).path("index").intValue(), batch.toString());
                assertEquals(one, withoutIndex(choices.get(index)), "choice " + index + " is prompt " + p + "'s: " + batch);
            }
        }
        assertEquals(prompt, batch.path("usage").path("prompt_tokens").intValue(), batch.toString());
        assertEquals(completion, batch.path("usage").path("completion_tokens").intValue(), batch.toString());
        assertEquals(prompt + completion, batch.path("usage").path("total_tokens").intValue(), batch.toString());
        assertEquals(6, batch.path("kvferry").path("choices").size(), batch.toString());
        Set<Long> rooms = new HashSet<>();
        for (JsonNode k : batch.path("kvferry").path("choices")) rooms.add(k.path("bootstrap_room").longValue());
        assertEquals(6, rooms.size(), "a room each: " + batch);

        // Streamed, each index's chunks add up to its answer's text.
        List<String> data = new ArrayList<>();
        List<StringBuilder> texts = streamedTexts("/v1/completions",
                "{\"prompt\":" + JSON.writeValueAsString(PROMPTS) + ",\"n\":2,\"stream\":true" + params + "}", 6, data);
        for (int i = 0; i < 6; i++) assertEquals(choices.get(i).path("text").asText(), texts.get(i).toString(), "choice " + i + ": " + data);
    }

    @Test
    @Timeout(120)
    void seededSamplesAreSingleRequestsWithTheDerivedSeedsAndDiffer() throws Exception {
        String params = ",\"max_tokens\":12,\"temperature\":1";
        JsonNode three = ok("/v1/completions", "{\"prompt\":" + quoted(PROMPTS.getFirst()) + ",\"n\":3,\"seed\":7" + params + "}");
        assertEquals(3, three.path("choices").size(), three.toString());
        Set<String> distinct = new HashSet<>();
        for (int j = 0; j < 3; j++) {
            JsonNode one = single("/v1/completions", "{\"prompt\":" + quoted(PROMPTS.getFirst()) + ",\"seed\":" + (7 + j) + params + "}");
            assertEquals(one, withoutIndex(three.path("choices").get(j)), "sample " + j + " is the request with seed " + (7 + j) + ": " + three);
            distinct.add(one.path("text").asText());
        }
        assertEquals(3, distinct.size(), "the samples differ: " + three);
        JsonNode again = ok("/v1/completions", "{\"prompt\":" + quoted(PROMPTS.getFirst()) + ",\"n\":3,\"seed\":7" + params + "}");
        assertEquals(three.path("choices"), again.path("choices"), "a seeded request gives its samples again");

        // A chat's n: the same seeds, and its stream's deltas per index are its answer's contents.
        String chat = "{\"messages\":[{\"role\":\"user\",\"content\":" + quoted(PROMPTS.getFirst()) + "}],\"n\":3,\"seed\":7" + params;
        JsonNode chats = ok("/v1/chat/completions", chat + "}");
        assertEquals(3, chats.path("choices").size(), chats.toString());
        for (int j = 0; j < 3; j++) {
            JsonNode one = single("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":" + quoted(PROMPTS.getFirst())
                    + "}],\"seed\":" + (7 + j) + params + "}");
            assertEquals(one, withoutIndex(chats.path("choices").get(j)), "chat sample " + j + ": " + chats);
        }
        List<String> data = new ArrayList<>();
        List<StringBuilder> contents = streamedTexts("/v1/chat/completions", chat + ",\"stream\":true}", 3, data);
        for (int j = 0; j < 3; j++) {
            assertEquals(chats.path("choices").get(j).path("message").path("content").asText(), contents.get(j).toString(), "chat choice " + j);
        }
        // Without a seed each choice's room is its seed: the samples differ too.
        JsonNode unseeded = ok("/v1/completions", "{\"prompt\":" + quoted(PROMPTS.getFirst()) + ",\"n\":3,\"max_tokens\":24,\"temperature\":1}");
        Set<String> texts = new HashSet<>();
        for (JsonNode c : unseeded.path("choices")) texts.add(c.path("text").asText());
        assertTrue(texts.size() > 1, "unseeded samples differ: " + unseeded);
    }

    @Test
    @Timeout(120)
    void logprobsAndEchoArePerChoice() throws Exception {
        for (int max : new int[]{0, 4}) { // 0: lm-evaluation-harness's loglikelihood batch, the prompts alone on the prefill
            String params = ",\"max_tokens\":" + max + ",\"temperature\":0,\"logprobs\":2,\"echo\":true";
            JsonNode batch = ok("/v1/completions", "{\"prompt\":" + JSON.writeValueAsString(PROMPTS.subList(0, 2)) + params + "}");
            assertEquals(2, batch.path("choices").size(), batch.toString());
            for (int p = 0; p < 2; p++) {
                JsonNode one = single("/v1/completions", "{\"prompt\":" + quoted(PROMPTS.get(p)) + params + "}");
                JsonNode choice = batch.path("choices").get(p);
                assertTrue(choice.path("text").asText().startsWith(PROMPTS.get(p)), choice.toString());
                assertEquals(one, withoutIndex(choice), "prompt " + p + "'s echo and logprobs, max_tokens " + max + ": " + batch);
            }
            // Streamed, each choice's chunks add up to its echoed text.
            List<String> data = new ArrayList<>();
            List<StringBuilder> texts = streamedTexts("/v1/completions", "{\"prompt\":" + JSON.writeValueAsString(PROMPTS.subList(0, 2))
                    + params + ",\"stream\":true}", 2, data);
            for (int p = 0; p < 2; p++) assertEquals(batch.path("choices").get(p).path("text").asText(), texts.get(p).toString(), data.toString());
        }
    }

    /** SGLang's batch /generate: a list of texts is a list of answers, each a single request's (its room and latency aside). */
    @Test
    @Timeout(120)
    void aGenerateBatchIsAListOfSingleAnswers() throws Exception {
        String params = ",\"sampling_params\":{\"max_new_tokens\":6,\"temperature\":0},\"return_logprob\":true,\"top_logprobs_num\":1";
        JsonNode batch = ok("/generate", "{\"text\":" + JSON.writeValueAsString(PROMPTS) + params + "}");
        assertTrue(batch.isArray(), batch.toString());
        assertEquals(PROMPTS.size(), batch.size(), batch.toString());
        for (int i = 0; i < PROMPTS.size(); i++) {
            ObjectNode one = (ObjectNode) ok("/generate", "{\"text\":" + quoted(PROMPTS.get(i)) + params + "}");
            ObjectNode got = batch.get(i).deepCopy();
            for (ObjectNode o : List.of(one, got)) {
                ((ObjectNode) o.get("meta_info")).remove(List.of("id", "e2e_latency"));
            }
            assertEquals(one, got, "text " + i + ": " + batch);
        }
    }

    @Test
    @Timeout(60)
    void badInputIsA400NamingTheField() throws Exception {
        String msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
        String[][] cases = {
                {"/v1/completions", "{\"prompt\":\"x\",\"n\":0}", "n", "n must be in [1, 64], got 0"},
                {"/v1/completions", "{\"prompt\":\"x\",\"n\":65}", "n", "n must be in [1, 64], got 65"},
                {"/v1/completions", "{\"prompt\":\"x\",\"n\":1.5}", "n", "n must be an integer"},
                {"/v1/completions", "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":22}", "n", "n (22) times the 3 prompts asks for 66 completions"},
                {"/v1/completions", "{\"prompt\":[]}", "prompt", "a list of 1 to 64 strings or lists of token ids, got a list of 0"},
                {"/v1/completions", "{\"prompt\":[\"a\",[1,2]]}", "prompt", "prompt[1] must be a string"},
                {"/v1/completions", "{\"prompt\":[\"a\",null]}", "prompt", "prompt[1] must be a string"},
                {"/v1/completions", "{\"prompt\":" + JSON.writeValueAsString(Collections.nCopies(65, "a")) + "}", "prompt",
                        "got a list of 65"},
                {"/v1/completions", "{\"prompt\":\"x\",\"best_of\":2,\"stream\":true}", "best_of", "best_of (2) above 1 cannot be streamed"},
                {"/v1/completions", "{\"prompt\":[\"a\",\"" + "a b ".repeat(400) + "\"]}", "prompt", "prompt[1]: the prompt has"},
                {"/v1/completions", "{\"prompt\":[\"a\",\"b\\ud800\"]}", "prompt", "prompt[1]: the prompt holds an unpaired UTF-16 surrogate"},
                {"/generate", "{\"text\":[]}", "text", "text must be a string or a list of 1 to 64 strings, got a list of 0"},
                {"/generate", "{\"text\":[\"a\",2]}", "text", "text[1] must be a string"},
                {"/generate", "{\"text\":[\"a\",\"b\"],\"stream\":true}", "stream", "a batch (text a list) is answered whole"},
                {"/v1/chat/completions", "{" + msgs + ",\"n\":0}", "n", "n must be in [1, 64], got 0"},
                {"/v1/chat/completions", "{" + msgs + ",\"n\":65}", "n", "n must be in [1, 64], got 65"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = post(router.port(), c[0], c[1]);
            assertEquals(400, r.statusCode(), c[1] + " -> " + r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals(c[2], e.path("param").asText(null), c[1] + " -> " + r.body());
            assertTrue(e.path("message").asText().contains(c[3]), c[1] + " -> " + r.body());
        }
    }

    /**
     * Each choice takes an admission slot as it runs, and none holds one while it waits for another: n above
     * --max-concurrent-requests runs its choices in turn (it waited forever if the request held a slot its choices needed).
     */
    @Test
    @Timeout(60)
    void nAboveTheAdmissionLimitRunsInTurn() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        try (Router one = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0, Router.Access.NONE, new Router.Admission(1, Duration.ofSeconds(30)), null)) {
            HttpResponse<String> r = post(one.port(), "/v1/completions", "{\"prompt\":\"Once\",\"n\":4,\"max_tokens\":4,\"temperature\":0}");
            assertEquals(200, r.statusCode(), r.body());
            assertEquals(4, JSON.readTree(r.body()).path("choices").size(), r.body());
        }
    }

    /**
     * Stub engines whose decode streams a token every 20 ms until its room is aborted (so only the router's aborts end
     * a choice), except a request seeded {@code failingSeed}, which it refuses at once with a 500.
     */
    record Endless(HttpServer prefill, HttpServer decode, Set<Long> asked, Set<Long> decodeAborts, Set<Long> prefillAborts,
                   CountDownLatch decodeAborted, CountDownLatch prefillAborted) implements AutoCloseable {
        /** @param aborts how many rooms each engine's aborts are awaited for */
        static Endless start(long failingSeed, int aborts) throws IOException {
            Endless e = new Endless(HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16), HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16),
                    ConcurrentHashMap.newKeySet(), ConcurrentHashMap.newKeySet(), ConcurrentHashMap.newKeySet(), new CountDownLatch(aborts),
                    new CountDownLatch(aborts));
            e.decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
            for (HttpServer s : List.of(e.decode, e.prefill)) {
                s.createContext("/health", ex -> {
                    byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}".getBytes(StandardCharsets.UTF_8);
                    ex.sendResponseHeaders(200, b.length);
                    ex.getResponseBody().write(b);
                    ex.close();
                });
                boolean isDecode = s == e.decode;
                s.createContext("/abort", ex -> {
                    long room = JSON.readTree(ex.getRequestBody()).path("bootstrap_room").asLong();
                    if ((isDecode ? e.decodeAborts : e.prefillAborts).add(room)) (isDecode ? e.decodeAborted : e.prefillAborted).countDown();
                    ex.sendResponseHeaders(200, -1);
                    ex.close();
                });
            }
            e.prefill.createContext("/generate", ex -> {
                byte[] b = "{}".getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
                ex.close();
            });
            e.decode.createContext("/generate", ex -> {
                JsonNode body = JSON.readTree(ex.getRequestBody());
                long room = body.path("bootstrap_room").asLong();
                if (body.path("sampling_params").path("seed").asLong(-1) == failingSeed) {
                    byte[] b = "{\"error\":{\"type\":\"internal_error\",\"message\":\"the stub refuses this seed\"}}".getBytes(StandardCharsets.UTF_8);
                    ex.sendResponseHeaders(500, b.length);
                    ex.getResponseBody().write(b);
                    ex.close();
                    return;
                }
                e.asked.add(room);
                ex.getResponseHeaders().add("Content-Type", "text/event-stream");
                ex.sendResponseHeaders(200, 0);
                try {
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    while (!e.decodeAborts.contains(room) && System.nanoTime() < until) {
                        ex.getResponseBody().write("data: {\"token\":300}\n\n".getBytes(StandardCharsets.UTF_8));
                        ex.getResponseBody().flush();
                        Thread.sleep(20); // a decode's pace, not a synchronisation
                    }
                } catch (IOException | InterruptedException gone) {
                    // the router closed the connection
                }
                ex.close();
            });
            e.decode.start();
            e.prefill.start();
            return e;
        }

        Router router() throws IOException {
            return new Router(List.of("http://127.0.0.1:" + prefill.getAddress().getPort()), List.of("http://127.0.0.1:" + decode.getAddress().getPort()),
                    ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0);
        }

        /**
         * Every room the decode streamed (at most {@code streamed}: a choice cancelled before its call reached the decode
         * streams nothing) was aborted on both engines (30 s at most). A failed choice's room may be aborted too: the
         * aborts are awaited by the rooms they name, not by their count (counted, an abort of the failed room let the
         * check run before the last streamed room's abort came).
         */
        void assertStreamedRoomsAbortedOnBoth(int streamed) throws InterruptedException {
            assertTrue(decodeAborted.await(30, TimeUnit.SECONDS), "the decode's aborts: " + decodeAborts + " of " + asked);
            assertTrue(prefillAborted.await(30, TimeUnit.SECONDS), "the prefill's aborts: " + prefillAborts + " of " + asked);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!(decodeAborts.containsAll(asked) && prefillAborts.containsAll(asked)) && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertTrue(!asked.isEmpty() && asked.size() <= streamed, asked.toString());
            assertTrue(decodeAborts.containsAll(asked), decodeAborts + " of " + asked);
            assertTrue(prefillAborts.containsAll(asked), prefillAborts + " of " + asked);
        }

        @Override
        public void close() {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** A client that closes a stream of three choices: every choice's room is aborted on both engines. */
    @Test
    @Timeout(60)
    void aClientThatLeavesAbortsEveryChoicesRoomOnBothEngines() throws Exception {
        try (Endless e = Endless.start(-1, 3); Router r = e.router()) {
            String body = "{\"prompt\":\"Hi\",\"n\":3,\"max_tokens\":400,\"stream\":true}";
            try (Socket s = new Socket("127.0.0.1", r.port())) {
                s.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                        + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.UTF_8));
                BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                String status = in.readLine();
                assertTrue(status.startsWith("HTTP/1.1 200"), status);
                for (String line; (line = in.readLine()) != null && !line.startsWith("data: "); ) {
                    // headers and chunk sizes, up to the first event
                }
            } // closed with the stream under way
            e.assertStreamedRoomsAbortedOnBoth(3);
        }
    }

    /**
     * A choice that fails before any byte was sent (not streamed: every failure is) is the request's answer at once: the
     * other choices, which would stream until aborted, are cancelled and their rooms aborted on both engines.
     */
    @Test
    @Timeout(60)
    void aFailedChoiceCancelsTheOthers() throws Exception {
        try (Endless e = Endless.start(8, 1); Router r = e.router()) {
            HttpResponse<String> answer = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"n\":3,\"seed\":7,\"max_tokens\":400}");
            assertEquals(500, answer.statusCode(), answer.body());
            assertTrue(JSON.readTree(answer.body()).path("error").path("message").asText().startsWith("choice 1: the stub refuses this seed"),
                    answer.body());
            e.assertStreamedRoomsAbortedOnBoth(2);
        }
    }

    /**
     * A decode (a stub) that fails the choice seeded 8: the whole answer is that choice's failure, naming its index 1; a
     * stream has its error event naming index 1, the other choices' texts, and one [DONE]. A /generate batch whose
     * second text (the stub fails long prompts) fails is that failure, naming text[1].
     */
    @Test
    @Timeout(60)
    void aChoiceThatFailsIsNamedByItsIndex() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        stub.createContext("/health", ex -> {
            byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        stub.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        stub.createContext("/generate", ex -> {
            JsonNode body = JSON.readTree(ex.getRequestBody());
            byte[] b;
            if (!body.has("bootstrap_addr")) { // the prefill's call
                b = "{}".getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(200, b.length);
            } else {
                boolean fails = body.path("sampling_params").path("seed").longValue() == 8 || body.path("input_ids").size() >= 6;
                ex.getResponseHeaders().add("Content-Type", "text/event-stream");
                ex.sendResponseHeaders(200, 0);
                b = ("data: {\"token\":300}\n\n" + (fails
                        ? "data: {\"error\":{\"type\":\"internal_error\",\"kind\":\"peer_lost\",\"message\":\"the decode lost its prefill\"}}\n\n"
                        : "data: {\"finish_reason\":\"length\"}\n\n")).getBytes(StandardCharsets.UTF_8);
            }
            ex.getResponseBody().write(b);
            ex.close();
        });
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try (Router r = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            HttpResponse<String> whole = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"n\":3,\"seed\":7,\"max_tokens\":3}");
            assertEquals(500, whole.statusCode(), whole.body());
            String message = JSON.readTree(whole.body()).path("error").path("message").asText();
            assertTrue(message.startsWith("choice 1: ") && message.contains("the decode lost its prefill"), whole.body());

            HttpResponse<String> stream = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"n\":3,\"seed\":7,\"max_tokens\":3,\"stream\":true}");
            assertEquals(200, stream.statusCode(), stream.body());
            List<String> data = stream.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).toList();
            assertEquals("[DONE]", data.getLast(), stream.body());
            assertEquals(1, data.stream().filter("[DONE]"::equals).count(), stream.body());
            List<JsonNode> errors = new ArrayList<>();
            Set<Integer> finished = new HashSet<>();
            for (String d : data.subList(0, data.size() - 1)) {
                JsonNode ev = JSON.readTree(d);
                if (ev.has("error")) errors.add(ev.path("error"));
                for (JsonNode c : ev.path("choices")) if (c.hasNonNull("finish_reason")) finished.add(c.path("index").intValue());
            }
            assertEquals(1, errors.size(), stream.body());
            assertEquals(1, errors.getFirst().path("index").intValue(), stream.body());
            assertTrue(errors.getFirst().path("message").asText().startsWith("choice 1: "), stream.body());
            assertEquals(Set.of(0, 2), finished, "the other choices finish: " + stream.body());

            HttpResponse<String> batch = post(r.port(), "/generate", "{\"text\":[\"Hi\",\"Hi there, my good old friend Tom\"],"
                    + "\"sampling_params\":{\"max_new_tokens\":3,\"seed\":1}}");
            assertEquals(500, batch.statusCode(), batch.body());
            String named = JSON.readTree(batch.body()).path("error").path("message").asText();
            assertTrue(named.startsWith("text[1]: ") && named.contains("the decode lost its prefill"), batch.body());
        } finally {
            stub.stop(0);
        }
    }
}
