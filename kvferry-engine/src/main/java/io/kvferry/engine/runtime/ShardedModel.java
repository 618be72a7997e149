package io.kvferry.engine.runtime;

import io.kvferry.engine.kv.HeadPages;
import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.kv.LatentPages;
import io.kvferry.engine.kv.RecurrentState;
import io.kvferry.engine.model.LayerKind;
import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelWeights;

import java.util.Arrays;

/**
 * The forward pass over an engine's shards: {@code pp} pipeline stages of {@code tp} tensor-parallel
 * ranks, each with its own {@link KvPool}. Rank r of a stage holds KV heads [r·H/tp, (r+1)·H/tp)
 * (and their query heads, its share of the recurrent channels, and the matching MLP blocks) and reads
 * its own pool's memory in place. The row-parallel sums (attention or mixer output, MLP down
 * projection) are made of fixed reduction groups, one per KV head, added in one global order by the
 * in-process all-reduce: the floats are the same for every TP and PP size, so a TP4 prefill feeding a
 * TP2 decode produces exactly the tokens of a TP1 colocated run. Arithmetic follows llama2.c's run.c
 * (float32, the same operation order per token), and a chunk of tokens is computed token by token
 * within each layer, so chunking never changes a value either.
 *
 * <p>Layer kinds ({@link Model#kind}): attention and window attention (GQA, K/V in the pool's head
 * pages; a window layer attends over the last {@link Model#window} positions of the request's window
 * ring), latent attention (MLA in its absorbed form: each head's query goes through the key
 * up-projection into latent space, scores and the weighted sum are taken against the cached latents,
 * and the value up-projection turns the summed latent into the head's output — the same as
 * reconstructing every token's per-head keys and values from the latent, without doing it per
 * token), and the recurrent mixer (causal depthwise conv then a selective state-space scan per
 * channel, gated; its state slot updated in place).
 *
 * <p>Not thread-safe: one engine scheduler thread drives it (the scratch arrays are its own, reused
 * across calls; the logits returned are valid until the next call).
 */
public final class ShardedModel {
    private final Model model;
    private final ModelWeights w;
    private final LlamaConfig c;
    public final int tp, pp;
    private final KvPool[][] pools; // [stage][rank]
    private final float[] ropeCos, ropeSin; // [pos][headSize/2]
    private final float[] latentCos, latentSin; // [pos][ropeDim/2]
    private final int hs, groups, kvPerRank, block, channelsPerGroup;
    // scratch (owner thread)
    private final float[] xb, att, headOut, partial; // one token of a latent or recurrent layer
    private final float[] latentVec, ropeKey, qLatent, qNope, qRope, latentSum;
    private final float[] bVec, cVec, mixOut;
    // per batch entry, grown to the largest batch seen
    private float[][] bx = new float[0][], bxb, bq, bk, bv, bheads, bpartial, bhb, bhb2, blogits;
    private int[] batchTokens, batchPositions, batchRows;
    private int[][] batchTables;

    public ShardedModel(Model model, int tp, int pp, KvPool[][] pools) {
        this.model = model;
        this.w = model.weights;
        this.c = model.config;
        model.requireTp(tp);
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
        channelsPerGroup = model.inner / groups;
        ropeCos = new float[c.seqLen() * (hs / 2)];
        ropeSin = new float[c.seqLen() * (hs / 2)];
        ropeTable(ropeCos, ropeSin, hs);
        latentCos = new float[c.seqLen() * (model.ropeDim / 2)];
        latentSin = new float[c.seqLen() * (model.ropeDim / 2)];
        ropeTable(latentCos, latentSin, model.ropeDim);
        xb = new float[c.dim()];
        att = new float[c.seqLen()];
        headOut = new float[c.dim()];
        partial = new float[groups * c.dim()];
        ensureBatch(1);
        latentVec = new float[model.latentRank + model.ropeDim];
        ropeKey = new float[model.ropeDim];
        qLatent = new float[model.latentRank];
        qNope = new float[hs];
        qRope = new float[model.ropeDim];
        latentSum = new float[model.latentRank];
        bVec = new float[model.stateSize];
        cVec = new float[model.stateSize];
        mixOut = new float[model.inner];
    }

