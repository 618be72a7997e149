package io.kvferry.engine.runtime;

import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.ModelWeights;

import java.util.Arrays;

/**
 * The Llama forward pass over an engine's shards: {@code pp} pipeline stages of {@code tp} tensor-
 * parallel ranks, each with its own {@link KvPool}. Rank r of a stage holds KV heads
 * [r·H/tp, (r+1)·H/tp) (and their query heads, and the matching MLP blocks) and attends over its own
 * pool's pages in place. The row-parallel sums (attention output, MLP down projection) are made of
 * fixed reduction groups, one per KV head, added in one global order by the in-process all-reduce:
 * the floats are the same for every TP and PP size, so a TP4 prefill feeding a TP2 decode produces
 * exactly the tokens of a TP1 colocated run. Arithmetic follows llama2.c's run.c (float32, the same
 * operation order per token), and a chunk of tokens is computed token by token within each layer, so
 * chunking never changes a value either.
 *
 * <p>Not thread-safe: one engine scheduler thread drives it (the scratch arrays are its own).
 */
public final class ShardedModel {
    private final ModelWeights w;
    private final LlamaConfig c;
    public final int tp, pp;
    private final KvPool[][] pools; // [stage][rank]
    private final float[] ropeCos, ropeSin; // [pos][headSize/2]
    private final int hs, groups, kvPerRank, block;
    // scratch (owner thread)
    private final float[] xb, q, kvec, vvec, att, headOut, partial, hb, hb2;

    public ShardedModel(ModelWeights weights, int tp, int pp, KvPool[][] pools) {
        this.w = weights;
        this.c = weights.config;
        c.requireTp(tp);
        c.requirePp(pp);
        if (pools.length != pp) throw new IllegalArgumentException("pools for " + pools.length + " stages, pp is " + pp);
        for (KvPool[] s : pools) if (s.length != tp) throw new IllegalArgumentException("pools for " + s.length + " ranks, tp is " + tp);
        this.tp = tp;
        this.pp = pp;
        this.pools = pools;
        hs = c.headSize();
        groups = c.reductionGroups();
        kvPerRank = c.kvHeads() / tp;
        block = c.hiddenDim() / groups;
        int half = hs / 2;
        ropeCos = new float[c.seqLen() * half];
        ropeSin = new float[c.seqLen() * half];
        for (int pos = 0; pos < c.seqLen(); pos++) {
            for (int i = 0; i < half; i++) {
                // run.c: head_dim = i % head_size (even i), freq = 1 / 10000^(head_dim / head_size), val = pos * freq
                float freq = 1.0f / (float) Math.pow(10000.0f, (2 * i) / (float) hs);
                float val = pos * freq;
                ropeCos[pos * half + i] = (float) Math.cos(val);
                ropeSin[pos * half + i] = (float) Math.sin(val);
            }
        }
        xb = new float[c.dim()];
        q = new float[hs];
        kvec = new float[hs];
        vvec = new float[hs];
        att = new float[c.seqLen()];
        headOut = new float[c.dim()];
        partial = new float[groups * c.dim()];
        hb = new float[c.hiddenDim()];
        hb2 = new float[c.hiddenDim()];
    }

    public LlamaConfig config() {
        return c;
    }

    public KvPool pool(int stage, int rank) {
        return pools[stage][rank];
    }

    /**
     * Runs tokens[from, to) at positions from..to-1 through every layer, writing their K and V into
     * the pages of {@code pageTable} (page of position p = pageTable[p / pageSize]); attention reads
     * positions 0..p from the same pages, so earlier chunks (or KV that kvferry landed) must be there.
     *
     * @return the logits after the last token, or null when {@code wantLogits} is false
     */
    public float[] forward(int[] tokens, int from, int to, int[] pageTable, boolean wantLogits) {
        if (from < 0 || to > tokens.length || from >= to) throw new IllegalArgumentException("bad token range [" + from + ", " + to + ")");
        if (to > c.seqLen()) throw new IllegalArgumentException("position " + (to - 1) + " is past the model's seq_len " + c.seqLen());
        int n = to - from, dim = c.dim();
        float[][] x = new float[n][dim];
        for (int t = 0; t < n; t++) {
            int tok = tokens[from + t];
            if (tok < 0 || tok >= c.vocabSize()) throw new IllegalArgumentException("token " + tok + " is outside the vocabulary (" + c.vocabSize() + ")");
            System.arraycopy(w.tokenEmbedding, tok * dim, x[t], 0, dim);
        }
        for (int stage = 0; stage < pp; stage++) {
            int first = c.stageStart(pp, stage), end = c.stageStart(pp, stage + 1);
            for (int l = first; l < end; l++) {
                for (int t = 0; t < n; t++) layer(stage, l, l - first, x[t], from + t, pageTable);
            }
        }
        if (!wantLogits) return null;
        float[] last = x[n - 1];
        rmsnorm(xb, last, w.rmsFinal);
        float[] logits = new float[c.vocabSize()];
        matmul(logits, 0, xb, w.wcls, 0, c.vocabSize(), dim);
        return logits;
    }

