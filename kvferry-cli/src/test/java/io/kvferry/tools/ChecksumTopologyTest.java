package io.kvferry.tools;

import io.kvferry.api.ChecksumMode;
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
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link TopologyMatrixTest}'s layouts with checksums on: heterogeneous TP both ways, MLA, PP, CP,
 * DP, hybrid state and decode prefixes, over inproc, tcp and shm, every byte checked against the
 * oracle. With {@code full} every WRITE (tcp) or destination item (the page digest of the other
 * paths) is verified, so any layout where the prefill's digest and the decode's recomputation
 * disagree fails its requests with kind integrity here, naming the layout; {@code sampled} checks a
 * subset the same way.
 */
class ChecksumTopologyTest {
    private static final PrintStream QUIET = new PrintStream(OutputStream.nullOutputStream());

    private static void assertVerified(BenchConfig c, String layout) throws Exception {
        BenchResult r = new BenchRunner(c, QUIET).runWithoutBaselines(false);
        assertEquals(0, r.corrupted(), () -> layout + " checksum=" + c.checksum().label() + ": corrupted; " + r.firstFailures());
        assertEquals(r.requests(), r.succeeded(), () -> layout + " checksum=" + c.checksum().label() + ": " + r.firstFailures());
    }

    /** TopologyMatrixTest's curated rows (and shm twins of the hetero ones), full or sampled. */
    @ParameterizedTest(name = "P{0} D{1} PP{2}{3} H{4} mla={5} page={6} chunk={7} {9} {10}")
    @CsvSource({
            "1,1,1,false,8,false,16,64,200,tcp,full",
            "2,2,1,false,8,false,16,64,200,tcp,full",
            "4,2,1,false,8,false,16,48,200,tcp,full",
            "2,4,1,false,8,false,16,64,200,tcp,full",
            "1,8,1,false,8,false,1,7,40,tcp,full",
            "8,1,1,false,8,false,16,64,200,tcp,full",
            "4,2,1,false,2,false,16,64,200,tcp,full",
            "2,8,1,false,2,false,64,128,300,tcp,full",
            "1,4,1,false,1,true,16,64,200,tcp,full",
            "4,1,1,false,1,true,16,64,200,tcp,full",
            "8,2,1,false,1,true,64,64,300,tcp,full",
            "1,1,2,false,8,false,16,64,200,tcp,full",
            "1,1,2,true,8,false,16,64,200,tcp,full",
            "2,2,4,false,8,false,1,5,30,tcp,full",
            "2,1,2,false,2,false,16,64,200,tcp,full",
            "1,1,4,true,1,true,16,32,200,tcp,full",
            "4,2,1,false,8,false,16,64,200,inproc,full",
            "1,2,2,false,2,false,64,64,260,inproc,full",
            "2,4,1,false,8,false,16,64,200,inproc,full",
            "4,1,1,false,1,true,16,64,200,inproc,full",
            "4,2,1,false,8,false,16,48,200,shm,full",
            "2,4,1,false,8,false,16,64,200,shm,full",
            "1,8,1,false,8,false,1,7,40,shm,full",
            "2,8,1,false,2,false,64,128,300,shm,full",
            "4,1,1,false,1,true,16,64,200,shm,full",
            "1,4,1,false,1,true,16,64,200,shm,full",
            "1,1,2,true,8,false,16,64,200,shm,full",
            "2,1,2,false,2,false,16,64,200,shm,full",
            "4,2,1,false,8,false,16,48,200,tcp,sampled",
            "2,8,1,false,2,false,64,128,300,tcp,sampled",
            "2,4,1,false,8,false,16,64,200,shm,sampled",
            "8,2,1,false,1,true,64,64,300,shm,sampled",
            "1,2,2,false,2,false,64,64,260,inproc,sampled"})
    @Timeout(60)
    void curatedLayouts(int p, int d, int pp, boolean same, int heads, boolean mla, int page, int chunk, int prompt,
                        String transport, String checksum) throws Exception {
        TopologyMatrixTest.Topology t = new TopologyMatrixTest.Topology(p, d, pp, same, heads, mla, page, chunk, prompt, transport);
        ModelShape shape = ModelShape.preset("tiny").withKvHeads(heads).withMla(mla);
        Workload w = new Workload(5, prompt, page, chunk, 2, 2, 1234L + t.hashCode());
        BenchConfig c = new BenchConfig(shape, w, transport, p, d, pp, same ? pp : 1, "matrix", 1)
                .withChecksum(ChecksumMode.parse(checksum));
        assertVerified(c, t.toString());
    }

