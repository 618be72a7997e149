package io.kvferry.engine.model;

import java.io.DataInputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.zip.CRC32C;

/**
 * The float32 weights of a Llama model, laid out as llama2.c stores them (row-major, output rows):
 * {@code wq[l]} is dim × dim, {@code wk/wv[l]} kvDim × dim, {@code wo[l]} dim × dim, {@code w1/w3[l]}
 * hidden × dim, {@code w2[l]} dim × hidden. Immutable once built; shared read-only by every TP shard.
 */
public final class ModelWeights {
    public final LlamaConfig config;
    public final float[] tokenEmbedding;
    public final float[][] rmsAtt, wq, wk, wv, wo, rmsFfn, w1, w2, w3;
    public final float[] rmsFinal;
    /** The classifier; the token embedding itself when the checkpoint shares it. */
    public final float[] wcls;
    /** Where the weights came from, for logs and the demo's banner. */
    public final String source;
    /** "name@crc" of the weights (a CRC32C over every tensor), the same on every host holding them. */
    private final String identity;

    private ModelWeights(LlamaConfig c, String source) {
        this.config = c;
        this.source = source;
        this.identity = null;
        int L = c.layers();
        tokenEmbedding = new float[c.vocabSize() * c.dim()];
        rmsAtt = new float[L][c.dim()];
        wq = new float[L][c.dim() * c.dim()];
        wk = new float[L][c.kvDim() * c.dim()];
        wv = new float[L][c.kvDim() * c.dim()];
        wo = new float[L][c.dim() * c.dim()];
        rmsFfn = new float[L][c.dim()];
        w1 = new float[L][c.hiddenDim() * c.dim()];
        w2 = new float[L][c.dim() * c.hiddenDim()];
        w3 = new float[L][c.hiddenDim() * c.dim()];
        rmsFinal = new float[c.dim()];
        wcls = null;
    }

    private ModelWeights(ModelWeights w, float[] wcls) {
        config = w.config;
        source = w.source;
        tokenEmbedding = w.tokenEmbedding;
        rmsAtt = w.rmsAtt;
        wq = w.wq;
        wk = w.wk;
        wv = w.wv;
        wo = w.wo;
        rmsFfn = w.rmsFfn;
        w1 = w.w1;
        w2 = w.w2;
        w3 = w.w3;
        rmsFinal = w.rmsFinal;
        this.wcls = wcls;
        this.identity = checksumIdentity(source);
    }

    private String checksumIdentity(String from) {
        CRC32C crc = new CRC32C();
        ByteBuffer buf = ByteBuffer.allocate(Float.BYTES * 4096).order(ByteOrder.LITTLE_ENDIAN);
        List<float[]> tensors = new ArrayList<>(List.of(tokenEmbedding, rmsFinal, wcls));
        for (float[][] perLayer : List.of(rmsAtt, wq, wk, wv, wo, rmsFfn, w1, w2, w3)) tensors.addAll(List.of(perLayer));
        for (float[] t : tensors) {
            for (int i = 0; i < t.length; i += 4096) {
                buf.clear();
                buf.asFloatBuffer().put(t, i, Math.min(4096, t.length - i));
                crc.update(buf.array(), 0, Float.BYTES * Math.min(4096, t.length - i));
            }
        }
        String name = Path.of(from).getFileName().toString();
        return (from.startsWith("random") ? "random-" + config.dim() + "x" + config.layers() : name) + "@" + Long.toHexString(crc.getValue());
    }

    /**
     * A stable identity of these weights ("name@crc32c"): prefill and decode declare it to kvferry
     * (with the variant), which refuses a link between engines of different models.
     */
    public String identity() {
        return identity;
    }

