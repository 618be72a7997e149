package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.ChecksumMode;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.List;

import static io.kvferry.PlayedPrefill.wholeCoverage;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Issue 13's integrity guarantees, each played by a hostile or broken peer: Success means every owed
 * byte landed, only a room's own prefill ranks write it and only until it concludes, a room belongs
 * to one decode instance, checksums catch bytes changed on their way, and the handshake proves the
 * cluster token on both sides without sending it.
 */
@Timeout(60)
class IntegrityTest extends TransferTestBase {

    /** A fake prefill rank (holding the token) registered in its own registry; the test plays it over {@link #evil}. */
    private final class FakePrefill implements AutoCloseable {
        final KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
        final ServerSocketChannel server = ServerSocketChannel.open();
        final String addr;
        SocketChannel raw;
        ControlConnection evil;

        FakePrefill() throws IOException {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            addr = "127.0.0.1:" + registry.port();
            new BootstrapClient(addr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                    "127.0.0.1", ((InetSocketAddress) server.getLocalAddress()).getPort(), PAGE_SIZE, "bf16",
                    "follow_bootstrap_room", false, 0));
        }

        /** Runs {@code init} of the receivers while this side answers the decode's handshake with {@code answer}. */
        Hello connect(Runnable init, boolean signed) throws Exception {
            Thread t = Thread.ofVirtual().start(init);
            raw = server.accept();
            evil = new ControlConnection(raw);
            Hello h;
            if (signed) {
                h = acceptAsPrefill(evil);
            } else {
                evil.send(new Challenge(Handshake.nonce()));
                h = assertInstanceOf(Hello.class, evil.read());
                evil.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory()))); // no MAC
            }
            t.join();
            return h;
        }

        /** A raw WRITE frame of {@code payload} into KV buffer {@code buffer} at {@code offset}, with or without a CRC. */
        void write(long room, int buffer, long offset, MemorySegment payload, Integer crc) throws IOException {
            ByteBuffer frame = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
            long n = payload.byteSize();
            FrameCodec.putWriteFrame(frame, room, Region.KV, 0, buffer, offset, n, n, n, crc != null, crc == null ? 0 : crc);
            ByteBuffer[] v = {frame.flip(), payload.asByteBuffer()};
            while (v[0].hasRemaining() || v[1].hasRemaining()) raw.write(v);
        }

        /** A raw WRITE_LIST frame of {@code list} (valid or not) followed by {@code payload}. */
        void writeList(WriteList list, MemorySegment payload) throws IOException {
            ByteBuffer[] v = {FrameCodec.encode(list), payload.asByteBuffer()};
            while (v[0].hasRemaining() || v[1].hasRemaining()) raw.write(v);
        }

        @Override
        public void close() throws IOException {
            if (evil != null) evil.close();
            server.close();
            registry.close();
        }
    }

    private int kvBuffers(TestRank r) {
        return RegisteredMemory.from(r.args(0, PAGE_SIZE)).kvBufferCount();
    }

    @Test
    void successMeansEveryOwedByteLanded() throws Exception {
        TestRank dm = rank();
        int buffers = kvBuffers(dm);
        try (FakePrefill fake = new FakePrefill(); Arena arena = Arena.ofConfined()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver partial = d.createReceiver(fake.addr, 1), underReported = d.createReceiver(fake.addr, 2);
            fake.connect(() -> {
                bootstrap(partial, 0);
                bootstrap(underReported, 0);
            }, true);
            partial.sendMetadata(new int[]{1, 2}, -1, null, 0);
            underReported.sendMetadata(new int[]{3, 4}, -1, null, 0);
            assertInstanceOf(TransferInfo.class, fake.evil.read());
            assertInstanceOf(TransferInfo.class, fake.evil.read());
            MemorySegment page = arena.allocate(PAGE_BYTES);
            long owed = 2L * buffers * PAGE_BYTES;
            // Room 1: only page 1 of each buffer is written, but Success claims everything.
            for (int b = 0; b < buffers; b++) fake.write(1, b, PAGE_BYTES, page, null);
            fake.evil.send(Status.success(1, 0, owed, 0, false));
            // Room 2: everything lands, but the prefill says it wrote half.
            for (int b = 0; b < buffers; b++) {
                fake.write(2, b, 3 * PAGE_BYTES, page, null);
                fake.write(2, b, 4 * PAGE_BYTES, page, null);
            }
            fake.evil.send(Status.success(2, 0, owed / 2, 0, false));
            await(partial::poll, KVPoll.Failed);
            await(underReported::poll, KVPoll.Failed);
            KVTransferException e1 = failed(partial::failureException);
            assertEquals(FailureKind.INTEGRITY, e1.kind());
            assertTrue(e1.getMessage().contains("incomplete transfer: landed " + owed / 2 + " of " + owed + " bytes from prefill rank 0"),
                    e1.getMessage());
            KVTransferException e2 = failed(underReported::failureException);
            assertTrue(e2.getMessage().contains("reports " + owed / 2 + " of the " + owed + " bytes it owes room 2"), e2.getMessage());
        }
    }

    /**
     * Success is final once verified: a Failed STATUS from the prefill after its room's bytes all landed
     * and checked out (a prefill-side abort or failure after the fact) leaves the decode's room Success,
     * even before the decode's scheduler polled it; a room still under way fails on it as before.
     */
    @Test
    void aFailedStatusAfterAVerifiedSuccessLeavesTheRoomSuccess() throws Exception {
        TestRank dm = rank();
        int buffers = kvBuffers(dm);
        try (FakePrefill fake = new FakePrefill(); Arena arena = Arena.ofConfined()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver done = d.createReceiver(fake.addr, 41), underWay = d.createReceiver(fake.addr, 42);
            fake.connect(() -> {
                bootstrap(done, 0);
                bootstrap(underWay, 0);
            }, true);
            done.sendMetadata(new int[]{1, 2}, -1, null, 0);
            underWay.sendMetadata(new int[]{3, 4}, -1, null, 0);
            for (int i = 0; i < 2; i++) assertInstanceOf(TransferInfo.class, fake.evil.read());
            MemorySegment page = arena.allocate(PAGE_BYTES);
            for (int b = 0; b < buffers; b++) {
                fake.write(41, b, PAGE_BYTES, page, null);
                fake.write(41, b, 2 * PAGE_BYTES, page, null);
            }
            fake.evil.send(Status.success(41, 0, 2L * buffers * PAGE_BYTES, 0, false));
            // Not polled (a scheduler busy elsewhere): the room's Success is read off the status table.
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (d.inspect().roomsByState().getOrDefault("Success", 0) == 0 && System.nanoTime() < deadline) Thread.onSpinWait();
            assertEquals(1, d.inspect().roomsByState().getOrDefault("Success", 0), "room 41 verified complete");
            fake.evil.send(new Status(41, KVPoll.Failed, FailureKind.ABORTED, 0, "Aborted by AbortReq."));
            fake.evil.send(new Status(42, KVPoll.Failed, FailureKind.ABORTED, 0, "Aborted by AbortReq."));
            await(underWay::poll, KVPoll.Failed); // read in order on the link's reader: room 41's status was handled first
            assertEquals(KVPoll.Success, done.poll(), "a transfer verified complete stays Success");
            done.clear();
            assertEquals(FailureKind.ABORTED, failed(underWay::failureException).kind());
        }
    }

    /**
     * A page written twice cannot stand in for one never written: a prefill that sends page 7 twice
     * (as two piece lists, or as two WRITEs) and page 8 never, then claims every owed byte, fails the
     * room instead of leaving page 8's stale bytes to be decoded from; a room written once succeeds.
     */
    @Test
    void aPageWrittenTwiceDoesNotCountForOneNeverWritten() throws Exception {
        TestRank dm = rank();
        int buffers = kvBuffers(dm);
        try (FakePrefill fake = new FakePrefill(); Arena arena = Arena.ofConfined()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver twiceByList = d.createReceiver(fake.addr, 31), twiceByWrite = d.createReceiver(fake.addr, 32);
            KVReceiver once = d.createReceiver(fake.addr, 33);
            fake.connect(() -> {
                bootstrap(twiceByList, 0);
                bootstrap(twiceByWrite, 0);
                bootstrap(once, 0);
            }, true);
            twiceByList.sendMetadata(new int[]{7, 8}, -1, null, 0);
            twiceByWrite.sendMetadata(new int[]{9, 10}, -1, null, 0);
            once.sendMetadata(new int[]{11, 12}, -1, null, 0);
            for (int i = 0; i < 3; i++) assertInstanceOf(TransferInfo.class, fake.evil.read());
            MemorySegment pages = arena.allocate(PAGE_BYTES * buffers);
            pages.fill((byte) 0x5A);
            long owed = 2L * PAGE_BYTES * buffers;
            for (int rep = 0; rep < 2; rep++) {
                WriteList l = WriteList.builder(31, buffers);
                for (int b = 0; b < buffers; b++) l.add(Region.KV, 0, b, 7 * PAGE_BYTES, PAGE_BYTES);
                fake.writeList(l, pages);
            }
            fake.evil.send(Status.success(31, 0, owed, 0, false));
            MemorySegment page = pages.asSlice(0, PAGE_BYTES);
            for (int rep = 0; rep < 2; rep++) {
                for (int b = 0; b < buffers; b++) fake.write(32, b, 9 * PAGE_BYTES, page, null);
            }
            fake.evil.send(Status.success(32, 0, owed, 0, false));
            for (int b = 0; b < buffers; b++) {
                fake.write(33, b, 11 * PAGE_BYTES, page, null);
                fake.write(33, b, 12 * PAGE_BYTES, page, null);
            }
            fake.evil.send(Status.success(33, 0, owed, 0, false));
            await(twiceByList::poll, KVPoll.Failed);
            await(twiceByWrite::poll, KVPoll.Failed);
            await(once::poll, KVPoll.Success);
            KVTransferException e = failed(twiceByList::failureException);
            assertTrue(e.getMessage().contains("page 7 of room 31 was written twice"), e.getMessage());
            assertTrue(failed(twiceByWrite::failureException).getMessage().contains("page 9 of room 32 was written twice"));
        }
    }

    /**
     * The same bytes in other pieces cannot stand in for bytes never written either: page 7 whole,
     * then page 7 again as two half-page pieces (both counts then reach what is owed, page 8 never
     * written) fails the room; so do aux buffer 0's row sent three times for buffers 0 and 1 (3 x 64 =
     * 64 + 128 bytes) and state tensor 0's slot three times for tensors 0 and 1 (3 x 256 = 256 + 512).
     */
    @Test
    void bytesSentAgainInOtherPiecesDoNotCountForOnesNeverWritten() throws Exception {
        TestRank dm = rank();
        int buffers = kvBuffers(dm);
        try (FakePrefill fake = new FakePrefill(); Arena arena = Arena.ofConfined()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver halves = d.createReceiver(fake.addr, 41), rows = d.createReceiver(fake.addr, 42);
            fake.connect(() -> {
                bootstrap(halves, 0);
                bootstrap(rows, 0);
            }, true);
            halves.sendMetadata(new int[]{7, 8}, -1, null, 0);
            rows.sendMetadata(new int[]{9}, 1, new int[][]{{2}}, 0);
            for (int i = 0; i < 2; i++) assertInstanceOf(TransferInfo.class, fake.evil.read());
            MemorySegment payload = arena.allocate(PAGE_BYTES * buffers);
            payload.fill((byte) 0x11);
            WriteList whole = WriteList.builder(41, buffers);
            for (int b = 0; b < buffers; b++) whole.add(Region.KV, 0, b, 7 * PAGE_BYTES, PAGE_BYTES);
            fake.writeList(whole, payload);
            WriteList again = WriteList.builder(41, 2 * buffers);
            for (int b = 0; b < buffers; b++) {
                again.add(Region.KV, 0, b, 7 * PAGE_BYTES, PAGE_BYTES / 2);
                again.add(Region.KV, 0, b, 7 * PAGE_BYTES + PAGE_BYTES / 2, PAGE_BYTES / 2);
            }
            fake.writeList(again, payload);
            fake.evil.send(Status.success(41, 0, 2L * PAGE_BYTES * buffers, 0, false));

            WriteList kv = WriteList.builder(42, buffers);
            for (int b = 0; b < buffers; b++) kv.add(Region.KV, 0, b, 9 * PAGE_BYTES, PAGE_BYTES);
            fake.writeList(kv, payload);
            for (int i = 0; i < 3; i++) {
                fake.writeList(WriteList.builder(42, 1).add(Region.AUX, 0, 0, dm.auxItem[0], dm.auxItem[0]), payload.asSlice(0, dm.auxItem[0]));
                fake.writeList(WriteList.builder(42, 1).add(Region.STATE, 0, 0, 2 * dm.stateItem[0], dm.stateItem[0]),
                        payload.asSlice(0, dm.stateItem[0]));
            }
            fake.evil.send(Status.success(42, 0, PAGE_BYTES * buffers + dm.auxItem[0] + dm.auxItem[1] + dm.stateItem[0] + dm.stateItem[1],
                    0, false));
            await(halves::poll, KVPoll.Failed);
            await(rows::poll, KVPoll.Failed);
            String why = failed(halves::failureException).getMessage();
            assertTrue(why.contains("is not what prefill rank 0 at"), why);
            why = failed(rows::failureException).getMessage();
            assertTrue(why.contains("aux buffer 0 row 1 of room 42 was written twice"), why);
        }
    }

    /**
     * Piece lists from a token-holding prefill: an exact list lands and concludes; a list with one
     * piece outside the room is refused whole (nothing of it lands, the room fails); a list that is
     * short of what Success claims fails as incomplete; a list whose CRC is wrong fails as integrity;
     * and a list whose pieces overlap is a protocol violation that ends the link.
     */
    @Test
    void pieceListsLandExactlyAndHostileOnesAreRefused() throws Exception {
        TestRank dm = rank();
        int buffers = kvBuffers(dm);
        try (FakePrefill fake = new FakePrefill(); Arena arena = Arena.ofConfined()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver exact = d.createReceiver(fake.addr, 21), outside = d.createReceiver(fake.addr, 22),
                    shortOne = d.createReceiver(fake.addr, 23), badCrc = d.createReceiver(fake.addr, 24),
                    overlapping = d.createReceiver(fake.addr, 25);
            fake.connect(() -> {
                for (KVReceiver r : List.of(exact, outside, shortOne, badCrc, overlapping)) bootstrap(r, 0);
            }, true);
            exact.sendMetadata(new int[]{3, 1}, -1, null, 0);
            outside.sendMetadata(new int[]{5}, -1, null, 0);
            shortOne.sendMetadata(new int[]{7, 8}, -1, null, 0);
            badCrc.sendMetadata(new int[]{10}, -1, null, 0);
            overlapping.sendMetadata(new int[]{12}, -1, null, 0);
            for (int i = 0; i < 5; i++) assertInstanceOf(TransferInfo.class, fake.evil.read());
            MemorySegment pages = arena.allocate(2 * PAGE_BYTES * buffers);
            pages.fill((byte) 0x3C);
            // Room 21: pages 1 and 3 of every buffer in one list, ascending; Success with the exact bytes.
            WriteList all = WriteList.builder(21, 2 * buffers);
            for (int b = 0; b < buffers; b++) all.add(Region.KV, 0, b, PAGE_BYTES, PAGE_BYTES).add(Region.KV, 0, b, 3 * PAGE_BYTES, PAGE_BYTES);
            fake.writeList(all, pages.asSlice(0, all.payloadLength()));
            fake.evil.send(Status.success(21, 0, all.payloadLength(), 0, false));
            // Room 22 owns page 5 only: a list reaching into page 6 is refused whole.
            WriteList stray = WriteList.builder(22, 2).add(Region.KV, 0, 0, 5 * PAGE_BYTES, PAGE_BYTES)
                    .add(Region.KV, 0, 0, 6 * PAGE_BYTES, PAGE_BYTES);
            fake.writeList(stray, pages.asSlice(0, 2 * PAGE_BYTES));
            // Room 23: one buffer of two pages lands, but Success claims every buffer.
            WriteList part = WriteList.builder(23, 2).add(Region.KV, 0, 0, 7 * PAGE_BYTES, 2 * PAGE_BYTES);
            fake.writeList(part, pages.asSlice(0, 2 * PAGE_BYTES));
            fake.evil.send(Status.success(23, 0, 2L * PAGE_BYTES * buffers, 0, false));
            // Room 24: the list's CRC is not its payload's.
            WriteList crc = WriteList.builder(24, 1).add(Region.KV, 0, 0, 10 * PAGE_BYTES, PAGE_BYTES).withCrc(0xBAD);
            fake.writeList(crc, pages.asSlice(0, PAGE_BYTES));
            await(exact::poll, KVPoll.Success);
            await(outside::poll, KVPoll.Failed);
            await(shortOne::poll, KVPoll.Failed);
            await(badCrc::poll, KVPoll.Failed);
            for (int b = 0; b < buffers; b++) {
                assertTrue(dm.pageHolds(b, 1, (byte) 0x3C) && dm.pageHolds(b, 3, (byte) 0x3C), "room 21's pages landed, buffer " + b);
            }
            assertTrue(dm.pageIsZero(5) && dm.pageIsZero(6), "nothing of a refused list lands");
            assertTrue(failure(outside::failureException).contains("does not own"));
            KVTransferException incomplete = failed(shortOne::failureException);
            assertEquals(FailureKind.INTEGRITY, incomplete.kind());
            assertTrue(incomplete.getMessage().contains("incomplete transfer: landed " + 2 * PAGE_BYTES + " of "), incomplete.getMessage());
            KVTransferException mismatch = failed(badCrc::failureException);
            assertEquals(FailureKind.INTEGRITY, mismatch.kind());
            assertTrue(mismatch.getMessage().contains("checksum mismatch on a WRITE_LIST of room 24"), mismatch.getMessage());
            // Room 25: two pieces over the same bytes would count one page twice: the decoder refuses the frame, the link ends.
            WriteList twice = WriteList.builder(25, 2).add(Region.KV, 0, 0, 12 * PAGE_BYTES, PAGE_BYTES)
                    .add(Region.KV, 0, 0, 12 * PAGE_BYTES, PAGE_BYTES);
            fake.writeList(twice, pages.asSlice(0, 2 * PAGE_BYTES));
            await(overlapping::poll, KVPoll.Failed);
            assertTrue(failure(overlapping::failureException).contains("Lost connection with prefill instance"));
            assertTrue(dm.pageIsZero(12) && dm.canariesIntact());
        }
    }

    @Test
    void aDecodeTrustsNoAcceptanceThatIsNotSignedWithTheClusterToken() throws Exception {
        TestRank dm = rank();
        try (FakePrefill fake = new FakePrefill()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver r = d.createReceiver(fake.addr, 5);
            Hello h = fake.connect(() -> bootstrap(r, 0), false);
            assertEquals(ChecksumMode.OFF, h.checksum());
            KVTransferException e = failed(r::failureException);
            assertEquals(FailureKind.HANDSHAKE_REFUSED, e.kind(), e.getMessage());
            assertTrue(e.getMessage().contains("without proving this cluster's auth token"), e.getMessage());
        }
    }

    @Test
    void onAChecksummedTcpLinkAWriteWithoutOrWithAWrongCrcFailsItsRoom() throws Exception {
        TestRank dm = rank();
        int buffers = kvBuffers(dm);
        try (FakePrefill fake = new FakePrefill(); Arena arena = Arena.ofConfined()) {
            KVManager d = decode(dm, "tcp", cfg(1, 0).checksum(ChecksumMode.FULL).build(), 0, PAGE_SIZE);
            KVReceiver bare = d.createReceiver(fake.addr, 11), wrong = d.createReceiver(fake.addr, 12),
                    right = d.createReceiver(fake.addr, 13);
            Hello h = fake.connect(() -> {
                bootstrap(bare, 0);
                bootstrap(wrong, 0);
                bootstrap(right, 0);
            }, true);
            assertEquals(ChecksumMode.FULL, h.checksum(), "the decode asks for full checksums in its HELLO");
            bare.sendMetadata(new int[]{1}, -1, null, 0);
            wrong.sendMetadata(new int[]{2}, -1, null, 0);
            right.sendMetadata(new int[]{3}, -1, null, 0);
            for (int i = 0; i < 3; i++) assertInstanceOf(TransferInfo.class, fake.evil.read());
            MemorySegment page = arena.allocate(PAGE_BYTES);
            page.fill((byte) 7);
            SegmentCrc crc = new SegmentCrc();
            crc.update(page, 0, PAGE_BYTES);
            int good = crc.value();
            fake.write(11, 0, PAGE_BYTES, page, null);
            fake.write(12, 0, 2 * PAGE_BYTES, page, good ^ 1);
            for (int b = 0; b < buffers; b++) fake.write(13, b, 3 * PAGE_BYTES, page, good);
            fake.evil.send(Status.success(13, 0, (long) buffers * PAGE_BYTES, 0, false));
            await(bare::poll, KVPoll.Failed);
            await(wrong::poll, KVPoll.Failed);
            await(right::poll, KVPoll.Success);
            KVTransferException e1 = failed(bare::failureException);
            assertEquals(FailureKind.INTEGRITY, e1.kind());
            assertTrue(e1.getMessage().contains("carries no checksum on a checksum=full link"), e1.getMessage());
            KVTransferException e2 = failed(wrong::failureException);
            assertEquals(FailureKind.INTEGRITY, e2.kind());
            assertTrue(e2.getMessage().contains("checksum mismatch"), e2.getMessage());
        }
    }

    @ParameterizedTest
    @CsvSource({"tcp,full", "tcp,sampled", "inproc,full", "inproc,sampled", "shm,full", "shm,sampled"})
    void checksummedTransfersSucceedOnEveryDataPath(String backend, String mode) {
        TestRank pm = rank(), dm = rank();
        ChecksumMode m = ChecksumMode.parse(mode);
        KVManager p = KVFerry.createManager(backend, pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, cfg(1, 0).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, backend, cfg(1, 0).checksum(m).build(), 0, PAGE_SIZE);
        assertLanded(start(p, pm, d, 301, new int[]{1, 2, 3, 9, 10}, new int[]{20, 21, 5, 6, 7}, 1, 2, 0), dm);
        assertLanded(start(p, pm, d, 302, new int[]{11, 12}, new int[]{30, 31}, 3, 4, 1), dm);
    }

    /**
     * The corruption hook flips one byte of a room's KV after the prefill took its digest (what a bad
     * NIC, DMA engine or shared-memory writer would do): with checksums the room fails as integrity;
     * without, the decode gets a corrupted page and Success — which is why checksums exist.
     */
    @ParameterizedTest
    @ValueSource(strings = {"inproc", "shm"})
    void corruptionOnTheWayIsCaughtByTheDigestAndOnlyByIt(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = KVFerry.createManager(backend, pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).corruptionInjectionProbability(1.0).build());
        closeables.add(p);
        p.registerToBootstrap();
        KVManager full = decode(dm, backend, cfg(1, 0).checksum(ChecksumMode.FULL).build(), 0, PAGE_SIZE);
        Transfer t = start(p, pm, full, 401, new int[]{1, 2}, new int[]{3, 4}, 0, 0, 0);
        await(t.receiver()::poll, KVPoll.Failed);
        KVTransferException e = failed(t.receiver()::failureException);
        assertEquals(FailureKind.INTEGRITY, e.kind());
        assertTrue(e.getMessage().contains("checksum mismatch"), e.getMessage());
        t.sender().clear();
        assertTrue(pm.pageMatches(1, 401, 0), "the hook restores the source: only the decode's copy was damaged");

        TestRank plain = rank();
        KVManager off = decode(plain, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        Transfer u = start(p, pm, off, 402, new int[]{1, 2}, new int[]{3, 4}, 0, 0, 0);
        await(u.receiver()::poll, KVPoll.Success);
        assertFalse(plain.pageMatches(3, 402, 0) && plain.pageMatches(4, 402, 0), "without checksums the flipped byte goes unnoticed");
    }

    /** A token holder that is not the room's decode: its transfer info is refused, the rightful decode is served. */
    @Test
    void aRoomBelongsToOneDecodeInstanceAndTakesNoLateDestinations() throws Exception {
        TestRank pm = rank(), dm = rank(), attacker = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        MemoryDescriptor mem = RegisteredMemory.from(attacker.args(0, PAGE_SIZE)).describe();
        KVReceiver rightful = d.createReceiver(addr, 77);
        bootstrap(rightful, 0);
        KVSender s = p.createSender(addr, 77);
        rightful.sendMetadata(new int[]{5, 6}, 0, new int[][]{{0}}, 0);
        await(s::poll, KVPoll.WaitingForInput);
        try (ControlConnection thief = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(thief, "thief", mem).accepted(), "the thief holds the token");
            thief.send(new TransferInfo(77, new int[]{1, 2}, 0, new int[][]{{0}}, 1, 0, false));
            Status refused = assertInstanceOf(Status.class, readSkippingHeartbeats(thief));
            assertEquals(KVPoll.Failed, refused.status());
            assertTrue(refused.reason().contains("belongs to another decode instance"), refused.reason());
        }
        // Same instance, another session (a second rank of the rightful decode would be): the room is complete already.
        try (ControlConnection late = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            Challenge ch = assertInstanceOf(Challenge.class, late.read());
            Hello h = decodeHello("late", mem);
            Hello sameInstance = new Hello("late", KVManagerConfig.PROCESS_INSTANCE_ID, h.fingerprint(), "tcp", 0, 1, 0,
                    0, ChecksumMode.OFF, mem, h.offers(), h.decodeNonce(), null, null);
            late.send(sameInstance.signed(Handshake.key(TOKEN), ch.nonce()));
            assertTrue(assertInstanceOf(HelloAck.class, late.read()).accepted());
            late.send(new TransferInfo(77, new int[]{1, 2}, 0, new int[][]{{0}}, 1, 0, false));
            Status refused = assertInstanceOf(Status.class, readSkippingHeartbeats(late));
            assertTrue(refused.reason().contains("already has its 1 destinations"), refused.reason());
        }
        pm.fillPage(1, 77, 0);
        pm.fillPage(2, 77, 1);
        s.init(2, 0);
        s.send(new int[]{1, 2}, new int[][]{{0}});
        await(rightful::poll, KVPoll.Success);
        assertTrue(dm.pageMatches(5, 77, 0) && dm.pageMatches(6, 77, 1));
        assertTrue(attacker.pageIsZero(1) && attacker.pageIsZero(2));
    }

    private static Object readSkippingHeartbeats(ControlConnection c) throws IOException {
        Object m;
        do {
            m = c.read();
        } while (m instanceof Heartbeat);
        return m;
    }

    @Test
    void aSessionCannotBeTakenOverByItsIdAloneNorItsStripesJoined() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        InetSocketAddress at = new InetSocketAddress(ep.rankIp(), ep.rankPort());
        MemoryDescriptor mem = RegisteredMemory.from(dm.args(0, PAGE_SIZE)).describe();
        try (ControlConnection victim = ControlConnection.connect(at, Duration.ofSeconds(5));
             ControlConnection usurper = ControlConnection.connect(at, Duration.ofSeconds(5));
             ControlConnection stripe = ControlConnection.connect(at, Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(victim, "victim-session", mem).accepted());
            HelloAck takeover = registerAsDecode(usurper, "victim-session", mem);
            assertFalse(takeover.accepted());
            assertTrue(takeover.error().contains("already registered") && takeover.error().contains("session key"), takeover.error());
            // A stripe HELLO signed with the cluster key (not the session key nobody but the victim holds).
            Challenge ch = assertInstanceOf(Challenge.class, stripe.read());
            Hello h = decodeHello("victim-session", mem);
            Hello stripeHello = new Hello(h.sessionId(), h.instanceId(), h.fingerprint(), "tcp", 0, 1, 0,
                    Hello.FLAG_STRIPE | (1 << Hello.STRIPE_INDEX_SHIFT), ChecksumMode.OFF, mem, h.offers(), h.decodeNonce(), null, null);
            stripe.send(stripeHello.signed(Handshake.key(TOKEN), ch.nonce()));
            HelloAck joined = assertInstanceOf(HelloAck.class, stripe.read());
            assertFalse(joined.accepted());
            assertTrue(joined.error().contains("not signed with its session's key"), joined.error());
            // The refused connections are closed by their reader threads; the victim's stays.
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (p.stats().peerConnections() > 1 && System.nanoTime() < deadline) Thread.onSpinWait();
            assertEquals(1, p.stats().peerConnections(), "the victim's session is untouched");
            victim.send(new TransferInfo(79, new int[]{1}, -1, new int[0][], 1, 0, false));
            while (p.stats().trackedRooms() < 1 && System.nanoTime() < deadline) Thread.onSpinWait();
            assertEquals(1, p.stats().trackedRooms(), "and still registers rooms");
        }
    }

    @Test
    void withoutATokenAManagerStaysOnLoopbackUnlessInsecureIsChosen() {
        TestRank pm = rank();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> KVFerry.createManager("tcp",
                pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, cfg(1, 0).authToken(null).listenHost("0.0.0.0").build()));
        assertTrue(e.getMessage().contains("no cluster auth token") && e.getMessage().contains("KVFERRY_INSECURE"), e.getMessage());
        KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).authToken(null).listenHost("0.0.0.0").insecure(true).build()).close();
        KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).authToken(null).listenHost("127.0.0.1").build()).close();
    }

    @Test
    void aRankOnTheWildcardAddressRegistersOnlyWithAnAdvertisedHost() {
        // 0.0.0.0 published as is sends every decode to its own host (each room failed at connect after its timeout).
        for (String wildcard : List.of("0.0.0.0", "::")) {
            KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                    cfg(1, 0).listenHost(wildcard).build());
            closeables.add(p);
            IllegalStateException e = assertThrows(IllegalStateException.class, p::registerToBootstrap);
            assertTrue(e.getMessage().contains("wildcard address " + wildcard) && e.getMessage().contains("advertise(host, port)"),
                    e.getMessage());
        }
        KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).listenHost("0.0.0.0").advertise("127.0.0.1", 0).build());
        closeables.add(p);
        p.registerToBootstrap();
        try (BootstrapClient c = new BootstrapClient(addr, TOKEN)) {
            assertEquals("127.0.0.1", c.fetchRankEndpoint(0, 0, 0, 0).rankIp(), "the advertised host is published");
        }
        // The status page's endpoint of a rank advertised at an IPv6 address reads as one: in brackets.
        KVManager v6 = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).listenHost("0.0.0.0").advertise("fd00::1", 0).build());
        closeables.add(v6);
        assertTrue(v6.inspect().endpoint().startsWith("[fd00::1]:"), v6.inspect().endpoint());
    }

    @Test
    void aFingerprintMismatchNamesTheField() {
        TestRank pm = rank(), dm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).modelIdentity("llama-3.1-8b@rev1").build());
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, "tcp", cfg(1, 0).modelIdentity("llama-3.1-8b@rev2").build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 88);
        bootstrap(r, 0);
        KVTransferException e = failed(r::failureException);
        assertEquals(FailureKind.LAYOUT_REFUSED, e.kind());
        assertTrue(e.getMessage().contains("model differs: prefill llama-3.1-8b@rev1, decode llama-3.1-8b@rev2"), e.getMessage());
    }
}
