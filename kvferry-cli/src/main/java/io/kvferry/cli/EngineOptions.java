package io.kvferry.cli;

import io.kvferry.KVFerry;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.serve.Roles;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.TypeConversionException;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.HexFormat;

/** The model, memory and transfer options of {@code kvferry serve} and {@code kvferry demo}. */
final class EngineOptions {
    @Option(names = "--model-file", description = "llama2.c checkpoint (.bin). Default: stories260K.bin from ../shared/models "
            + "(or -Dkvferry.models / KVFERRY_MODELS) when present, else seeded random weights of its shape.")
    Path modelFile;

    @Option(names = "--tokenizer", description = "llama2.c tokenizer (.bin). Default: tok512.bin beside the model file. Without --model-file it replaces "
            + "the tokenizer of the stories260K found (or of the random weights) and needs its 512-token vocabulary.")
    Path tokenizer;

    @Option(names = "--model-variant", defaultValue = "llama", converter = VariantConverter.class,
            description = "Layer kinds: llama (GQA attention), mla (latent KV, replicated over TP, is_mla), swa (odd layers over a "
                    + "sliding window whose pages travel as swa state), hybrid (even layers recurrent, their state travels as mamba "
                    + "state). Variant layers use seeded random weights. Prefill and decode must agree. Default: ${DEFAULT-VALUE}.")
    ModelVariant variant;

    /** Picocli converter: the variant's name, or a message listing the names. */
    static final class VariantConverter implements ITypeConverter<ModelVariant> {
        @Override
        public ModelVariant convert(String value) {
            try {
                return ModelVariant.parse(value);
            } catch (IllegalArgumentException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    @Option(names = "--transport", defaultValue = "tcp", description = "kvferry transport between prefill and decode: tcp, shm, ucx, "
            + "inproc (embedded only), auto. Default: ${DEFAULT-VALUE}.")
    String transport;

    @Option(names = "--host", defaultValue = "127.0.0.1", description = "Address the HTTP servers and kvferry ranks bind. Default: ${DEFAULT-VALUE}.")
    String host;

    @Option(names = "--page-size", defaultValue = "16", description = "Tokens per KV page. Default: ${DEFAULT-VALUE}.")
    int pageSize;

    @Option(names = "--pages", defaultValue = "1024", description = "KV pages per engine (each TP rank holds its heads of every page). Default: ${DEFAULT-VALUE}.")
    int pages;

    @Option(names = "--max-requests", defaultValue = "256", description = "Requests in flight per engine (aux rows). Default: ${DEFAULT-VALUE}.")
    int maxRequests;

    @Option(names = "--chunk-tokens", defaultValue = "64", description = "Chunked-prefill size in tokens (need not be a page multiple). Default: ${DEFAULT-VALUE}.")
    int chunkTokens;

    @Option(names = "--prefill-cache", defaultValue = "on", description = "The prefill's prefix cache: on keeps finished prompts' "
            + "full KV pages (evicted least recently used when pages run out), so a prompt that starts with cached pages computes "
            + "only the rest, and requests arriving together on one new prefix compute it once; off computes every prompt whole. "
            + "Always off for --model-variant swa (its window ring cannot resume from pages); for hybrid the recurrent state at "
            + "each cached prompt's last full page is kept with it. Prefill and embedded roles. Default: ${DEFAULT-VALUE}.")
    String prefillCache;

    /** The cluster token for the bootstrap registry and kvferry's control connections. */
    @Mixin
    AuthTokenOptions auth = new AuthTokenOptions();

    /**
     * Checks the transport and the sizes before anything loads or starts, naming the flag: the engines' own checks
     * said only "pages must be >= 1" or "unknown transfer backend", and took {@code fake}, which moves no KV (the
     * decode generated from pages nobody wrote while the demo reported the bytes as moved).
     */
    void check() {
        if ("fake".equals(transport)) {
            throw new IllegalArgumentException("--transport fake moves no KV (the decode would generate from pages nobody wrote); "
                    + "use tcp, shm, ucx, auto or inproc");
        }
        if (!KVFerry.BACKENDS.contains(transport)) {
            throw new IllegalArgumentException("--transport must be one of tcp, shm, ucx, auto or inproc, got '" + transport + "'");
        }
        try {
            // Bound later, where an unresolvable name said only "cannot bind the bootstrap registry to …: Unresolved address".
            InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            throw new IllegalArgumentException("--host " + host + ": no such host (cannot resolve it)", e);
        }
        requirePositive("--page-size", pageSize);
        requirePositive("--pages", pages);
        requirePositive("--max-requests", maxRequests);
        requirePositive("--chunk-tokens", chunkTokens);
        if (!prefillCache.equals("on") && !prefillCache.equals("off")) {
            throw new IllegalArgumentException("--prefill-cache must be on or off, got '" + prefillCache + "'");
        }
    }

    private static void requirePositive(String flag, int value) {
        if (value < 1) throw new IllegalArgumentException(flag + " must be >= 1, got " + value);
    }

    /** The model; a file that cannot be read or is no checkpoint/tokenizer is the user's error: one line naming it. */
    ModelFiles.Loaded load() {
        try {
            return ModelFiles.load(modelFile, tokenizer);
        } catch (IOException e) {
            throw new UncheckedIOException(e.getMessage(), e);
        }
    }

    /** The token from --auth-token-file or KVFERRY_AUTH_TOKEN; null when none was given. */
    String token() {
        return auth.token();
    }

    Roles.Options options(ModelFiles.Loaded model, int tp, int pp, int port, int bootstrapPort, String token) {
        return new Roles.Options(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, host, port, bootstrapPort,
                token).withPrefillCache(!"off".equals(prefillCache));
    }

    /**
     * Checks a TP and a PP size against the model before anything starts, naming the flags that set them:
     * the model's own check says only "tp 3 must divide…", and serve and demo have three flags that set one.
     */
    void requireParallelism(ModelFiles.Loaded model, String tpFlag, int tp, String ppFlag, int pp) {
        try {
            Model.of(model.weights(), variant).requireTp(tp);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(tpFlag + " " + tp + ": " + e.getMessage(), e);
        }
        if (ppFlag == null) return;
        try {
            model.weights().config.requirePp(pp);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(ppFlag + " " + pp + ": " + e.getMessage(), e);
        }
    }

    static String randomToken() {
        byte[] b = new byte[16];
        new SecureRandom().nextBytes(b);
        return HexFormat.of().formatHex(b);
    }
}
