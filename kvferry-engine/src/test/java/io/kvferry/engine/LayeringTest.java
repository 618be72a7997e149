package io.kvferry.engine;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import io.kvferry.KVFerry;
import io.kvferry.http.BearerToken;
import io.kvferry.http.SecretFiles;
import io.kvferry.memory.SharedArena;
import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.WarnLimiter;
import org.junit.jupiter.api.Test;

import static com.tngtech.archunit.base.DescribedPredicate.not;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.belongToAnyOf;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideInAPackage;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideOutsideOfPackages;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.Architectures.layeredArchitecture;

/**
 * The engine uses kvferry only through its public API (io.kvferry.KVFerry, io.kvferry.api, the
 * shared-memory arena, the registry's bearer check, the secret files' permission check, LogSafe's escaping; kvferry-ops), as SGLang uses its connector; and its own packages stack model → kv →
 * runtime → serving → http → serve, each using only those below it.
 */
class LayeringTest {
    static final JavaClasses ENGINE = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
            .importPackages("io.kvferry.engine");

    @Test
    void usesOnlyKvferrysPublicApi() {
        noClasses().that().resideInAPackage("io.kvferry.engine..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.prefill..", "io.kvferry.decode..", "io.kvferry.session..", "io.kvferry.fake..", "io.kvferry.transport..", "io.kvferry.protocol..",
                        "io.kvferry.plan..", "io.kvferry.registry..")
                .because("the reference engine drives kvferry exactly as an external serving engine would")
                .check(ENGINE);
        // The list above named only the implementation packages: memory, metrics and http were open to the engine.
        noClasses().that().resideInAPackage("io.kvferry.engine..")
                .should().dependOnClassesThat(resideInAPackage("io.kvferry..")
                        .and(resideOutsideOfPackages("io.kvferry.engine..", "io.kvferry.api..", "io.kvferry.ops.."))
                        .and(not(belongToAnyOf(KVFerry.class, SharedArena.class, BearerToken.class, SecretFiles.class, LogSafe.class,
                                WarnLimiter.class))))
                .because("docs/ARCHITECTURE.md: the engine uses KVFerry, io.kvferry.api, SharedArena, BearerToken, SecretFiles, LogSafe, WarnLimiter and kvferry-ops only")
                .check(ENGINE);
    }

    @Test
    void packagesStackInOneDirection() {
        layeredArchitecture().consideringOnlyDependenciesInLayers()
                .layer("model").definedBy("io.kvferry.engine.model..")
                .layer("kv").definedBy("io.kvferry.engine.kv..")
                .layer("runtime").definedBy("io.kvferry.engine.runtime..")
                .layer("serving").definedBy("io.kvferry.engine.serving..")
                .layer("http").definedBy("io.kvferry.engine.http..")
                .layer("serve").definedBy("io.kvferry.engine.serve..")
                .whereLayer("serve").mayNotBeAccessedByAnyLayer()
                .whereLayer("http").mayOnlyBeAccessedByLayers("serve")
                .whereLayer("serving").mayOnlyBeAccessedByLayers("http", "serve")
                .whereLayer("runtime").mayOnlyBeAccessedByLayers("serving")
                .whereLayer("kv").mayOnlyBeAccessedByLayers("runtime", "serving")
                .check(ENGINE);
    }
}
