package io.kvferry.engine.serving;

import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.kv.PageAllocator;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.runtime.ShardedModel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Prefill and decode in one engine, no transfer: the reference every disaggregated run is compared
 * with, token for token and bit for bit. Same chunked prefill, same paged attention, same sampling;
 * the KV simply stays in the pool it was written to. One request at a time (callers serialize).
 */
public final class ColocatedEngine implements AutoCloseable {
    private final EngineSpec spec;
    private final KvPool[][] pools;
    private final ShardedModel model;
    private final PageAllocator pages;

    public ColocatedEngine(EngineSpec spec) {
        this.spec = spec;
        this.pools = spec.newPools(false, "colocated");
        this.model = new ShardedModel(spec.model(), spec.tp(), spec.pp(), pools);
        this.pages = new PageAllocator(spec.pages(), spec.maxRequests());
    }

    public Generation generate(int[] prompt, int maxNewTokens, Sampling sampling) {
        return generate(prompt, maxNewTokens, sampling, -1);
    }

    /**
     * @param topLogprobs -1: no log probabilities; 0..{@link TokenLogprobs#MAX_TOP}: each token's, with that many of the
     *                    most likely tokens' ({@link Generation#logprobs()})
     */
    public Generation generate(int[] prompt, int maxNewTokens, Sampling sampling, int topLogprobs) {
        return generate(prompt, maxNewTokens, sampling, topLogprobs, -1);
    }

    /**
     * As {@link #generate(int[], int, Sampling, int)}, with the prompt's input token log probabilities from position
     * {@code logprobStart} on ({@link Generation#inputLogprobs()}; -1: none), each with {@code max(topLogprobs, 0)} top
     * ones. {@code maxNewTokens} 0: the prompt alone (a prefill-only request), no output token.
     */
    public synchronized Generation generate(int[] prompt, int maxNewTokens, Sampling sampling, int topLogprobs, int logprobStart) {
        if (topLogprobs < -1 || topLogprobs > TokenLogprobs.MAX_TOP) {
            throw new IllegalArgumentException("top logprobs must be in [-1, " + TokenLogprobs.MAX_TOP + "], got " + topLogprobs);
        }
        var c = spec.weights().config;
        boolean promptOnly = maxNewTokens == 0;
        Requests.validate(prompt, promptOnly ? 1 : maxNewTokens, c);
        sampling.rules().checkVocab(c.vocabSize());
        PromptLogprobs.check(logprobStart, Math.max(topLogprobs, 0), prompt.length);
        int total = Requests.totalTokens(prompt.length, promptOnly ? 1 : maxNewTokens, c);
        int[] table = pages.allocatePages(spec.pagesFor(total));
        int row = pages.allocateRow();
        try {
            for (KvPool[] s : pools) for (KvPool p : s) p.resetState(row);
            float[] logits = null;
            List<TokenLogprobs> input = logprobStart >= 0 ? new ArrayList<>() : null;
            for (int from = 0; from < prompt.length; from += spec.chunkTokens()) {
                int to = Math.min(prompt.length, from + spec.chunkTokens());
                if (input == null) {
                    logits = model.forward(prompt, from, to, table, row, to == prompt.length);
                } else {
                    float[][] rows = model.forward(prompt, from, to, table, row, PromptLogprobs.logitsFrom(logprobStart, from, to, prompt.length));
                    PromptLogprobs.add(input, rows, prompt, logprobStart, from, to, Math.max(topLogprobs, 0));
                    logits = rows[to - from - 1];
                }
            }
            if (promptOnly) return new Generation(0, new int[0], logits.clone(), "length", Generation.Timings.NONE, null, input);
            float[] first = logits.clone();
            int[] out = new int[total - prompt.length];
            int[] seq = Arrays.copyOf(prompt, total);
            int n = 0;
            String reason = "length";
            List<TokenLogprobs> logprobs = topLogprobs >= 0 ? new ArrayList<>() : null;
            OutputConstraint.Progress progress = new OutputConstraint.Progress(); // this generation's alone
            int tok = sampling.sample(logits, 0, seq, prompt.length, progress);
            while (true) {
                if (logprobs != null) logprobs.add(TokenLogprobs.of(logits, tok, topLogprobs));
                out[n++] = tok;
                seq[prompt.length + n - 1] = tok;
                if (sampling.ends(tok, n - 1)) { // EOS, or BOS (llama2.c's models end a story by starting the next), or the rules' end
                    reason = "stop";
                    break;
                }
                if (n == out.length) break;
                int pos = prompt.length + n - 1;
                logits = model.forward(seq, pos, pos + 1, table, row, true);
                tok = sampling.sample(logits, n, seq, prompt.length, progress);
            }
            return new Generation(0, Arrays.copyOf(out, n), first, reason, Generation.Timings.NONE, logprobs, input);
        } finally {
            pages.freePages(table);
            pages.freeRow(row);
        }
    }

    @Override
    public void close() {
        for (KvPool[] s : pools) for (KvPool p : s) p.close();
    }
}