    private void layer(int stage, int l, int local, float[] x, int pos, int[] pageTable) {
        int dim = c.dim(), ps = pools[stage][0].pageSize, page = pageTable[pos / ps], slot = pos % ps;
        rmsnorm(xb, x, w.rmsAtt[l]);
        float scale = (float) Math.sqrt(hs);
        for (int r = 0; r < tp; r++) {
            KvPool pool = pools[stage][r];
            for (int kh = 0; kh < kvPerRank; kh++) {
                int g = r * kvPerRank + kh;
                matmul(kvec, 0, xb, w.wk[l], g * hs, hs, dim);
                matmul(vvec, 0, xb, w.wv[l], g * hs, hs, dim);
                rope(kvec, pos);
                pool.writeKv(local, page, slot, kh, kvec, 0, vvec, 0);
                for (int j = 0; j < c.kvMul(); j++) {
                    int h = g * c.kvMul() + j;
                    matmul(q, 0, xb, w.wq[l], h * hs, hs, dim);
                    rope(q, pos);
                    float max = Float.NEGATIVE_INFINITY;
                    for (int t = 0; t <= pos; t++) {
                        float s = pool.dotK(local, pageTable[t / ps], t % ps, kh, q, 0) / scale;
                        att[t] = s;
                        if (s > max) max = s;
                    }
                    float sum = 0;
                    for (int t = 0; t <= pos; t++) {
                        att[t] = (float) Math.exp(att[t] - max);
                        sum += att[t];
                    }
                    for (int t = 0; t <= pos; t++) att[t] /= sum;
                    Arrays.fill(headOut, h * hs, (h + 1) * hs, 0f);
                    for (int t = 0; t <= pos; t++) pool.addV(local, pageTable[t / ps], t % ps, kh, att[t], headOut, h * hs);
                }
                // This group's share of wo @ headOut: columns of its query heads.
                int col0 = g * c.kvMul() * hs, cols = c.kvMul() * hs;
                float[] wo = w.wo[l];
                for (int i = 0; i < dim; i++) {
                    float s = 0;
                    int row = i * dim + col0;
                    for (int j = 0; j < cols; j++) s += wo[row + j] * headOut[col0 + j];
                    partial[g * dim + i] = s;
                }
            }
        }
        allReduceInto(x);
        rmsnorm(xb, x, w.rmsFfn[l]);
        int hidden = c.hiddenDim();
        for (int r = 0; r < tp; r++) {
            for (int b = r * kvPerRank; b < (r + 1) * kvPerRank; b++) {
                int j0 = b * block;
                matmul(hb, j0, xb, w.w1[l], j0, block, dim);
                matmul(hb2, j0, xb, w.w3[l], j0, block, dim);
                for (int j = j0; j < j0 + block; j++) {
                    float v = hb[j];
                    v *= 1.0f / (1.0f + (float) Math.exp(-v)); // SiLU
                    hb[j] = v * hb2[j];
                }
                float[] w2 = w.w2[l];
                for (int i = 0; i < dim; i++) {
                    float s = 0;
                    int row = i * hidden + j0;
                    for (int j = 0; j < block; j++) s += w2[row + j] * hb[j0 + j];
                    partial[b * dim + i] = s;
                }
            }
        }
        allReduceInto(x);
    }

    /** The all-reduce: x += the groups' partial sums, added in global group order whatever the TP split. */
    private void allReduceInto(float[] x) {
        int dim = c.dim();
        for (int i = 0; i < dim; i++) {
            float s = partial[i];
            for (int g = 1; g < groups; g++) s += partial[g * dim + i];
            x[i] += s;
        }
    }

    private void rope(float[] v, int pos) {
        int half = hs / 2;
        for (int i = 0; i < half; i++) {
            float fcr = ropeCos[pos * half + i], fci = ropeSin[pos * half + i];
            float v0 = v[2 * i], v1 = v[2 * i + 1];
            v[2 * i] = v0 * fcr - v1 * fci;
            v[2 * i + 1] = v0 * fci + v1 * fcr;
        }
    }

    /** out[outOff + i] = W[rowOff + i, :] · x for i in [0, rows) (W row-major with {@code n} columns). */
    static void matmul(float[] out, int outOff, float[] x, float[] wm, int rowOff, int rows, int n) {
        for (int i = 0; i < rows; i++) {
            float s = 0;
            int base = (rowOff + i) * n;
            for (int j = 0; j < n; j++) s += wm[base + j] * x[j];
            out[outOff + i] = s;
        }
    }

    static void rmsnorm(float[] out, float[] x, float[] weight) {
        float ss = 0;
        for (float v : x) ss += v * v;
        ss /= x.length;
        ss += 1e-5f;
        ss = 1.0f / (float) Math.sqrt(ss);
        for (int j = 0; j < x.length; j++) out[j] = weight[j] * (ss * x[j]);
    }
}
