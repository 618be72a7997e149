package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.serve.Roles;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/** {@code kvferry demo}: PD disaggregation serving real text, checked against a colocated run. */
@Command(name = "demo", mixinStandardHelpOptions = true,
        description = "Start a router, one prefill and one decode (the reference engine, kvferry between them), send a handful of "
                + "prompts, stream their text, and report per request: TTFT split into prefill compute / KV transfer / first decode "
                + "step, bytes moved, tokens/s, and whether the tokens equal a colocated run's.")
public final class DemoCommand implements Callable<Integer> {
    static final List<String> PROMPTS = List.of("Once upon a time", "Lily and Ben went to the park", "One day, a big bear",
            "Tom had a red ball. He", "The sun was hot, so the little bird");

    @Mixin
    EngineOptions engine = new EngineOptions();

    @Option(names = "--processes", description = "Run the prefill and the decode as separate JVMs (the router stays in this one).")
    boolean processes;

    @Option(names = "--prefill-tp", defaultValue = "1", description = "Prefill TP size (in process). Default: ${DEFAULT-VALUE}.")
    int prefillTp;

    @Option(names = "--decode-tp", defaultValue = "1", description = "Decode TP size (in process). Default: ${DEFAULT-VALUE}.")
    int decodeTp;

    @Option(names = "--prefill-pp", defaultValue = "1", description = "Prefill PP stages (in process). Default: ${DEFAULT-VALUE}.")
    int prefillPp;

    @Option(names = "--max-tokens", defaultValue = "48", description = "Tokens generated per prompt. Default: ${DEFAULT-VALUE}.")
    int maxTokens;

    @Option(names = "--prompt", description = "Prompts to send (repeatable). Default: five TinyStories openings.")
    List<String> prompts;

    @Option(names = "--load", defaultValue = "0", description = "Then send this many requests at once (--max-tokens each, "
            + "greedy) and report their aggregate tokens/s and TTFT p50/p99, beside the same requests run one by one on a "
            + "colocated engine in this process (the baseline of the same run). Default: ${DEFAULT-VALUE} (skip).")
    int load;

    @Option(names = "--shared-prefix-tokens", defaultValue = "0", description = "With --load: every load request's prompt starts "
            + "with one common prefix of about this many tokens (a fixed children's story, cut at the last whole word that keeps it "
            + "within the count, BOS included), then its own varied opening; the prefix is sent alone once first (a system prompt "
            + "already served), so the prefill's prefix cache can hold its pages. Default: ${DEFAULT-VALUE} (no shared prefix).")
    int sharedPrefixTokens;

    @Option(names = "--shared-prefix-cold", description = "With --shared-prefix-tokens: the prefix is not sent alone first, so the "
            + "load's burst brings a system prompt no cache holds yet (the prefill computes it once and the requests that share it "
            + "wait for its pages: SERVING.md \"Prefix caches and cache_salt\").")
    boolean sharedPrefixCold;

    @Option(names = "--json", description = "End with one JSON line: requests, succeeded, tokens, matches_colocated, ttft_ms, transfer_ms, "
            + "tokens_per_s, model, transport, model_variant, per_request (tokens, bytes, kv_pages, cached_tokens: the prompt tokens "
            + "the prefill took from its prefix cache, matches_colocated each), and load with --load (requests, succeeded, "
            + "matches_colocated, tokens_per_s, colocated_one_by_one_tokens_per_s, ttft_ms, prompt_tokens, cached_tokens, kv_bytes, "
            + "shared_prefix_tokens, shared_prefix_cold).")
    boolean json;

    private static final ObjectMapper JSON = new ObjectMapper();

    /** Most concurrent requests of --load: far beyond what one engine's --max-requests serves at once. */
    static final int MAX_LOAD = 100_000;

