package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.ChecksumMode;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.function.Supplier;

import static io.kvferry.PlayedPrefill.wholeCoverage;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/** Shared set-up for in-JVM transfer tests: a registry with auth, test ranks, and one-request helpers. */
abstract class TransferTestBase {
    static final String TOKEN = "test-cluster-token";
    static final int PAGE_SIZE = 16;
    static final int BUFFERS = 4;
    static final int PAGES = 64;
    static final long PAGE_BYTES = 1024;
    static final int ROWS = 8;

    final List<AutoCloseable> closeables = new ArrayList<>();
    KVBootstrapServer registry;
    String addr;

    @BeforeEach
    void startRegistry() {
        registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
        addr = "127.0.0.1:" + registry.port();
    }

    @AfterEach
    void closeAll() throws Exception {
        Collections.reverse(closeables);
        for (AutoCloseable c : closeables) c.close();
        registry.close();
    }

    TestRank rank() {
        TestRank r = new TestRank(BUFFERS, PAGES, PAGE_BYTES, ROWS);
        closeables.add(r);
        return r;
    }

    KVManagerConfig.Builder cfg(int tp, int rank) {
        String[] hp = addr.split(":");
        return KVManagerConfig.builder().attnTp(tp, rank).bootstrap(hp[0], Integer.parseInt(hp[1])).authToken(TOKEN)
                .connectTimeout(Duration.ofSeconds(5));
    }

    KVManager prefill(TestRank mem, String backend, int tp, int rank, int pageSize) {
        KVManager m = KVFerry.createManager(backend, mem.args(rank, pageSize), DisaggregationMode.PREFILL, cfg(tp, rank).build());
        closeables.add(m);
        m.registerToBootstrap();
        return m;
    }

    KVManager decode(TestRank mem, String backend, KVManagerConfig config, int rank, int pageSize) {
        KVManager m = KVFerry.createManager(backend, mem.args(rank, pageSize), DisaggregationMode.DECODE, config);
        closeables.add(m);
        return m;
    }

