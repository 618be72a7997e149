package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.StateType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.function.Executable;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What an embedding engine hands {@code KVFerry.createManager} is checked there, with an error naming what is wrong. */
@Timeout(60)
class ManagerArgumentsTest extends TransferTestBase {

    /**
     * Null where createManager needs a value: a null mode made a decode manager (of a rank that may have been
     * meant as a prefill), and null entries of KVArgs' lists failed with bare NullPointerExceptions.
     */
    @Test
    void nullArgumentsAndNullEntriesOfKVArgsAreNamed() {
        TestRank m = rank();
        KVManagerConfig c = cfg(1, 0).build();
        assertRefused("disaggregation mode is null", () -> KVFerry.createManager("tcp", m.args(0, PAGE_SIZE), null, c));
        assertRefused("disaggregation mode is null", () -> KVFerry.createManager("fake", null, null, c));
        assertRefused("KVArgs is null", () -> KVFerry.createManager("tcp", null, DisaggregationMode.PREFILL, c));
        assertRefused("KVManagerConfig is null", () -> KVFerry.createManager("tcp", m.args(0, PAGE_SIZE), DisaggregationMode.DECODE, null));
        KVArgs layers = m.args(0, PAGE_SIZE);
        layers.kvLayerIds.addAll(Arrays.asList(0, 1, null, 3));
        assertRefused("kv_layer_ids[2] is null", () -> KVFerry.createManager("tcp", layers, DisaggregationMode.DECODE, c));
        KVArgs type = m.args(0, PAGE_SIZE);
        type.stateTypes.set(0, null);
        assertRefused("state component 0 has no state type (null)", () -> KVFerry.createManager("tcp", type, DisaggregationMode.PREFILL, c));
        KVArgs tensors = m.args(0, PAGE_SIZE);
        tensors.stateData.set(0, null);
        assertRefused("state component 0 has no tensor list (null)", () -> KVFerry.createManager("tcp", tensors, DisaggregationMode.DECODE, c));
        KVArgs items = m.args(0, PAGE_SIZE);
        items.stateItemLens.set(0, null);
        assertRefused("state component 0 has no item length list (null)", () -> KVFerry.createManager("tcp", items, DisaggregationMode.PREFILL, c));
    }

    /**
     * What was refused only later, or lost: a null KV dtype (the registry's "Missing field 'kv_cache_dtype'" at
     * registration), a prefill's pp rank past pp_size (the registry's refusal at registration), and a null sink
     * given to the change feed, which popped its entry first and lost it.
     */
    @Test
    void aNullDtypeAPpRankPastPpSizeAndANullFeedSinkAreRefusedUpFront() {
        TestRank m = rank();
        KVManagerConfig c = cfg(1, 0).build();
        KVArgs dtype = m.args(0, PAGE_SIZE);
        dtype.kvCacheDtypeStr = null;
        assertRefused("KVArgs.kvCacheDtypeStr is null", () -> KVFerry.createManager("tcp", dtype, DisaggregationMode.DECODE, c));
        KVArgs pp = m.args(0, PAGE_SIZE);
        pp.ppRank = 1;
        assertRefused("KVArgs.ppRank 1 is outside [0, pp_size 1)", () -> KVFerry.createManager("tcp", pp, DisaggregationMode.PREFILL, c));

        TestRank dm = rank();
        KVManager d = decode(dm, "tcp", c, 0, PAGE_SIZE);
        assertTrue(d.enableChangeFeed());
        KVReceiver r = d.createReceiver(addr, 62); // a new receiver is fed once
        assertRefused("drainChangedReceivers: the sink is null", () -> d.drainChangedReceivers(null));
        List<KVReceiver> fed = new ArrayList<>();
        d.drainChangedReceivers(fed::add);
        assertEquals(List.of(r), fed, "the refused drain lost nothing");
    }