    private void ropeTable(float[] cos, float[] sin, int size) {
        int half = size / 2;
        for (int pos = 0; pos < c.seqLen(); pos++) {
            for (int i = 0; i < half; i++) {
                // run.c: head_dim = i % head_size (even i), freq = 1 / 10000^(head_dim / head_size), val = pos * freq
                float freq = 1.0f / (float) Math.pow(10000.0f, (2 * i) / (float) size);
                float val = pos * freq;
                cos[pos * half + i] = (float) Math.cos(val);
                sin[pos * half + i] = (float) Math.sin(val);
            }
        }
    }

    public LlamaConfig config() {
        return c;
    }

    /**
     * Runs tokens[from, to) at positions from..to-1 through every layer of the request on aux row
     * {@code row}, writing their K/V (or latents) into the pages of {@code pageTable} (page of position
     * p = pageTable[p / pageSize]), their window K/V into the row's window ring and updating the row's
     * recurrent state; attention reads positions 0..p from the same memory, so earlier chunks (or what
     * kvferry landed) must be there.
     *
     * @return the logits after the last token (valid until the next call), or null when {@code wantLogits} is false
     */
    public float[] forward(int[] tokens, int from, int to, int[] pageTable, int row, boolean wantLogits) {
        float[][] out = forward(tokens, from, to, pageTable, row, wantLogits ? to - 1 : to);
        return wantLogits ? out[to - from - 1] : null;
    }

    /**
     * As {@link #forward(int[], int, int, int[], int, boolean)}, with the logits of every position in
     * [{@code logitsFrom}, to): position p's are row {@code p - from} (the prompt's input log probabilities; a row's
     * values are the same bits whichever rows are computed beside it).
     *
     * @return logits per position of the chunk (rows below {@code logitsFrom - from} unset), valid until the next call
     */
    public float[][] forward(int[] tokens, int from, int to, int[] pageTable, int row, int logitsFrom) {
        if (from < 0 || to > tokens.length || from >= to) throw new IllegalArgumentException("bad token range [" + from + ", " + to + ")");
        if (logitsFrom < from || logitsFrom > to) throw new IllegalArgumentException("logits from " + logitsFrom + " outside [" + from + ", " + to + "]");
        int n = to - from;
        ensureBatch(n);
        for (int t = 0; t < n; t++) {
            batchTokens[t] = tokens[from + t];
            batchPositions[t] = from + t;
            batchTables[t] = pageTable;
            batchRows[t] = row;
        }
        return forward(n, batchTokens, batchPositions, batchTables, batchRows, logitsFrom - from);
    }

    /**
     * One pass over {@code count} entries, each a token at a position of a request (its page table and
     * aux row): a chunk of one request's prompt (consecutive positions), or the running batch's next
     * token of each request. Within a layer the entries' projections are computed together (weights
     * read once per layer for the whole batch), then each entry attends or recurs in entry order, so an
     * entry sees the K/V of the entries before it; each output is summed in the same order as for a
     * lone token, so batching never changes a value.
     *
     * @param logitsFrom entries [logitsFrom, count) get logits
     * @return logits per entry (rows below logitsFrom unset), valid until the next call
     */
    public float[][] forward(int count, int[] tokens, int[] positions, int[][] pageTables, int[] rows, int logitsFrom) {
        int dim = c.dim();
        ensureBatch(count);
        for (int b = 0; b < count; b++) {
            int tok = tokens[b];
            if (tok < 0 || tok >= c.vocabSize()) throw new IllegalArgumentException("token " + tok + " is outside the vocabulary (" + c.vocabSize() + ")");
            if (positions[b] < 0 || positions[b] >= c.seqLen()) {
                throw new IllegalArgumentException("position " + positions[b] + " is outside the model's seq_len " + c.seqLen());
            }
            System.arraycopy(w.tokenEmbedding, tok * dim, bx[b], 0, dim);
        }
        for (int stage = 0; stage < pp; stage++) {
            int first = c.stageStart(pp, stage), end = c.stageStart(pp, stage + 1);
            for (int l = first; l < end; l++) layer(count, stage, l, l - first, positions, pageTables, rows);
        }
        for (int b = logitsFrom; b < count; b++) rmsnorm(bxb[b], bx[b], w.rmsFinal);
        matmulBatch(blogits, 0, bxb, 0, logitsFrom, count, w.wcls, 0, c.vocabSize(), dim, dim, 0);
        return blogits;
    }

