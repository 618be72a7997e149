package io.kvferry;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideInAPackage;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideOutsideOfPackage;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.resideOutsideOfPackages;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

/**
 * The "may touch" table of docs/ARCHITECTURE.md, enforced: every row's column ({@link #MAY_TOUCH}); {@code api} depends
 * on nothing of kvferry; {@code protocol} and {@code plan} are pure (no I/O packages, no threads of ours);
 * transports see only the SPI's neighbours (api, memory, plan, protocol); the shared HTTP plumbing
 * ({@code http}) sees nothing of kvferry; the session toolkit sees
 * only api; prefill and decode never see each other; only the {@link KVFerry}
 * factory names the managers; and no two packages depend on each other in a cycle.
 */
class LayeringTest {
    static final JavaClasses CORE = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
            .importPackages("io.kvferry");

    private static final String[] ROLE_PACKAGES = {"io.kvferry.prefill..", "io.kvferry.decode..", "io.kvferry.fake.."};

    /**
     * The table's "may touch" column, row by row: the packages of kvferry each one may depend on besides
     * itself (prefill, decode and the root have their own tests below). Without it a package the other
     * tests do not name, such as memory reaching into session, went unnoticed.
     */
    private static final Map<String, List<String>> MAY_TOUCH = Map.ofEntries(
            Map.entry("api", List.of()),
            Map.entry("protocol", List.of("api")),
            Map.entry("plan", List.of("api", "protocol")),
            Map.entry("memory", List.of("api", "protocol")),
            Map.entry("registry", List.of("api", "metrics", "http")),
            Map.entry("http", List.of()),
            Map.entry("transport", List.of("api", "memory", "plan", "protocol", "transport.tcp")),
            Map.entry("transport.tcp", List.of("transport", "api", "memory", "plan", "protocol")),
            Map.entry("transport.inproc", List.of("transport", "api", "memory", "plan", "protocol")),
            Map.entry("transport.shm", List.of("transport", "api", "memory", "plan", "protocol")),
            Map.entry("metrics", List.of("api", "plan")),
            Map.entry("session", List.of("api")),
            Map.entry("fake", List.of("api")));

    @Test
    void everyPackageTouchesOnlyWhatTheTableAllows() {
        MAY_TOUCH.forEach((pkg, allowed) -> {
            List<String> own = new ArrayList<>(List.of("io.kvferry." + pkg));
            for (String a : allowed) own.add("io.kvferry." + a);
            noClasses().that().resideInAPackage("io.kvferry." + pkg)
                    .should().dependOnClassesThat(resideInAPackage("io.kvferry..").and(resideOutsideOfPackages(own.toArray(String[]::new))))
                    .because("docs/ARCHITECTURE.md: " + pkg + " may touch " + (allowed.isEmpty() ? "nothing of kvferry" : allowed))
                    .check(CORE);
        });
    }

    @Test
    void apiDependsOnNothingOfKvferry() {
        noClasses().that().resideInAPackage("io.kvferry.api..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.memory..", "io.kvferry.plan..", "io.kvferry.protocol..",
                        "io.kvferry.registry..", "io.kvferry.transport..", "io.kvferry.session..", "io.kvferry.prefill..",
                        "io.kvferry.decode..", "io.kvferry.fake..", "io.kvferry.http..")
                .orShould().dependOnClassesThat().belongToAnyOf(KVFerry.class)
                .because("the API is what engines compile against; it must not drag the implementation with it")
                .check(CORE);
    }

    @Test
    void protocolAndPlanArePure() {
        noClasses().that().resideInAnyPackage("io.kvferry.protocol..", "io.kvferry.plan..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.memory..", "io.kvferry.registry..",
                        "io.kvferry.transport..", "io.kvferry.session..", "io.kvferry.prefill..", "io.kvferry.decode..",
                        "java.nio.channels..", "java.net..", "java.util.concurrent..")
                .because("framing and planning are pure functions of their inputs, tested without sockets or threads")
                .check(CORE);
    }

