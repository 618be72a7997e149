package io.kvferry.transport;

import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * The reading half of a {@link ControlConnection}, owned by its reader thread: frames are parsed
 * from a 16 KiB direct read-ahead, so one syscall picks up as many whole small frames as have
 * arrived (a room's piece list, its STATUS, the next room's list …). A body up to the read-ahead's
 * size is decoded in place from it; a larger one is read into a buffer that grows as its bytes
 * arrive (never sized from the header alone), so a peer that announces a large frame and stalls
 * costs nothing. Payload bytes that arrived in the read-ahead are copied from it; the rest are read
 * straight into their destinations, with the read-ahead as the last buffer of the scattering read so
 * the next frames come with the same call. Nothing is allocated per WRITE or WRITE_LIST frame.
 */
final class FrameReader {
    /**
     * The read-ahead: every body up to this size (a WRITE_LIST's, a STATUS, most TRANSFER_INFOs) is
     * decoded in place from it. Small, because each connection keeps it for its life: with the frame
     * writer's list buffer a link costs well under 64 KiB of native memory on either side.
     */
    static final int AHEAD_BYTES = 16 << 10;

    private final SocketChannel channel;
    private final String peer;
    /** Told of every read that returned bytes (the connection's liveness clock). */
    private final ControlConnection liveness;
    /** Bytes read ahead, from the current frame's start (or payload position) on. */
    private final ByteBuffer ahead = ByteBuffer.allocateDirect(AHEAD_BYTES).order(ByteOrder.LITTLE_ENDIAN).flip();
    /** The single-buffer vector of {@link #readPayload(ByteBuffer)} (plus the read-ahead slot). */
    private final ByteBuffer[] single = new ByteBuffer[2];
    /** WRITE frames are decoded into this header, WRITE_LIST frames into this list (made on the first). */
    private final WriteHeader writeHeader = WriteHeader.reusable();
    private WriteList writeList;
    /** Buffers handed to vectored reads so far (see {@link ControlConnection#vectoredWritten}). */
    private long vectoredRead;

    FrameReader(SocketChannel channel, String peer, ControlConnection liveness) {
        this.channel = channel;
        this.peer = peer;
        this.liveness = liveness;
    }

    long vectoredRead() {
        return vectoredRead;
    }

    /**
     * Reads the next message (reader thread only). For a {@link WriteHeader} or {@link WriteList} the
     * payload is still on the stream: the caller must consume exactly its length with
     * {@link #readPayload} or {@link #skipPayload} before reading again; the header or list itself is
     * this connection's reused one, valid until the next read. A body up to the read-ahead's size is
     * decoded in place from it; a larger one is read into a buffer that grows as its bytes arrive
     * (never sized from the header alone), so a peer that announces a large frame and stalls costs nothing.
     */
    ControlMessage read(Set<MessageType> onlyTypes, int onlyMaxBody) throws IOException {
        fillAhead(Wire.HEADER_BYTES, true);
        long header = FrameCodec.readHeaderPacked(ahead);
        MessageType type = FrameCodec.packedType(header);
        int bodyLength = FrameCodec.packedBodyLength(header);
        if (onlyTypes != null) {
            if (!onlyTypes.contains(type)) {
                throw new ProtocolException("expected " + onlyTypes.stream().map(MessageType::name).collect(Collectors.joining(" or "))
                        + " from an unauthenticated peer, got " + type);
            }
            if (bodyLength > onlyMaxBody) {
                throw new ProtocolException(type + " of " + bodyLength + " bytes from an unauthenticated peer exceeds " + onlyMaxBody);
            }
        }
        if (bodyLength <= AHEAD_BYTES) {
            fillAhead(bodyLength, false);
            int end = ahead.position() + bodyLength, limit = ahead.limit();
            ahead.limit(end);
            try {
                return switch (type) {
                    case WRITE -> FrameCodec.decodeWriteInto(ahead, writeHeader);
                    case WRITE_LIST -> FrameCodec.decodeWriteListInto(ahead, writeList == null ? writeList = WriteList.reusable() : writeList);
                    default -> FrameCodec.decodeBody(type, ahead);
                };
            } finally {
                ahead.limit(limit).position(end);
            }
        }
        // Larger than the read-ahead (a big HELLO or TRANSFER_INFO): what arrived so far is all this body's.
        ByteBuffer body = ByteBuffer.allocate(Math.max(4096, ahead.remaining())).order(ByteOrder.LITTLE_ENDIAN);
        body.put(ahead);
        body.limit(Math.min(bodyLength, body.capacity()));
        while (true) {
            readFully(body); // the rest of the body, read directly: never past this frame
            if (body.position() == bodyLength) break;
            // Full, and the frame is longer: grow by doubling, only as far as bytes have arrived.
            ByteBuffer larger = ByteBuffer.allocate((int) Math.min(bodyLength, 2L * body.capacity())).order(ByteOrder.LITTLE_ENDIAN);
            body.flip();
            larger.put(body);
            larger.limit(larger.capacity());
            body = larger;
        }
        body.flip();
        return FrameCodec.decodeBody(type, body);
    }

