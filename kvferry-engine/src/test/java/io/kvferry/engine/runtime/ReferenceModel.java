package io.kvferry.engine.runtime;

import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelWeights;

/**
 * An independent scalar forward of every model variant for the tests, written from the layer
 * definitions rather than from the engine: contiguous per-position caches, no pages, no rings, no
 * shards, no state slots. Window layers mask positions older than the window; latent layers
 * reconstruct every position's per-head key and value from its cached latent with the up-projections
 * (the engine uses the absorbed form instead); recurrent layers keep each channel's input history and
 * scan state in plain arrays.
 */
final class ReferenceModel {
    private final Model m;
    private final ModelWeights w;
    private final LlamaConfig c;
    private final float[][][] keys, values; // attention and window layers: [layer][pos][kvDim]
    private final float[][][] latents; // latent layers: [layer][pos][rank + rope]
    private final float[][][] inputs; // recurrent layers: [layer][pos][inner], the conv's inputs
    private final float[][][] scan; // recurrent layers: [layer][channel][state]

    ReferenceModel(Model m) {
        this.m = m;
        this.w = m.weights;
        this.c = m.config;
        int L = c.layers(), T = c.seqLen();
        keys = new float[L][][];
        values = new float[L][][];
        latents = new float[L][][];
        inputs = new float[L][][];
        scan = new float[L][][];
        for (int l = 0; l < L; l++) {
            switch (m.kind(l)) {
                case ATTENTION, WINDOW -> {
                    keys[l] = new float[T][c.kvDim()];
                    values[l] = new float[T][c.kvDim()];
                }
                case LATENT -> latents[l] = new float[T][m.latentRank + m.ropeDim];
                case RECURRENT -> {
                    inputs[l] = new float[T][m.inner];
                    scan[l] = new float[m.inner][m.stateSize];
                }
            }
        }
    }

    float[] forward(int token, int pos) {
        int dim = c.dim(), hidden = c.hiddenDim();
        float[] x = new float[dim];
        System.arraycopy(w.tokenEmbedding, token * dim, x, 0, dim);
        float[] xb = new float[dim], hb = new float[hidden], hb2 = new float[hidden];
        for (int l = 0; l < c.layers(); l++) {
            rmsnorm(xb, x, w.rmsAtt[l]);
            float[] mixed = switch (m.kind(l)) {
                case ATTENTION -> attention(l, xb, pos, 0);
                case WINDOW -> attention(l, xb, pos, Math.max(0, pos - m.window + 1));
                case LATENT -> latent(l, xb, pos);
                case RECURRENT -> recurrent(l, xb, pos);
            };
            for (int i = 0; i < dim; i++) x[i] += mixed[i];
            rmsnorm(xb, x, w.rmsFfn[l]);
            matmul(hb, xb, w.w1[l], dim, hidden);
            matmul(hb2, xb, w.w3[l], dim, hidden);
            for (int i = 0; i < hidden; i++) hb[i] = silu(hb[i]) * hb2[i];
            float[] down = new float[dim];
            matmul(down, hb, w.w2[l], hidden, dim);
            for (int i = 0; i < dim; i++) x[i] += down[i];
        }
        rmsnorm(x, x.clone(), w.rmsFinal);
        float[] logits = new float[c.vocabSize()];
        matmul(logits, x, w.wcls, dim, c.vocabSize());
        return logits;
    }

    private float[] attention(int l, float[] xb, int pos, int start) {
        int dim = c.dim(), hs = c.headSize(), kvDim = c.kvDim();
        float[] q = new float[dim];
        matmul(q, xb, w.wq[l], dim, dim);
        matmul(keys[l][pos], xb, w.wk[l], dim, kvDim);
        matmul(values[l][pos], xb, w.wv[l], dim, kvDim);
        for (int h = 0; h < c.heads(); h++) rotate(q, h * hs, hs, pos);
        for (int h = 0; h < c.kvHeads(); h++) rotate(keys[l][pos], h * hs, hs, pos);
        float[] heads = new float[dim];
        for (int h = 0; h < c.heads(); h++) {
            int kvh = h / c.kvMul();
            float[] att = new float[pos + 1 - start];
            for (int t = start; t <= pos; t++) {
                float s = 0;
                for (int i = 0; i < hs; i++) s += q[h * hs + i] * keys[l][t][kvh * hs + i];
                att[t - start] = s / (float) Math.sqrt(hs);
            }
            softmax(att);
            for (int t = start; t <= pos; t++) {
                for (int i = 0; i < hs; i++) heads[h * hs + i] += att[t - start] * values[l][t][kvh * hs + i];
            }
        }
        float[] out = new float[dim];
        matmul(out, heads, w.wo[l], dim, dim);
        return out;
    }

