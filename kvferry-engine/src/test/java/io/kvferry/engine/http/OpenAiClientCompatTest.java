package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.openai.client.OpenAIClient;
import com.openai.client.okhttp.OpenAIOkHttpClient;
import com.openai.core.JsonValue;
import com.openai.core.http.StreamResponse;
import com.openai.errors.BadRequestException;
import com.openai.errors.NotFoundException;
import com.openai.errors.OpenAIServiceException;
import com.openai.errors.RateLimitException;
import com.openai.errors.SseException;
import com.openai.errors.UnauthorizedException;
import com.openai.helpers.ChatCompletionAccumulator;
import com.openai.models.FunctionDefinition;
import com.openai.models.FunctionParameters;
import com.openai.models.ResponseFormatJsonSchema;
import com.openai.models.chat.completions.ChatCompletion;
import com.openai.models.chat.completions.ChatCompletionChunk;
import com.openai.models.chat.completions.ChatCompletionContentPart;
import com.openai.models.chat.completions.ChatCompletionContentPartImage;
import com.openai.models.chat.completions.ChatCompletionCreateParams;
import com.openai.models.chat.completions.ChatCompletionMessageFunctionToolCall;
import com.openai.models.chat.completions.ChatCompletionMessageToolCall;
import com.openai.models.chat.completions.ChatCompletionStreamOptions;
import com.openai.models.chat.completions.ChatCompletionTokenLogprob;
import com.openai.models.chat.completions.ChatCompletionToolChoiceOption;
import com.openai.models.chat.completions.ChatCompletionToolMessageParam;
import com.openai.models.completions.Completion;
import com.openai.models.completions.CompletionChoice;
import com.openai.models.completions.CompletionCreateParams;
import com.openai.models.completions.CompletionUsage;
import com.openai.models.models.Model;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The router as the official OpenAI Java client sees it ({@code com.openai:openai-java}, test scope): real
 * engines behind a router with an API key, driven only through the client, with every answer validated
 * against the client's own model of it ({@code validate()}: each field it requires present and of its type).
 * "OpenAI-shaped" means this client parses it: a missing {@code created}, an error whose {@code code} is not a
 * string, an SSE frame it cannot read, fail here.
 */
class OpenAiClientCompatTest {
    private static final String TOKEN = "openai-compat-test-cluster-token";
    private static final String KEY = "openai-compat-test-api-key";
    private static final String PROMPT = "Once upon a time";

    private static ModelFiles.Loaded model;
    private static EngineStack stack;
    private static Router router;
    private static OpenAIClient client;

