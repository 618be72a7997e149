package io.kvferry.tools;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import org.junit.jupiter.api.Test;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;

/**
 * The tool modules' "may touch" rows of docs/ARCHITECTURE.md: testkit, bench, chaos and cli reach
 * kvferry only through its public API (never the manager implementations, and the transport SPI
 * only from UcxPutBench, which measures a data path by itself); testkit knows no tool; bench and
 * chaos do not know each other or the command line.
 */
class ToolLayeringTest {
    static final JavaClasses TOOLS = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
            .importPackages("io.kvferry.testkit", "io.kvferry.bench", "io.kvferry.chaos", "io.kvferry.cli");

    @Test
    void toolsUseOnlyThePublicApi() {
        noClasses().that().resideInAnyPackage("io.kvferry.testkit..", "io.kvferry.bench..", "io.kvferry.chaos..", "io.kvferry.cli..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.prefill..", "io.kvferry.decode..", "io.kvferry.session..",
                        "io.kvferry.fake..")
                .because("tools read a manager through KVManager.stats(), never by casting to its implementation")
                .check(TOOLS);
        noClasses().that().resideInAnyPackage("io.kvferry.testkit..", "io.kvferry.bench", "io.kvferry.chaos..", "io.kvferry.cli..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.transport..")
                .check(TOOLS);
    }

    @Test
    void testkitKnowsNoTool() {
        noClasses().that().resideInAPackage("io.kvferry.testkit..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.bench..", "io.kvferry.chaos..", "io.kvferry.cli..")
                .check(TOOLS);
    }

    /** The network-namespace plumbing is operating-system work only: it knows nothing of kvferry or the harness. */
    @Test
    void chaosNetworkPlumbingKnowsNoKvferry() {
        noClasses().that().resideInAPackage("io.kvferry.chaos.net..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry")
                .orShould().dependOnClassesThat().resideInAnyPackage("io.kvferry.api..", "io.kvferry.protocol..", "io.kvferry.registry..",
                        "io.kvferry.testkit..")
                .orShould().dependOnClassesThat().resideInAPackage("io.kvferry.chaos")
                .check(TOOLS);
    }

    @Test
    void benchAndChaosAreIndependent() {
        noClasses().that().resideInAPackage("io.kvferry.bench..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.chaos..", "io.kvferry.cli..")
                .check(TOOLS);
        noClasses().that().resideInAPackage("io.kvferry.chaos..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.bench..", "io.kvferry.cli..")
                .check(TOOLS);
    }
}