    @Override
    public Integer call() throws Exception {
        if (load < 0) throw new IllegalArgumentException("--load " + load + " is negative; give the number of requests (0 = skip)");
        if (load > MAX_LOAD) {
            // The load's prompts and futures are all held at once: 2^31 of them ran out of heap after minutes of silence.
            throw new IllegalArgumentException("--load " + load + " is more than " + MAX_LOAD + " requests");
        }
        engine.check();
        if (sharedPrefixTokens < 0) throw new IllegalArgumentException("--shared-prefix-tokens " + sharedPrefixTokens + " is negative");
        if (sharedPrefixTokens > 0 && load == 0) {
            throw new IllegalArgumentException("--shared-prefix-tokens shapes --load's requests; give --load N too");
        }
        if (sharedPrefixCold && sharedPrefixTokens == 0) {
            throw new IllegalArgumentException("--shared-prefix-cold needs --shared-prefix-tokens T");
        }
        if (maxTokens < 1) throw new IllegalArgumentException("--max-tokens must be >= 1, got " + maxTokens);
        if (processes && "inproc".equals(engine.transport)) {
            // Each engine in its own JVM: inproc links fell back to tcp while the banner said inproc.
            throw new IllegalArgumentException("--transport inproc moves memory inside one JVM; it cannot be combined with --processes");
        }
        PrintStream out = System.out;
        ModelFiles.Loaded model = engine.load();
        String sharedPrefix = sharedPrefixTokens > 0 ? sharedPrefix(model, sharedPrefixTokens) : null;
        List<String> loadPrompts = loadPrompts(model, sharedPrefix); // before anything starts: a prefix past the context is the user's error
        engine.requireParallelism(model, "--prefill-tp", prefillTp, "--prefill-pp", prefillPp);
        engine.requireParallelism(model, "--decode-tp", decodeTp, null, 1);
        out.println("[demo] model: " + model.description());
        if (engine.variant != ModelVariant.LLAMA) {
            out.println("[demo] variant: " + Model.of(model.weights(), engine.variant).describe() + "; its own layers use seeded random weights");
        }
        String given = engine.token(); // read once: a file others can read is warned about once
        String token = given != null ? given : EngineOptions.randomToken();
        List<String> ps = prompts != null && !prompts.isEmpty() ? prompts : PROMPTS;
        List<Process> children = new ArrayList<>();
        Roles.Role cluster = null;
        try {
            String routerUrl;
            if (processes) {
                Roles.requireStatePairs(engine.variant, prefillPp, 1); // the decode process runs one stage
                Process p = spawn("prefill", prefillTp, prefillPp, token);
                children.add(p);
                Process d = spawn("decode", decodeTp, 1, token);
                children.add(d);
                String pUrl = awaitUrl(p, "prefill"), dUrl = awaitUrl(d, "decode");
                cluster = Roles.router(engine.options(model, 1, 1, 0, 0, token), List.of(pUrl), List.of(dUrl));
                out.println("[demo] prefill (pid " + p.pid() + ") at " + pUrl + ", decode (pid " + d.pid() + ") at " + dUrl);
            } else {
                cluster = Roles.all(engine.options(model, 1, 1, 0, 0, token), engine.options(model, prefillTp, prefillPp, 0, 0, token),
                        engine.options(model, decodeTp, 1, 0, 0, token));
            }
            routerUrl = "http://" + Roles.hostPort(Roles.isWildcard(engine.host) ? Roles.loopback(engine.host) : engine.host, cluster.port());
            out.println("[demo] router " + routerUrl + ": " + engine.variant.label() + ", prefill tp" + prefillTp + " pp" + prefillPp
                    + " -> decode tp" + decodeTp + " over " + engine.transport + (processes ? ", separate processes" : ", one process"));
            return run(out, model, routerUrl, ps, sharedPrefix, loadPrompts);
        } finally {
            if (cluster != null) cluster.close();
            for (Process c : children.reversed()) { // decode first: a prefill gone first makes the decode revoke its links
                c.destroy();
                if (!c.waitFor(5, TimeUnit.SECONDS)) c.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        }
    }

    private int run(PrintStream out, ModelFiles.Loaded model, String routerUrl, List<String> ps, String sharedPrefix, List<String> loadPrompts)
            throws Exception {
        HttpClient http = HttpClient.newHttpClient();
        List<Double> ttft = new ArrayList<>(), transfer = new ArrayList<>();
        int succeeded = 0, matched = 0;
        long tokens = 0;
        ArrayNode perRequest = JSON.createArrayNode();
        double seconds = 0;
        try (ColocatedEngine colocated = colocated(model)) {
            for (String prompt : ps) {
                ObjectNode body = JSON.createObjectNode();
                body.put("model", Roles.modelName(model));
                body.put("prompt", prompt);
                body.put("max_tokens", maxTokens);
                body.put("temperature", 0);
                body.put("stream", true);
                body.putObject("stream_options").put("include_usage", true); // the usage chunk, for cached_tokens
                out.print("\n> " + prompt);
                out.flush();
                long t0 = System.nanoTime();
                HttpResponse<InputStream> r = http.send(HttpRequest.newBuilder(URI.create(routerUrl + "/v1/completions"))
                        .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body.toString())).build(),
                        HttpResponse.BodyHandlers.ofInputStream());
                if (r.statusCode() != 200) {
                    String answer = new String(r.body().readAllBytes(), StandardCharsets.UTF_8);
                    out.println("\n[demo] HTTP " + r.statusCode() + ": " + answer);
                    if (r.statusCode() >= 400 && r.statusCode() < 500) {
                        // The engines refused the request as this command line shapes it (too few --pages for the prompt and
                        // --max-tokens, a prompt longer than the context): the user's error, and every later prompt would meet it too.
                        out.flush();
                        throw new IllegalArgumentException("the engines refused the request (HTTP " + r.statusCode() + "): " + errorMessage(answer));
                    }
                    continue;
                }
                JsonNode fin = null;
                JsonNode usage = null;
                try (BufferedReader in = new BufferedReader(new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null) {
                        if (!line.startsWith("data: ") || line.equals("data: [DONE]")) continue;
                        JsonNode ev = JSON.readTree(line.substring(6));
                        if (ev.has("error")) {
                            out.println("\n[demo] failed: " + ev.path("error").path("message").asText());
                            break;
                        }
                        out.print(ev.path("choices").path(0).path("text").asText());
                        out.flush();
                        if (ev.has("kvferry")) fin = ev;
                        if (ev.path("usage").isObject()) usage = ev.get("usage");
                    }
                }
                double secs = (System.nanoTime() - t0) / 1e9;
                out.println();
                if (fin == null) continue;
                succeeded++;
                JsonNode k = fin.get("kvferry");
                int[] ids = new int[k.get("token_ids").size()];
                for (int i = 0; i < ids.length; i++) ids[i] = k.get("token_ids").get(i).intValue();
                int[] ref = colocated.generate(model.tokenizer().encode(prompt, true, false), maxTokens, Sampling.GREEDY).tokens();
                boolean same = Arrays.equals(ids, ref);
                if (same) matched++;
                tokens += ids.length;
                seconds += secs;
                ttft.add(k.path("ttft_ms").asDouble());
                transfer.add(k.path("transfer_ms").asDouble());
                int kvPages = k.path("kv_pages").asInt();
                // The router's usage (its include_usage chunk, after the last): the prompt tokens from the prefill's prefix cache.
                int cached = usage == null ? 0 : usage.path("prompt_tokens_details").path("cached_tokens").asInt(0);
                out.printf("  [ttft %.1f ms: prefill compute %.1f, KV transfer %.1f (last chunk sent -> landed), first decode step %.2f;"
                                + " the rest is HTTP and scheduling] %d B of KV moved (%s), %d tokens at %.0f tokens/s, %s%s%n",
                        k.path("ttft_ms").asDouble(), k.path("prefill_compute_ms").asDouble(), k.path("transfer_ms").asDouble(),
                        k.path("first_decode_ms").asDouble(), k.path("bytes").asLong(),
                        kvPages == 0 ? "no KV page: the prompt was all in the decode's prefix cache, the last chunk carried the aux row"
                                + (engine.variant == ModelVariant.LLAMA || engine.variant == ModelVariant.MLA ? "" : " and the state")
                                : kvPages + (kvPages == 1 ? " page" : " pages"), ids.length, ids.length / secs,
                        same ? "matches colocated" : "DIFFERS from colocated: " + Arrays.toString(ref),
                        cached > 0 ? "; " + cached + " prompt tokens from the prefill's cache" : "");
                perRequest.addObject().put("tokens", ids.length).put("bytes", k.path("bytes").asLong()).put("kv_pages", kvPages)
                        .put("cached_tokens", cached).put("matches_colocated", same);
            }
        }
        double tps = seconds > 0 ? tokens / seconds : 0;
        out.printf("%n[demo] %d/%d requests succeeded, %d tokens, %d/%d match the colocated run, %.0f tokens/s (one stream at a time)%n",
                succeeded, ps.size(), tokens, matched, succeeded, tps);
        ObjectNode loadResult = load > 0 ? load(out, model, routerUrl, http, sharedPrefix, loadPrompts) : null;
        if (json) {
            ObjectNode o = JSON.createObjectNode();
            if (loadResult != null) o.set("load", loadResult);
            o.put("requests", ps.size());
            o.put("succeeded", succeeded);
            o.put("tokens", tokens);
            o.put("matches_colocated", succeeded > 0 && matched == succeeded);
            o.set("ttft_ms", percentiles(ttft));
            o.set("transfer_ms", percentiles(transfer));
            o.put("tokens_per_s", tps);
            o.put("model", Roles.modelName(model));
            o.put("transport", engine.transport);
            o.put("model_variant", engine.variant.label());
            o.set("per_request", perRequest);
            out.println(JSON.writeValueAsString(o));
        }
        boolean loadOk = loadResult == null || loadResult.path("matches_colocated").asInt() == loadResult.path("succeeded").asInt();
        return succeeded == ps.size() && matched == succeeded && loadOk ? 0 : 1;
    }

    /** The message of an OpenAI-shaped error body, else the body itself. */
    static String errorMessage(String body) {
        try {
            JsonNode m = JSON.readTree(body).path("error").path("message");
            return m.isTextual() ? m.asText() : body;
        } catch (IOException e) {
            return body;
        }
    }

    /**
     * The text of --shared-prefix-tokens: a children's story in the style of TinyStories (the model's training set, so the
     * 512-token vocabulary has its words and the model writes on from it), repeated as often as the count needs.
     */
    static final String SHARED_STORY = "Once upon a time, in a small town near a big green forest, there lived a kind old woman named "
            + "Sue. She had a little garden with red flowers and a tall apple tree. Every morning she gave water to the flowers and "
            + "sang a happy song. One day, a little boy named Tim came to her gate. He was sad because he had lost his blue ball. "
            + "Sue smiled and said, \"Do not be sad, Tim. We can look for it together.\" They looked under the tree and behind the "
            + "flowers. They looked near the pond where the ducks swim. Then Tim saw something blue in the grass. It was his ball! "
            + "He was so happy that he jumped up and down. \"Thank you, Sue!\" he said. Sue gave him a big red apple from her tree. "
            + "Tim ate the apple and it was very sweet. After that, Tim came to the garden every day. He helped Sue water the "
            + "flowers and pick the apples. They became best friends. One sunny day, a little bird fell from its nest. It could not "
            + "fly yet, and it was scared. Tim and Sue found the bird near the fence. Tim wanted to help. He put the bird in a soft "
            + "box with some leaves. Sue gave it some water and a little bread. The next day, the bird was strong again. Its mom "
            + "came to the tree and sang to it. The little bird flapped its wings and flew up to the nest. Tim clapped his hands "
            + "and laughed. Sue said, \"When we are kind, good things happen.\" Tim learned that helping others makes everyone "
            + "happy. From that day on, the bird sang for them every morning, and the garden was full of joy. ";

    /**
     * The shared prefix of about {@code tokens} tokens (BOS included): the most whole words of {@link #SHARED_STORY}, repeated,
     * whose encoding stays within the count (a binary search over the word count; encodings grow with the words).
     */
    static String sharedPrefix(ModelFiles.Loaded model, int tokens) {
        String[] words = SHARED_STORY.strip().split(" ");
        int lo = 1, hi = Math.max(1, tokens); // every word is at least one token, BOS one more
        while (lo < hi) {
            int mid = (lo + hi + 1) >>> 1;
            if (model.tokenizer().encode(words(words, mid), true, false).length <= tokens) lo = mid;
            else hi = mid - 1;
        }
        return words(words, lo);
    }

    private static String words(String[] words, int n) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < n; i++) b.append(i == 0 ? "" : " ").append(words[i % words.length]);
        return b.toString();
    }

    /** --load's prompts: the five openings with a number each, after the shared prefix if one is asked for. */
    private List<String> loadPrompts(ModelFiles.Loaded model, String sharedPrefix) {
        String prefix = sharedPrefix != null ? sharedPrefix + " " : "";
        int seqLen = model.weights().config.seqLen();
        List<String> ps = new ArrayList<>();
        for (int i = 0; i < load; i++) {
            String p = prefix + PROMPTS.get(i % PROMPTS.size()) + " " + (i / PROMPTS.size());
            int n = model.tokenizer().encode(p, true, false).length;
            if (n >= seqLen) {
                throw new IllegalArgumentException("--shared-prefix-tokens " + sharedPrefixTokens + ": load request " + i + "'s prompt has "
                        + n + " tokens; the model's context is " + seqLen + " and must leave room for one output token");
            }
            ps.add(p);
        }
        return ps;
    }

    /**
     * N concurrent requests through the router vs the same N one by one on a colocated engine; each answer's tokens are checked
     * against the colocated run's. With a shared prefix, the prefix alone goes first (not counted): its pages are then in
     * the prefill's prefix cache (and the decode's), as a system prompt's are in a server that has run a while.
     */
    private ObjectNode load(PrintStream out, ModelFiles.Loaded model, String routerUrl, HttpClient http, String prefix, List<String> ps)
            throws Exception {
        int prefixTokens = prefix == null ? 0 : model.tokenizer().encode(prefix, true, false).length;
        if (prefix != null && !sharedPrefixCold) {
            ObjectNode body = JSON.createObjectNode().put("prompt", prefix).put("max_tokens", 1).put("temperature", 0);
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(routerUrl + "/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString(body.toString())).build(), HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() != 200) {
                throw new IllegalArgumentException("the engines refused the shared prefix alone (HTTP " + r.statusCode() + "): "
                        + errorMessage(r.body()));
            }
            out.printf("[demo] load: a shared prefix of %d tokens (%d characters), sent alone first%n", prefixTokens, prefix.length());
        } else if (prefix != null) {
            out.printf("[demo] load: a shared prefix of %d tokens (%d characters), not sent first: no cache holds it%n", prefixTokens,
                    prefix.length());
        }
        ExecutorService exec = Executors.newVirtualThreadPerTaskExecutor();
        List<Future<JsonNode>> fs = new ArrayList<>();
        long t0 = System.nanoTime();
        for (String p : ps) {
            ObjectNode body = JSON.createObjectNode().put("prompt", p).put("max_tokens", maxTokens).put("temperature", 0);
            fs.add(exec.submit(() -> {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(routerUrl + "/v1/completions"))
                        .POST(HttpRequest.BodyPublishers.ofString(body.toString())).build(), HttpResponse.BodyHandlers.ofString());
                return r.statusCode() == 200 ? JSON.readTree(r.body()) : null;
            }));
        }
        long tokens = 0, promptTokens = 0, cachedTokens = 0, bytes = 0;
        int ok = 0;
        List<Double> ttft = new ArrayList<>();
        List<int[]> answers = new ArrayList<>();
        for (var f : fs) {
            JsonNode j = f.get(600, TimeUnit.SECONDS);
            if (j == null) {
                answers.add(null);
                continue;
            }
            ok++;
            JsonNode k = j.path("kvferry"), ids = k.path("token_ids");
            int[] a = new int[ids.size()];
            for (int i = 0; i < a.length; i++) a[i] = ids.get(i).intValue();
            answers.add(a);
            tokens += a.length;
            ttft.add(k.path("ttft_ms").asDouble());
            bytes += k.path("bytes").asLong();
            promptTokens += j.path("usage").path("prompt_tokens").asLong();
            cachedTokens += j.path("usage").path("prompt_tokens_details").path("cached_tokens").asLong();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        exec.shutdown();
        long c0 = System.nanoTime(), ctokens = 0;
        int matched = 0;
        try (ColocatedEngine colocated = colocated(model)) {
            for (int i = 0; i < ps.size(); i++) {
                int[] ref = colocated.generate(model.tokenizer().encode(ps.get(i), true, false), maxTokens, Sampling.GREEDY).tokens();
                ctokens += ref.length;
                if (answers.get(i) != null && Arrays.equals(answers.get(i), ref)) matched++;
            }
        }
        double csecs = (System.nanoTime() - c0) / 1e9;
        ObjectNode o = JSON.createObjectNode();
        o.put("requests", load);
        o.put("succeeded", ok);
        o.put("matches_colocated", matched);
        o.put("tokens_per_s", tokens / secs);
        o.put("colocated_one_by_one_tokens_per_s", ctokens / csecs);
        o.set("ttft_ms", percentiles(ttft));
        o.put("prompt_tokens", promptTokens);
        o.put("cached_tokens", cachedTokens);
        o.put("kv_bytes", bytes);
        o.put("shared_prefix_tokens", prefixTokens);
        o.put("shared_prefix_cold", sharedPrefixCold);
        out.printf("[demo] load: %d/%d concurrent requests succeeded, %d/%d match the colocated run, %.0f tokens/s through the router "
                        + "(TTFT p50 %.1f ms, p99 %.1f ms); %d of %d prompt tokens from the prefill's cache, %d B of KV moved; the same "
                        + "requests one by one on a colocated engine: %.0f tokens/s%n", ok, load, matched, ok, tokens / secs,
                o.path("ttft_ms").path("p50").asDouble(), o.path("ttft_ms").path("p99").asDouble(), cachedTokens, promptTokens, bytes,
                ctokens / csecs);
        return o;
    }

    /** The baseline: one engine doing prefill and decode itself, TP1 (the engine's floats are the same for every TP and PP). */
    private ColocatedEngine colocated(ModelFiles.Loaded model) {
        return new ColocatedEngine(new EngineSpec(Model.of(model.weights(), engine.variant), 1, 1, engine.pageSize,
                Math.max(8, (model.weights().config.seqLen() + engine.pageSize - 1) / engine.pageSize), 1, engine.chunkTokens));
    }

    private static ObjectNode percentiles(List<Double> v) {
        ObjectNode o = JSON.createObjectNode();
        List<Double> s = new ArrayList<>(v);
        s.sort(null);
        o.put("p50", s.isEmpty() ? 0 : s.get((int) Math.floor(0.5 * (s.size() - 1))));
        o.put("p99", s.isEmpty() ? 0 : s.get((int) Math.ceil(0.99 * (s.size() - 1))));
        return o;
    }

    private Process spawn(String role, int tp, int pp, String token) throws IOException {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx512m", "-XX:+ExitOnOutOfMemoryError"));
        String level = System.getProperty("org.slf4j.simpleLogger.defaultLogLevel");
        if (level != null) cmd.add("-Dorg.slf4j.simpleLogger.defaultLogLevel=" + level);
        String models = System.getProperty("kvferry.models");
        if (models != null) cmd.add("-Dkvferry.models=" + models);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main", "serve", "--role", role, "--port", "0"));
        if (role.equals("prefill")) { // its registry (a decode has none), and its prefix cache
            cmd.addAll(List.of("--bootstrap-port", "0", "--prefill-cache", engine.prefillCache));
        }
        // Every process is on this host: a prefill bound to every address is reached over loopback.
        if (role.equals("prefill") && Roles.isWildcard(engine.host)) cmd.addAll(List.of("--advertise-host", Roles.loopback(engine.host)));
        cmd.addAll(List.of("--tp", Integer.toString(tp), "--pp", Integer.toString(pp),
                "--transport", engine.transport, "--host", engine.host, "--page-size", Integer.toString(engine.pageSize),
                "--pages", Integer.toString(engine.pages), "--max-requests", Integer.toString(engine.maxRequests),
                "--chunk-tokens", Integer.toString(engine.chunkTokens), "--model-variant", engine.variant.label()));
        if (engine.modelFile != null) cmd.addAll(List.of("--model-file", engine.modelFile.toAbsolutePath().toString()));
        if (engine.tokenizer != null) cmd.addAll(List.of("--tokenizer", engine.tokenizer.toAbsolutePath().toString()));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("KVFERRY_AUTH_TOKEN", token); // not in argv: process listings would show it
        return pb.start();
    }

    /** Reads a role's stdout until its "listening on http://…" line; its remaining output is drained in the background. */
    static String awaitUrl(Process p, String role) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            int i = line.indexOf("listening on http://");
            if (i >= 0) {
                Thread.ofVirtual().start(() -> {
                    try {
                        while (in.readLine() != null) {
                            // drain
                        }
                    } catch (IOException ignored) {
                        // the role ended
                    }
                });
                return line.substring(i + "listening on ".length()).trim();
            }
        }
        throw new IOException(role + " process (pid " + p.pid() + ") exited before it started listening (status "
                + (p.isAlive() ? "alive" : Integer.toString(p.exitValue())) + ")");
    }
}
