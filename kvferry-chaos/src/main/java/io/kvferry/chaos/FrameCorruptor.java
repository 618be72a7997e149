package io.kvferry.chaos;

import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Follows one direction of a kvferry control stream (prefill to decode) frame by frame as its bytes
 * pass through a {@link FaultProxy}, in whatever pieces the socket delivers them, and flips one byte
 * in the middle of the payload of a WRITE its {@link WriteCorruption} picks. Headers and bodies are
 * never touched: the decode must see a well-formed stream whose KV bytes are wrong, which only a
 * checksum can tell (a damaged header would be a protocol error, caught anyway).
 *
 * <p>Frames: a 12-byte header (magic, version, type, flags, body length, little-endian); a WRITE's
 * 56-byte body is followed by {@code length} payload bytes (body offset 24, i64); every other
 * frame is just its body. A stream that does not parse (bad magic or version) is passed on
 * untouched from there on. One instance per stream direction, used by its pump thread only;
 * nothing is allocated per frame.
 */
final class FrameCorruptor {
    private static final int WRITE = MessageType.WRITE.code();
    /** Offsets inside the header and the WRITE body. */
    private static final int TYPE_AT = 5, LENGTH_AT = 8, ROOM_AT = 0, PAYLOAD_LENGTH_AT = 24;

    private enum Stage { HEADER, WRITE_BODY, PAYLOAD, SKIP, BROKEN }

    private final WriteCorruption corruption;
    private final byte[] header = new byte[Wire.HEADER_BYTES];
    private final byte[] writeBody = new byte[WriteHeader.BODY_BYTES];
    private final ByteBuffer headerView = ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN);
    private final ByteBuffer bodyView = ByteBuffer.wrap(writeBody).order(ByteOrder.LITTLE_ENDIAN);
    private Stage stage = Stage.HEADER;
    private int filled;
    /** Bytes left in the current body or payload. */
    private long remaining;
    /** Payload offset of the byte to flip in the current WRITE, or -1. */
    private long flipAt = -1;
    private long payloadSeen;
    private long flips;

    FrameCorruptor(WriteCorruption corruption) {
        this.corruption = corruption;
    }

    /** Bytes flipped on this stream so far. */
    long flips() {
        return flips;
    }

    /** Walks {@code buf}'s remaining bytes (position and limit unchanged), flipping the chosen payload byte in place. */
    void process(ByteBuffer buf) {
        int i = buf.position(), end = buf.limit();
        while (i < end) {
            switch (stage) {
                case HEADER -> {
                    int n = Math.min(Wire.HEADER_BYTES - filled, end - i);
                    buf.get(i, header, filled, n);
                    i += n;
                    filled += n;
                    if (filled == Wire.HEADER_BYTES) onHeader();
                }
                case WRITE_BODY -> {
                    int n = Math.min(WriteHeader.BODY_BYTES - filled, end - i);
                    buf.get(i, writeBody, filled, n);
                    i += n;
                    filled += n;
                    if (filled == WriteHeader.BODY_BYTES) onWriteBody();
                }
                case PAYLOAD -> {
                    int n = (int) Math.min(remaining, end - i);
                    if (flipAt >= payloadSeen && flipAt < payloadSeen + n) {
                        int at = i + (int) (flipAt - payloadSeen);
                        buf.put(at, (byte) (buf.get(at) ^ WriteCorruption.FLIP_MASK));
                        flips++;
                        flipAt = -1;
                    }
                    payloadSeen += n;
                    remaining -= n;
                    i += n;
                    if (remaining == 0) nextFrame();
                }
                case SKIP -> {
                    int n = (int) Math.min(remaining, end - i);
                    remaining -= n;
                    i += n;
                    if (remaining == 0) nextFrame();
                }
                case BROKEN -> i = end;
                default -> throw new IllegalStateException(stage.name());
            }
        }
    }

    private void onHeader() {
        if (headerView.getInt(0) != Wire.MAGIC || (header[4] & 0xFF) != Wire.VERSION) {
            stage = Stage.BROKEN;
            corruption.malformed();
            return;
        }
        int type = header[TYPE_AT] & 0xFF;
        long bodyLength = Integer.toUnsignedLong(headerView.getInt(LENGTH_AT));
        filled = 0;
        if (type == WRITE && bodyLength == WriteHeader.BODY_BYTES) {
            stage = Stage.WRITE_BODY;
        } else if (bodyLength == 0) {
            nextFrame();
        } else {
            stage = Stage.SKIP;
            remaining = bodyLength;
        }
    }

    private void onWriteBody() {
        long room = bodyView.getLong(ROOM_AT);
        long length = bodyView.getLong(PAYLOAD_LENGTH_AT);
        if (length <= 0) {
            nextFrame(); // an empty write (or one the decode refuses as malformed anyway)
            return;
        }
        stage = Stage.PAYLOAD;
        remaining = length;
        payloadSeen = 0;
        flipAt = corruption.claim(room) ? length / 2 : -1;
    }

    private void nextFrame() {
        stage = Stage.HEADER;
        filled = 0;
        remaining = 0;
    }
}
