package io.kvferry.bench.jmh;

import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.TimeUnit;

/** The per-op cost of a WRITE header on the tcp path: encoding it into a reused buffer, and decoding one. */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class FrameCodecBench {
    ByteBuffer out;
    ByteBuffer frame;

    @Setup
    public void setUp() {
        out = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        frame = FrameCodec.encode(new WriteHeader(42, Region.KV, 0, 3, 1L << 20, 16384, 16384, 16384));
    }

    @Benchmark
    public ByteBuffer encodeWriteHeader() {
        out.clear();
        FrameCodec.putWriteFrame(out, 42, Region.KV, 0, 3, 1L << 20, 16384);
        return out;
    }

    @Benchmark
    public ControlMessage decodeWriteHeader() throws ProtocolException {
        return FrameCodec.decodeFrame(frame.duplicate().order(ByteOrder.LITTLE_ENDIAN));
    }
}
