package io.kvferry.decode;

import io.kvferry.api.KVArgs;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.PlanException;
import io.kvferry.protocol.Coverage;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.statistics.Statistics;

import java.lang.foreign.Arena;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The coverage a prefill declares in its (signed) HELLO_ACK is a broken or hostile peer's word until
 * checked: {@link Coverage#checkAgainst} refuses what does not fit this rank's memory, building its
 * granules may refuse a slice no op can carry ({@link PlanException}), and anything that passes yields
 * owed byte counts and granule bits within what the room's items hold, never an arithmetic surprise
 * (a division by a zero unit, an overflow to a negative count). Slices are drawn plausible (a unit
 * dividing the item, a range inside it) and then, often, broken in one field.
 */
class HostileCoveragePropertiesTest {
    private static final Arena ARENA = Arena.ofShared();
    private static final long PAGE = 8L << 20, AUX = 64, SLOT = 1024;
    private static final RegisteredMemory MEMORY = memory();

    private static RegisteredMemory memory() {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(ARENA.allocate(PAGE), PAGE); // one 8 MiB page: some slices are larger than one op
        a.addKvBuffer(ARENA.allocate(PAGE), PAGE);
        a.addAuxBuffer(ARENA.allocate(4 * AUX), AUX);
        a.addStateComponent(StateType.MAMBA, List.of(ARENA.allocate(4 * SLOT)), List.of(SLOT));
        return RegisteredMemory.from(a);
    }

    private static final long[] ODD = {-1, 0, 1, 3, Long.MAX_VALUE, Long.MIN_VALUE, Integer.MAX_VALUE + 1L, 4L << 20, (4L << 20) + 1};

    /** (unit, offset, length) of an item of {@code item} bytes: plausible, then perhaps one field replaced. */
    private static Arbitrary<long[]> slice(long item) {
        Arbitrary<long[]> plausible = Arbitraries.integers().between(0, 12).flatMap(shift -> {
            long unit = Math.max(1, item >> shift);
            return Arbitraries.longs().between(0, unit).flatMap(length -> Arbitraries.longs().between(0, unit - length)
                    .map(offset -> new long[]{unit, offset, length}));
        });
        return plausible.flatMap(s -> Arbitraries.integers().between(0, 5).flatMap(field -> field > 2 ? Arbitraries.just(s)
                : Arbitraries.of(Arrays.stream(ODD).boxed().toList()).map(v -> {
                    long[] t = s.clone();
                    t[field] = v;
                    return t;
                })));
    }

    @Provide
    Arbitrary<long[]> kvSlices() {
        return slice(PAGE);
    }

    @Provide
    Arbitrary<long[]> stateSlices() {
        return slice(SLOT);
    }

    @Provide
    Arbitrary<Integer> kvCounts() {
        return Arbitraries.of(1, 2, 2, 2, 2, 2, 3);
    }

    @Provide
    Arbitrary<Integer> stateCounts() {
        return Arbitraries.of(0, 1, 1, 1, 1, 1, 2);
    }

    @Property(seed = "20261207", tries = 2000)
    void aCoverageFitsAndAddsUpOrIsRefused(@ForAll("kvCounts") int kvCount, @ForAll("stateCounts") int stateCount,
                                           @ForAll("kvSlices") long[] kv0, @ForAll("kvSlices") long[] kv1, @ForAll("stateSlices") long[] st,
                                           @ForAll boolean aux, @ForAll boolean state) {
        long[][] choice = {kv0, kv1, kv0};
        long[] unit = new long[kvCount], offset = new long[kvCount], length = new long[kvCount];
        for (int b = 0; b < kvCount; b++) {
            unit[b] = choice[b][0];
            offset[b] = choice[b][1];
            length[b] = choice[b][2];
        }
        long[][] sUnit = new long[stateCount][], sOffset = new long[stateCount][], sLength = new long[stateCount][];
        for (int c = 0; c < stateCount; c++) {
            sUnit[c] = new long[]{st[0]};
            sOffset[c] = new long[]{st[1]};
            sLength[c] = new long[]{st[2]};
        }
        Coverage coverage = new Coverage(unit, offset, length, aux, state, sUnit, sOffset, sLength);
        String misfit;
        try {
            misfit = coverage.checkAgainst(MEMORY.describe());
        } catch (Throwable t) {
            throw new AssertionError("checkAgainst failed with " + t, t);
        }
        if (misfit != null) {
            Statistics.collect("misfit");
            return;
        }
        LinkGranules granules;
        try {
            granules = LinkGranules.of(coverage, MEMORY);
        } catch (PlanException e) {
            Statistics.collect("no op can carry it");
            return;
        } catch (Throwable t) {
            throw new AssertionError("LinkGranules.of failed with " + t, t);
        }
        Statistics.collect("fits");
        if (kvCount != 2 || stateCount != 1) fail("a coverage of " + kvCount + " KV buffers and " + stateCount + " state components fit");
        int[][] slots = {{0, 1, 2, 3}};
        for (int pages = 0; pages <= 1; pages++) {
            long owed = Completeness.owed(coverage, MEMORY, pages, 1, slots);
            long most = pages * 2 * PAGE + AUX + 4 * SLOT;
            assertTrue(owed >= 0 && owed <= most, "owed " + owed + " bytes of at most " + most);
            long bits = granules.bits(pages, true, slots);
            assertTrue(bits >= 0 && bits <= most, "granule bits " + bits);
        }
    }
}
