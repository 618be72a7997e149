package io.kvferry.transfer;

import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.ControlConnection;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** Data frames as a hostile (or broken) prefill sends them: whatever it declares, straight onto the connection. */
final class RawFrames {
    private RawFrames() {}

    /** A contiguous WRITE of {@code payload} to {@code offset} of the named buffer. */
    static void write(ControlConnection c, long room, Region region, int component, int buffer, long offset, MemorySegment payload)
            throws IOException {
        ByteBuffer frame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        FrameCodec.putWriteFrame(frame, room, region, component, buffer, offset, payload.byteSize());
        send(c, frame.flip(), payload);
    }

    /** A WRITE_LIST frame of {@code list} (valid or not), then {@code payload}. */
    static void writeList(ControlConnection c, WriteList list, MemorySegment payload) throws IOException {
        send(c, FrameCodec.encode(list), payload);
    }

    /** Any frame bytes, then {@code payload}. */
    static void send(ControlConnection c, ByteBuffer frame, MemorySegment payload) throws IOException {
        ByteBuffer[] v = {frame, payload.asByteBuffer()};
        c.writeFrames(v, 0, 2, frame.remaining() + payload.byteSize());
    }
}