    @BeforeAll
    static void start() throws Exception {
        model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        stack = EngineStack.open(spec, spec, TOKEN, TOKEN);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "stories260K", "127.0.0.1", 0, new Router.Access(TOKEN, KEY), null);
        client = client(router.port(), KEY);
    }

    @AfterAll
    static void stop() {
        if (client != null) client.close();
        if (router != null) router.close();
        if (stack != null) stack.close();
    }

    /** The official client on the router's /v1, no retries (a test sees each answer as it came). */
    static OpenAIClient client(int port, String apiKey) {
        return OpenAIOkHttpClient.builder().baseUrl("http://127.0.0.1:" + port + "/v1").apiKey(apiKey).maxRetries(0)
                .timeout(Duration.ofSeconds(60)).build();
    }

    private static CompletionCreateParams.Builder completion(String prompt, long maxTokens) {
        return CompletionCreateParams.builder().model("stories260K").prompt(prompt).maxTokens(maxTokens).temperature(0.0).seed(7);
    }

    /** Concatenates a stream's text, validating every chunk as the client's model of a completion. */
    private static String streamed(CompletionCreateParams params, List<Completion> chunks) {
        StringBuilder text = new StringBuilder();
        try (StreamResponse<Completion> s = client.completions().createStreaming(params)) {
            s.stream().forEach(c -> {
                chunks.add(c);
                for (CompletionChoice choice : c.choices()) text.append(choice.text());
            });
        }
        return text.toString();
    }

    @Test
    @Timeout(60)
    void modelsListAndRetrieveParse() {
        List<Model> models = client.models().list().data();
        assertEquals(1, models.size(), models.toString());
        Model m = models.getFirst().validate();
        assertEquals("stories260K", m.id());
        assertEquals("kvferry", m.ownedBy());
        assertTrue(m.created() > 0, "created: " + m.created());
        assertEquals(m, client.models().retrieve("stories260K").validate(), "GET /v1/models/{model}");
        NotFoundException other = assertThrows(NotFoundException.class, () -> client.models().retrieve("gpt-4o"));
        assertError(other, 404, "invalid_request_error", "the model 'gpt-4o' does not exist here; this router serves 'stories260K'");
        assertEquals("model", other.param().orElse(null));
        assertEquals("model_not_found", other.code().orElse(null), "OpenAI's code for an unknown model");
    }

    @Test
    @Timeout(60)
    void aCompletionAndItsStreamAgree() {
        Completion c = client.completions().create(completion(PROMPT, 12).build()).validate();
        assertTrue(c.id().startsWith("cmpl-"), c.id());
        assertTrue(c.created() > 0);
        assertEquals("stories260K", c.model());
        assertEquals(1, c.choices().size());
        CompletionChoice choice = c.choices().getFirst();
        assertEquals(0, choice.index());
        assertFalse(choice.text().isEmpty(), c.toString());
        CompletionUsage usage = c.usage().orElseThrow();
        assertTrue(usage.promptTokens() > 0, usage.toString());
        assertTrue(usage.completionTokens() > 0 && usage.completionTokens() <= 12, usage.toString());
        assertEquals(usage.promptTokens() + usage.completionTokens(), usage.totalTokens(), usage.toString());
        assertEquals(usage.completionTokens() == 12 ? CompletionChoice.FinishReason.LENGTH : CompletionChoice.FinishReason.STOP,
                choice.finishReason(), c.toString());

        List<Completion> chunks = new ArrayList<>();
        String text = streamed(completion(PROMPT, 12).build(), chunks);
        assertEquals(choice.text(), text, "the same seed at temperature 0: the stream is the answer, chunk by chunk");
        assertTrue(chunks.size() > 1, "streamed in pieces: " + chunks);
        for (Completion chunk : chunks) {
            assertEquals(c.model(), chunk.model());
            assertTrue(chunk.id().startsWith("cmpl-"), chunk.id());
            assertEquals(chunks.getFirst().id(), chunk.id(), "one id for the whole stream");
            assertTrue(chunk.usage().isEmpty(), "no usage without include_usage (OpenAI's rule): " + chunk);
        }
        Completion last = chunks.getLast();
        assertEquals(choice.finishReason(), last.choices().getFirst().finishReason(), last.toString());
    }

    /** stream_options.include_usage: one more chunk, its choices empty, carries the usage (OpenAI's shape). */
    @Test
    @Timeout(60)
    void aStreamWithIncludeUsageEndsWithTheUsageChunk() {
        Completion whole = client.completions().create(completion(PROMPT, 8).build());
        List<Completion> chunks = new ArrayList<>();
        String text = streamed(completion(PROMPT, 8).streamOptions(ChatCompletionStreamOptions.builder().includeUsage(true).build()).build(),
                chunks);
        assertEquals(whole.choices().getFirst().text(), text);
        Completion last = chunks.getLast().validate();
        assertTrue(last.choices().isEmpty(), "the usage chunk has no choices: " + last);
        assertEquals(whole.usage().orElseThrow().completionTokens(), last.usage().orElseThrow().completionTokens(), last.toString());
        assertEquals(whole.usage().orElseThrow().promptTokens(), last.usage().orElseThrow().promptTokens(), last.toString());
        for (Completion chunk : chunks.subList(0, chunks.size() - 1)) {
            assertTrue(chunk.usage().isEmpty(), "only the last chunk carries the usage: " + chunk);
        }
    }

    /**
     * The client's token-id prompts (one list, and a batch of lists) and best_of: parsed and validated by the client, a
     * prompt equal to the text's tokenization answers as the text does.
     */
    @Test
    @Timeout(60)
    void tokenIdPromptsAndBestOfParse() {
        List<Long> ids = Arrays.stream(model.tokenizer().encode(PROMPT, true, false)).mapToObj(i -> (long) i).toList();
        Completion text = client.completions().create(completion(PROMPT, 8).build()).validate();
        Completion tokens = client.completions().create(completion(PROMPT, 8).promptOfArrayOfTokens(ids).build()).validate();
        assertEquals(text.choices().getFirst().text(), tokens.choices().getFirst().text());
        assertEquals(text.usage().orElseThrow().promptTokens(), tokens.usage().orElseThrow().promptTokens());

        Completion batch = client.completions().create(completion(PROMPT, 8).promptOfArrayOfTokenArrays(List.of(ids, ids.subList(0, 3))).n(2)
                .build()).validate();
        assertEquals(4, batch.choices().size(), batch.toString());
        assertEquals(text.choices().getFirst().text(), batch.choices().getFirst().text());

        Completion best = client.completions().create(completion(PROMPT, 8).temperature(1.0).n(2).bestOf(4).build()).validate();
        assertEquals(2, best.choices().size(), best.toString());
        assertEquals(List.of(0L, 1L), best.choices().stream().map(CompletionChoice::index).toList());
        assertTrue(best.usage().orElseThrow().completionTokens() >= 4, "every one of the 4 samples counts: " + best);
        BadRequestException streamed = assertThrows(BadRequestException.class,
                () -> streamed(completion(PROMPT, 8).bestOf(2).build(), new ArrayList<>()));
        assertEquals("best_of", streamed.param().orElse(null));
    }

    @Test
    @Timeout(60)
    void stopAndMaxTokens() {
        String free = client.completions().create(completion(PROMPT, 30).build()).choices().getFirst().text();
        // A stop string taken from inside the free answer: the text ends just before it, finish_reason stop.
        int at = free.indexOf(' ', free.length() / 2);
        assertTrue(at > 0, free);
        String stop = free.substring(at, Math.min(free.length(), at + 3));
        Completion stopped = client.completions().create(completion(PROMPT, 30).stop(stop).build()).validate();
        assertEquals(free.substring(0, free.indexOf(stop)), stopped.choices().getFirst().text());
        assertEquals(CompletionChoice.FinishReason.STOP, stopped.choices().getFirst().finishReason());
        // vLLM's stop_reason beside it (the client keeps a field it does not know among the choice's additional properties).
        assertEquals(Optional.of(stop), stopReason(stopped.choices().getFirst()._additionalProperties()).asString());
        List<Completion> chunks = new ArrayList<>();
        assertEquals(stopped.choices().getFirst().text(), streamed(completion(PROMPT, 30).stopOfStrings(List.of(stop, "zzz")).build(), chunks));
        assertEquals(Optional.of(stop), stopReason(chunks.getLast().choices().getFirst()._additionalProperties()).asString(), "the last chunk's");

        Completion two = client.completions().create(completion(PROMPT, 2).build()).validate();
        assertEquals(2, two.usage().orElseThrow().completionTokens());
        assertEquals(CompletionChoice.FinishReason.LENGTH, two.choices().getFirst().finishReason());
        assertTrue(stopReason(two.choices().getFirst()._additionalProperties()).isNull(), "the length: a null stop_reason");
        // A stop token id (BOS, forced, the model's end ignored): the stop_reason is the id, a number.
        Completion byId = client.completions().create(completion(PROMPT, 8).putAdditionalBodyProperty("logit_bias", JsonValue.from(Map.of("1", 100)))
                .putAdditionalBodyProperty("ignore_eos", JsonValue.from(true)).putAdditionalBodyProperty("stop_token_ids", JsonValue.from(List.of(1)))
                .build()).validate();
        assertEquals(CompletionChoice.FinishReason.STOP, byId.choices().getFirst().finishReason());
        assertEquals(1, ((Number) stopReason(byId.choices().getFirst()._additionalProperties()).asNumber().orElseThrow()).intValue());
        assertTrue(free.startsWith(two.choices().getFirst().text()), free + " / " + two.choices().getFirst().text());
    }

    /**
     * Structured outputs as the client sends them: {@code response_format} json_schema built with the client's own model,
     * and its typed form ({@code responseFormat(Class)}: the client derives the schema from the class and parses the answer
     * into it). The answer is a JSON text of the schema's shape, finished with stop.
     */
    @Test
    @Timeout(60)
    void aJsonSchemaResponseFormatGetsAParseableAnswer() throws Exception {
        ResponseFormatJsonSchema.JsonSchema.Schema schema = ResponseFormatJsonSchema.JsonSchema.Schema.builder()
                .putAdditionalProperty("type", JsonValue.from("object"))
                .putAdditionalProperty("properties", JsonValue.from(Map.of("name", Map.of("type", "string", "maxLength", 12),
                        "age", Map.of("type", "integer"), "happy", Map.of("type", "boolean"))))
                .putAdditionalProperty("required", JsonValue.from(List.of("name", "age", "happy")))
                .putAdditionalProperty("additionalProperties", JsonValue.from(false)).build();
        ChatCompletion c = client.chat().completions().create(chat(100).responseFormat(ResponseFormatJsonSchema.builder()
                .jsonSchema(ResponseFormatJsonSchema.JsonSchema.builder().name("pet").schema(schema).strict(true).build()).build()).build()).validate();
        ChatCompletion.Choice choice = c.choices().getFirst();
        assertEquals(ChatCompletion.Choice.FinishReason.STOP, choice.finishReason(), c.toString());
        JsonNode answer = new ObjectMapper().readTree(choice.message().content().orElseThrow());
        assertTrue(answer.get("name").isTextual() && answer.get("age").isIntegralNumber() && answer.get("happy").isBoolean(), answer.toString());
        assertEquals(3, answer.size(), answer.toString());
        // The typed form: the client's schema of a class, its answer parsed by the client into the class.
        Pet pet = client.chat().completions().create(chat(100).responseFormat(Pet.class).build()).choices().getFirst().message().content()
                .orElseThrow();
        assertNotNull(pet.name, pet.toString());
    }

    /** What the typed form asks for (public fields: the client's schema generator reads them). */
    public static class Pet {
        public String name;
        public boolean happy;

        @Override
        public String toString() {
            return "Pet[" + name + ", " + happy + "]";
        }
    }

    /**
     * Tool calling as the client sends and reads it: tools defined with its builders (one with a parameters schema), a
     * required choice answered with calls the client parses ({@code tool_calls}, finish reason {@code tool_calls}, arguments
     * valid JSON for the schema); the stream, its arguments in several chunks as OpenAI's, accumulated by the client's
     * {@code ChatCompletionAccumulator} is the same answer, a max_tokens cut inside the arguments too (the call so far,
     * finish reason length); the assistant's message sent back with the tool's result goes on.
     */
    @Test
    @Timeout(60)
    void toolCallsParseAsTheClientsToolCalls() throws Exception {
        FunctionDefinition weather = FunctionDefinition.builder().name("get_weather").description("The weather in a city")
                .parameters(FunctionParameters.builder().putAdditionalProperty("type", JsonValue.from("object"))
                        .putAdditionalProperty("properties", JsonValue.from(Map.of("city", Map.of("type", "string", "maxLength", 8))))
                        .putAdditionalProperty("required", JsonValue.from(List.of("city"))).build()).build();
        ChatCompletionCreateParams params = ChatCompletionCreateParams.builder().model("stories260K").addUserMessage("Weather in Paris?")
                .addFunctionTool(weather).addFunctionTool(FunctionDefinition.builder().name("now").build())
                .toolChoice(ChatCompletionToolChoiceOption.Auto.REQUIRED).parallelToolCalls(false).maxCompletionTokens(120).temperature(1.0).seed(3).build();
        ChatCompletion whole = client.chat().completions().create(params).validate();
        ChatCompletion.Choice choice = whole.choices().getFirst();
        assertEquals(ChatCompletion.Choice.FinishReason.TOOL_CALLS, choice.finishReason(), whole.toString());
        assertTrue(choice.message().content().isEmpty(), "no content beside calls: " + whole);
        List<ChatCompletionMessageToolCall> calls = choice.message().toolCalls().orElseThrow();
        assertFalse(calls.isEmpty());
        ObjectMapper json = new ObjectMapper();
        for (ChatCompletionMessageToolCall call : calls) {
            ChatCompletionMessageFunctionToolCall f = call.asFunction();
            assertTrue(f.id().startsWith("call_"), f.id());
            JsonNode args = json.readTree(f.function().arguments());
            if (f.function().name().equals("get_weather")) assertTrue(args.path("city").isTextual(), f.function().arguments());
            else assertEquals("now", f.function().name());
        }
        ChatCompletionAccumulator acc = ChatCompletionAccumulator.create();
        int[] argumentChunks = {0};
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(params)) {
            s.stream().forEach(chunk -> {
                acc.accumulate(chunk);
                for (ChatCompletionChunk.Choice c : chunk.choices()) {
                    for (ChatCompletionChunk.Choice.Delta.ToolCall tc : c.delta().toolCalls().orElse(List.of())) {
                        if (tc.id().isEmpty() && tc.function().flatMap(ChatCompletionChunk.Choice.Delta.ToolCall.Function::arguments).isPresent()) {
                            argumentChunks[0]++;
                        }
                    }
                }
            });
        }
        // As OpenAI streams them: each call's head, then its arguments in fragments as they are generated.
        assertTrue(argumentChunks[0] > calls.size(), "several argument chunks: " + argumentChunks[0]);
        ChatCompletion.Choice streamed = acc.chatCompletion().choices().getFirst();
        assertEquals(choice.finishReason(), streamed.finishReason());
        List<ChatCompletionMessageToolCall> streamedCalls = streamed.message().toolCalls().orElseThrow();
        assertEquals(calls.size(), streamedCalls.size());
        for (int i = 0; i < calls.size(); i++) {
            assertEquals(calls.get(i).asFunction().function(), streamedCalls.get(i).asFunction().function(), "the same seed, the same calls");
        }
        ChatCompletion next = client.chat().completions().create(params.toBuilder().addMessage(choice.message())
                .addMessage(ChatCompletionToolMessageParam.builder().toolCallId(calls.getFirst().asFunction().id()).content("Sunny.").build())
                .toolChoice(ChatCompletionToolChoiceOption.Auto.NONE).maxCompletionTokens(8).build()).validate();
        assertTrue(next.choices().getFirst().message().content().isPresent(), next.toString());
        // max_tokens cutting the call inside its arguments (the fewest tokens giving 4 of its characters): the client reads
        // the call with its arguments so far and finish reason length (OpenAI's rule), streamed and accumulated as whole.
        String fullArgs = calls.getFirst().asFunction().function().arguments();
        assertTrue(fullArgs.length() > 5, "a call with arguments to cut: " + whole);
        long lo = 1, hi = whole.usage().orElseThrow().completionTokens();
        while (lo < hi) {
            long mid = (lo + hi) / 2;
            ChatCompletion c = client.chat().completions().create(params.toBuilder().maxCompletionTokens(mid).build()).validate();
            int got = c.choices().getFirst().message().toolCalls().map(t -> t.getFirst().asFunction().function().arguments().length()).orElse(0);
            if (got >= 4) hi = mid;
            else lo = mid + 1;
        }
        ChatCompletionCreateParams cut = params.toBuilder().maxCompletionTokens(lo).build();
        ChatCompletion.Choice cutWhole = client.chat().completions().create(cut).validate().choices().getFirst();
        assertEquals(ChatCompletion.Choice.FinishReason.LENGTH, cutWhole.finishReason());
        assertTrue(cutWhole.message().content().isEmpty(), cutWhole.toString());
        ChatCompletionMessageFunctionToolCall.Function cutCall = cutWhole.message().toolCalls().orElseThrow().getFirst().asFunction().function();
        assertTrue(fullArgs.startsWith(cutCall.arguments()) && cutCall.arguments().length() < fullArgs.length(), cutCall + " of " + fullArgs);
        ChatCompletionAccumulator cutAcc = ChatCompletionAccumulator.create();
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(cut)) {
            s.stream().forEach(cutAcc::accumulate);
        }
        ChatCompletion.Choice cutStreamed = cutAcc.chatCompletion().choices().getFirst();
        assertEquals(ChatCompletion.Choice.FinishReason.LENGTH, cutStreamed.finishReason());
        assertEquals(cutCall, cutStreamed.message().toolCalls().orElseThrow().getFirst().asFunction().function(), "the same cut call, streamed");
    }

    /**
     * Under tool_choice auto, a text answer streams as OpenAI's plain answer: its first chunk the role with content ""
     * ({@code delta: {"role": "assistant", "content": ""}}), the client's accumulated message the whole answer's content
     * (with n 2, each choice's role chunk at the stream's start, without content, the accumulation still whole); a
     * required answer's role chunk keeps content null (an accumulated message of calls has no content beside them).
     */
    @Test
    @Timeout(60)
    void autosTextAnswerStreamsAsOpenAisPlainAnswer() {
        FunctionDefinition weather = FunctionDefinition.builder().name("get_weather")
                .parameters(FunctionParameters.builder().putAdditionalProperty("type", JsonValue.from("object"))
                        .putAdditionalProperty("properties", JsonValue.from(Map.of("city", Map.of("type", "string", "maxLength", 8))))
                        .putAdditionalProperty("required", JsonValue.from(List.of("city"))).build()).build();
        for (long n : new long[]{1, 2}) {
            ChatCompletionCreateParams params = chat(12).addFunctionTool(weather).toolChoice(ChatCompletionToolChoiceOption.Auto.AUTO).n(n)
                    .temperature(1.0).build();
            ChatCompletion whole = client.chat().completions().create(params).validate();
            ChatCompletionAccumulator acc = ChatCompletionAccumulator.create();
            List<ChatCompletionChunk> chunks = new ArrayList<>();
            try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(params)) {
                s.stream().forEach(c -> {
                    c.validate();
                    chunks.add(c);
                    acc.accumulate(c);
                });
            }
            for (int i = 0; i < n; i++) {
                ChatCompletion.Choice w = whole.choices().get(i);
                assertTrue(w.message().toolCalls().isEmpty() && w.message().content().isPresent(), "a story, as text: " + whole);
                ChatCompletionChunk.Choice.Delta first = null;
                for (ChatCompletionChunk c : chunks) {
                    for (ChatCompletionChunk.Choice ch : c.choices()) if (ch.index() == i && first == null) first = ch.delta();
                }
                assertNotNull(first);
                assertTrue(first.role().isPresent(), first.toString());
                // One choice: OpenAI's first chunk of a text answer. Several: each role chunk goes at the stream's start, before
                // its answer is known (without content): the client's accumulator ends once every choice it saw has finished.
                if (n == 1) assertEquals(Optional.of(""), first._content().asString(), "OpenAI's first chunk of a text answer: " + first);
                else assertTrue(first._content().isMissing(), first.toString());
                ChatCompletion.Choice streamed = acc.chatCompletion().choices().stream().filter(c -> c.index() == w.index()).findFirst().orElseThrow();
                assertEquals(w.message().content(), streamed.message().content(), "the accumulated message is the whole answer's");
                assertEquals(w.finishReason(), streamed.finishReason());
                assertTrue(streamed.message().toolCalls().map(List::isEmpty).orElse(true), streamed.toString());
            }
        }
        // required: the role chunk's content stays null, so the accumulated message of calls has none.
        ChatCompletionCreateParams required = chat(60).addFunctionTool(weather).toolChoice(ChatCompletionToolChoiceOption.Auto.REQUIRED).build();
        ChatCompletionAccumulator acc = ChatCompletionAccumulator.create();
        List<ChatCompletionChunk> chunks = new ArrayList<>();
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(required)) {
            s.stream().forEach(c -> {
                chunks.add(c);
                acc.accumulate(c);
            });
        }
        assertTrue(chunks.getFirst().choices().getFirst().delta()._content().isNull(), chunks.getFirst().toString());
        assertTrue(acc.chatCompletion().choices().getFirst().message().content().isEmpty(), acc.chatCompletion().toString());
        assertFalse(acc.chatCompletion().choices().getFirst().message().toolCalls().orElseThrow().isEmpty());
    }

    private static ChatCompletionCreateParams.Builder chat(long maxTokens) {
        return ChatCompletionCreateParams.builder().model("stories260K").addSystemMessage("Tom had a red ball.").addUserMessage(PROMPT)
                .maxCompletionTokens(maxTokens).temperature(0.0).seed(7);
    }

    /**
     * A chat is the completion of its template's prompt (the contents, one per line: {@link ChatPrompt}) in the
     * chat's shape; its stream names the role first, then the content, which adds up to the answer.
     */
    /**
     * The prefill's prefix cache, as the client reads it: a prompt sent again has all its full pages but the one of its
     * last token cached ({@code usage.prompt_tokens_details.cached_tokens}, pages of 16 here), and the same answer.
     */
    @Test
    @Timeout(60)
    void cachedPromptTokensParseInTheClientsUsage() {
        String prompt = "Ben and Mia found a small dog in the garden. The dog was sad and hungry, so they gave it some milk";
        long n = model.tokenizer().encode(prompt, true, false).length;
        assertTrue(n > 32, n + " tokens");
        Completion first = client.completions().create(completion(prompt, 6).build()).validate();
        Completion again = client.completions().create(completion(prompt, 6).build()).validate();
        assertEquals(first.choices().getFirst().text(), again.choices().getFirst().text());
        CompletionUsage usage = again.usage().orElseThrow();
        assertEquals(n, usage.promptTokens());
        assertEquals((n - 1) / 16 * 16, usage.promptTokensDetails().orElseThrow().cachedTokens().orElseThrow(), usage.toString());
        ChatCompletionCreateParams chat = ChatCompletionCreateParams.builder().model("stories260K").addSystemMessage(prompt)
                .addUserMessage("Then what?").maxCompletionTokens(6).temperature(0.0).seed(7).build();
        client.chat().completions().create(chat);
        CompletionUsage chatUsage = client.chat().completions().create(chat).validate().usage().orElseThrow();
        assertEquals((chatUsage.promptTokens() - 1) / 16 * 16, chatUsage.promptTokensDetails().orElseThrow().cachedTokens().orElseThrow(),
                chatUsage.toString());
    }

    @Test
    @Timeout(60)
    void aChatAndItsStreamAreTheCompletionOfTheTemplatedPrompt() {
        ChatCompletion c = client.chat().completions().create(chat(12).build()).validate();
        assertTrue(c.id().startsWith("chatcmpl-"), c.id());
        assertTrue(c.created() > 0);
        assertEquals("stories260K", c.model());
        ChatCompletion.Choice choice = c.choices().getFirst();
        String text = choice.message().content().orElseThrow();
        assertFalse(text.isEmpty(), c.toString());
        CompletionUsage usage = c.usage().orElseThrow();
        assertEquals(usage.promptTokens() + usage.completionTokens(), usage.totalTokens(), usage.toString());
        assertEquals(usage.completionTokens() == 12 ? ChatCompletion.Choice.FinishReason.LENGTH : ChatCompletion.Choice.FinishReason.STOP,
                choice.finishReason(), c.toString());
        Completion same = client.completions().create(completion("Tom had a red ball." + ChatPrompt.SEPARATOR + PROMPT, 12).build());
        assertEquals(same.choices().getFirst().text(), text, "the chat's prompt is its template's");
        assertEquals(same.usage().orElseThrow().promptTokens(), usage.promptTokens());

        List<ChatCompletionChunk> chunks = new ArrayList<>();
        StringBuilder streamed = new StringBuilder();
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(chat(12)
                .streamOptions(ChatCompletionStreamOptions.builder().includeUsage(true).build()).build())) {
            s.stream().forEach(chunk -> {
                chunks.add(chunk.validate());
                for (ChatCompletionChunk.Choice ch : chunk.choices()) streamed.append(ch.delta().content().orElse(""));
            });
        }
        assertEquals(text, streamed.toString());
        ChatCompletionChunk.Choice.Delta first = chunks.getFirst().choices().getFirst().delta();
        assertEquals(ChatCompletionChunk.Choice.Delta.Role.ASSISTANT, first.role().orElseThrow(), "the first chunk names the role");
        assertEquals("", first.content().orElseThrow());
        for (ChatCompletionChunk chunk : chunks.subList(1, chunks.size())) {
            assertEquals(chunks.getFirst().id(), chunk.id(), "one id for the whole stream");
            for (ChatCompletionChunk.Choice ch : chunk.choices()) assertTrue(ch.delta().role().isEmpty(), "the role only first: " + chunk);
        }
        ChatCompletionChunk last = chunks.getLast();
        assertTrue(last.choices().isEmpty(), last.toString());
        assertEquals(usage.completionTokens(), last.usage().orElseThrow().completionTokens());
        ChatCompletionChunk fin = chunks.get(chunks.size() - 2);
        assertEquals(choice.finishReason().asString(), fin.choices().getFirst().finishReason().orElseThrow().asString());
    }

    @Test
    @Timeout(60)
    void aChatsTokenLimitAndStop() {
        ChatCompletion three = client.chat().completions().create(chat(3).build()).validate();
        assertEquals(3, three.usage().orElseThrow().completionTokens());
        assertEquals(ChatCompletion.Choice.FinishReason.LENGTH, three.choices().getFirst().finishReason());
        ChatCompletion older = client.chat().completions().create(chat(3).maxCompletionTokens(Optional.empty()).maxTokens(3).build());
        assertEquals(three.choices().getFirst().message().content(), older.choices().getFirst().message().content(), "max_tokens, the older name");

        String free = client.chat().completions().create(chat(30).build()).choices().getFirst().message().content().orElseThrow();
        int at = free.indexOf(' ', free.length() / 2);
        assertTrue(at > 0, free);
        String stop = free.substring(at, Math.min(free.length(), at + 3));
        ChatCompletion stopped = client.chat().completions().create(chat(30).stop(stop).build()).validate();
        assertEquals(free.substring(0, free.indexOf(stop)), stopped.choices().getFirst().message().content().orElseThrow());
        assertEquals(ChatCompletion.Choice.FinishReason.STOP, stopped.choices().getFirst().finishReason());
        assertEquals(Optional.of(stop), stopReason(stopped.choices().getFirst()._additionalProperties()).asString());
        assertTrue(stopReason(three.choices().getFirst()._additionalProperties()).isNull(), "the length: a null stop_reason");
        List<ChatCompletionChunk.Choice> last = new ArrayList<>();
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(chat(30).stop(stop).build())) {
            s.stream().forEach(chunk -> last.addAll(chunk.choices()));
        }
        assertEquals(ChatCompletionChunk.Choice.FinishReason.STOP, last.getLast().finishReason().orElseThrow());
        assertEquals(Optional.of(stop), stopReason(last.getLast()._additionalProperties()).asString(), "the last chunk's");
    }

    /** A choice's vLLM {@code stop_reason}, which the client keeps among its additional properties: there, null or not. */
    private static JsonValue stopReason(Map<String, JsonValue> properties) {
        assertTrue(properties.containsKey("stop_reason"), "no stop_reason: " + properties);
        return properties.get("stop_reason");
    }

    @Test
    @Timeout(60)
    void whatAChatCannotDoIsTheClientsBadRequestExceptionNamingTheField() {
        BadRequestException n = assertThrows(BadRequestException.class, () -> client.chat().completions().create(chat(4).n(65).build()));
        assertError(n, 400, "invalid_request_error", "n must be in [1, 64], got 65");
        assertEquals("n", n.param().orElse(null));
        BadRequestException tools = assertThrows(BadRequestException.class, () -> client.chat().completions().create(chat(4)
                .addFunctionTool(FunctionDefinition.builder().name("two words").build()).build()));
        assertError(tools, 400, "invalid_request_error", "tools[0].function.name must be 1 to 64 letters, digits, _ or -");
        assertEquals("tools[0].function.name", tools.param().orElse(null));
        BadRequestException tool = assertThrows(BadRequestException.class, () -> client.chat().completions().create(chat(4)
                .addMessage(ChatCompletionToolMessageParam.builder().toolCallId("call-1").content("42").build()).build()));
        assertError(tool, 400, "invalid_request_error", "messages[2].tool_call_id must be the id of a call of an earlier assistant message's");
        assertEquals("messages[2].tool_call_id", tool.param().orElse(null));
        BadRequestException image = assertThrows(BadRequestException.class, () -> client.chat().completions().create(chat(4)
                .addUserMessageOfArrayOfContentParts(List.of(ChatCompletionContentPart.ofImageUrl(ChatCompletionContentPartImage.builder()
                        .imageUrl(ChatCompletionContentPartImage.ImageUrl.builder().url("https://example.com/a.png").build()).build()))).build()));
        assertError(image, 400, "invalid_request_error", "messages[2].content[0] must be a text part");
        BadRequestException logprobs = assertThrows(BadRequestException.class, () -> client.chat().completions().create(chat(4).topLogprobs(2)
                .build()));
        assertError(logprobs, 400, "invalid_request_error", "top_logprobs (2) needs logprobs: true");
        assertEquals("top_logprobs", logprobs.param().orElse(null));
    }

    /** Log probabilities, asked for as the client asks, parse in its models of a completion, a chat and a chat's chunks. */
    @Test
    @Timeout(60)
    void logprobsParseInTheClientsModels() {
        Completion c = client.completions().create(completion(PROMPT, 6).logprobs(3).build()).validate();
        CompletionChoice.Logprobs lp = c.choices().getFirst().logprobs().orElseThrow();
        long n = c.usage().orElseThrow().completionTokens();
        assertEquals(n, lp.tokens().orElseThrow().size(), lp.toString());
        assertEquals(n, lp.tokenLogprobs().orElseThrow().size(), lp.toString());
        assertEquals(n, lp.textOffset().orElseThrow().size(), lp.toString());
        assertEquals(n, lp.topLogprobs().orElseThrow().size(), lp.toString());
        for (int i = 0; i < n; i++) {
            Map<String, JsonValue> top = lp.topLogprobs().orElseThrow().get(i)._additionalProperties();
            assertEquals(3, top.size(), top.toString());
            // Greedy: the token is the most likely one, with its log probability.
            assertEquals(lp.tokens().orElseThrow().get(i), top.keySet().iterator().next(), lp.toString());
            assertEquals(lp.tokenLogprobs().orElseThrow().get(i), ((Number) top.values().iterator().next().asNumber().orElseThrow()).doubleValue(), 0);
        }
        assertEquals(0L, lp.textOffset().orElseThrow().getFirst());

        ChatCompletion chat = client.chat().completions().create(chat(6).logprobs(true).topLogprobs(2).build()).validate();
        List<ChatCompletionTokenLogprob> content = chat.choices().getFirst().logprobs().orElseThrow().content().orElseThrow();
        assertEquals(chat.usage().orElseThrow().completionTokens(), content.size(), content.toString());
        for (ChatCompletionTokenLogprob t : content) {
            assertEquals(2, t.topLogprobs().size(), t.toString());
            assertEquals(t.token(), t.topLogprobs().getFirst().token(), "greedy: " + t);
            assertEquals(t.logprob(), t.topLogprobs().getFirst().logprob(), 0, t.toString());
            assertFalse(t.bytes().orElseThrow().isEmpty() && !t.token().startsWith("<"), t.toString());
        }
        List<ChatCompletionTokenLogprob> streamed = new ArrayList<>();
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(chat(6).logprobs(true).topLogprobs(2).build())) {
            s.stream().forEach(chunk -> {
                chunk.validate();
                for (ChatCompletionChunk.Choice choice : chunk.choices()) {
                    choice.logprobs().flatMap(ChatCompletionChunk.Choice.Logprobs::content).ifPresent(streamed::addAll);
                }
            });
        }
        assertEquals(content, streamed, "the chunks' log probabilities are the answer's");
    }

    /**
     * lm-evaluation-harness's loglikelihood request (echo, logprobs, max_tokens 0 or 1) parses in the client's model: the
     * prompt's tokens come first, the first one's logprob and top logprobs null, as OpenAI's; streamed the same.
     */
    @Test
    @Timeout(60)
    void echoedPromptLogprobsParseInTheClientsModels() {
        int promptTokens = model.tokenizer().encode(PROMPT, true, false).length;
        for (long max : new long[]{0, 1}) {
            Completion c = client.completions().create(completion(PROMPT, max).echo(true).logprobs(2).build()).validate();
            CompletionChoice choice = c.choices().getFirst();
            assertTrue(choice.text().startsWith(PROMPT), choice.text());
            assertEquals(max, c.usage().orElseThrow().completionTokens());
            CompletionChoice.Logprobs lp = choice.logprobs().orElseThrow();
            List<Double> values = lp.tokenLogprobs().orElseThrow();
            assertEquals(promptTokens + max, values.size(), lp.toString());
            assertEquals(promptTokens + max, lp.tokens().orElseThrow().size(), lp.toString());
            assertEquals(promptTokens + max, lp.textOffset().orElseThrow().size(), lp.toString());
            assertEquals(promptTokens + max, lp.topLogprobs().orElseThrow().size(), lp.toString());
            assertEquals(null, values.getFirst(), "the first prompt token has no logprob: " + lp);
            for (int i = 1; i < values.size(); i++) assertTrue(values.get(i) <= 0, lp.toString());
            double sum = 0;
            for (int i = 1; i < promptTokens; i++) sum += values.get(i); // what loglikelihood adds up
            assertTrue(sum < 0, lp.toString());
            StringBuilder text = new StringBuilder();
            List<Double> streamed = new ArrayList<>();
            try (StreamResponse<Completion> s = client.completions().createStreaming(completion(PROMPT, max).echo(true).logprobs(2).build())) {
                s.stream().forEach(chunk -> { // a chunk's finish_reason is null until the last: the client's validate() is for answers
                    for (CompletionChoice ch : chunk.choices()) {
                        text.append(ch.text());
                        ch.logprobs().flatMap(CompletionChoice.Logprobs::tokenLogprobs).ifPresent(streamed::addAll);
                    }
                });
            }
            assertEquals(choice.text(), text.toString());
            assertEquals(values, streamed, "the chunks' log probabilities are the answer's");
        }
    }

    /**
     * Several choices (a batch of prompts, n samples each; a chat's n) parse in the client's models, each choice with its
     * index, the usage summed; streamed, the client reads the interleaved chunks, each naming its choice, and each
     * choice's text is the answer's.
     */
    @Test
    @Timeout(60)
    void severalChoicesParseAndStreamInTheClientsModels() {
        List<String> prompts = List.of(PROMPT, "The little dog");
        Completion c = client.completions().create(completion(PROMPT, 6).promptOfArrayOfStrings(prompts).n(2).build()).validate();
        assertEquals(4, c.choices().size(), c.toString());
        long completionTokens = 0;
        for (int i = 0; i < 4; i++) assertEquals(i, c.choices().get(i).index(), c.toString());
        Completion first = client.completions().create(completion(prompts.get(1), 6).build());
        assertEquals(first.choices().getFirst().text(), c.choices().get(2).text(), "prompt 1's first sample is index 2");
        for (int i = 0; i < prompts.size(); i++) {
            completionTokens += client.completions().create(completion(prompts.get(i), 6).build()).usage().orElseThrow().completionTokens() * 2;
        }
        assertEquals(completionTokens, c.usage().orElseThrow().completionTokens(), "the usage is the choices' sum");
        String[] texts = new String[4];
        Arrays.fill(texts, "");
        try (StreamResponse<Completion> s = client.completions().createStreaming(completion(PROMPT, 6).promptOfArrayOfStrings(prompts).n(2).build())) {
            s.stream().forEach(chunk -> {
                for (CompletionChoice ch : chunk.choices()) texts[(int) ch.index()] += ch.text();
            });
        }
        for (int i = 0; i < 4; i++) assertEquals(c.choices().get(i).text(), texts[i], "choice " + i);

        ChatCompletion chat = client.chat().completions().create(chat(5).n(3).build()).validate();
        assertEquals(3, chat.choices().size(), chat.toString());
        String[] contents = new String[3];
        Arrays.fill(contents, "");
        try (StreamResponse<ChatCompletionChunk> s = client.chat().completions().createStreaming(chat(5).n(3).build())) {
            s.stream().forEach(chunk -> {
                for (ChatCompletionChunk.Choice ch : chunk.choices()) contents[(int) ch.index()] += ch.delta().content().orElse("");
            });
        }
        for (int i = 0; i < 3; i++) {
            assertEquals(i, chat.choices().get(i).index());
            assertEquals(chat.choices().get(i).message().content().orElseThrow(), contents[i], "chat choice " + i);
        }
    }

    /**
     * The client's typed {@code frequency_penalty}, {@code presence_penalty} and {@code logit_bias} (and vLLM's
     * {@code min_tokens} as an extra property) are applied: each changes the answer, which the client parses.
     */
    @Test
    @Timeout(60)
    void theClientsTypedPenaltiesAndLogitBiasApply() {
        Completion plain = client.completions().create(completion(PROMPT, 32).build()).validate();
        Completion penalised = client.completions().create(completion(PROMPT, 32).frequencyPenalty(1.5).presencePenalty(1.5).build()).validate();
        assertFalse(plain.choices().getFirst().text().equals(penalised.choices().getFirst().text()), penalised.toString());
        // BOS at +100: the story ends at its first token, no text; with min_tokens 3 not before 3 tokens.
        CompletionCreateParams.LogitBias bos = CompletionCreateParams.LogitBias.builder().putAdditionalProperty("1", JsonValue.from(100)).build();
        Completion ended = client.completions().create(completion(PROMPT, 32).logitBias(bos).build()).validate();
        assertEquals("", ended.choices().getFirst().text(), ended.toString());
        assertEquals(1, ended.usage().orElseThrow().completionTokens());
        assertEquals(CompletionChoice.FinishReason.STOP, ended.choices().getFirst().finishReason());
        Completion held = client.completions().create(completion(PROMPT, 32).logitBias(bos)
                .putAdditionalBodyProperty("min_tokens", JsonValue.from(3)).build()).validate();
        assertEquals(4, held.usage().orElseThrow().completionTokens(), held.toString());
        assertFalse(held.choices().getFirst().text().isEmpty(), held.toString());
        ChatCompletion chat = client.chat().completions().create(chat(24).frequencyPenalty(2.0).logitBias(ChatCompletionCreateParams.LogitBias
                .builder().putAdditionalProperty("1", JsonValue.from(-100)).build()).build()).validate();
        assertNotNull(chat.choices().getFirst().message().content().orElseThrow());
    }

    @Test
    @Timeout(60)
    void badRequestsAreTheClientsBadRequestException() {
        BadRequestException negative = assertThrows(BadRequestException.class, () -> client.completions().create(completion(PROMPT, -1).build()));
        assertError(negative, 400, "invalid_request_error", "max_tokens");
        assertEquals("max_tokens", negative.param().orElse(null), "the field at fault, as OpenAI names it");
        BadRequestException n = assertThrows(BadRequestException.class, () -> client.completions().create(completion(PROMPT, 4).n(0).build()));
        assertError(n, 400, "invalid_request_error", "n must be in [1, 64], got 0");
        assertEquals("n", n.param().orElse(null));
        BadRequestException unknown = assertThrows(BadRequestException.class, () -> client.completions().create(completion(PROMPT, 4)
                .putAdditionalBodyProperty("min_p", JsonValue.from(1.5)).build()));
        assertError(unknown, 400, "invalid_request_error", "min_p must be in [0, 1]");
        assertEquals("min_p", unknown.param().orElse(null));
    }

    @Test
    @Timeout(60)
    void aWrongApiKeyIsTheClientsUnauthorizedException() {
        OpenAIClient wrong = client(router.port(), "not-the-key");
        try {
            UnauthorizedException e = assertThrows(UnauthorizedException.class, () -> wrong.models().list());
            assertError(e, 401, "authentication_error", "needs the router's API key");
            assertThrows(UnauthorizedException.class, () -> wrong.completions().create(completion(PROMPT, 2).build()));
        } finally {
            wrong.close();
        }
    }

    /** Over the admission limit (stub engines; the decode holds the one slot): the client's RateLimitException, readable. */
    @Test
    @Timeout(60)
    void overTheAdmissionLimitIsTheClientsRateLimitException() throws Exception {
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        HttpServer prefill = stub(ex -> {
            ex.getRequestBody().readAllBytes();
            answer(ex, "{}");
        });
        HttpServer decode = stub(ex -> {
            ex.getRequestBody().readAllBytes();
            entered.countDown();
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            answer(ex, "data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n");
        });
        try (Router limited = new Router(List.of(url(prefill)), List.of(url(decode)), model.tokenizer(), model.weights().config.seqLen(),
                "stories260K", "127.0.0.1", 0, Router.Access.NONE, new Router.Admission(1, Duration.ZERO), null)) {
            OpenAIClient limitedClient = client(limited.port(), "any");
            // Not on the common pool: with one thread (two cores) a call blocked there stalls the JDK HttpClient's own completions.
            CompletableFuture<Completion> first = CompletableFuture.supplyAsync(() -> limitedClient.completions().create(completion(PROMPT, 1).build()),
                    Executors.newVirtualThreadPerTaskExecutor());
            assertTrue(entered.await(30, TimeUnit.SECONDS), "the first request holds the slot");
            RateLimitException e = assertThrows(RateLimitException.class, () -> limitedClient.completions().create(completion(PROMPT, 1).build()));
            assertError(e, 429, "rate_limit_error", "--max-concurrent-requests");
            assertEquals(List.of("1"), e.headers().values("Retry-After"));
            release.countDown();
            assertNotNull(first.get(30, TimeUnit.SECONDS).validate());
            limitedClient.close();
        } finally {
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A stream that fails after its 200 (the decode's error event after one token): the client's stream throws
     * SseException with the router's error (type and message), on both OpenAI routes, rather than ending as if done.
     */
    @Test
    @Timeout(60)
    void aStreamThatFailsMidWayIsTheClientsSseException() throws Exception {
        HttpServer prefill = stub(ex -> {
            ex.getRequestBody().readAllBytes();
            answer(ex, "{}");
        });
        HttpServer decode = stub(ex -> {
            ex.getRequestBody().readAllBytes();
            answer(ex, "data: {\"token\":300}\n\ndata: {\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"peer_lost\","
                    + "\"message\":\"the decode lost its prefill\"}}\n\n");
        });
        try (Router failing = new Router(List.of(url(prefill)), List.of(url(decode)), model.tokenizer(), model.weights().config.seqLen(),
                "stories260K", "127.0.0.1", 0)) {
            OpenAIClient c = client(failing.port(), "any");
            try {
                List<String> texts = new ArrayList<>();
                SseException e = assertThrows(SseException.class, () -> {
                    try (StreamResponse<Completion> s = c.completions().createStreaming(completion(PROMPT, 4).build())) {
                        s.stream().forEach(chunk -> texts.add(chunk.choices().getFirst().text()));
                    }
                });
                assertFalse(texts.isEmpty(), "the text before the failure arrived");
                assertTrue(e.body().toString().contains("the decode lost its prefill"), e.body().toString());
                assertTrue(e.body().toString().contains("kv_transfer_error"), e.body().toString());
                SseException chat = assertThrows(SseException.class, () -> {
                    try (StreamResponse<ChatCompletionChunk> s = c.chat().completions().createStreaming(chat(4).build())) {
                        s.stream().forEach(chunk -> { });
                    }
                });
                assertTrue(chat.body().toString().contains("the decode lost its prefill"), chat.body().toString());
            } finally {
                c.close();
            }
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** A stub engine: healthy (a prefill's registry named), {@code generate} on /generate, 200 on /abort. */
    private static HttpServer stub(HttpHandler generate) throws Exception {
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        s.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        s.createContext("/health", ex -> answer(ex, "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}"));
        s.createContext("/abort", ex -> answer(ex, "{}"));
        s.createContext("/generate", generate);
        s.start();
        return s;
    }

    private static void answer(HttpExchange ex, String body) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(200, b.length);
        ex.getResponseBody().write(b);
        ex.close();
    }

    private static String url(HttpServer s) {
        return "http://127.0.0.1:" + s.getAddress().getPort();
    }

    /** The client read the error body: its type, and a message holding {@code message}. */
    static void assertError(OpenAIServiceException e, int status, String type, String message) {
        assertEquals(status, e.statusCode(), e.toString());
        assertEquals(type, e.type().orElse(null), e.toString());
        assertTrue(e.code().isEmpty() || !e.code().get().isEmpty(), "the code reads as a string or null: " + e);
        assertTrue(e.getMessage().contains(message), e.getMessage());
    }
}
