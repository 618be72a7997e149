package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.TransferInfo;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
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

    private static final byte[] CHALLENGE = Handshake.nonce();

    private static Hello hello(String token, KVArgs decode, int tpSize, int flags) {
        return hello(token, decode, tpSize, flags, "", "tcp");
    }

    /** A HELLO signed with {@code token}'s key for {@link #CHALLENGE}. */
    private static Hello hello(String token, KVArgs decode, int tpSize, int flags, String model, String dataPath) {
        return hello(token, decode, 0, tpSize, flags, model, dataPath);
    }

    /** As above, from decode attention TP rank {@code engineRank}. */
    private static Hello hello(String token, KVArgs decode, int engineRank, int tpSize, int flags, String model, String dataPath) {
        return new Hello("s1", "decode-1", Fingerprint.of(model, decode.kvCacheDtypeStr, decode.pageSize, false, decode.totalKvHeadNum),
                dataPath, engineRank, tpSize, 0, flags, ChecksumMode.OFF, RegisteredMemory.from(decode).describe(), List.of(), Handshake.nonce(),
                null, null).signed(Handshake.key(token), CHALLENGE);
    }

    private HandshakeValidator validator(KVManagerConfig config) {
        KVArgs mine = args(16, PAGE, 16, "bf16");
        return new HandshakeValidator(RegisteredMemory.from(mine), config,
                Fingerprint.of(config.modelIdentity(), mine.kvCacheDtypeStr, mine.pageSize, config.isMla(), 8), false);
    }

    @Test
    void matchingLayoutIsAccepted() {
        assertNull(validator(KVManagerConfig.builder().build()).checkHello(hello("", args(32, PAGE, 16, "bf16"), 1, 0)),
                "a decode with more pages of the same size pairs");
    }

    @Test
    void aHelloNotSignedWithTheClusterTokenIsAHandshakeRefusal() {
        HandshakeValidator v = validator(KVManagerConfig.builder().authToken("secret").build());
        HandshakeValidator.Refusal r = v.checkMac(hello("guess", args(16, PAGE, 16, "bf16"), 1, 0), CHALLENGE);
        assertNotNull(r);
        assertEquals(FailureKind.HANDSHAKE_REFUSED, r.kind());
        assertTrue(r.reason().contains("auth token"), r.reason());
        assertNull(v.checkMac(hello("secret", args(16, PAGE, 16, "bf16"), 1, 0), CHALLENGE));
        assertNotNull(v.checkMac(hello("secret", args(16, PAGE, 16, "bf16"), 1, 0), Handshake.nonce()),
                "a HELLO answering another challenge (a replay) is refused");
        assertNotNull(v.checkMac(hello("", args(16, PAGE, 16, "bf16"), 1, 0), CHALLENGE), "no token is not the token");
    }

    @Test
    void aChangedFieldBreaksTheMac() {
        HandshakeValidator v = validator(KVManagerConfig.builder().authToken("secret").build());
        Hello h = hello("secret", args(16, PAGE, 16, "bf16"), 1, 0);
        Hello tampered = new Hello("someone-else", h.instanceId(), h.fingerprint(), h.dataPath(), h.engineRank(), h.attnTpSize(),
                h.ppRank(), h.flags(), h.checksum(), h.memory(), h.offers(), h.decodeNonce(), h.resumeProof(), h.mac());
        assertNotNull(v.checkMac(tampered, CHALLENGE), "the MAC covers the whole HELLO");
    }

    @Test
    void fingerprintMismatchesNameTheField() {
        HandshakeValidator v = validator(KVManagerConfig.builder().modelIdentity("stories260K@abc").build());
        HandshakeValidator.Refusal model = v.checkHello(hello("", args(16, PAGE, 16, "bf16"), 1, 0, "stories15M@def", "tcp"));
        assertEquals(FailureKind.LAYOUT_REFUSED, model.kind());
        assertTrue(model.reason().contains("model differs: prefill stories260K@abc, decode stories15M@def"), model.reason());
        Hello otherBuild = hello("", args(16, PAGE, 16, "bf16"), 1, 0, "stories260K@abc", "tcp");
        otherBuild = new Hello(otherBuild.sessionId(), otherBuild.instanceId(), new Fingerprint("0.0.9", "stories260K@abc", "bf16", 16,
                false, 8), "tcp", 0, 1, 0, 0, ChecksumMode.OFF, otherBuild.memory(), List.of(), null, null, null);
        HandshakeValidator.Refusal version = v.checkHello(otherBuild);
        assertEquals(FailureKind.HANDSHAKE_REFUSED, version.kind());
        assertTrue(version.reason().contains("kvferry version differs"), version.reason());
        KVArgs mla = args(16, PAGE, 16, "bf16");
        Hello mlaHello = new Hello("s1", "d", Fingerprint.of("stories260K@abc", "bf16", 16, true, 8), "tcp", 0, 1, 0, 0,
                ChecksumMode.OFF, RegisteredMemory.from(mla).describe(), List.of(), null, null, null);
        assertTrue(v.checkHello(mlaHello).reason().contains("is_mla differs: prefill false, decode true"));
    }

    @Test
    void coverageSaysWhichBytesThisRankWrites() {
        HandshakeValidator whole = validator(KVManagerConfig.builder().build());
        Hello same = hello("", args(16, PAGE, 16, "bf16"), 1, 0);
        Coverage c = whole.coverage(same, new int[] {0, 1}, null);
        assertArrayEquals(new long[] {PAGE, PAGE}, c.kvUnit());
        assertArrayEquals(new long[] {PAGE, PAGE}, c.kvLength());
        assertTrue(c.aux() && c.state());
        assertNull(c.checkAgainst(same.memory()));
        // Prefill TP 2 rank 1 -> decode TP 1: this rank's 4 of the 8 heads of every token slot, at heads 4..7.
        HandshakeValidator half = validator(KVManagerConfig.builder().attnTp(2, 1).build());
        Hello one = hello("", args(16, 2 * PAGE, 16, "bf16"), 1, 0);
        Coverage sliced = half.coverage(one, new int[] {0, 1}, half.headSlices(one, new int[] {0, 1}));
        long token = 2 * PAGE / 16;
        assertArrayEquals(new long[] {token, token}, sliced.kvUnit());
        assertArrayEquals(new long[] {token / 2, token / 2}, sliced.kvOffset());
        assertArrayEquals(new long[] {token / 2, token / 2}, sliced.kvLength());
        assertNull(sliced.checkAgainst(one.memory()));
        // A non-zero CP rank under all-CP-ranks transfer sends only KV: no aux, no state.
        Coverage cp = validator(KVManagerConfig.builder().attnCp(2, 1).allCpRanksTransfer(true).build())
                .coverage(same, new int[] {0, 1}, null);
        assertFalse(cp.aux());
        assertFalse(cp.state());
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
    void aDecodeRankThatDoesNotReadFromThisRankIsRefused() {
        // Prefill rank 1 of TP 2 holds heads 4..7; decode rank 0 of TP 2 holds heads 0..3 and reads from prefill rank 0.
        // Accepted before: whole pages of the wrong heads would have been copied into its pages.
        HandshakeValidator v = validator(KVManagerConfig.builder().attnTp(2, 1).build());
        HandshakeValidator.Refusal r = v.checkHello(hello("", args(16, PAGE, 16, "bf16"), 0, 2, 0, "", "tcp"));
        assertNotNull(r, "a decode rank reading from another prefill rank is refused");
        assertEquals(FailureKind.LAYOUT_REFUSED, r.kind());
        assertEquals("decode attention TP rank 0 of 2 reads from prefill attention TP ranks [0], not from this rank 1 of 2; its route to "
                + "this address is stale or wrong", r.reason());
        assertNull(v.checkHello(hello("", args(16, PAGE, 16, "bf16"), 1, 2, 0, "", "tcp")));
        assertNull(v.checkHello(hello("", args(16, PAGE, 16, "bf16"), 3, 2, 0, "", "tcp")), "the engine rank is taken modulo the TP size");
        // Decode rank 1 of TP 4 (heads 2..3) reads from prefill rank 0 only.
        HandshakeValidator.Refusal sliced = v.checkHello(hello("", args(16, PAGE / 2, 16, "bf16"), 1, 4, 0, "", "tcp"));
        assertNotNull(sliced);
        assertTrue(sliced.reason().contains("reads from prefill attention TP ranks [0], not from this rank 1"), sliced.reason());
    }

    @Test
    void malformedDataPathNameIsRefused() {
        KVArgs d = args(16, PAGE, 16, "bf16");
        Hello h = hello("", d, 1, 0, "", "TCP;rm");
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

    private static HandshakeValidator windowValidator(KVArgs mine, KVManagerConfig config) {
        return new HandshakeValidator(RegisteredMemory.from(mine), config,
                Fingerprint.of(config.modelIdentity(), mine.kvCacheDtypeStr, mine.pageSize, config.isMla(), 4), false);
    }

    @Test
    void swaWindowPagesAreReshardedByHeadUnderATpChange() {
        // prefill TP2 (2 of 4 heads per rank) -> decode TP1 (4 heads) and TP4 (1 head)
        KVArgs mine = withWindowState(2, StateType.SWA, true);
        HandshakeValidator v = windowValidator(mine, KVManagerConfig.builder().attnTp(2, 1).build());
        Hello toOne = hello("", withWindowState(4, StateType.SWA, true), 1, 0);
        assertNull(v.checkHello(toOne));
        assertNull(v.checkHello(hello("", withWindowState(1, StateType.SWA, true), 2, 4, 0, "", "tcp")),
                "decode rank 2 of TP 4 reads from prefill rank 1 of TP 2");
        // Rank 1 writes heads 2..3 of every token of each window page: 128 of every 256 bytes, from byte 128.
        Coverage c = v.coverage(toOne, new int[] {0, 1}, v.headSlices(toOne, new int[] {0, 1}));
        assertArrayEquals(new long[][] {{256, 256}}, c.stateUnit());
        assertArrayEquals(new long[][] {{128, 128}}, c.stateOffset());
        assertArrayEquals(new long[][] {{128, 128}}, c.stateLength());
        HandshakeValidator.Refusal wrong = v.checkHello(hello("", withWindowState(4, 3, StateType.SWA, true), 1, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, wrong.kind());
        assertTrue(wrong.reason().contains("state component 0 (swa) tensor 0"), wrong.reason());
    }

    @Test
    void stateThatCannotBeReshardedIsNamedAtHello() {
        KVManagerConfig tp2 = KVManagerConfig.builder().attnTp(2, 0).build();
        HandshakeValidator noDims = windowValidator(withWindowState(2, StateType.SWA, false), tp2);
        HandshakeValidator.Refusal r = noDims.checkHello(hello("", withWindowState(4, StateType.SWA, false), 1, 0));
        assertEquals(FailureKind.LAYOUT_REFUSED, r.kind());
        assertTrue(r.reason().contains("state component 0 tensor 0 needs state_dim_per_tensor and state_slice_outer_counts"),
                r.reason());
        HandshakeValidator dsa = windowValidator(withWindowState(2, StateType.DSA, true), tp2);
        assertEquals("state component 0 (dsa) cannot be resharded between prefill TP 2 and decode TP 1",
                dsa.checkHello(hello("", withWindowState(4, StateType.DSA, true), 1, 0)).reason());
        // the same TP needs no reshard: the window copies page for page
        HandshakeValidator same = windowValidator(withWindowState(2, StateType.DSA, false), tp2);
        assertNull(same.checkHello(hello("", withWindowState(2, StateType.DSA, false), 2, 0)));
    }
}
