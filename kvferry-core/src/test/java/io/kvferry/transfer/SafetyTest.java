package io.kvferry.transfer;

import io.kvferry.api.FailureKind;
import io.kvferry.decode.DecodeKVManager;
import io.kvferry.prefill.PrefillKVManager;
import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.RoomChoice;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.memory.SharedMemory;
import io.kvferry.transport.WriteSink;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Memory safety and liveness: no byte after clear(), no stuck worker, no Success with missing pages. */
@Timeout(120)
class SafetyTest extends TransferTestBase {

    private TestRank big(int pages, long pageBytes) {
        TestRank r = new TestRank(1, pages, pageBytes, 4);
        closeables.add(r);
        return r;
    }

    private static KVPoll awaitTerminal(Supplier<KVPoll> p) {
        long deadline = System.nanoTime() + 20_000_000_000L;
        KVPoll st;
        while ((st = p.get()) != KVPoll.Success && st != KVPoll.Failed) {
            if (System.nanoTime() > deadline) return st;
            Thread.onSpinWait();
        }
        return st;
    }

    /** Abort + clear mid-transfer, then the pages are reused: nothing of the old room may land in them. */
    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm"})
    void noByteOfAClearedRoomLandsInReusedPages(String backend) throws Exception {
        long pb = 4L << 20;
        int np = 16;
        TestRank pm = big(np, pb), dm = big(np, pb);
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        int[] pages = IntStream.range(0, np).toArray();
        KVReceiver recv = d.createReceiver(addr, 77);
        bootstrap(recv, 0);
        KVSender send = p.createSender(addr, 77);
        recv.sendMetadata(pages, 0, null, 0);
        await(send::poll, KVPoll.WaitingForInput);
        for (int j = 0; j < np; j++) pm.fillPage(j, 77, j);
        send.init(np, 0);
        send.send(pages, null);
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (recv.poll() != KVPoll.Transferring && recv.poll() != KVPoll.Success) {
            assertTrue(System.nanoTime() < deadline, "never Transferring");
            Thread.onSpinWait();
        }
        recv.abort();
        recv.clear();
        // The scheduler frees the pages and another request writes all of them.
        dm.kv[0].fill((byte) 0);
        awaitTerminal(send::poll);
        Thread.sleep(300);
        for (int j = 0; j < np; j++) assertTrue(dm.pageIsZero(j), backend + ": cleared room 77 wrote page " + j + " after clear()");
        assertTrue(dm.canariesIntact());
    }