    private void ensureBatch(int n) {
        if (bx.length >= n) return;
        int cap = Math.max(n, 2 * bx.length);
        int dim = c.dim(), kvDim = c.kvDim();
        bx = new float[cap][dim];
        bxb = new float[cap][dim];
        bq = new float[cap][dim];
        bk = new float[cap][kvDim];
        bv = new float[cap][kvDim];
        bheads = new float[cap][dim];
        bpartial = new float[cap][groups * dim];
        bhb = new float[cap][c.hiddenDim()];
        bhb2 = new float[cap][c.hiddenDim()];
        blogits = new float[cap][c.vocabSize()];
        batchTokens = new int[cap];
        batchPositions = new int[cap];
        batchTables = new int[cap][];
        batchRows = new int[cap];
    }

    private void layer(int count, int stage, int l, int local, int[] positions, int[][] pageTables, int[] rows) {
        int dim = c.dim(), hidden = c.hiddenDim(), kvDim = c.kvDim();
        for (int b = 0; b < count; b++) rmsnorm(bxb[b], bx[b], w.rmsAtt[l]);
        switch (model.kind(l)) {
            case ATTENTION, WINDOW -> {
                boolean windowed = model.kind(l) == LayerKind.WINDOW;
                matmulBatch(bq, 0, bxb, 0, 0, count, w.wq[l], 0, dim, dim, dim, 0);
                matmulBatch(bk, 0, bxb, 0, 0, count, w.wk[l], 0, kvDim, dim, dim, 0);
                matmulBatch(bv, 0, bxb, 0, 0, count, w.wv[l], 0, kvDim, dim, dim, 0);
                for (int b = 0; b < count; b++) attend(stage, local, positions[b], pageTables[b], rows[b], windowed, bq[b], bk[b], bv[b], bheads[b]);
                // Each group's share of wo @ heads: the columns of its query heads.
                int cols = c.kvMul() * hs;
                for (int g = 0; g < groups; g++) {
                    matmulBatch(bpartial, g * dim, bheads, g * cols, 0, count, w.wo[l], 0, dim, cols, dim, g * cols);
                }
            }
            case LATENT, RECURRENT -> {
                for (int b = 0; b < count; b++) {
                    System.arraycopy(bxb[b], 0, xb, 0, dim);
                    if (model.kind(l) == LayerKind.LATENT) latentAttention(stage, l, local, positions[b], pageTables[b]);
                    else recurrent(stage, l, local, rows[b]);
                    System.arraycopy(partial, 0, bpartial[b], 0, groups * dim);
                }
            }
        }
        for (int b = 0; b < count; b++) {
            allReduceInto(bx[b], bpartial[b]);
            rmsnorm(bxb[b], bx[b], w.rmsFfn[l]);
        }
        matmulBatch(bhb, 0, bxb, 0, 0, count, w.w1[l], 0, hidden, dim, dim, 0);
        matmulBatch(bhb2, 0, bxb, 0, 0, count, w.w3[l], 0, hidden, dim, dim, 0);
        for (int b = 0; b < count; b++) {
            float[] h1 = bhb[b], h3 = bhb2[b];
            for (int j = 0; j < hidden; j++) {
                float v = h1[j];
                v *= 1.0f / (1.0f + (float) Math.exp(-v)); // SiLU
                h1[j] = v * h3[j];
            }
        }
        // Each group's share of w2 @ hb: the columns of its MLP block (groups of every rank, in global order).
        for (int g = 0; g < groups; g++) {
            matmulBatch(bpartial, g * dim, bhb, g * block, 0, count, w.w2[l], 0, dim, block, hidden, g * block);
        }
        for (int b = 0; b < count; b++) allReduceInto(bx[b], bpartial[b]);
    }

