package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.TransferInfo;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The prefill's handshake decisions, without sockets: each refusal names the field and carries its kind. */
class HandshakeValidatorTest {
    private static final long PAGE = 1024;
    private final Arena arena = Arena.ofConfined();

    @AfterEach
    void close() {
        arena.close();
    }

    /** Two KV buffers of {@code pages} pages, one aux buffer of 8 rows, one mamba state of 4 slots. */
    private KVArgs args(int pages, long pageBytes, int pageSize, String dtype) {
        KVArgs a = new KVArgs();
        a.pageSize = pageSize;
        a.kvCacheDtypeStr = dtype;
        a.totalKvHeadNum = 8;
        for (int b = 0; b < 2; b++) a.addKvBuffer(arena.allocate(pages * pageBytes), pageBytes);
        a.addAuxBuffer(arena.allocate(8 * 64), 64);
        a.addStateComponent(StateType.MAMBA, List.of(arena.allocate(4 * 256)), List.of(256L));
        return a;
    }

    private static Hello hello(String token, KVArgs decode, int tpSize, int flags) {
        return new Hello(token, "s1", "tcp", 0, tpSize, 0, decode.pageSize, decode.kvCacheDtypeStr,
                RegisteredMemory.from(decode).describe(), flags);
    }

    private HandshakeValidator validator(KVManagerConfig config) {
        KVArgs mine = args(16, PAGE, 16, "bf16");
        return new HandshakeValidator(RegisteredMemory.from(mine), config, mine.pageSize, mine.kvCacheDtypeStr, 8, false);
    }

    @Test
    void matchingLayoutIsAccepted() {
        assertNull(validator(KVManagerConfig.builder().build()).checkHello(hello("", args(32, PAGE, 16, "bf16"), 1, 0)),
                "a decode with more pages of the same size pairs");
    }

    @Test
    void wrongTokenIsAHandshakeRefusal() {
        HandshakeValidator v = validator(KVManagerConfig.builder().authToken("secret").build());
        HandshakeValidator.Refusal r = v.checkHello(hello("guess", args(16, PAGE, 16, "bf16"), 1, 0));
        assertNotNull(r);
        assertEquals(FailureKind.HANDSHAKE_REFUSED, r.kind());
        assertTrue(r.reason().contains("auth token"), r.reason());
        assertNull(v.checkHello(hello("secret", args(16, PAGE, 16, "bf16"), 1, 0)));
    }