    @Test
    void aTornDownDecodeRefusesWrites() {
        TestRank pm = rank(), dm = rank();
        prefill(pm, "inproc", 1, 0, PAGE_SIZE);
        DecodeKVManager d = (DecodeKVManager) decode(dm, "inproc", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 42);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{5}, 0, null, 0);
        d.teardown();
        assertThrows(WriteRejectedException.class, () -> d.writeGate().begin(new WriteSink.Landing("127.0.0.1:1", null), 42, Region.KV, 0, 0, 5 * PAGE_BYTES, PAGE_BYTES, PAGE_BYTES,
                PAGE_BYTES, PAGE_BYTES));
        assertEquals(KVPoll.Failed, recv.poll());
    }

    /**
     * A request retried with its room id on the same link, after the first attempt failed and was
     * cleared on both sides: the second ABORT for the id is acknowledged at once, so the decode's
     * clear() neither waits for abortAckTimeout nor cuts the link under another room.
     */
    @Test
    void aRoomIdUsedAgainIsAbortedWithoutCuttingTheLink() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "shm", 1, 0, PAGE_SIZE);
        // A clear() that waited for its ABORT_ACK would wait 30 s: it must end before half of them. The bound was 2.5 s of
        // the default 5 s, a figure a loaded 2-core machine can reach; the acknowledgement comes at once, so this costs nothing.
        KVManager d = decode(dm, "shm", cfg(1, 0).abortAckTimeout(Duration.ofSeconds(30)).build(), 0, PAGE_SIZE);
        KVReceiver other = d.createReceiver(addr, 9);
        KVSender otherSender = waitingForInput(p, other, 9, new int[]{10, 11}, 1);

        KVReceiver first = d.createReceiver(addr, 5);
        KVSender firstSender = waitingForInput(p, first, 5, new int[]{1, 2}, 0);
        firstSender.abort();
        assertThrows(KVTransferException.class, firstSender::failureException); // the prefill forgets room 5
        await(first::poll, KVPoll.Failed);
        assertThrows(KVTransferException.class, first::failureException); // ABORT of room 5, acknowledged

        KVReceiver again = d.createReceiver(addr, 5);
        bootstrap(again, 0);
        again.sendMetadata(new int[]{3, 4}, 2, null, 0);
        await(again::poll, KVPoll.Failed); // the prefill's tombstone: room 5 concluded already
        long start = System.nanoTime();
        again.clear(); // a second ABORT of room 5 on this link
        long millis = (System.nanoTime() - start) / 1_000_000;
        assertTrue(millis < 15_000, "clear() of the reused room waited " + millis + " ms for its ABORT_ACK");
        assertNotEquals(KVPoll.Failed, other.poll(), "the link was cut under another room");
        assertNotEquals(KVPoll.Failed, otherSender.poll());
    }

    /**
     * A decode's transfer info racing the prefill scheduler's clear() of the same room: whichever
     * wins, nothing of the room is left behind (before, an info attached to the record being forgotten
     * brought its status slot back, and nothing ever removed it).
     */
    @Test
    void aTransferInfoRacingTheRoomsClearLeavesNothingBehind() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        try (ControlConnection decode = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(decode, "racer", RegisteredMemory.from(dm.args(0, PAGE_SIZE)).describe()).accepted());
            Thread drain = Thread.ofPlatform().daemon().start(() -> {
                try {
                    while (true) decode.read(); // the prefill's answers (Failed STATUS for cleared rooms)
                } catch (IOException closed) {
                    // the test ends
                }
            });
            for (int i = 0; i < 4000; i++) {
                long room = 50_000 + i;
                KVSender s = p.createSender(addr, room);
                decode.send(new TransferInfo(room, new int[]{1}, -1, new int[0][], 1, 0, false));
                if (i % 2 == 1) Thread.onSpinWait(); // vary which side tends to go first
                s.clear();
            }
            long deadline = System.nanoTime() + 20_000_000_000L;
            Map<String, Integer> left = p.inspect().roomsByState();
            while (!left.isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(20);
                left = p.inspect().roomsByState();
            }
            assertEquals(Map.of(), left, "rooms left in the prefill's status table");
            assertEquals(0, p.stats().trackedRooms());
            decode.close();
            drain.join(5000);
        }
    }

    /** Room {@code room} up to WaitingForInput on both sides: {@code r} initialised and its metadata sent; returns the sender. */
    private KVSender waitingForInput(KVManager p, KVReceiver r, long room, int[] pages, int auxIndex) {
        bootstrap(r, 0);
        KVSender s = p.createSender(addr, room);
        r.sendMetadata(pages, auxIndex, null, 0);
        await(s::poll, KVPoll.WaitingForInput);
        return s;
    }

    /** A prefill torn down with rooms in flight ends each of them Failed (shutdown), as the decode does. */
    @Test
    void aTornDownPrefillFailsItsRoomsInFlight() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 21);
        KVSender waiting = waitingForInput(p, recv, 21, new int[]{1, 2}, 0);
        KVSender bootstrapping = p.createSender(addr, 22); // no decode for it yet
        p.teardown();
        assertEquals(KVPoll.Failed, waiting.poll());
        assertEquals(FailureKind.SHUTDOWN, failed(waiting::failureException).kind());
        assertEquals(KVPoll.Failed, bootstrapping.poll());
        await(recv::poll, KVPoll.Failed); // its decode saw the link close
    }

    /**
     * A decode that stops reading holds only the workers admitted to its own link: with more of its rooms
     * queued than a link admits (4), and the write-stall timeout far away, another decode's room still
     * completes while every room of the stalled decode is still stuck. Before rooms were strands, room 12
     * was pinned behind room 8 (12 mod 4 == 8 mod 4) and the other workers queued on the stalled
     * connection's lock, so nothing moved until the stall timeout.
     */
    @Test
    void aStalledDecodeHoldsOnlyItsOwnLinksWorkers() throws Exception {
        long pb = 1L << 20;
        TestRank pm = big(64, pb), dm = big(64, pb), fm = big(64, pb);
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).writeStallTimeout(Duration.ofMinutes(5)).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        ControlConnection stalled = stalledDecode(p, fm);
        List<KVSender> stuck = new ArrayList<>();
        for (long room : new long[]{8, 9, 10, 11, 13, 16}) stuck.add(sendToStalled(p, stalled, room));
        Transfer t = start(p, pm, d, 12, new int[]{1, 2}, new int[]{3, 4}, 1, 1, 0);
        assertEquals(KVPoll.Success, awaitTerminal(t.receiver()::poll), "room 12 stuck behind the stalled decode's rooms");
        assertEquals(KVPoll.Success, awaitTerminal(t.sender()::poll));
        for (int j = 0; j < t.dst().length; j++) assertTrue(dm.pageMatches(t.dst()[j], 12, j), "page " + j + " of room 12");
        for (KVSender s : stuck) {
            KVPoll st = s.poll();
            assertTrue(st != KVPoll.Success && st != KVPoll.Failed, "a room of the stalled decode concluded: " + st);
        }
    }

    /** A decode that registers and never reads (its socket buffers fill with the first room's bytes). */
    private ControlConnection stalledDecode(KVManager p, TestRank fm) throws IOException {
        ControlConnection stalled = ControlConnection.connect(((PrefillKVManager) p).endpoint(), Duration.ofSeconds(5));
        closeables.add(stalled);
        assertTrue(registerAsDecode(stalled, "stalled-decode", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
        return stalled;
    }

    /** Starts a 64 MiB room towards a decode that never reads; returns its sender. */
    private KVSender sendToStalled(KVManager p, ControlConnection stalled, long room) throws IOException {
        int[] all = IntStream.range(0, 64).toArray();
        stalled.send(new TransferInfo(room, all, 0, new int[0][], 1, 0, false));
        KVSender s = p.createSender(addr, room);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(64, 0);
        s.send(all, null);
        return s;
    }

    /**
     * Room 8 of a decode ({@code fm}'s layout) that registers and never reads: its 64 MiB write blocks
     * a transfer worker of {@code p} until {@code p}'s write-stall timeout. Returns room 8's sender.
     */
    private KVSender blockRoom8sWorker(KVManager p, TestRank fm) throws IOException {
        return sendToStalled(p, stalledDecode(p, fm), 8);
    }

    /**
     * A decode that aborts more of its own rooms than the flood cap (its ABORT_ACKs queue on their rooms'
     * strands, behind its link's admission, while another decode stopped reading) is not mistaken for a
     * flood: its link stays, and every ABORT_ACK arrives.
     */
    @Test
    void aDecodeAbortingManyOfItsRoomsIsNotCutAsAFlood() throws Exception {
        long pb = 1L << 20;
        TestRank pm = big(64, pb), fm = big(64, pb);
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).writeStallTimeout(Duration.ofMillis(2000)).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVSender s8 = blockRoom8sWorker(p, fm); // until the write-stall timeout
        ControlConnection aborter = ControlConnection.connect(((PrefillKVManager) p).endpoint(), Duration.ofSeconds(5));
        closeables.add(aborter);
        assertTrue(registerAsDecode(aborter, "aborting-decode", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
        int rooms = 1024 + 500; // past the flood cap of 1,024 unsent ABORT_ACKs (DecodeSessions.MAX_PENDING_ACKS)
        for (int k = 0; k < rooms; k++) aborter.send(new TransferInfo(1000 + 4L * k, new int[]{k % 64}, -1, new int[0][], 1, 0, false));
        for (int k = 0; k < rooms; k++) aborter.send(new Abort(1000 + 4L * k));
        int acks = 0;
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (acks < rooms && System.nanoTime() < deadline) {
            if (aborter.read() instanceof AbortAck) acks++;
        }
        assertEquals(rooms, acks, "ABORT_ACKs received before the link was cut");
        assertEquals(KVPoll.Failed, awaitTerminal(s8::poll));
    }

    /**
     * A prefill-side abort() after the room's transfer completed (its client went away just then) fails the
     * room on the prefill only, as SGLang's abort() latches its own state: poll() returns Failed there, polled
     * Success before or not, but no Failed STATUS follows the room's Success to its decode, which may hold the
     * room complete and verified by then.
     */
    @Test
    void aPrefillAbortAfterSuccessFailsTheRoomOnThePrefillOnly() throws Exception {
        TestRank pm = rank(), fm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, cfg(1, 0).build());
        closeables.add(p);
        p.registerToBootstrap();
        ControlConnection decode = ControlConnection.connect(((PrefillKVManager) p).endpoint(), Duration.ofSeconds(5));
        closeables.add(decode);
        assertTrue(registerAsDecode(decode, "finished-decode", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
        KVSender polled = p.createSender(addr, 51), unpolled = p.createSender(addr, 52);
        decode.send(new TransferInfo(51, new int[]{1}, -1, new int[0][], 1, 0, false));
        decode.send(new TransferInfo(52, new int[]{2}, -1, new int[0][], 1, 0, false));
        for (KVSender s : List.of(polled, unpolled)) {
            await(s::poll, KVPoll.WaitingForInput);
            s.init(1, -1);
            s.send(new int[]{3}, null);
        }
        await(polled::poll, KVPoll.Success);
        // Room 52 is not polled (a scheduler busy elsewhere): its Success is read off the status table.
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (p.inspect().roomsByState().getOrDefault("Success", 0) < 2 && System.nanoTime() < deadline) Thread.onSpinWait();
        assertEquals(2, p.inspect().roomsByState().getOrDefault("Success", 0));

        polled.abort();
        unpolled.abort();
        assertEquals(KVPoll.Failed, polled.poll(), "abort() latches Failed, as SGLang's, even after poll() returned Success");
        assertEquals(KVPoll.Failed, unpolled.poll());
        assertEquals(FailureKind.ABORTED, failed(polled::failureException).kind());

        // Each ABORT_ACK leaves on its room's strand, behind any failure notice abort() queued for the room.
        decode.send(new Abort(51));
        decode.send(new Abort(52));
        List<Status> statuses = new ArrayList<>();
        ControlMessage m;
        int acks = 0;
        while (acks < 2) {
            m = decode.read();
            if (m instanceof AbortAck) acks++;
            else if (m instanceof Status st) statuses.add(st);
            else if (m instanceof WriteHeader h) decode.readPayload(ByteBuffer.allocate(Math.toIntExact(h.length())));
            else if (m instanceof WriteList l) decode.readPayload(ByteBuffer.allocate(Math.toIntExact(l.payloadLength())));
        }
        assertEquals(List.of(KVPoll.Success, KVPoll.Success), statuses.stream().map(Status::status).toList(),
                "the decode heard each room's Success and nothing after it: " + statuses);
    }

    @Test
    void failureExceptionLatchesAndClearsLikeSGLang() {
        TestRank pm = rank();
        PrefillKVManager p = (PrefillKVManager) prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVSender s = p.createSender(addr, 900);
        s.abort();
        assertEquals(KVPoll.Failed, s.poll());
        KVTransferException e = assertThrows(KVTransferException.class, s::failureException);
        assertEquals("KVTransferError(bootstrap_room=900): Aborted by AbortReq.", e.getMessage());
        assertEquals(0, p.stats().trackedRooms());
        assertEquals(KVPoll.Failed, s.poll());
    }

    @Test
    void prefillSendingFewerPagesThanDecodeAskedForFails() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 321);
        bootstrap(recv, 0);
        KVSender send = p.createSender(addr, 321);
        recv.sendMetadata(new int[]{10, 11, 12, 13, 14, 15}, 0, null, 0);
        await(send::poll, KVPoll.WaitingForInput);
        send.init(3, 0);
        send.send(new int[]{1, 2, 3}, null);
        assertEquals(KVPoll.Failed, awaitTerminal(recv::poll));
        assertTrue(failure(recv::failureException).contains("expects 6 pages"));
    }

    @Test
    void anUnreachableBootstrapIsRetriedWithoutStallingTheSchedulerThenFails() throws Exception {
        TestRank dm = rank();
        KVManager d = decode(dm, "tcp", cfg(1, 0).prefillInfoTimeout(Duration.ofMillis(1500)).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver("127.0.0.1:1", 5);
        long t0 = System.nanoTime();
        r.init(0);
        double first = (System.nanoTime() - t0) / 1e9;
        assertEquals(KVPoll.Bootstrapping, r.poll(), "an unavailable prefill is retried, not failed at once");
        KVReceiver r2 = d.createReceiver("127.0.0.1:1", 6);
        long t1 = System.nanoTime();
        r2.init(0);
        double second = (System.nanoTime() - t1) / 1e9;
        assertTrue(first < 3.0, "first init took " + first + " s");
        assertTrue(second < 0.2, "a lookup that just failed is not repeated within a second; took " + second + " s");
        assertEquals(KVPoll.Failed, awaitTerminal(r::poll));
        KVTransferException e = failed(r::failureException);
        assertEquals(FailureKind.PREFILL_UNREACHABLE, e.kind());
        String why = e.getMessage();
        assertTrue(why.contains("Could not fetch prefill parallel info from 127.0.0.1:1 after"), why);
    }

    /** A decode that starts before its prefill registered waits for it instead of failing its requests. */
    @Test
    void decodeStartedBeforePrefillRegistrationWaitsForIt() {
        TestRank pm = rank(), dm = rank();
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 31);
        r.init(0);
        assertEquals(KVPoll.Bootstrapping, r.poll());
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        await(r::poll, KVPoll.WaitingForInput);
        KVSender s = p.createSender(addr, 31);
        r.sendMetadata(new int[]{4}, 0, null, 0);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1, 0);
        s.send(new int[]{9});
        await(r::poll, KVPoll.Success);
    }

    /** A prefill that aborted and cleared a room before decode's metadata arrived answers it with Failed: no re-created room, no hang. */
    @Test
    void metadataForARoomThePrefillAlreadyAbortedFailsAtOnce() {
        TestRank pm = rank(), dm = rank();
        PrefillKVManager p = (PrefillKVManager) prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVSender s = p.createSender(addr, 4444);
        s.abort();
        assertEquals(KVPoll.Failed, s.poll());
        s.clear();
        KVReceiver r = d.createReceiver(addr, 4444);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1}, 0, null, 0);
        assertEquals(KVPoll.Failed, awaitTerminal(r::poll));
        KVTransferException aborted = failed(r::failureException);
        assertTrue(aborted.getMessage().contains("Aborted by AbortReq."));
        assertEquals(FailureKind.ABORTED, aborted.kind(), "the tombstone keeps the kind");
        assertEquals(0, p.stats().trackedRooms(), "the late metadata must not re-create the room on prefill");
    }

    @Test
    void theFailureInjectionHookFailsRequestsOnceUnderWay() {
        TestRank pm = rank(), dm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).failureInjectionProbability(1.0).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 88);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{2}, 0, null, 0);
        KVSender s = p.createSender(addr, 88);
        assertEquals(KVPoll.Failed, awaitTerminal(s::poll));
        KVTransferException injected = failed(s::failureException);
        assertTrue(injected.getMessage().contains("Injected failure"));
        assertEquals(FailureKind.INJECTED, injected.kind());
        assertEquals(KVPoll.Failed, awaitTerminal(r::poll));
        assertEquals(FailureKind.INJECTED, failed(r::failureException).kind());
    }

    /**
     * At 0.5 the hook fails exactly the rooms RoomChoice picks for its side (a hash of the room, the
     * prefill's and the decode's salts apart), not a random half: a test that needs some room failed (or
     * some left) can count on the workload's rooms. With a draw, this set equality failed but once in 65,536
     * per side, and a run of a few rooms could fail none.
     */
    @Test
    void theFailureInjectionHookFailsTheRoomsItsHashPicksOnEachSide() {
        TestRank pm = rank(), dm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).failureInjectionProbability(0.5).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, "tcp", cfg(1, 0).failureInjectionProbability(0.5).build(), 0, PAGE_SIZE);
        List<Long> failedOnPrefill = new ArrayList<>(), failedOnDecode = new ArrayList<>();
        List<Long> pickedOnPrefill = new ArrayList<>(), pickedOnDecode = new ArrayList<>();
        for (long room = 300; room < 316; room++) {
            if (RoomChoice.chosen(room, RoomChoice.PREFILL_FAILURE_SALT, 0.5)) pickedOnPrefill.add(room);
            if (RoomChoice.chosen(room, RoomChoice.DECODE_FAILURE_SALT, 0.5)) pickedOnDecode.add(room);
            KVReceiver r = d.createReceiver(addr, room);
            bootstrap(r, 0);
            KVSender s = p.createSender(addr, room);
            r.sendMetadata(new int[]{(int) (room % 4)}, 0, null, 0);
            // The decode's hook fires on its first poll after the metadata went out, the prefill's on its first
            // poll past Bootstrapping; a room neither picks waits for its data (nothing is sent here).
            KVPoll onDecode = r.poll();
            if (onDecode == KVPoll.Failed && failed(r::failureException).kind() == FailureKind.INJECTED) failedOnDecode.add(room);
            KVPoll onPrefill = awaitPast(s::poll, KVPoll.Bootstrapping);
            if (onPrefill == KVPoll.Failed && failed(s::failureException).kind() == FailureKind.INJECTED
                    && !failedOnDecode.contains(room)) {
                failedOnPrefill.add(room);
            }
            r.abort();
            s.abort();
        }
        List<Long> expectedOnPrefill = new ArrayList<>(pickedOnPrefill);
        expectedOnPrefill.removeAll(pickedOnDecode); // the decode's injection (an abort) ends such a room first
        assertTrue(!pickedOnDecode.isEmpty() && pickedOnDecode.size() < 16 && !expectedOnPrefill.isEmpty(),
                "rooms 300-315 should be picked and left on both sides: " + pickedOnPrefill + " " + pickedOnDecode);
        assertEquals(pickedOnDecode, failedOnDecode, "the decode's hook");
        assertEquals(expectedOnPrefill, failedOnPrefill, "the prefill's hook");
    }

    private static KVPoll awaitPast(Supplier<KVPoll> p, KVPoll state) {
        long deadline = System.nanoTime() + 20_000_000_000L;
        KVPoll st;
        while ((st = p.get()) == state && System.nanoTime() < deadline) Thread.onSpinWait();
        return st;
    }

    /**
     * A decode's shared file truncated under a live shm link (issue 13, hostile input 8): the
     * prefill's next copy faults (InternalError); the room fails on both sides with a reason, no hang.
     */
    @Test
    void aTruncatedSharedFileFailsTheRoomOnBothSides() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "shm", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "shm", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertLanded(start(p, pm, d, 1, new int[]{1, 2}, new int[]{3, 4}, 0, 0, 0), dm);
        try (FileChannel f = FileChannel.open(SharedMemory.locate(dm.kv[0]).path(), StandardOpenOption.WRITE)) {
            f.truncate(0); // from now on nobody may touch dm's memory: every access faults
        }
        Transfer t = start(p, pm, d, 2, new int[]{5, 6}, new int[]{7, 8}, 0, 1, 0);
        assertEquals(KVPoll.Failed, awaitTerminal(t.sender()::poll));
        assertEquals(KVPoll.Failed, awaitTerminal(t.receiver()::poll));
        KVTransferException onPrefill = failed(t.sender()::failureException);
        assertEquals(FailureKind.INTERNAL, onPrefill.kind(), onPrefill.getMessage());
        assertTrue(onPrefill.getMessage().contains("InternalError"), onPrefill.getMessage());
        assertEquals(FailureKind.INTERNAL, failed(t.receiver()::failureException).kind(), "the decode is told the kind");
    }
}