    @ParameterizedTest(name = "CP{0} all={1} DP{2} with P{3} D{4} PP{5} {6} {7}")
    @CsvSource({"2,false,1,1,1,1,tcp,full", "3,true,1,1,1,1,tcp,full", "2,true,1,2,1,1,tcp,full", "1,false,2,1,1,1,tcp,full",
            "1,false,2,2,4,1,tcp,full", "2,true,2,1,1,2,tcp,full", "1,false,4,1,2,1,tcp,full", "2,true,1,2,1,1,shm,full",
            "1,false,2,2,4,1,shm,full", "3,true,1,1,1,1,inproc,full", "2,true,2,1,1,2,tcp,sampled", "2,true,1,2,1,1,shm,sampled"})
    @Timeout(60)
    void contextAndDataParallelPrefill(int cp, boolean allCp, int dp, int p, int d, int pp, String transport, String checksum)
            throws Exception {
        Workload w = new Workload(8, 230, 16, 64, 2, 3, 77L + cp * 10 + dp);
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny").withKvHeads(4), w, transport, p, d, pp, 1, cp, allCp, dp,
                "matrix", 1).withChecksum(ChecksumMode.parse(checksum));
        assertVerified(c, "CP" + cp + (allCp ? " all" : "") + " DP" + dp + " P" + p + " D" + d + " PP" + pp + " " + transport);
    }

    /** TopologyMatrixTest's random layouts, over a random data path, with full checksums. */
    @Property(seed = "20261207", tries = 10)
    void randomLayoutsVerifyUnderFullChecksums(@ForAll("layouts") TopologyMatrixTest.Topology t) throws Exception {
        ModelShape shape = ModelShape.preset("tiny").withKvHeads(t.kvHeads()).withMla(t.mla());
        Workload w = new Workload(5, t.promptTokens(), t.pageSize(), t.chunkTokens(), 2, 2, 1234L + t.hashCode());
        BenchConfig c = new BenchConfig(shape, w, t.transport(), t.prefillTp(), t.decodeTp(), t.prefillPp(),
                t.decodePpSame() ? t.prefillPp() : 1, "matrix", 1).withChecksum(ChecksumMode.FULL);
        assertVerified(c, t.toString());
    }

    @Provide
    Arbitrary<TopologyMatrixTest.Topology> layouts() {
        return Combinators.combine(new TopologyMatrixTest().topologies(), Arbitraries.of("tcp", "shm", "inproc"))
                .as((t, transport) -> new TopologyMatrixTest.Topology(t.prefillTp(), t.decodeTp(), t.prefillPp(), t.decodePpSame(),
                        t.kvHeads(), t.mla(), t.pageSize(), t.chunkTokens(), t.promptTokens(), transport));
    }

    /**
     * The runs above really verify: the same kind of layout with the prefill's corruption hook on every
     * room fails every request (full) or shows every one as corrupted (off).
     */
    @ParameterizedTest(name = "{0} {1}")
    @CsvSource({"shm,full", "shm,off", "inproc,full", "inproc,off"})
    @Timeout(60)
    void aDamagedByteFailsEveryLayoutRunUnderFullChecksums(String transport, String checksum) throws Exception {
        Workload w = new Workload(5, 200, 16, 64, 2, 2, 99L);
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny"), w, transport, 4, 2, 1, 1, "matrix", 1)
                .withChecksum(ChecksumMode.parse(checksum)).withFaults(new BenchConfig.Faults(0, 0, 0, 1.0));
        BenchResult r = new BenchRunner(c, QUIET).runWithoutBaselines(false);
        if (checksum.equals("full")) {
            assertEquals(0, r.succeeded(), () -> "a damaged room succeeded: " + r.firstFailures());
            assertEquals(0, r.corrupted());
        } else {
            // counted per decode rank: every request is damaged on at least one of them
            assertTrue(r.corrupted() >= r.requests(), () -> "without checksums the damage must show: " + r.firstFailures());
        }
    }

    /** Hybrid models: mamba state slots (re-sliced under heterogeneous TP) beside the KV pages. */
    @ParameterizedTest(name = "hybrid P{0} D{1} PP{2} {3} {4}")
    @CsvSource({"1,1,1,tcp,full", "2,1,1,tcp,full", "1,2,1,tcp,full", "2,2,2,tcp,full", "2,1,1,shm,full", "1,2,1,shm,full",
            "2,1,1,inproc,full", "1,2,1,inproc,full", "2,1,1,tcp,sampled", "1,2,1,shm,sampled"})
    @Timeout(60)
    void hybridState(int p, int d, int pp, String transport, String checksum) throws Exception {
        Workload w = new Workload(6, 300, 16, 64, 2, 2, 4242L + p * 10 + d);
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny-hybrid"), w, transport, p, d, pp, 1, "matrix", 1)
                .withChecksum(ChecksumMode.parse(checksum));
        assertVerified(c, "tiny-hybrid P" + p + " D" + d + " PP" + pp + " " + transport);
    }
}
