import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * The cost of a grammar's mask (Earley, the request's chart kept between steps: {@link OutputConstraint.Progress}) against a DFA's, on the real model
 * (stories260K): a 128-token JSON answer sampled colocated under a JSON grammar and under json_object's DFA
 * (tokens/s of the whole generation, model included), then the mask alone, both constraints masking the same
 * answer's 128 steps (the grammar's chart kept between the steps, as a request keeps it, and replayed from the start
 * at each step, as before it was kept). Then ({@link #vocabularies}; alone with the argument {@code vocab}) the mask at
 * large vocabularies, stories260K's 512 token texts and generated ones to 32,000 and 128,000: the walk of the whole
 * trie, the precomputed mask (GrammarMaskCache) without its shared-suffix groups (session 14's) and with them, interleaved,
 * the three masks held equal at each step. Not a test. Run from the repository root after
 * `mvn -q -B -o package -DskipTests`:
 *
 * <pre>
 * java -cp 'kvferry-cli/target/classes:kvferry-cli/target/lib/*' scripts/GrammarMaskCost.java [vocab]
 * </pre>
 */
public class GrammarMaskCost {
    static final String JSON_GRAMMAR = """
            root ::= object
            value ::= object | array | string | number | "true" | "false" | "null"
            object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
            array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
            string ::= "\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""
            number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
            ws ::= [ \\t\\n]*
            """;
    static final int TOKENS = 128, ROUNDS = 5;

    public static void main(String[] args) throws Exception {
        if (args.length == 0 || !args[0].equals("vocab")) model();
        vocabularies();
    }

    static void model() throws Exception {
        ModelFiles.Loaded m = ModelFiles.load(null, null);
        Tokenizer tok = m.tokenizer();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        OutputConstraint dfa = compiler.jsonSchema("{\"type\":\"object\"}"), grammar = compiler.ebnf(JSON_GRAMMAR);
        int[] prompt = tok.encode("Once upon a time", true, false);
        try (ColocatedEngine engine = new ColocatedEngine(new EngineSpec(m.weights(), 1, 1, 16, 256, 1, 32))) {
            Generation[] last = new Generation[3];
            OutputConstraint[] cs = {null, dfa, grammar};
            String[] names = {"none", "json_object (DFA)", "JSON grammar (Earley)"};
            for (int round = 0; round <= ROUNDS; round++) { // round 0 warms up
                for (int k = 0; k < cs.length; k++) {
                    SamplingRules r = SamplingRules.of(0, 0, 1, 0, Map.of(), TOKENS, true, new int[0]).withConstraint(cs[k]);
                    long t0 = System.nanoTime();
                    Generation g = engine.generate(prompt, TOKENS, new Sampling(0.9f, 0.95f, 7, -1, r));
                    double s = (System.nanoTime() - t0) / 1e9;
                    last[k] = g;
                    if (round > 0) System.out.printf("round %d %-22s %3d tokens %8.1f tokens/s%n", round, names[k], g.tokens().length, g.tokens().length / s);
                }
            }
            String text = tok.decode(last[1].tokens());
            System.out.println("DFA answer (" + last[1].tokens().length + " tokens): " + text.substring(0, Math.min(120, text.length())));
            // The mask alone, both constraints on the DFA's answer (a JSON object, in the grammar's language too).
            int[] out = last[1].tokens();
            int[] seq = Arrays.copyOf(prompt, prompt.length + out.length);
            System.arraycopy(out, 0, seq, prompt.length, out.length);
            if (!grammar.startsMatch(text)) throw new IllegalStateException("the grammar does not take the DFA's answer");
            // dfa, the grammar with its chart kept (as requests do), the grammar replayed from the start at each step (as
            // before the chart was kept: no Progress), interleaved twice.
            OutputConstraint[] order = {dfa, grammar, grammar, dfa, grammar, grammar};
            boolean[] kept = {true, true, false, true, true, false};
            for (int k = 0; k < order.length; k++) {
                OutputConstraint c = order[k];
                long t0 = System.nanoTime();
                int reps = 20;
                for (int rep = 0; rep < reps; rep++) {
                    OutputConstraint.Progress progress = kept[k] ? new OutputConstraint.Progress() : null; // one answer's, as a request keeps it
                    for (int step = 0; step < out.length; step++) {
                        c.mask(new float[tok.vocabSize()], seq, prompt.length, step, true, true, new int[0], progress);
                    }
                }
                double perMask = (System.nanoTime() - t0) / 1e3 / reps / out.length;
                System.out.printf("mask alone, %-5s%s: %8.1f µs per step (mean over the answer's %d steps)%n", c.kind().param,
                        c == dfa ? "" : kept[k] ? " (chart kept)" : " (replayed)", perMask, out.length);
            }
            // The recognizer's steps (what the bound counts; deterministic, whatever the machine's load): a step's with the
            // chart kept, against the replay's (the rebuild and the step: what the bound counted before the chart was kept).
            OutputConstraint.Progress progress = new OutputConstraint.Progress();
            long keptSum = 0, keptMax = 0, replaySum = 0, replayMax = 0;
            for (int step = 0; step < out.length; step++) {
                grammar.mask(new float[tok.vocabSize()], seq, prompt.length, step, true, true, new int[0], progress);
                OutputConstraint.Progress fresh = new OutputConstraint.Progress();
                grammar.mask(new float[tok.vocabSize()], seq, prompt.length, step, true, true, new int[0], fresh);
                keptSum += progress.lastStepWork();
                keptMax = Math.max(keptMax, progress.lastStepWork());
                long replay = fresh.lastRebuildWork() + fresh.lastStepWork();
                replaySum += replay;
                replayMax = Math.max(replayMax, replay);
            }
            System.out.printf("recognizer steps a step, chart kept: mean %,d, max %,d, the answer %,d; replayed: mean %,d, max %,d (the last), the answer %,d (%d characters)%n",
                    keptSum / out.length, keptMax, keptSum, replaySum / out.length, replayMax, replaySum, text.length());
        }
    }

    /** GrammarOutputsTest's first grammar: a sentence, a left-recursive list with nested parentheses, words [a-z]+. */
    static final String SENTENCE_GRAMMAR = """
            root ::= name " " verb " " things "."
            name ::= "Lily" | "Tom" | "Sue"
            verb ::= "saw" | "had" | "liked"
            things ::= things " and " thing | thing
            thing ::= ("a " | "the ") [a-z]+ | "(" things ")"
            """;
    static final String JSON_ANSWER = "{\"title\": \"The Little Red Hen\", \"year\": 1942, \"pages\": 24, \"tags\": [\"farm\", \"bread\","
            + " \"friends\"], \"summary\": \"Once upon a time, a little red hen found some wheat. She asked her friends for help,"
            + " but nobody came.\", \"rating\": 4.5, \"available\": true, \"author\": null}";
    static final String SENTENCE_ANSWER = "Tom liked the garden and the flowers and (a bird and the sky and (a tree and the river)) and the house"
            + " and a ball and the moon and a star.";
    static final int VOCAB_ROUNDS = 3;

    /**
     * The mask at 512, 32,000 and 128,000 token texts, for the JSON grammar and the sentence grammar: each answer's tokens
     * (the longest token text that goes on with the answer, step by step) masked with the chart kept, by the walk of the
     * whole trie (maskFullWalk, the reference), by the precomputed mask without its shared-suffix groups (maskUngrouped:
     * session 14's) and with them (mask), interleaved in rounds; µs per mask, the recognizer's steps per mask (the
     * chart's extension by the last token, then the walk or the check of the context-dependent tokens), the tokens and
     * groups checked against the chart, and the compilation (the precomputation in it).
     */
    static void vocabularies() throws Exception {
        Path dir = ModelFiles.findModelDir().orElseThrow(() -> new IllegalStateException("no stories260K (KVFERRY_MODELS)"));
        List<byte[]> base = pieces(Files.readAllBytes(dir.resolve(ModelFiles.TOKENIZER)), 512);
        for (int size : new int[]{512, 32_000, 128_000}) {
            List<byte[]> pieces = new ArrayList<>(base);
            generate(pieces, size);
            Path file = Files.createTempFile("vocab" + size, ".bin");
            Files.write(file, tokenizerFile(pieces));
            Tokenizer tok = Tokenizer.load(file, size);
            Files.delete(file);
            OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
            String[][] cases = {{"JSON", JSON_GRAMMAR, JSON_ANSWER}, {"sentence", SENTENCE_GRAMMAR, SENTENCE_ANSWER}};
            for (String[] k : cases) {
                long t0 = System.nanoTime();
                OutputConstraint c = compiler.ebnf(k[1]);
                double compileMs = (System.nanoTime() - t0) / 1e6;
                if (!c.maskCached()) throw new IllegalStateException(k[0] + " at " + size + ": no precomputed mask");
                int[] prompt = tok.encode("Once upon a time", true, false);
                int[] out = greedy(tok, k[2]);
                int[] seq = Arrays.copyOf(prompt, prompt.length + out.length);
                System.arraycopy(out, 0, seq, prompt.length, out.length);
                // Three ways, interleaved in each round: the full walk (mode 0), the precomputed mask without the
                // shared-suffix groups (1: session 14's, maskUngrouped), with them (2: mask); the same tokens (held equal here).
                double[] micros = new double[3];
                long[] steps = new long[3], checked = new long[3];
                int reps = Math.max(1, 64_000 / size);
                float[][] reference = new float[out.length][];
                for (int round = 0; round <= VOCAB_ROUNDS; round++) { // round 0 warms up
                    for (int mode = 0; mode < 3; mode++) {
                        long work = 0, seen = 0, started = System.nanoTime();
                        for (int rep = 0; rep < reps; rep++) {
                            OutputConstraint.Progress progress = new OutputConstraint.Progress();
                            for (int step = 0; step < out.length; step++) {
                                float[] logits = new float[size];
                                if (mode == 0) c.maskFullWalk(logits, seq, prompt.length, step, true, true, new int[0], progress, Long.MAX_VALUE / 4);
                                else if (mode == 1) c.maskUngrouped(logits, seq, prompt.length, step, true, true, new int[0], progress);
                                else c.mask(logits, seq, prompt.length, step, true, true, new int[0], progress);
                                if (logits[out[step]] == Float.NEGATIVE_INFINITY) throw new IllegalStateException(k[0] + ": token " + step + " masked");
                                if (round == 0 && rep == 0) {
                                    if (mode == 0) reference[step] = logits;
                                    else if (!Arrays.equals(reference[step], logits)) throw new IllegalStateException(k[0] + ": mode " + mode + " step " + step + " differs");
                                }
                                work += progress.lastStepWork();
                                if (mode > 0) seen += progress.lastCheckedTokens();
                            }
                        }
                        long nanos = System.nanoTime() - started;
                        if (round > 0) {
                            micros[mode] += nanos / 1e3 / reps / out.length;
                            steps[mode] += work / reps / out.length;
                            checked[mode] += seen / reps;
                        }
                    }
                }
                long[] cost = c.maskCacheCost();
                System.out.printf("%,7d tokens  %-8s %3d masks  full walk %9.1f µs %,10d steps | ungrouped %7.1f µs %,7d steps %7.2f checked"
                                + " | grouped %7.1f µs %,7d steps %7.2f checked | compile %,7.1f ms, %,11d steps, %,7d ints%n", size, k[0], out.length,
                        micros[0] / VOCAB_ROUNDS, steps[0] / VOCAB_ROUNDS, micros[1] / VOCAB_ROUNDS, steps[1] / VOCAB_ROUNDS,
                        (double) checked[1] / VOCAB_ROUNDS / out.length, micros[2] / VOCAB_ROUNDS, steps[2] / VOCAB_ROUNDS,
                        (double) checked[2] / VOCAB_ROUNDS / out.length, compileMs, cost[0], cost[1]);
            }
        }
    }

    /** A llama2.c tokenizer file's first {@code n} pieces (max_token_length, then score, length, bytes each). */
    static List<byte[]> pieces(byte[] file, int n) {
        ByteBuffer in = ByteBuffer.wrap(file).order(ByteOrder.LITTLE_ENDIAN);
        in.getInt();
        List<byte[]> out = new ArrayList<>();
        for (int t = 0; t < n; t++) {
            in.getFloat();
            byte[] b = new byte[in.getInt()];
            in.get(b);
            out.add(b);
        }
        return out;
    }

    /** The pieces as a llama2.c tokenizer file: the first 512 with scores by their rank (their merges), the generated never merged. */
    static byte[] tokenizerFile(List<byte[]> pieces) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteBuffer head = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN);
        out.writeBytes(head.putInt(64).array());
        for (int t = 0; t < pieces.size(); t++) {
            ByteBuffer b = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            b.putFloat(t < 512 ? -t : -1e10f).putInt(pieces.get(t).length);
            out.writeBytes(b.array());
            out.writeBytes(pieces.get(t));
        }
        return out.toByteArray();
    }

    static final String[] ONSETS = {"", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
            "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "sp", "st", "str", "th", "tr", "wh"};
    static final String[] VOWELS = {"a", "e", "i", "o", "u", "ea", "ee", "oo", "ou", "ai", "y", "ie"};
    static final String[] CODAS = {"", "", "n", "r", "s", "t", "l", "d", "ng", "ck", "st", "nd", "m", "ght", "sh", "x"};
    static final String[] PUNCTUATION = {".", ",", "!", "?", ";", ":", "-", "'", "'s", "...", ".\n", ",\n", "!\n", "\n", "\n\n", "  ",
            "   ", "\t", "(", ")", " (", ").", "),", "--", " -", "\"", " \"", "\".", "\",", "\"}", "\"]", "{\"", " {\"", "[\"", " [\"",
            "\":", "\": ", "\": \"", "\":\"", "\", \"", "\",\"", "},", "}, ", "],", "{", "}", "[", "]", " {", " [", "\\n", "\\\"", "\\\\",
            " true", " false", " null", "true", "false", "null", ",\"", ", \"", "}}", "]}", "}]"};

    /**
     * Generated token texts up to {@code size} pieces in all, seeded: English-like words (one to three syllables of onset,
     * vowel, coda) with a leading space (50%), as subwords without one (20%), capitalised with a space (8%), numbers
     * of one to four digits, half with a space (7%), JSON fragments (a word with a quote, a colon or comma after it, or
     * a quote before it: 10%), and punctuation, whitespace and JSON punctuation from a list (5%). Each text once, none
     * of the 512.
     */
    static void generate(List<byte[]> pieces, int size) {
        SplittableRandom r = new SplittableRandom(2411_15100L);
        LinkedHashSet<String> seen = new LinkedHashSet<>();
        for (byte[] p : pieces) seen.add(new String(p, StandardCharsets.UTF_8));
        for (String p : PUNCTUATION) {
            if (pieces.size() < size && seen.add(p)) pieces.add(p.getBytes(StandardCharsets.UTF_8));
        }
        while (pieces.size() < size) {
            String w = word(r);
            int k = r.nextInt(100);
            String text;
            if (k < 50) text = " " + w;
            else if (k < 70) text = w.substring(0, Math.min(w.length(), 2 + r.nextInt(5)));
            else if (k < 78) text = " " + Character.toUpperCase(w.charAt(0)) + w.substring(1);
            else if (k < 85) text = (r.nextBoolean() ? " " : "") + r.nextInt((int) Math.pow(10, 1 + r.nextInt(4)));
            else if (k < 95) text = switch (r.nextInt(5)) {
                case 0 -> "\"" + w;
                case 1 -> w + "\"";
                case 2 -> w + "\",";
                case 3 -> " \"" + w + "\":";
                default -> w + "\":";
            };
            else text = PUNCTUATION[r.nextInt(PUNCTUATION.length)] + PUNCTUATION[r.nextInt(PUNCTUATION.length)];
            if (seen.add(text)) pieces.add(text.getBytes(StandardCharsets.UTF_8));
        }
    }

    static String word(SplittableRandom r) {
        StringBuilder w = new StringBuilder();
        int syllables = 1 + r.nextInt(3);
        for (int i = 0; i < syllables; i++) {
            w.append(ONSETS[r.nextInt(ONSETS.length)]).append(VOWELS[r.nextInt(VOWELS.length)]).append(CODAS[r.nextInt(CODAS.length)]);
        }
        return w.toString();
    }

    /** The answer's tokens: at each point the longest token text (not after BOS) that the answer goes on with. */
    static int[] greedy(Tokenizer tok, String answer) {
        Map<String, Integer> ids = new HashMap<>();
        int longest = 1;
        for (int t = tok.vocabSize() - 1; t > Tokenizer.EOS; t--) { // a text piece before a byte piece (<0x7B>) of the same text
            String text = new String(tok.pieceBytes(-1, t), StandardCharsets.UTF_8);
            if (text.isEmpty() || text.contains("\uFFFD")) continue;
            ids.putIfAbsent(text, t);
            longest = Math.max(longest, text.length());
        }
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < answer.length(); ) {
            int n = Math.min(longest, answer.length() - i);
            while (n > 0 && !ids.containsKey(answer.substring(i, i + n))) n--;
            if (n == 0) throw new IllegalStateException("no token for '" + answer.charAt(i) + "'");
            out.add(ids.get(answer.substring(i, i + n)));
            i += n;
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }
}
