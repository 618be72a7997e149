package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.OutputConstraint;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.FunctionTimer;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;

import java.util.concurrent.TimeUnit;
import java.util.function.ToLongFunction;

/**
 * A structured-output compiler's meters on its process's {@code /metrics} (the router's, each engine role's), read from
 * the compiler's own counts: {@code kvferry_structured_output_compiles_total{role,outcome}} (compiled, cached, refused,
 * deadline, busy: {@link OutputConstraint.Compiler.Outcome}), {@code kvferry_structured_output_compile_seconds{role}} (the
 * compilations that ran, holding the compiler: their count and their time) and
 * {@code kvferry_structured_output_compiles_waiting{role}} (specs waiting for the compiler now). Each is tagged
 * {@code role} ({@code router}, {@code prefill}, {@code decode}: the server whose compiler it is), as the other per-role
 * meters ({@code kvferry_draining{role}}), so a dashboard splits them by role, not by instance alone.
 *
 * <p>The same figures as a status document's {@code structured_outputs} object ({@link #status}): the router's
 * {@code /status.json} from its compiler, an engine's ({@code engine.structured_outputs}) from its registry.
 */
public final class StructuredOutputMeters {
    static final String COMPILES = "kvferry_structured_output_compiles";
    static final String COMPILE_TIME = "kvferry_structured_output_compile";
    static final String WAITING = "kvferry_structured_output_compiles_waiting";

    private StructuredOutputMeters() {
    }

    /**
     * Registers {@code compiler}'s meters in {@code registry}, tagged {@code role} ({@code router}, {@code prefill} or
     * {@code decode}); nothing for a null compiler (a server without the tokenizer).
     */
    static void bind(MeterRegistry registry, OutputConstraint.Compiler compiler, String role) {
        if (registry == null || compiler == null) return;
        for (OutputConstraint.Compiler.Outcome o : OutputConstraint.Compiler.Outcome.values()) {
            FunctionCounter.builder(COMPILES, compiler, c -> c.outcomes(o)).tags("role", role, "outcome", o.label())
                    .description("Structured-output specs by what became of them: compiled, cached, refused (400), deadline (400), busy (503)")
                    .register(registry);
        }
        FunctionTimer.builder(COMPILE_TIME, compiler, OutputConstraint.Compiler::compileCount, OutputConstraint.Compiler::compileSeconds,
                        TimeUnit.SECONDS)
                .description("Structured-output compilations that ran (the compiler held), whatever their outcome, and their time")
                .tag("role", role).register(registry);
        Gauge.builder(WAITING, compiler, OutputConstraint.Compiler::waiting)
                .description("Structured-output specs waiting for the compiler (one compiles at a time)").tag("role", role).register(registry);
    }

    /**
     * {@code compiler}'s figures as a status document shows them: {@code outcomes} (each {@link OutputConstraint.Compiler.Outcome}'s
     * count since start), {@code waiting} (specs waiting for the compiler now), {@code compiles} and {@code compile_seconds} (the
     * compilations that ran, and their time in all) and {@code mean_compile_ms} (null before the first).
     */
    static ObjectNode status(OutputConstraint.Compiler compiler) {
        return status(compiler::outcomes, compiler.waiting(), compiler.compileCount(), compiler.compileSeconds());
    }

    /**
     * The same object read from {@code registry}'s meters ({@link #bind}) of {@code role}'s compiler: an engine's status
     * document, built from its process's registry. Null where the registry holds no such compiler's meters (a server
     * without the tokenizer).
     */
    public static ObjectNode status(MeterRegistry registry, String role) {
        FunctionTimer t = registry.find(COMPILE_TIME).tag("role", role).functionTimer();
        Gauge w = registry.find(WAITING).tag("role", role).gauge();
        if (t == null || w == null) return null;
        return status(o -> {
            FunctionCounter c = registry.find(COMPILES).tags("role", role, "outcome", o.label()).functionCounter();
            return c == null ? 0 : (long) c.count();
        }, (int) w.value(), (long) t.count(), t.totalTime(TimeUnit.SECONDS));
    }

    private static ObjectNode status(ToLongFunction<OutputConstraint.Compiler.Outcome> outcomes, int waiting, long compiles, double seconds) {
        ObjectNode o = JsonNodeFactory.instance.objectNode();
        ObjectNode by = o.putObject("outcomes");
        for (OutputConstraint.Compiler.Outcome x : OutputConstraint.Compiler.Outcome.values()) by.put(x.label(), outcomes.applyAsLong(x));
        o.put("waiting", waiting);
        o.put("compiles", compiles);
        o.put("compile_seconds", Math.round(seconds * 1e6) / 1e6);
        if (compiles == 0) o.putNull("mean_compile_ms");
        else o.put("mean_compile_ms", Math.round(seconds * 1e3 / compiles * 1000) / 1000.0);
        return o;
    }
}
