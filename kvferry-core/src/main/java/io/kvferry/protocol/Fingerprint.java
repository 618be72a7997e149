package io.kvferry.protocol;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Properties;

/**
 * What a decode and a prefill must agree on before any byte moves (vLLM's compatibility hash, kept as
 * named fields so a refusal says which one differs): the kvferry build, the model (name and revision,
 * as the engine names it), the KV dtype, the page size, whether KV is MLA-replicated, and the model's
 * total KV heads. The protocol version is checked by every frame header already.
 *
 * @param model         "name@revision" supplied by the engine ({@code KVManagerConfig.modelIdentity}); empty = not declared
 * @param totalKvHeads  the model's KV heads (0 = not declared; then not compared)
 */
public record Fingerprint(String kvferryVersion, String model, String kvCacheDtype, int pageSize, boolean mla,
                          int totalKvHeads) {
    /** This build's version (the Maven project version). */
    public static final String KVFERRY_VERSION = loadVersion();

    public Fingerprint {
        kvferryVersion = kvferryVersion == null ? "" : kvferryVersion;
        model = model == null ? "" : model;
        kvCacheDtype = kvCacheDtype == null ? "" : kvCacheDtype;
    }

    /** This build's fingerprint for a layout. */
    public static Fingerprint of(String model, String kvCacheDtype, int pageSize, boolean mla, int totalKvHeads) {
        return new Fingerprint(KVFERRY_VERSION, model, kvCacheDtype, pageSize, mla, totalKvHeads);
    }

    /**
     * Null when a decode with fingerprint {@code decode} may talk to this prefill; else the first
     * differing field with both values ("kv_cache_dtype differs: prefill bf16, decode fp8").
     */
    public String differenceFrom(Fingerprint decode) {
        if (!kvferryVersion.equals(decode.kvferryVersion)) {
            return "kvferry version differs: prefill " + kvferryVersion + ", decode " + decode.kvferryVersion
                    + "; run the same kvferry build on both sides";
        }
        if (!model.equals(decode.model)) {
            return "model differs: prefill " + shown(model) + ", decode " + shown(decode.model);
        }
        if (!kvCacheDtype.equals(decode.kvCacheDtype)) {
            return "kv_cache_dtype mismatch: prefill uses " + kvCacheDtype + ", decode uses " + decode.kvCacheDtype;
        }
        if (pageSize != decode.pageSize) {
            return "page_size mismatch: prefill uses " + pageSize + ", decode uses " + decode.pageSize
                    + "; both servers must use the same --page-size value";
        }
        if (mla != decode.mla) {
            return "is_mla differs: prefill " + mla + ", decode " + decode.mla;
        }
        if (totalKvHeads > 0 && decode.totalKvHeads > 0 && totalKvHeads != decode.totalKvHeads) {
            return "total KV heads differ: prefill " + totalKvHeads + ", decode " + decode.totalKvHeads;
        }
        return null;
    }

    /** A short hex digest of every field (for logs, metrics and the status page). */
    public String hash() {
        String canonical = String.join("\u0000", kvferryVersion, model, kvCacheDtype, Integer.toString(pageSize),
                Boolean.toString(mla), Integer.toString(totalKvHeads));
        return HexFormat.of().formatHex(Handshake.sha256(canonical.getBytes(StandardCharsets.UTF_8)), 0, 8);
    }

    private static String shown(String model) {
        return model.isEmpty() ? "(not declared)" : model;
    }

    private static String loadVersion() {
        try (InputStream in = Fingerprint.class.getResourceAsStream("kvferry-version.properties")) {
            if (in == null) return "unknown";
            Properties p = new Properties();
            p.load(in);
            String v = p.getProperty("version", "unknown");
            return v.startsWith("${") ? "unknown" : v;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
