import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;

import java.util.Arrays;

/**
 * The cost of a DFA's mask step (regex, JSON schema) as the output grows: the request's state kept between steps
 * ({@link OutputConstraint.Progress}, extended by the last token's text) against the state replayed from the start at
 * each step (no Progress: the way before it was kept). An output of one word token repeated (stories260K's vocabulary),
 * masked step by step to some 2,100 characters; the 8 steps around 100 and 2,000 characters timed (a pass's 8 masks
 * timed as one, the median of 200 passes after 20 to warm up, per step) and their automaton steps counted (deterministic). Not a test. Run from the
 * repository root after `mvn -q -B -o package -DskipTests`:
 *
 * <pre>
 * java -cp 'kvferry-cli/target/classes:kvferry-cli/target/lib/*' scripts/DfaMaskCost.java
 * </pre>
 */
public class DfaMaskCost {
    static final int PASSES = 200, WARMUP = 20, WINDOW = 8;

    public static void main(String[] args) throws Exception {
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        int vocab = tok.vocabSize();
        int word = -1, open = -1;
        for (int t = Tokenizer.EOS + 1; t < vocab; t++) {
            String s = tok.tokenText(t);
            if (s.matches("[a-z]+") && (word < 0 || s.length() > tok.tokenText(word).length())) word = t;
        }
        String lead0 = "{\"story\": \"";
        int[] prefix = new int[lead0.length()]; // a token a character (its text the one byte, not after BOS)
        for (int i = 0; i < prefix.length; i++) {
            for (int t = Tokenizer.EOS + 1; t < vocab && prefix[i] == 0; t++) {
                byte[] b = tok.pieceBytes(-1, t);
                if (b.length == 1 && b[0] == lead0.charAt(i)) prefix[i] = t;
            }
        }
        String[] names = {"regex [a-z ]*", "json_schema {story: string}"};
        OutputConstraint[] cs = {compiler.regex("[a-z ]*"),
                compiler.jsonSchema("{\"type\":\"object\",\"properties\":{\"story\":{\"type\":\"string\"}},\"required\":[\"story\"]}")};
        int[] prompt = tok.encode("x", true, false);
        int wordLength = tok.tokenText(word).length();
        int n = 2_100 / wordLength + prefix.length;
        for (int k = 0; k < cs.length; k++) {
            int[] lead = k == 0 ? new int[0] : prefix;
            int[] seq = Arrays.copyOf(prompt, prompt.length + n);
            System.arraycopy(lead, 0, seq, prompt.length, lead.length);
            Arrays.fill(seq, prompt.length + lead.length, seq.length, word);
            String text = tok.decode(Arrays.copyOfRange(seq, prompt.length, seq.length));
            if (!cs[k].startsMatch(text)) throw new IllegalStateException(names[k] + " does not take " + text.substring(0, 40));
            int[] chars = new int[n + 1]; // the output's characters before step i
            for (int i = 1; i <= n; i++) chars[i] = tok.decode(Arrays.copyOfRange(seq, prompt.length, prompt.length + i)).length();
            int at100 = 0, at2000 = 0;
            while (chars[at100] < 100) at100++;
            while (chars[at2000] < 2_000) at2000++;
            for (boolean kept : new boolean[]{true, false, true, false}) {
                long[][] blocks = new long[2][PASSES]; // each pass's window of steps, in one timing
                for (int pass = 0; pass < WARMUP + PASSES; pass++) {
                    OutputConstraint.Progress p = kept ? new OutputConstraint.Progress() : null;
                    long t0 = 0;
                    for (int step = 0; step < n; step++) {
                        float[] logits = new float[vocab];
                        if (step == at100 - WINDOW / 2 || step == at2000 - WINDOW / 2) t0 = System.nanoTime();
                        cs[k].mask(logits, seq, prompt.length, step, true, true, new int[0], p);
                        if (pass >= WARMUP && (step == at100 + WINDOW / 2 - 1 || step == at2000 + WINDOW / 2 - 1)) {
                            blocks[step < at2000 - WINDOW ? 0 : 1][pass - WARMUP] = System.nanoTime() - t0;
                        }
                    }
                }
                Arrays.sort(blocks[0]);
                Arrays.sort(blocks[1]);
                System.out.printf("%-28s %-9s mask per step at ~%d characters: %6.1f µs, at ~%d characters: %6.1f µs (medians)%n", names[k],
                        kept ? "kept" : "replayed", chars[at100], blocks[0][PASSES / 2] / 1e3 / WINDOW, chars[at2000],
                        blocks[1][PASSES / 2] / 1e3 / WINDOW);
            }
            // Automaton steps a mask (deterministic): the kept state's step, against a replay's (a state rebuilt, and the step).
            for (int at : new int[]{at100, at2000}) {
                OutputConstraint.Progress p = new OutputConstraint.Progress();
                for (int step = 0; step <= at; step++) cs[k].mask(new float[vocab], seq, prompt.length, step, true, true, new int[0], p);
                OutputConstraint.Progress fresh = new OutputConstraint.Progress();
                cs[k].mask(new float[vocab], seq, prompt.length, at, true, true, new int[0], fresh);
                System.out.printf("%-28s automaton steps of the mask at %d characters: kept %,d (the vocabulary check %,d), replayed %,d%n",
                        names[k], chars[at], p.lastStepWork(), p.lastStepWork() - (chars[at] - chars[at - 1]),
                        fresh.lastRebuildWork() + fresh.lastStepWork());
            }
        }
    }
}