    private float[] latent(int l, float[] xb, int pos) {
        int dim = c.dim(), hs = c.headSize(), rank = m.latentRank, rope = m.ropeDim;
        float[] down = new float[rank + rope];
        matmul(down, xb, m.kvDown[l], dim, rank + rope);
        float[] lat = new float[rank];
        System.arraycopy(down, 0, lat, 0, rank);
        rmsnorm(lat, lat.clone(), m.kvNorm[l]);
        System.arraycopy(lat, 0, latents[l][pos], 0, rank);
        System.arraycopy(down, rank, latents[l][pos], rank, rope);
        rotate(latents[l][pos], rank, rope, pos);
        float[] q = new float[c.heads() * (hs + rope)];
        matmul(q, xb, m.qLatent[l], dim, q.length);
        float[] heads = new float[dim];
        for (int h = 0; h < c.heads(); h++) {
            int qo = h * (hs + rope);
            rotate(q, qo + hs, rope, pos);
            float[] att = new float[pos + 1];
            float[][] v = new float[pos + 1][hs];
            for (int t = 0; t <= pos; t++) {
                // This position's key and value for head h, reconstructed from its latent.
                float s = 0;
                for (int d = 0; d < hs; d++) {
                    float k = 0, vv = 0;
                    for (int i = 0; i < rank; i++) {
                        k += m.upK[l][(h * hs + d) * rank + i] * latents[l][t][i];
                        vv += m.upV[l][(h * hs + d) * rank + i] * latents[l][t][i];
                    }
                    s += q[qo + d] * k;
                    v[t][d] = vv;
                }
                for (int i = 0; i < rope; i++) s += q[qo + hs + i] * latents[l][t][rank + i];
                att[t] = s / (float) Math.sqrt(hs + rope);
            }
            softmax(att);
            for (int t = 0; t <= pos; t++) for (int d = 0; d < hs; d++) heads[h * hs + d] += att[t] * v[t][d];
        }
        float[] out = new float[dim];
        matmul(out, heads, w.wo[l], dim, dim);
        return out;
    }

    private float[] recurrent(int l, float[] xb, int pos) {
        int dim = c.dim(), inner = m.inner, n = m.stateSize, k = m.convKernel;
        float[] in = inputs[l][pos], z = new float[inner], b = new float[n], cc = new float[n], y = new float[inner];
        matmul(in, xb, m.inProj[l], dim, inner);
        matmul(z, xb, m.gateProj[l], dim, inner);
        matmul(b, xb, m.bProj[l], dim, n);
        matmul(cc, xb, m.cProj[l], dim, n);
        for (int ch = 0; ch < inner; ch++) {
            float u = m.convBias[l][ch];
            for (int i = 0; i < k; i++) {
                int p = pos - (k - 1) + i; // tap i sees the input k-1-i positions back (zero before the prompt)
                if (p >= 0) u += m.conv[l][ch * k + i] * inputs[l][p][ch];
            }
            u = silu(u);
            double dt = Math.log1p(Math.exp(m.dtWeight[l][ch] * u + m.dtBias[l][ch]));
            float out = 0;
            for (int s = 0; s < n; s++) {
                double a = Math.exp(-dt * Math.exp(m.aLog[l][ch * n + s]));
                scan[l][ch][s] = (float) (a * scan[l][ch][s] + dt * b[s] * u);
                out += cc[s] * scan[l][ch][s];
            }
            y[ch] = (out + m.skip[l][ch] * u) * silu(z[ch]);
        }
        float[] o = new float[dim];
        matmul(o, y, m.outProj[l], inner, dim);
        return o;
    }

    /** RoPE on v[off, off+size) at position pos, pairs (2i, 2i+1) at frequency 10000^(-2i/size). */
    private static void rotate(float[] v, int off, int size, int pos) {
        for (int i = 0; i < size; i += 2) {
            double freq = 1.0 / Math.pow(10000.0, i / (double) size), a = pos * freq;
            float cr = (float) Math.cos(a), ci = (float) Math.sin(a);
            float v0 = v[off + i], v1 = v[off + i + 1];
            v[off + i] = v0 * cr - v1 * ci;
            v[off + i + 1] = v0 * ci + v1 * cr;
        }
    }

    private static float silu(float v) {
        return v / (1.0f + (float) Math.exp(-v));
    }

    private static void matmul(float[] out, float[] x, float[] wm, int n, int d) {
        for (int i = 0; i < d; i++) {
            float s = 0;
            for (int j = 0; j < n; j++) s += wm[i * n + j] * x[j];
            out[i] = s;
        }
    }

    private static void rmsnorm(float[] o, float[] x, float[] weight) {
        float ss = 0;
        for (float v : x) ss += v * v;
        ss /= x.length;
        ss += 1e-5f;
        ss = 1.0f / (float) Math.sqrt(ss);
        for (int j = 0; j < x.length; j++) o[j] = weight[j] * (ss * x[j]);
    }

    private static void softmax(float[] x) {
        float max = x[0];
        for (float v : x) max = Math.max(max, v);
        float sum = 0;
        for (int i = 0; i < x.length; i++) {
            x[i] = (float) Math.exp(x[i] - max);
            sum += x[i];
        }
        for (int i = 0; i < x.length; i++) x[i] /= sum;
    }
}