    @Test
    void httpPlumbingDependsOnNothingOfKvferry() {
        noClasses().that().resideInAPackage("io.kvferry.http..")
                .should().dependOnClassesThat(resideInAPackage("io.kvferry..").and(resideOutsideOfPackage("io.kvferry.http..")))
                .because("the request gate and the bounded body are shared by the registry and kvferry-ops' servers and clients; "
                        + "they are plumbing, not kvferry")
                .check(CORE);
    }

    @Test
    void transportsSeeOnlyTheSpiNeighbours() {
        noClasses().that().resideInAPackage("io.kvferry.transport..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.registry..", "io.kvferry.session..",
                        "io.kvferry.prefill..", "io.kvferry.decode..", "io.kvferry.fake..")
                .because("a transport moves bytes between registered memories; rooms and sessions are the managers' business")
                .check(CORE);
    }

    /**
     * Issue 12: framing and liveness ({@code ControlConnection} and its {@code FrameReader}) know no
     * plan and no registered memory; tcp's data path (frames with payloads, their landing) lives in
     * {@code transport.tcp}, the only code that puts payload frames on a connection or reads payloads off it.
     */
    @Test
    void framingIsSeparateFromTheTcpDataPath() {
        noClasses().that().belongToAnyOf(ControlConnection.class).or().haveFullyQualifiedName("io.kvferry.transport.FrameReader")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.plan..", "io.kvferry.memory..",
                        "io.kvferry.transport.tcp..")
                .because("a control connection frames and keeps a link alive; what WRITE frames carry is tcp's data path")
                .check(CORE);
        noClasses().that().resideOutsideOfPackage("io.kvferry.transport.tcp..").and().doNotBelongToAnyOf(ControlConnection.class)
                .should().callMethod(ControlConnection.class, "writeFrames", ByteBuffer[].class, int.class, int.class, long.class)
                .orShould().callMethod(ControlConnection.class, "readPayload", ByteBuffer[].class, int.class)
                .orShould().callMethod(ControlConnection.class, "skipPayload", long.class)
                .because("only transport.tcp's frame writer and lander move payload bytes over a control connection")
                .check(CORE);
    }

    @Test
    void sessionToolkitIsSharedNotRoleSpecific() {
        noClasses().that().resideInAPackage("io.kvferry.session..")
                .should().dependOnClassesThat().resideInAnyPackage(ROLE_PACKAGES)
                .orShould().dependOnClassesThat().resideInAnyPackage("io.kvferry.registry..")
                .check(CORE);
    }

    @Test
    void metricsSeeOnlyTheApiAndPlans() {
        noClasses().that().resideInAPackage("io.kvferry.metrics..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.memory..", "io.kvferry.protocol..",
                        "io.kvferry.registry..", "io.kvferry.transport..", "io.kvferry.session..", "io.kvferry.prefill..",
                        "io.kvferry.decode..", "io.kvferry.fake..")
                .because("instrumentation is fed by the managers; it must not reach into what it measures")
                .check(CORE);
    }

    @Test
    void prefillAndDecodeNeverSeeEachOther() {
        noClasses().that().resideInAPackage("io.kvferry.prefill..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.decode..", "io.kvferry.fake..")
                .check(CORE);
        noClasses().that().resideInAPackage("io.kvferry.decode..")
                .should().dependOnClassesThat().resideInAnyPackage("io.kvferry.prefill..", "io.kvferry.fake..")
                .check(CORE);
    }

    @Test
    void onlyTheFactoryNamesTheManagers() {
        noClasses().that().resideOutsideOfPackages(ROLE_PACKAGES).and().doNotBelongToAnyOf(KVFerry.class)
                .should().dependOnClassesThat().resideInAnyPackage(ROLE_PACKAGES)
                .because("engines and tools reach a manager through KVFerry.createManager and the KVManager interface")
                .check(CORE);
    }

    @Test
    void packagesAreFreeOfCycles() {
        slices().matching("io.kvferry.(*)..").should().beFreeOfCycles().check(CORE);
    }
}