    /**
     * One token's grouped-query attention on every rank from its projections (q: all query heads, k and
     * v: all KV heads): each rank ropes and writes its KV heads at the token's slot, then its query heads
     * attend over positions [start, pos] of its pool (the whole sequence, or the window ring's last
     * {@link Model#window} positions) into {@code heads}.
     */
    private void attend(int stage, int local, int pos, int[] pageTable, int row, boolean windowed, float[] qAll, float[] kAll,
                        float[] vAll, float[] heads) {
        int ps = pools[stage][0].pageSize;
        int start = windowed ? Math.max(0, pos - model.window + 1) : 0;
        float scale = (float) Math.sqrt(hs);
        for (int r = 0; r < tp; r++) {
            KvPool pool = pools[stage][r];
            HeadPages kv = windowed ? pool.window(local) : pool.attention(local);
            int page = windowed ? pool.windowPage(row, pos / ps) : pageTable[pos / ps], slot = pos % ps;
            for (int kh = 0; kh < kvPerRank; kh++) {
                int g = r * kvPerRank + kh;
                rope(kAll, g * hs, hs, pos, ropeCos, ropeSin);
                kv.write(page, slot, kh, kAll, g * hs, vAll, g * hs);
                for (int j = 0; j < c.kvMul(); j++) {
                    int h = g * c.kvMul() + j;
                    rope(qAll, h * hs, hs, pos, ropeCos, ropeSin);
                    float max = Float.NEGATIVE_INFINITY;
                    for (int t = start; t <= pos; t++) {
                        int pg = windowed ? pool.windowPage(row, t / ps) : pageTable[t / ps];
                        float s = kv.dotK(pg, t % ps, kh, qAll, h * hs) / scale;
                        att[t] = s;
                        if (s > max) max = s;
                    }
                    float sum = 0;
                    for (int t = start; t <= pos; t++) {
                        att[t] = (float) Math.exp(att[t] - max);
                        sum += att[t];
                    }
                    for (int t = start; t <= pos; t++) att[t] /= sum;
                    Arrays.fill(heads, h * hs, (h + 1) * hs, 0f);
                    for (int t = start; t <= pos; t++) {
                        int pg = windowed ? pool.windowPage(row, t / ps) : pageTable[t / ps];
                        kv.addV(pg, t % ps, kh, att[t], heads, h * hs);
                    }
                }
            }
        }
    }

    /** This group's share of wo @ headOut (latent attention): the columns of its query heads. */
    private void outputPartial(int l, int g) {
        int dim = c.dim(), col0 = g * c.kvMul() * hs, cols = c.kvMul() * hs;
        float[] wo = w.wo[l];
        for (int i = 0; i < dim; i++) {
            float s = 0;
            int rowOff = i * dim + col0;
            for (int j = 0; j < cols; j++) s += wo[rowOff + j] * headOut[col0 + j];
            partial[g * dim + i] = s;
        }
    }

    /** MLA-style attention over the layer's latent pages (absorbed form; see the class comment). */
    private void latentAttention(int stage, int l, int local, int pos, int[] pageTable) {
        int dim = c.dim(), rank = model.latentRank, rope = model.ropeDim, ps = pools[stage][0].pageSize;
        // The token's latent and rope key: the same on every rank (replicated), each rank writes its own copy.
        matmul(latentVec, 0, xb, model.kvDown[l], 0, rank + rope, dim);
        System.arraycopy(latentVec, rank, ropeKey, 0, rope);
        rmsnormPrefix(latentVec, rank, model.kvNorm[l]);
        rope(ropeKey, 0, rope, pos, latentCos, latentSin);
        int page = pageTable[pos / ps], slot = pos % ps;
        float scale = (float) Math.sqrt(hs + rope);
        float[] wq = model.qLatent[l], upK = model.upK[l], upV = model.upV[l];
        for (int r = 0; r < tp; r++) {
            LatentPages cache = pools[stage][r].latent(local);
            cache.write(page, slot, latentVec, ropeKey);
            for (int g = r * kvPerRank; g < (r + 1) * kvPerRank; g++) {
                for (int j = 0; j < c.kvMul(); j++) {
                    int h = g * c.kvMul() + j;
                    matmul(qNope, 0, xb, wq, h * (hs + rope), hs, dim);
                    matmul(qRope, 0, xb, wq, h * (hs + rope) + hs, rope, dim);
                    rope(qRope, 0, rope, pos, latentCos, latentSin);
                    // qLatent = upK_h^T qNope: the query in latent space
                    for (int i = 0; i < rank; i++) {
                        float s = 0;
                        for (int d = 0; d < hs; d++) s += upK[(h * hs + d) * rank + i] * qNope[d];
                        qLatent[i] = s;
                    }
                    float max = Float.NEGATIVE_INFINITY;
                    for (int t = 0; t <= pos; t++) {
                        float s = cache.score(pageTable[t / ps], t % ps, qLatent, qRope, 0) / scale;
                        att[t] = s;
                        if (s > max) max = s;
                    }
                    float sum = 0;
                    for (int t = 0; t <= pos; t++) {
                        att[t] = (float) Math.exp(att[t] - max);
                        sum += att[t];
                    }
                    for (int t = 0; t <= pos; t++) att[t] /= sum;
                    Arrays.fill(latentSum, 0f);
                    for (int t = 0; t <= pos; t++) cache.addLatent(pageTable[t / ps], t % ps, att[t], latentSum);
                    matmul(headOut, h * hs, latentSum, upV, h * hs, hs, rank); // the value up-projection
                }
                outputPartial(l, g);
            }
        }
    }

