package io.kvferry.tools;

import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;

import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.io.OutputStream;
import java.io.PrintStream;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Topologies × model families × page and chunk sizes, each run end to end (registry, managers,
 * TCP) in one JVM, with every destination byte checked against the logical (token, head, layer)
 * oracle: a decode rank must hold exactly what the oracle says, nothing less and nothing else.
 */
class TopologyMatrixTest {
    record Topology(int prefillTp, int decodeTp, int prefillPp, boolean decodePpSame, int kvHeads, boolean mla,
                    int pageSize, int chunkTokens, int promptTokens, String transport) {}

    static BenchResult run(Topology t) throws Exception {
        ModelShape shape = ModelShape.preset("tiny").withKvHeads(t.kvHeads()).withMla(t.mla());
        Workload w = new Workload(5, t.promptTokens(), t.pageSize(), t.chunkTokens(), 2, 2, 1234L + t.hashCode());
        BenchConfig c = new BenchConfig(shape, w, t.transport(), t.prefillTp(), t.decodeTp(), t.prefillPp(),
                t.decodePpSame() ? t.prefillPp() : 1, "matrix", 1);
        return new BenchRunner(c, new PrintStream(OutputStream.nullOutputStream())).runWithoutBaselines(false);
    }

    static void assertExact(Topology t) throws Exception {
        BenchResult r = run(t);
        assertEquals(0, r.corrupted(), () -> t + ": corrupted; " + r.firstFailures());
        assertEquals(r.requests(), r.succeeded(), () -> t + ": " + r.firstFailures());
    }

    @ParameterizedTest(name = "P{0} D{1} PP{2}{3} H{4} mla={5} page={6} chunk={7}")
    @CsvSource({
            "1,1,1,false,8,false,16,64,200,tcp",
            "2,2,1,false,8,false,16,64,200,tcp",
            "4,2,1,false,8,false,16,48,200,tcp",
            "2,4,1,false,8,false,16,64,200,tcp",
            "1,8,1,false,8,false,1,7,40,tcp",
            "8,1,1,false,8,false,16,64,200,tcp",
            "4,2,1,false,2,false,16,64,200,tcp",
            "2,8,1,false,2,false,64,128,300,tcp",
            "1,4,1,false,1,true,16,64,200,tcp",
            "4,1,1,false,1,true,16,64,200,tcp",
            "8,2,1,false,1,true,64,64,300,tcp",
            "1,1,2,false,8,false,16,64,200,tcp",
            "1,1,2,true,8,false,16,64,200,tcp",
            "2,2,4,false,8,false,1,5,30,tcp",
            "2,1,2,false,2,false,16,64,200,tcp",
            "1,1,4,true,1,true,16,32,200,tcp",
            "4,2,1,false,8,false,16,64,200,inproc",
            "1,2,2,false,2,false,64,64,260,inproc"})
    @Timeout(60)
    void curated(int p, int d, int pp, boolean same, int heads, boolean mla, int page, int chunk, int prompt, String transport)
            throws Exception {
        assertExact(new Topology(p, d, pp, same, heads, mla, page, chunk, prompt, transport));
    }

    @ParameterizedTest(name = "CP{0} all={1} DP{2} with P{3} D{4} PP{5}")
    @CsvSource({"2,false,1,1,1,1", "3,true,1,1,1,1", "2,true,1,2,1,1", "1,false,2,1,1,1", "1,false,2,2,4,1",
            "2,true,2,1,1,2", "1,false,4,1,2,1"})
    @Timeout(60)
    void contextAndDataParallelPrefill(int cp, boolean allCp, int dp, int p, int d, int pp) throws Exception {
        Workload w = new Workload(8, 230, 16, 64, 2, 3, 77L + cp * 10 + dp);
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny").withKvHeads(4), w, "tcp", p, d, pp, 1, cp, allCp, dp,
                "matrix", 1);
        BenchResult r = new BenchRunner(c, new PrintStream(OutputStream.nullOutputStream())).runWithoutBaselines(false);
        assertEquals(0, r.corrupted(), () -> c + ": " + r.firstFailures());
        assertEquals(8, r.succeeded(), () -> c + ": " + r.firstFailures());
    }

    /** Groups assigned round robin: the decode can only find a room's group through the registry (/query_dp_ranks). */
    @ParameterizedTest(name = "DP{0} round robin, P{1} D{2}")
    @CsvSource({"2,1,1", "4,2,1"})
    @Timeout(60)
    void dataParallelPrefillPublishingEachRoomsGroupInTheRegistry(int dp, int p, int d) throws Exception {
        Workload w = new Workload(12, 230, 16, 64, 3, 3, 91L + dp, 0, true);
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny").withKvHeads(4), w, "tcp", p, d, 1, 1, 1, false, dp,
                "matrix", 1);
        BenchResult r = new BenchRunner(c, new PrintStream(OutputStream.nullOutputStream())).runWithoutBaselines(false);
        assertEquals(0, r.corrupted(), () -> c + ": " + r.firstFailures());
        assertEquals(12, r.succeeded(), () -> c + ": " + r.firstFailures());
    }

    @Property(seed = "20261207", tries = 12)
    void randomTopologiesAreByteExact(@ForAll("topologies") Topology t) throws Exception {
        assertExact(t);
    }

    @Provide
    Arbitrary<Topology> topologies() {
        Arbitrary<Integer> tp = Arbitraries.of(1, 2, 4, 8);
        Arbitrary<Integer> pp = Arbitraries.of(1, 2, 4);
        Arbitrary<Integer> heads = Arbitraries.of(1, 2, 4, 8);
        Arbitrary<Integer> page = Arbitraries.of(1, 4, 16, 64);
        return Combinators.combine(tp, tp, pp, Arbitraries.of(true, false), heads, Arbitraries.of(true, false), page,
                        Arbitraries.integers().between(1, 300))
                .as((p, d, stages, same, h, mla, ps, promptTokens) -> {
                    int prefillPp = p * stages > 8 ? 1 : stages; // keep the JVM's rank count modest
                    int chunk = Math.max(ps, (promptTokens / 3 / ps) * ps + (promptTokens % 2 == 0 ? ps : 0));
                    return new Topology(p, d, prefillPp, same && prefillPp > 1, mla ? 1 : h, mla, ps, chunk,
                            Math.max(ps, promptTokens), "tcp");
                });
    }
}
