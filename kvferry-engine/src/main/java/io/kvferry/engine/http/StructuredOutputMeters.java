package io.kvferry.engine.http;

import io.kvferry.engine.model.OutputConstraint;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.FunctionTimer;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;

import java.util.concurrent.TimeUnit;

/**
 * A structured-output compiler's meters on its process's {@code /metrics} (the router's, each engine role's), read from
 * the compiler's own counts: {@code kvferry_structured_output_compiles_total{outcome}} (compiled, cached, refused,
 * deadline, busy: {@link OutputConstraint.Compiler.Outcome}), {@code kvferry_structured_output_compile_seconds} (the
 * compilations that ran, holding the compiler: their count and their time) and
 * {@code kvferry_structured_output_compiles_waiting} (specs waiting for the compiler now).
 */
final class StructuredOutputMeters {
    static final String COMPILES = "kvferry_structured_output_compiles";
    static final String COMPILE_TIME = "kvferry_structured_output_compile";
    static final String WAITING = "kvferry_structured_output_compiles_waiting";

    private StructuredOutputMeters() {
    }

    /** Registers {@code compiler}'s meters in {@code registry} (nothing for a null compiler: a server without the tokenizer). */
    static void bind(MeterRegistry registry, OutputConstraint.Compiler compiler) {
        if (registry == null || compiler == null) return;
        for (OutputConstraint.Compiler.Outcome o : OutputConstraint.Compiler.Outcome.values()) {
            FunctionCounter.builder(COMPILES, compiler, c -> c.outcomes(o)).tag("outcome", o.label())
                    .description("Structured-output specs by what became of them: compiled, cached, refused (400), deadline (400), busy (503)")
                    .register(registry);
        }
        FunctionTimer.builder(COMPILE_TIME, compiler, OutputConstraint.Compiler::compileCount, OutputConstraint.Compiler::compileSeconds,
                        TimeUnit.SECONDS)
                .description("Structured-output compilations that ran (the compiler held), whatever their outcome, and their time")
                .register(registry);
        Gauge.builder(WAITING, compiler, OutputConstraint.Compiler::waiting)
                .description("Structured-output specs waiting for the compiler (one compiles at a time)").register(registry);
    }
}