    /**
     * Makes at least {@code need} (at most {@link #AHEAD_BYTES}) unread bytes available in {@link #ahead};
     * an end of stream is clean only at a frame's start with nothing of the next frame read.
     */
    private void fillAhead(int need, boolean frameStart) throws IOException {
        if (ahead.remaining() >= need) return;
        ahead.compact(); // kept bytes move to 0; reads take whatever has arrived, up to the buffer's capacity
        while (ahead.position() < need) {
            int n = channel.read(ahead);
            if (n > 0) liveness.markRead();
            if (n < 0) {
                boolean clean = frameStart && ahead.position() == 0;
                ahead.flip();
                if (clean) throw new EOFException("connection closed by " + peer);
                throw new ProtocolException("connection closed by " + peer + " in the middle of a frame");
            }
        }
        ahead.flip();
    }

    /** Reads payload bytes into {@code destination}'s remaining bytes. */
    void readPayload(ByteBuffer destination) throws IOException {
        single[0] = destination;
        try {
            readPayload(single, 1);
        } finally {
            single[0] = null;
        }
    }

    /**
     * Fills the remaining bytes of the first {@code count} buffers of {@code vector}, in order, with
     * the payload that follows the last frame read (reader thread only): first from the read-ahead,
     * then with scattering reads straight into them. {@code vector[count]} must be free: the
     * read-ahead takes that slot during the reads, so the frames after this payload arrive with it.
     */
    void readPayload(ByteBuffer[] vector, int count) throws IOException {
        int first = 0;
        long left = 0;
        for (int i = 0; i < count; i++) {
            ByteBuffer b = vector[i];
            int n = Math.min(ahead.remaining(), b.remaining());
            if (n > 0) {
                b.put(b.position(), ahead, ahead.position(), n);
                b.position(b.position() + n);
                ahead.position(ahead.position() + n);
            }
            if (!b.hasRemaining() && first == i) first = i + 1;
            left += b.remaining();
        }
        if (left == 0) return;
        // The read-ahead is empty here: it takes what comes after this payload.
        ahead.clear();
        vector[count] = ahead;
        try {
            while (left > 0) {
                // The read-ahead joins the call only once the window reaches the payload's end.
                int last = ControlConnection.window(vector, first, count);
                if (last == count) last++;
                vectoredRead += last - first;
                long n = channel.read(vector, first, last - first);
                if (n < 0) throw new ProtocolException("connection closed by " + peer + " in the middle of a frame");
                if (n > 0) liveness.markRead();
                left -= n;
                while (first < count && !vector[first].hasRemaining()) first++;
            }
        } finally {
            vector[count] = null;
            ahead.flip();
        }
    }

    /** Discards {@code length} payload bytes of a rejected write, keeping the stream in step. */
    void skipPayload(long length) throws IOException {
        long fromAhead = Math.min(ahead.remaining(), length);
        ahead.position(ahead.position() + (int) fromAhead);
        long left = length - fromAhead;
        while (left > 0) {
            ahead.clear();
            int n = channel.read(ahead);
            ahead.flip();
            if (n < 0) throw new ProtocolException("connection closed by " + peer + " in the middle of a frame");
            if (n > 0) liveness.markRead();
            int drop = (int) Math.min(n, left);
            ahead.position(drop); // bytes past the payload stay: they are the next frames
            left -= drop;
        }
    }

    private void readFully(ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) {
            int n = channel.read(buf);
            if (n > 0) liveness.markRead();
            if (n < 0) {
                throw new ProtocolException("connection closed by " + peer + " in the middle of a frame");
            }
        }
    }
}
