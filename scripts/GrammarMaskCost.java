import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;

import java.util.Arrays;
import java.util.Map;

/**
 * The cost of a grammar's mask (Earley, the request's chart kept between steps: {@link OutputConstraint.Progress}) against a DFA's, on the real model
 * (stories260K): a 128-token JSON answer sampled colocated under a JSON grammar and under json_object's DFA
 * (tokens/s of the whole generation, model included), then the mask alone, both constraints masking the same
 * answer's 128 steps (the grammar's chart kept between the steps, as a request keeps it, and replayed from the start
 * at each step, as before it was kept). Not a test. Run from the repository root after `mvn -q -B -o package -DskipTests`:
 *
 * <pre>
 * java -cp 'kvferry-cli/target/classes:kvferry-cli/target/lib/*' scripts/GrammarMaskCost.java
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
}