    @Test
    void pageSizeDtypeAndItemLengthsAreLayoutRefusals() {
        HandshakeValidator v = validator(KVManagerConfig.builder().build());
        HandshakeValidator.Refusal page = v.checkHello(hello("", args(16, PAGE, 32, "bf16"), 1, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, page.kind());
        assertTrue(page.reason().contains("page_size mismatch: prefill uses 16, decode uses 32"), page.reason());
        HandshakeValidator.Refusal dtype = v.checkHello(hello("", args(16, PAGE, 16, "fp8"), 1, 0));
        assertTrue(dtype.reason().contains("kv_cache_dtype mismatch: prefill uses bf16, decode uses fp8"), dtype.reason());
        HandshakeValidator.Refusal item = v.checkHello(hello("", args(16, 2 * PAGE, 16, "bf16"), 1, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, item.kind());
        assertTrue(item.reason().contains("KV buffer 0 page size in bytes differs: prefill 1024"), item.reason());
    }

    @Test
    void tpSizesThatDoNotDivideAreRefused() {
        HandshakeValidator v = validator(KVManagerConfig.builder().attnTp(2, 0).build());
        HandshakeValidator.Refusal r = v.checkHello(hello("", args(16, PAGE, 16, "bf16"), 3, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, r.kind());
        assertTrue(r.reason().contains("attention TP sizes must divide one another: prefill 2, decode 3"), r.reason());
    }

    @Test
    void malformedDataPathNameIsRefused() {
        KVArgs d = args(16, PAGE, 16, "bf16");
        Hello h = new Hello("", "s1", "TCP;rm", 0, 1, 0, 16, "bf16", RegisteredMemory.from(d).describe(), 0);
        HandshakeValidator.Refusal r = validator(KVManagerConfig.builder().build()).checkHello(h);
        assertEquals(FailureKind.HANDSHAKE_REFUSED, r.kind());
        assertTrue(r.reason().contains("malformed data path name"), r.reason());
    }

    @Test
    void transferInfoOutsideTheDecodePoolsIsNamed() {
        MemoryDescriptor d = RegisteredMemory.from(args(16, PAGE, 16, "bf16")).describe();
        assertNull(HandshakeValidator.checkTransferInfo(d, new TransferInfo(1, new int[]{0, 15}, 7, new int[][]{{3}}, 1, 0, false)));
        assertEquals("destination page id 16 is outside the decode KV pool of 16 pages",
                HandshakeValidator.checkTransferInfo(d, new TransferInfo(1, new int[]{16}, -1, new int[0][], 1, 0, false)));
        assertEquals("destination aux index 8 is outside the decode metadata pool of 8 rows",
                HandshakeValidator.checkTransferInfo(d, new TransferInfo(1, new int[]{1}, 8, new int[0][], 1, 0, false)));
        assertEquals("destination state index 4 of component 0 is outside its 4 entries",
                HandshakeValidator.checkTransferInfo(d, new TransferInfo(1, new int[]{1}, 0, new int[][]{{4}}, 1, 0, false)));
        assertEquals("transfer info has 2 state index lists but decode registered 1 state components",
                HandshakeValidator.checkTransferInfo(d, new TransferInfo(1, new int[]{1}, 0, new int[][]{{0}, {0}}, 1, 0, false)));
    }

    /** KV pages of {@code heads} heads (16 tokens, 64-byte heads) plus one state component of two tensors (K and V window pages of {@code stateHeads} heads). */
    private KVArgs withWindowState(int heads, StateType type, boolean dims) {
        return withWindowState(heads, heads, type, dims);
    }

    private KVArgs withWindowState(int heads, int stateHeads, StateType type, boolean dims) {
        long page = 16L * heads * 64, statePage = 16L * stateHeads * 64;
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.kvCacheDtypeStr = "bf16";
        a.totalKvHeadNum = 4;
        for (int b = 0; b < 2; b++) a.addKvBuffer(arena.allocate(8 * page), page);
        a.addAuxBuffer(arena.allocate(8 * 64), 64);
        a.addStateComponent(type, List.of(arena.allocate(4 * statePage), arena.allocate(4 * statePage)), List.of(statePage, statePage));
        if (dims) {
            a.stateDimPerTensor.add(List.of(stateHeads, stateHeads));
            a.stateSliceOuterCounts.add(List.of(16, 16));
        }
        return a;
    }

    @Test
    void swaWindowPagesAreReshardedByHeadUnderATpChange() {
        // prefill TP2 (2 of 4 heads per rank) -> decode TP1 (4 heads) and TP4 (1 head)
        KVArgs mine = withWindowState(2, StateType.SWA, true);
        HandshakeValidator v = new HandshakeValidator(RegisteredMemory.from(mine), KVManagerConfig.builder().attnTp(2, 1).build(),
                16, "bf16", 4, false);
        assertNull(v.checkHello(hello("", withWindowState(4, StateType.SWA, true), 1, 0)));
        assertNull(v.checkHello(hello("", withWindowState(1, StateType.SWA, true), 4, 0)));
        HandshakeValidator.Refusal wrong = v.checkHello(hello("", withWindowState(4, 3, StateType.SWA, true), 1, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, wrong.kind());
        assertTrue(wrong.reason().contains("state component 0 (swa) tensor 0"), wrong.reason());
    }

    @Test
    void stateThatCannotBeReshardedIsNamedAtHello() {
        KVManagerConfig tp2 = KVManagerConfig.builder().attnTp(2, 0).build();
        HandshakeValidator noDims = new HandshakeValidator(RegisteredMemory.from(withWindowState(2, StateType.SWA, false)), tp2,
                16, "bf16", 4, false);
        HandshakeValidator.Refusal r = noDims.checkHello(hello("", withWindowState(4, StateType.SWA, false), 1, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, r.kind());
        assertTrue(r.reason().contains("state component 0 tensor 0 needs state_dim_per_tensor and state_slice_outer_counts"),
                r.reason());
        HandshakeValidator dsa = new HandshakeValidator(RegisteredMemory.from(withWindowState(2, StateType.DSA, true)), tp2,
                16, "bf16", 4, false);
        assertEquals("state component 0 (dsa) cannot be resharded between prefill TP 2 and decode TP 1",
                dsa.checkHello(hello("", withWindowState(4, StateType.DSA, true), 1, 0)).reason());
        // the same TP needs no reshard: the window copies page for page
        HandshakeValidator same = new HandshakeValidator(RegisteredMemory.from(withWindowState(2, StateType.DSA, false)), tp2,
                16, "bf16", 4, false);
        assertNull(same.checkHello(hello("", withWindowState(2, StateType.DSA, false), 2, 0)));
    }
}