    /**
     * Two registered buffers that share bytes (the same segment added twice, or an aux buffer inside a KV pool) were
     * accepted: a write meant for one lands in the other's pages, and the gate counts per buffer, so nothing notices.
     */
    @Test
    void buffersThatShareBytesAreRefusedNamingBoth() {
        TestRank m = rank();
        KVArgs twice = m.args(0, PAGE_SIZE);
        twice.addKvBuffer(m.kv[1], PAGE_BYTES);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KVFerry.createManager("tcp", twice, DisaggregationMode.DECODE, cfg(1, 0).build()));
        assertTrue(e.getMessage().contains("overlaps KV buffer 1") || e.getMessage().startsWith("KV buffer 1 "), e.getMessage());
        assertTrue(e.getMessage().contains("KV buffer " + BUFFERS), e.getMessage());
        assertTrue(e.getMessage().contains("registered buffers must not share bytes"), e.getMessage());
        KVArgs inside = m.args(0, PAGE_SIZE);
        inside.addAuxBuffer(m.kv[2].asSlice(PAGE_BYTES, 64), 64);
        assertRefused("overlaps KV buffer 2", () -> KVFerry.createManager("tcp", inside, DisaggregationMode.PREFILL, cfg(1, 0).build()));
        KVArgs adjacent = m.args(0, PAGE_SIZE); // the engine's pools are often slices of one arena, back to back: fine
        assertTrue(adjacent.kvData.size() == BUFFERS);
        KVFerry.createManager("tcp", adjacent, DisaggregationMode.DECODE, cfg(1, 0).build()).close();
    }

    /** A prefill manager torn down (a role switch) refuses to register its closed endpoint, saying so; it said "java.nio.channels.ClosedChannelException". */
    @Test
    void aTornDownPrefillRefusesToRegisterSayingWhy() {
        KVManager p = prefill(rank(), "tcp", 1, 0, PAGE_SIZE);
        p.close();
        IllegalStateException e = assertThrows(IllegalStateException.class, p::registerToBootstrap);
        assertTrue(e.getMessage().contains("the prefill KV manager was torn down"), e.getMessage());
    }

    /**
     * An engine that closes its pools' arena while a room still expects writes: the link's reader died of the
     * landing's IllegalStateException, uncaught, and every room of the link failed as "Lost connection with
     * prefill instance", kind peer_lost, blaming a prefill that was fine. The room now names the reader's failure.
     */
    @Test
    void aDecodeReaderThatFailsOnItsOwnMemorySaysSoInsteadOfBlamingThePrefill() {
        TestRank pm = rank();
        TestRank dm = new TestRank(BUFFERS, PAGES, PAGE_BYTES, ROWS, true); // closed here, not by the base class
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 61);
        bootstrap(recv, 0);
        KVSender send = p.createSender(addr, 61);
        recv.sendMetadata(new int[]{3}, 0, new int[][]{{0}}, 0);
        await(send::poll, KVPoll.WaitingForInput);
        dm.close(); // the engine's mistake: its pools are gone while the room is in flight
        send.init(1, 0);
        send.send(new int[]{5}, new int[][]{{0}});
        await(recv::poll, KVPoll.Failed);
        KVTransferException e = failed(recv::failureException);
        assertEquals(FailureKind.TRANSFER_ERROR, e.kind(), e.getMessage());
        assertTrue(e.getMessage().contains("the decode's reader of the link to prefill instance (bootstrap_addr: " + addr + ") failed"),
                e.getMessage());
    }

    /** A second receiver for a room in flight on the decode is refused naming it, and the first one's transfer goes on untouched. */
    @Test
    void aSecondReceiverForARoomInFlightIsRefused() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver first = d.createReceiver(addr, 60);
        bootstrap(first, 0);
        assertRefused("bootstrap_room 60 is already in flight on this decode rank", () -> d.createReceiver(addr, 60));
        first.clear();
        assertLanded(start(p, pm, d, 60, new int[]{1}, new int[]{2}, 0, 0, 0), dm); // once cleared, the id is free again
    }

    /**
     * A buffer added by raw address 0 (a null pointer: a tensor not allocated yet) was registered, and the first
     * transfer that read or wrote it crashed the JVM with a SIGSEGV (prefill or decode alike). It is refused naming it.
     */
    @Test
    void aBufferAtAddressZeroIsRefused() {
        TestRank m = rank();
        KVManagerConfig c = cfg(1, 0).build();
        KVArgs kv = m.args(0, PAGE_SIZE);
        kv.addKvBuffer(0L, PAGES * PAGE_BYTES, PAGE_BYTES);
        assertRefused("KV buffer " + BUFFERS + " is at address 0 (a null pointer)", () -> KVFerry.createManager("tcp", kv, DisaggregationMode.DECODE, c));
        KVArgs aux = m.args(0, PAGE_SIZE);
        aux.addAuxBuffer(0L, 64L * ROWS, 64);
        assertRefused("aux buffer 2 is at address 0", () -> KVFerry.createManager("tcp", aux, DisaggregationMode.PREFILL, c));
        KVArgs state = m.args(0, PAGE_SIZE);
        state.addStateComponent(StateType.MAMBA, List.of(MemorySegment.ofAddress(0).reinterpret(256L * ROWS)), List.of(256L));
        assertRefused("state component 1 tensor 0 is at address 0", () -> KVFerry.createManager("tcp", state, DisaggregationMode.DECODE, c));
    }

    /**
     * A buffer from a confined arena: only its allocating thread may touch it, and kvferry's threads move its bytes.
     * It was registered; on a decode the link reader landing in it died (WrongThreadException) and every room of
     * the link failed as "Lost connection with prefill instance", on a prefill each room failed at its first chunk.
     */
    @Test
    void aBufferConfinedToOneThreadIsRefused() {
        TestRank m = rank();
        try (Arena confined = Arena.ofConfined()) {
            KVArgs a = m.args(0, PAGE_SIZE);
            a.kvData.set(1, confined.allocate(PAGES * PAGE_BYTES, 64));
            assertRefused("KV buffer 1 is confined to the thread that allocated it",
                    () -> KVFerry.createManager("tcp", a, DisaggregationMode.DECODE, cfg(1, 0).build()));
            assertRefused("KV buffer 1 is confined", () -> KVFerry.createManager("tcp", a, DisaggregationMode.PREFILL, cfg(1, 0).build()));
        }
    }

    private static void assertRefused(String why, Executable create) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, create);
        assertTrue(e.getMessage().contains(why), e.getMessage());
    }

    /**
     * A decode rank's KVArgs.engineRank picks its prefill ranks and the KV heads they send it. Left at its
     * default 0 on attention TP rank 1 of 2, the rank bootstrapped with prefill rank 0 and received rank 0's
     * shard with no error (and prefill rank 1's sender waited for the bootstrap timeout).
     */
    @Test
    void aDecodeEngineRankThatIsNotItsAttentionTpRankIsRefused() {
        TestRank d1 = rank();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> decode(d1, "tcp", cfg(2, 1).build(), 0, PAGE_SIZE));
        assertTrue(e.getMessage().contains("KVArgs.engineRank 0 does not match attn_tp_rank 1 of attn_tp_size 2"), e.getMessage());
        KVArgs negative = d1.args(-1, PAGE_SIZE);
        assertThrows(IllegalArgumentException.class,
                () -> KVFerry.createManager("tcp", negative, DisaggregationMode.DECODE, cfg(1, 0).build()).close());
    }

    /**
     * A receiver whose bootstrap address cannot be a registry address (null, no port, a bad port): no lookup
     * can succeed, so the room fails at once naming the address. Before, it was retried as if the prefill were
     * still starting, for prefillInfoTimeout (15 s), and a null one then failed with a NullPointerException's text.
     */
    @Test
    void aMalformedBootstrapAddressFailsTheRoomAtOnce() {
        TestRank dm = rank();
        KVManager d = decode(dm, "tcp", cfg(1, 0).prefillInfoTimeout(Duration.ofSeconds(60)).build(), 0, PAGE_SIZE);
        String[][] cases = {{"nonsense", "bootstrap address 'nonsense' has no port"}, {null, "bootstrap address is null"},
            {"127.0.0.1:99999", "has port 99999 outside [1, 65535]"}};
        long room = 40;
        for (String[] c : cases) {
            KVReceiver r = d.createReceiver(c[0], room++);
            assertEquals(KVPoll.Failed, bootstrap(r, 0), "room for " + c[0]);
            KVTransferException e = failed(r::failureException);
            assertEquals(FailureKind.BAD_REQUEST, e.kind(), e.getMessage());
            assertTrue(e.getMessage().contains(c[1]), e.getMessage());
            IllegalArgumentException dp = assertThrows(IllegalArgumentException.class, () -> d.resolvePrefillDpRank(c[0], 7, null));
            assertTrue(dp.getMessage().contains(c[1]), dp.getMessage());
        }
        KVReceiver good = d.createReceiver(addr, room); // no prefill registered there yet: looked up again until one is
        good.init(0);
        assertEquals(KVPoll.Bootstrapping, good.poll(), "a well-formed address is looked up as before");
    }

    /** SGLang's global tp_rank form (its remainder is the attention TP rank) is accepted, and each rank gets its own prefill rank's shard. */
    @Test
    void aDecodeEngineRankCountedOverDpGroupsIsAccepted() {
        TestRank p0 = rank(), p1 = rank(), d1 = rank();
        prefill(p0, "tcp", 2, 0, PAGE_SIZE);
        KVManager pr1 = prefill(p1, "tcp", 2, 1, PAGE_SIZE);
        KVManager de1 = decode(d1, "tcp", cfg(2, 1).build(), 3, PAGE_SIZE);
        KVReceiver r = de1.createReceiver(addr, 5);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1}, -1, null, 0);
        KVSender s1 = pr1.createSender(addr, 5);
        await(s1::poll, KVPoll.WaitingForInput);
        p1.fillPage(3, 5, 0);
        s1.init(1, -1);
        s1.send(new int[]{3});
        await(r::poll, KVPoll.Success);
        assertTrue(d1.pageMatches(1, 5, 0));
    }
}
