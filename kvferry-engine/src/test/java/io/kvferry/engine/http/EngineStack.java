package io.kvferry.engine.http;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.PrefillEngine;
import io.kvferry.engine.serving.TransferSpec;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * What the HTTP tests drive: a prefill instance (its bootstrap registry, engine and HTTP server) and a decode
 * instance (engine and HTTP server) on loopback over tcp, the engines reached directly too. Closed in the
 * reverse order of their start; one that fails to start closes those started before it.
 */
final class EngineStack implements AutoCloseable {
    final String addr;
    final PrefillEngine prefill;
    final DecodeEngine decode;
    final PrefillServer prefillServer;
    final DecodeServer decodeServer;
    private final List<AutoCloseable> started = new ArrayList<>();

    /**
     * @param token       the cluster token of the registry and kvferry's links
     * @param serverToken the token the engines' HTTP servers require on /generate and /abort; null for none
     */
    private EngineStack(EngineSpec prefillSpec, EngineSpec decodeSpec, String token, String serverToken) throws IOException {
        try {
            KVBootstrapServer registry = started(KVFerry.startBootstrapServer("127.0.0.1", 0, token));
            addr = "127.0.0.1:" + registry.port();
            prefill = started(new PrefillEngine(prefillSpec, new TransferSpec("tcp", addr, token, "127.0.0.1")));
            decode = started(new DecodeEngine(decodeSpec, new TransferSpec("tcp", null, token, "127.0.0.1")));
            Tokenizer tokenizer = tokenizer(prefillSpec);
            prefillServer = started(new PrefillServer(prefill, addr, "127.0.0.1", 0, serverToken, tokenizer));
            decodeServer = started(new DecodeServer(decode, "127.0.0.1", 0, serverToken, tokenizer));
        } catch (IOException | RuntimeException e) {
            close();
            throw e;
        }
    }

    /** The model's tokenizer for the engines' structured outputs (the test checkpoint's, or none for another vocabulary). */
    private static Tokenizer tokenizer(EngineSpec spec) throws IOException {
        Tokenizer t = ModelFiles.load(null, null).tokenizer();
        return t.vocabSize() == spec.model().config.vocabSize() ? t : null;
    }

    /** Both engines of {@code spec}; their HTTP servers take any request. */
    static EngineStack open(EngineSpec spec, String token) throws IOException {
        return new EngineStack(spec, spec, token, null);
    }

    /** The prefill and the decode each of its own spec; {@code serverToken} as the constructor's. */
    static EngineStack open(EngineSpec prefillSpec, EngineSpec decodeSpec, String token, String serverToken) throws IOException {
        return new EngineStack(prefillSpec, decodeSpec, token, serverToken);
    }

    String prefillUrl() {
        return "http://127.0.0.1:" + prefillServer.port();
    }

    String decodeUrl() {
        return "http://127.0.0.1:" + decodeServer.port();
    }

    private <T extends AutoCloseable> T started(T part) {
        started.add(part);
        return part;
    }

    @Override
    public void close() {
        for (int i = started.size() - 1; i >= 0; i--) {
            try {
                started.get(i).close();
            } catch (Exception ignored) {
                // the rest still close
            }
        }
        started.clear();
    }
}
