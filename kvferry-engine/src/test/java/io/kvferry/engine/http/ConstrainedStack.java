package io.kvferry.engine.http;

import io.kvferry.engine.TestModels;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;

import java.util.List;

/**
 * What the structured-output tests run against, opened once per class: the real stories260K behind a router over a TP2
 * prefill (the first token) and a TP1 decode (the rest), a colocated engine of the same weights (the answer a PD answer
 * must equal, token for token) and a compiler of the model's vocabulary.
 */
final class ConstrainedStack implements AutoCloseable {
    final Tokenizer tokenizer;
    final OutputConstraint.Compiler compiler;
    final EngineStack stack;
    final Router router;
    final ColocatedEngine colocated;

    private ConstrainedStack(Tokenizer tokenizer, EngineStack stack, Router router, ColocatedEngine colocated) {
        this.tokenizer = tokenizer;
        this.compiler = new OutputConstraint.Compiler(tokenizer);
        this.stack = stack;
        this.router = router;
        this.colocated = colocated;
    }

    /** Opens it, its engines' threads named after {@code name}; what was opened is closed again where a later part fails. */
    static ConstrainedStack open(String name) throws Exception {
        TestModels.requireStories();
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        EngineStack stack = EngineStack.open(spec.withParallelism(2, 1), spec, name, null);
        Router router = null;
        try {
            router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                    "test-model", "127.0.0.1", 0);
            return new ConstrainedStack(model.tokenizer(), stack, router, new ColocatedEngine(spec.withMaxRequests(1)));
        } catch (Exception | Error e) {
            closeAll(router, stack);
            throw e;
        }
    }

    @Override
    public void close() {
        closeAll(router, stack, colocated);
    }

    private static void closeAll(AutoCloseable... parts) {
        for (AutoCloseable c : parts) {
            try {
                if (c != null) c.close();
            } catch (Exception ignored) {
                // closing the rest
            }
        }
    }
}