    /** The recurrent mixer for one token: conv + selective scan per channel of each rank's groups, the row's state in place. */
    private void recurrent(int stage, int l, int local, int row) {
        int dim = c.dim(), n = model.stateSize, k = model.convKernel, inner = model.inner, perRank = inner / tp;
        matmul(bVec, 0, xb, model.bProj[l], 0, n, dim);
        matmul(cVec, 0, xb, model.cProj[l], 0, n, dim);
        float[] conv = model.conv[l], aLog = model.aLog[l], out = model.outProj[l];
        for (int r = 0; r < tp; r++) {
            RecurrentState st = pools[stage][r].recurrent(local);
            for (int g = r * kvPerRank; g < (r + 1) * kvPerRank; g++) {
                int c0 = g * channelsPerGroup;
                for (int ch = c0; ch < c0 + channelsPerGroup; ch++) {
                    int lc = ch - r * perRank;
                    float uIn = dot(model.inProj[l], ch * dim, xb, dim);
                    float z = dot(model.gateProj[l], ch * dim, xb, dim);
                    float u = model.convBias[l][ch];
                    for (int i = 0; i < k - 1; i++) u += conv[ch * k + i] * st.conv(row, i, lc);
                    u += conv[ch * k + k - 1] * uIn;
                    for (int i = 0; i < k - 2; i++) st.setConv(row, i, lc, st.conv(row, i + 1, lc));
                    st.setConv(row, k - 2, lc, uIn);
                    u *= 1.0f / (1.0f + (float) Math.exp(-u)); // SiLU
                    float dt = softplus(model.dtWeight[l][ch] * u + model.dtBias[l][ch]);
                    float y = 0;
                    for (int s = 0; s < n; s++) {
                        float decay = (float) Math.exp(-dt * (float) Math.exp(aLog[ch * n + s]));
                        float h = decay * st.scan(row, lc, s) + dt * bVec[s] * u;
                        st.setScan(row, lc, s, h);
                        y += cVec[s] * h;
                    }
                    y += model.skip[l][ch] * u;
                    y *= z / (1.0f + (float) Math.exp(-z)); // gate: SiLU(z)
                    mixOut[ch] = y;
                }
                for (int i = 0; i < dim; i++) {
                    float s = 0;
                    int rowOff = i * inner + c0;
                    for (int j = 0; j < channelsPerGroup; j++) s += out[rowOff + j] * mixOut[c0 + j];
                    partial[g * dim + i] = s;
                }
            }
        }
    }

    private static float softplus(float v) {
        return v > 20 ? v : (float) Math.log1p(Math.exp(v));
    }

    private static float dot(float[] wm, int off, float[] x, int n) {
        float s = 0;
        for (int j = 0; j < n; j++) s += wm[off + j] * x[j];
        return s;
    }

