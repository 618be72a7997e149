package io.kvferry.chaos;

import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The corrupting proxy's stream walker: one byte flipped in one payload of each chosen room, whatever the chunking; nothing else touched. */
class FrameCorruptorTest {
    /** A prefill-to-decode stream: CHALLENGE, then per room WRITEs and WRITE_LISTs (one empty WRITE) and a STATUS, heartbeats between. */
    private record Stream(byte[] bytes, List<long[]> payloads) {} // payloads: {room, offset in stream, length}

    private static Stream stream(int rooms, long seed) {
        Random rnd = new Random(seed);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        List<long[]> payloads = new ArrayList<>();
        put(out, FrameCodec.encode(new Challenge(Handshake.nonce())));
        for (int r = 0; r < rooms; r++) {
            long room = 1000 + r;
            put(out, FrameCodec.encode(new WriteHeader(room, Region.KV, 0, 0, 0, 0))); // empty: nothing to flip
            for (int w = 0; w < 3; w++) {
                int len = 1 + rnd.nextInt(5000);
                if (rnd.nextBoolean()) {
                    put(out, FrameCodec.encode(new WriteHeader(room, Region.KV, 0, w, 4096L * w, len)));
                } else {
                    // A piece list of up to three pieces, their bytes in one payload (what tcp sends).
                    WriteList list = WriteList.builder(room, 3);
                    int left = len, pieces = 1 + rnd.nextInt(3);
                    for (int p = 0; p < pieces && left > 0; p++) {
                        int piece = p == pieces - 1 ? left : 1 + rnd.nextInt(left);
                        list.add(Region.KV, 0, w, 8192L * p, piece);
                        left -= piece;
                    }
                    put(out, FrameCodec.encode(list));
                }
                byte[] payload = new byte[len];
                rnd.nextBytes(payload);
                payloads.add(new long[]{room, out.size(), len});
                out.write(payload, 0, len);
                put(out, FrameCodec.encode(new Heartbeat()));
            }
            put(out, FrameCodec.encode(Status.success(room, 0, 15_000, 0, false)));
        }
        return new Stream(out.toByteArray(), payloads);
    }

    private static void put(ByteArrayOutputStream out, ByteBuffer frame) {
        byte[] b = new byte[frame.remaining()];
        frame.get(b);
        out.write(b, 0, b.length);
    }

    /** Runs {@code bytes} through a corruptor in chunks of random sizes up to {@code maxChunk}. */
    private static byte[] pass(byte[] bytes, WriteCorruption c, int maxChunk, long seed) {
        FrameCorruptor f = new FrameCorruptor(c);
        byte[] copy = bytes.clone();
        Random rnd = new Random(seed);
        for (int at = 0; at < copy.length; ) {
            int n = Math.min(copy.length - at, 1 + rnd.nextInt(maxChunk));
            ByteBuffer chunk = ByteBuffer.wrap(copy, at, n);
            f.process(chunk);
            assertEquals(at, chunk.position(), "the walker leaves the buffer's position alone");
            at += n;
        }
        return copy;
    }

    @Property(seed = "20261207", tries = 60)
    void flipsExactlyOnePayloadByteOfEachChosenRoomWhateverTheChunking(@ForAll @IntRange(min = 1, max = 9000) int maxChunk,
                                                                      @ForAll long seed) {
        Stream s = stream(12, seed);
        WriteCorruption c = new WriteCorruption(0.5, seed);
        byte[] out = pass(s.bytes(), c, maxChunk, seed ^ 0x55);
        List<Integer> diffs = new ArrayList<>();
        for (int i = 0; i < out.length; i++) if (out[i] != s.bytes()[i]) diffs.add(i);
        int chosen = 0;
        for (long room = 1000; room < 1012; room++) if (c.chosen(room)) chosen++;
        assertEquals(chosen, c.rooms());
        assertEquals(chosen, diffs.size(), "one byte per chosen room");
        for (int d : diffs) {
            long[] p = s.payloads().stream().filter(x -> d >= x[1] && d < x[1] + x[2]).findFirst().orElseThrow(
                    () -> new AssertionError("byte " + d + " flipped outside every payload (a header or body)"));
            assertTrue(c.chosen(p[0]), "flipped a room that was not chosen");
            long first = s.payloads().stream().filter(x -> x[0] == p[0]).findFirst().orElseThrow()[1];
            assertEquals(first, p[1], "the room's first payload gets the flip");
            assertEquals(p[1] + p[2] / 2, d, "in the middle of the payload");
            assertEquals((byte) (s.bytes()[d] ^ WriteCorruption.FLIP_MASK), out[d]);
        }
    }

    @Test
    void nothingChangesAtProbabilityZeroAndEveryRoomAtOne() {
        Stream s = stream(5, 3);
        assertArrayEquals(s.bytes(), pass(s.bytes(), new WriteCorruption(0, 1), 777, 1));
        WriteCorruption all = new WriteCorruption(1, 1);
        byte[] out = pass(s.bytes(), all, 777, 1);
        assertEquals(5, all.rooms());
        int diffs = 0;
        for (int i = 0; i < out.length; i++) if (out[i] != s.bytes()[i]) diffs++;
        assertEquals(5, diffs);
    }

    @Test
    void aStreamThatIsNotKvferryFramesPassesUntouched() {
        byte[] noise = new byte[10_000];
        new Random(9).nextBytes(noise);
        noise[0] = 1; // not the magic
        WriteCorruption c = new WriteCorruption(1, 1);
        assertArrayEquals(noise, pass(noise, c, 1000, 2));
        assertEquals(1, c.malformedStreams());
        assertEquals(0, c.rooms());
    }

    @Test
    void probabilitiesOutsideZeroToOneAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> new WriteCorruption(-0.1, 1));
        assertThrows(IllegalArgumentException.class, () -> new WriteCorruption(1.5, 1));
        assertThrows(IllegalArgumentException.class, () -> new WriteCorruption(Double.NaN, 1));
        assertFalse(new WriteCorruption(0, 1).chosen(42));
    }
}