    /**
     * Loads a llama2.c checkpoint: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads,
     * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate classifier follows),
     * then the float32 tensors in llama2.c's order, with the RoPE tables (unused: RoPE is computed).
     */
    public static ModelWeights load(Path file) throws IOException {
        ModelFiles.requireRegularFile(file, "model file");
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < 28) throw new IOException(file + ": " + size + " bytes is too short for a llama2.c checkpoint header (28)");
            ByteBuffer buf = ch.map(FileChannel.MapMode.READ_ONLY, 0, size).order(ByteOrder.LITTLE_ENDIAN);
            int[] h = new int[7];
            for (int i = 0; i < 7; i++) h[i] = buf.getInt();
            boolean shared = h[5] > 0;
            LlamaConfig c;
            try {
                c = new LlamaConfig(h[0], h[1], h[2], h[3], h[4], Math.abs(h[5]), h[6]);
            } catch (IllegalArgumentException e) {
                throw new IOException(file + ": not a llama2.c checkpoint (" + e.getMessage() + ")", e);
            }
            long need;
            try {
                need = Math.addExact(28, Math.multiplyExact(expectedFloats(c, shared), 4));
            } catch (ArithmeticException e) {
                throw new IOException(file + ": header " + c + " describes more than " + Long.MAX_VALUE + " bytes; not a llama2.c checkpoint");
            }
            if (size < need) {
                throw new IOException(file + ": truncated: header " + c + " needs " + need + " bytes, the file has " + size);
            }
            if (size > need) {
                throw new IOException(file + ": " + (size - need) + " bytes more than header " + c + " describes; not a llama2.c checkpoint");
            }
            long largest = Math.max(Math.max((long) c.vocabSize() * c.dim(), (long) c.dim() * c.dim()), (long) c.hiddenDim() * c.dim());
            if (largest > MAX_TENSOR_FLOATS) {
                throw new IOException(file + ": header " + c + " has a tensor of " + largest + " floats, more than the " + MAX_TENSOR_FLOATS
                        + " one Java array holds");
            }
            ModelWeights w = new ModelWeights(c, file.toString());
            FloatBuffer f = buf.asFloatBuffer();
            f.get(w.tokenEmbedding);
            for (float[] a : w.rmsAtt) f.get(a);
            for (float[] a : w.wq) f.get(a);
            for (float[] a : w.wk) f.get(a);
            for (float[] a : w.wv) f.get(a);
            for (float[] a : w.wo) f.get(a);
            for (float[] a : w.rmsFfn) f.get(a);
            for (float[] a : w.w1) f.get(a);
            for (float[] a : w.w2) f.get(a);
            for (float[] a : w.w3) f.get(a);
            f.get(w.rmsFinal);
            f.position(f.position() + c.seqLen() * c.headSize()); // freq_cis_real and freq_cis_imag
            if (shared) return new ModelWeights(w, w.tokenEmbedding);
            float[] cls = new float[c.vocabSize() * c.dim()];
            f.get(cls);
            return new ModelWeights(w, cls);
        }
    }

    /** The most floats one tensor may have: the largest Java array. */
    static final long MAX_TENSOR_FLOATS = Integer.MAX_VALUE - 8;

    /**
     * Floats the header describes, computed exactly: absurd dims throw {@link ArithmeticException} rather than
     * wrap round to a small size (a 28-byte file could otherwise pass the size check).
     */
    static long expectedFloats(LlamaConfig c, boolean sharedClassifier) {
        long d = c.dim(), hd = c.hiddenDim(), L = c.layers(), kv = c.kvDim(), v = c.vocabSize();
        long n = sum(v * d, L * d, product(L, d, d), product(2, L, d, kv), product(L, d, d), L * d, product(3, L, d, hd), d,
                (long) c.seqLen() * c.headSize());
        return sharedClassifier ? n : Math.addExact(n, v * d);
    }

    private static long product(long... factors) {
        long p = 1;
        for (long f : factors) p = Math.multiplyExact(p, f);
        return p;
    }

    private static long sum(long... terms) {
        long s = 0;
        for (long t : terms) s = Math.addExact(s, t);
        return s;
    }

    /**
     * Seeded random weights of the given shape (a fresh clone has no checkpoint): the text is noise,
     * but the math, the KV and every transfer are real. Scaled like an initialized model (1/sqrt(fan-in)).
     */
    public static ModelWeights random(LlamaConfig c, long seed) {
        ModelWeights w = new ModelWeights(c, "random weights (seed " + seed + ")");
        SplittableRandom r = new SplittableRandom(seed);
        fill(w.tokenEmbedding, r, 1.0f);
        float inDim = (float) (1 / Math.sqrt(c.dim())), inHidden = (float) (1 / Math.sqrt(c.hiddenDim()));
        for (int l = 0; l < c.layers(); l++) {
            Arrays.fill(w.rmsAtt[l], 1f);
            Arrays.fill(w.rmsFfn[l], 1f);
            fill(w.wq[l], r, inDim);
            fill(w.wk[l], r, inDim);
            fill(w.wv[l], r, inDim);
            fill(w.wo[l], r, inDim);
            fill(w.w1[l], r, inDim);
            fill(w.w3[l], r, inDim);
            fill(w.w2[l], r, inHidden);
        }
        Arrays.fill(w.rmsFinal, 1f);
        return new ModelWeights(w, w.tokenEmbedding);
    }

    private static void fill(float[] a, SplittableRandom r, float scale) {
        for (int i = 0; i < a.length; i++) a[i] = (float) ((r.nextDouble() * 2 - 1) * scale);
    }

    /** Reads only the header of a checkpoint, for a clear message before the pools are sized. */
    public static LlamaConfig readHeader(Path file) throws IOException {
        try (DataInputStream in = new DataInputStream(Files.newInputStream(file))) {
            byte[] b = in.readNBytes(28);
            if (b.length < 28) throw new IOException(file + ": too short for a llama2.c checkpoint header");
            ByteBuffer bb = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
            return new LlamaConfig(bb.getInt(), bb.getInt(), bb.getInt(), bb.getInt(), bb.getInt(), Math.abs(bb.getInt()),
                    bb.getInt());
        }
    }
}
