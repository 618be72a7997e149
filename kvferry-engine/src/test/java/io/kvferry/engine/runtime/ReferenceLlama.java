package io.kvferry.engine.runtime;

import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.ModelWeights;

/**
 * An independent scalar Llama forward, written straight from llama2.c's run.c for the tests:
 * contiguous KV arrays, full-width matmuls, no pages, no shards, double-free of any engine code. The
 * engine must match it (within float rounding: the engine sums in fixed groups).
 */
final class ReferenceLlama {
    private final ModelWeights w;
    private final LlamaConfig c;
    private final float[][][] keyCache, valueCache; // [layer][pos][kvDim]

    ReferenceLlama(ModelWeights w) {
        this.w = w;
        this.c = w.config;
        keyCache = new float[c.layers()][c.seqLen()][c.kvDim()];
        valueCache = new float[c.layers()][c.seqLen()][c.kvDim()];
    }

    float[] forward(int token, int pos) {
        int dim = c.dim(), hs = c.headSize(), kvDim = c.kvDim(), hidden = c.hiddenDim();
        float[] x = new float[dim];
        System.arraycopy(w.tokenEmbedding, token * dim, x, 0, dim);
        float[] xb = new float[dim], xb2 = new float[dim], q = new float[dim], hb = new float[hidden], hb2 = new float[hidden];
        for (int l = 0; l < c.layers(); l++) {
            rmsnorm(xb, x, w.rmsAtt[l]);
            float[] k = keyCache[l][pos], v = valueCache[l][pos];
            matmul(q, xb, w.wq[l], dim, dim);
            matmul(k, xb, w.wk[l], dim, kvDim);
            matmul(v, xb, w.wv[l], dim, kvDim);
            for (int i = 0; i < dim; i += 2) {
                int headDim = i % hs;
                float freq = 1.0f / (float) Math.pow(10000.0f, headDim / (float) hs);
                float val = pos * freq, fcr = (float) Math.cos(val), fci = (float) Math.sin(val);
                int rotn = i < kvDim ? 2 : 1;
                for (int vi = 0; vi < rotn; vi++) {
                    float[] vec = vi == 0 ? q : k;
                    float v0 = vec[i], v1 = vec[i + 1];
                    vec[i] = v0 * fcr - v1 * fci;
                    vec[i + 1] = v0 * fci + v1 * fcr;
                }
            }
            for (int h = 0; h < c.heads(); h++) {
                int kvh = h / c.kvMul();
                float[] att = new float[pos + 1];
                for (int t = 0; t <= pos; t++) {
                    float s = 0;
                    for (int i = 0; i < hs; i++) s += q[h * hs + i] * keyCache[l][t][kvh * hs + i];
                    att[t] = s / (float) Math.sqrt(hs);
                }
                softmax(att);
                for (int i = 0; i < hs; i++) xb[h * hs + i] = 0;
                for (int t = 0; t <= pos; t++) {
                    for (int i = 0; i < hs; i++) xb[h * hs + i] += att[t] * valueCache[l][t][kvh * hs + i];
                }
            }
            matmul(xb2, xb, w.wo[l], dim, dim);
            for (int i = 0; i < dim; i++) x[i] += xb2[i];
            rmsnorm(xb, x, w.rmsFfn[l]);
            matmul(hb, xb, w.w1[l], dim, hidden);
            matmul(hb2, xb, w.w3[l], dim, hidden);
            for (int i = 0; i < hidden; i++) {
                float val = hb[i];
                val *= 1.0f / (1.0f + (float) Math.exp(-val));
                hb[i] = val * hb2[i];
            }
            matmul(xb, hb, w.w2[l], hidden, dim);
            for (int i = 0; i < dim; i++) x[i] += xb[i];
        }
        rmsnorm(x, x.clone(), w.rmsFinal);
        float[] logits = new float[c.vocabSize()];
        matmul(logits, x, w.wcls, dim, c.vocabSize());
        return logits;
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