    /** Acts as a prefill rank on an accepted connection: challenges it, reads the decode's HELLO, accepts it signed with TOKEN. */
    static Hello acceptAsPrefill(ControlConnection c) throws IOException {
        byte[] challenge = Handshake.nonce();
        c.send(new Challenge(challenge));
        Hello h = assertInstanceOf(Hello.class, c.read());
        assertTrue(h.verify(Handshake.key(TOKEN), challenge), "the decode signs its HELLO with the cluster token");
        c.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory())).signed(Handshake.key(TOKEN), h.decodeNonce()));
        return h;
    }

    /** Acts as a decode rank: answers the prefill's challenge with a HELLO signed with TOKEN and returns the answer. */
    static HelloAck registerAsDecode(ControlConnection c, String sessionId, MemoryDescriptor memory) throws IOException {
        Challenge ch = assertInstanceOf(Challenge.class, c.read());
        c.send(decodeHello(sessionId, memory).signed(Handshake.key(TOKEN), ch.nonce()));
        return assertInstanceOf(HelloAck.class, c.read());
    }

    /** An unsigned HELLO of a TP1 tcp decode with {@code memory}. */
    static Hello decodeHello(String sessionId, MemoryDescriptor memory) {
        return new Hello(sessionId, "instance-of-" + sessionId, Fingerprint.of("", "bf16", PAGE_SIZE, false, 0), "tcp", 0, 1, 0, 0,
                ChecksumMode.OFF, memory, List.of(), Handshake.nonce(), null, null);
    }

    /**
     * init() and then polls until the room has left Bootstrapping, as a scheduler would: the route's
     * lookups and link set-up run off the caller's thread. Returns the state it reached.
     */
    static KVPoll bootstrap(KVReceiver r, int prefillDpRank) {
        r.init(prefillDpRank);
        long deadline = System.nanoTime() + 30_000_000_000L;
        KVPoll st;
        while ((st = r.poll()) == KVPoll.Bootstrapping) {
            if (System.nanoTime() > deadline) fail("room " + r.bootstrapRoom() + " still Bootstrapping after 30 s");
            Thread.onSpinWait();
        }
        return st;
    }

    /** Asks for a room's prefill DP group as a scheduler would, every iteration until it is known (30 s at most). */
    static int dpRank(KVManager decode, String bootstrapAddr, long room) {
        long deadline = System.nanoTime() + 30_000_000_000L;
        int dp;
        while ((dp = decode.resolvePrefillDpRank(bootstrapAddr, room, null)) < 0) {
            if (System.nanoTime() > deadline) fail("room " + room + "'s prefill DP group still unknown after 30 s");
            Thread.onSpinWait();
        }
        return dp;
    }

    static void await(Supplier<KVPoll> poll, KVPoll expected) {
        long deadline = System.nanoTime() + 20_000_000_000L;
        KVPoll st = poll.get();
        while (st != expected) {
            if (st == KVPoll.Failed && expected != KVPoll.Failed) fail("reached Failed while waiting for " + expected);
            if (System.nanoTime() > deadline) fail("still " + st + " while waiting for " + expected);
            Thread.onSpinWait();
            st = poll.get();
        }
    }

    /** The exception a failed sender's or receiver's failureException() raises (call once: it clears the room). */
    static KVTransferException failed(Runnable failureException) {
        return assertThrows(KVTransferException.class, failureException::run);
    }

    static String failure(Runnable failureException) {
        KVTransferException e = assertThrows(KVTransferException.class, failureException::run);
        return e.getMessage();
    }

    static int[] distinctPages(Random rnd, int n, int pool) {
        List<Integer> all = new ArrayList<>();
        for (int i = 0; i < pool; i++) all.add(i);
        Collections.shuffle(all, rnd);
        return all.subList(0, n).stream().mapToInt(Integer::intValue).toArray();
    }

    /** One request, both sides, all in the calling thread. */
    record Transfer(long room, KVSender sender, KVReceiver receiver, int[] src, int[] dst, int srcRow, int dstRow, int prefixPages) {}

    Transfer start(KVManager p, TestRank pm, KVManager d, long room, int[] src, int[] dst, int srcRow, int dstRow,
                   int prefixPages) {
        KVReceiver recv = d.createReceiver(addr, room);
        bootstrap(recv, 0);
        assertEquals(KVPoll.WaitingForInput, recv.poll());
        KVSender send = p.createSender(addr, room);
        recv.sendMetadata(dst, dstRow, new int[][]{{dstRow}}, prefixPages * PAGE_SIZE);
        await(send::poll, KVPoll.WaitingForInput);
        int prefixTokens = send.popDecodePrefixLen();
        assertEquals(prefixPages * PAGE_SIZE, prefixTokens);
        for (int j = 0; j < src.length; j++) pm.fillPage(src[j], room, prefixPages + j);
        pm.fillRow(pm.aux, pm.auxItem, srcRow, room);
        pm.fillRow(pm.state, pm.stateItem, srcRow, room);
        send.init(src.length, srcRow);
        int chunk = 3;
        int sent = 0;
        do {
            int end = Math.min(src.length, sent + chunk);
            boolean last = end == src.length;
            int[] part = Arrays.copyOfRange(src, sent, end);
            if (send.shouldSendKvChunk(part.length, last)) send.send(part, last ? new int[][]{{srcRow}} : null);
            sent = end;
        } while (sent < src.length);
        return new Transfer(room, send, recv, src, dst, srcRow, dstRow, prefixPages);
    }

    void assertLanded(Transfer t, TestRank dm) {
        await(t.receiver::poll, KVPoll.Success);
        await(t.sender::poll, KVPoll.Success);
        for (int j = 0; j < t.dst.length; j++) {
            assertTrue(dm.pageMatches(t.dst[j], t.room, t.prefixPages + j), "page " + j + " of room " + t.room);
        }
        assertTrue(dm.rowMatches(dm.aux, dm.auxItem, t.dstRow, t.room, t.srcRow), "aux row of room " + t.room);
        assertTrue(dm.rowMatches(dm.state, dm.stateItem, t.dstRow, t.room, t.srcRow), "state slot of room " + t.room);
        long expectedBytes = t.dst.length * PAGE_BYTES * BUFFERS + 64 + 128 + 256 + 512;
        String path = t.receiver.getTransferMetric().transport();
        // Every data path, one-sided ones too: the decode checked each prefill rank delivered what it owed.
        assertEquals(expectedBytes, t.receiver.getTransferMetric().transferTotalBytes());
        assertEquals(path, t.sender.getTransferMetric().transport(), "both sides name the same data path");
        assertEquals(expectedBytes, t.sender.getTransferMetric().transferTotalBytes());
        assertTrue(t.sender.getTransferMetric().transferLatencySeconds() >= 0);
        assertTrue(t.receiver.getTransferMetric().transferLatencySeconds() >= 0);
        t.sender.clear();
        t.receiver.clear();
        assertEquals(KVPoll.Success, t.sender.poll(), "the terminal state stays latched after clear()");
    }
}