    /** The all-reduce: x += the groups' partial sums, added in global group order whatever the TP split. */
    private void allReduceInto(float[] x, float[] parts) {
        int dim = c.dim();
        for (int i = 0; i < dim; i++) {
            float s = parts[i];
            for (int g = 1; g < groups; g++) s += parts[g * dim + i];
            x[i] += s;
        }
    }

    private static void rope(float[] v, int off, int size, int pos, float[] cos, float[] sin) {
        int half = size / 2;
        for (int i = 0; i < half; i++) {
            float fcr = cos[pos * half + i], fci = sin[pos * half + i];
            float v0 = v[off + 2 * i], v1 = v[off + 2 * i + 1];
            v[off + 2 * i] = v0 * fcr - v1 * fci;
            v[off + 2 * i + 1] = v0 * fci + v1 * fcr;
        }
    }

    /**
     * out[b][outOff + i] = W[rowOff + i, colOff : colOff + n] · x[b][xOff : xOff + n] for i in [0, rows)
     * and entries b in [from, to) (W row-major, {@code stride} columns). Each output is summed over j in
     * order, exactly as {@link #matmul} sums it, whatever the batch.
     */
    static void matmulBatch(float[][] out, int outOff, float[][] x, int xOff, int from, int to, float[] wm, int rowOff, int rows,
                            int n, int stride, int colOff) {
        int b = from;
        // Tiles of two weight rows x four entries: eight independent sums, each weight and input read once per
        // tile (a lone dot product waits on its add latency every step), every sum in the lone token's order.
        for (; b + 4 <= to; b += 4) {
            float[] x0 = x[b], x1 = x[b + 1], x2 = x[b + 2], x3 = x[b + 3];
            float[] o0 = out[b], o1 = out[b + 1], o2 = out[b + 2], o3 = out[b + 3];
            int i = 0;
            for (; i + 2 <= rows; i += 2) {
                float s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
                int base = (rowOff + i) * stride + colOff, base2 = base + stride;
                for (int j = 0; j < n; j++) {
                    float wv = wm[base + j], wu = wm[base2 + j];
                    int xj = xOff + j;
                    float a0 = x0[xj], a1 = x1[xj], a2 = x2[xj], a3 = x3[xj];
                    s0 += wv * a0;
                    s1 += wv * a1;
                    s2 += wv * a2;
                    s3 += wv * a3;
                    t0 += wu * a0;
                    t1 += wu * a1;
                    t2 += wu * a2;
                    t3 += wu * a3;
                }
                o0[outOff + i] = s0;
                o1[outOff + i] = s1;
                o2[outOff + i] = s2;
                o3[outOff + i] = s3;
                o0[outOff + i + 1] = t0;
                o1[outOff + i + 1] = t1;
                o2[outOff + i + 1] = t2;
                o3[outOff + i + 1] = t3;
            }
            for (; i < rows; i++) {
                float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                int base = (rowOff + i) * stride + colOff;
                for (int j = 0; j < n; j++) {
                    float wv = wm[base + j];
                    int xj = xOff + j;
                    s0 += wv * x0[xj];
                    s1 += wv * x1[xj];
                    s2 += wv * x2[xj];
                    s3 += wv * x3[xj];
                }
                o0[outOff + i] = s0;
                o1[outOff + i] = s1;
                o2[outOff + i] = s2;
                o3[outOff + i] = s3;
            }
        }
        for (; b < to; b++) { // the entries left over, one at a time
            float[] xv = x[b], o = out[b];
            for (int i = 0; i < rows; i++) {
                float s = 0;
                int base = (rowOff + i) * stride + colOff;
                for (int j = 0; j < n; j++) s += wm[base + j] * xv[xOff + j];
                o[outOff + i] = s;
            }
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

    /** RMSNorm of v[0, n) in place. */
    private static void rmsnormPrefix(float[] v, int n, float[] weight) {
        float ss = 0;
        for (int j = 0; j < n; j++) ss += v[j] * v[j];
        ss /= n;
        ss += 1e-5f;
        ss = 1.0f / (float) Math.sqrt(ss);
        for (int j = 0; j < n; j++) v[j] = weight[j] * (ss * v[j]);
    }
}
