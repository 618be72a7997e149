package io.kvferry.transport;

import io.kvferry.protocol.Region;

import java.io.IOException;
import java.lang.foreign.MemorySegment;

/**
 * Same-JVM data path: a plain {@link MemorySegment#copy} into the decode's memory, gated by the
 * same {@link WriteSink} checks a TCP write goes through. Control messages still use TCP.
 */
public final class InprocDataPath implements DataPath {
    private final WriteSink sink;

    public InprocDataPath(WriteSink sink) {
        this.sink = sink;
    }

    @Override
    public String name() {
        return "inproc";
    }

    @Override
    public void write(long room, Region region, int component, int buffer, long dstOffset, MemorySegment source)
            throws IOException {
        WriteSink.Landing landing;
        try {
            landing = sink.begin(room, region, component, buffer, dstOffset, source.byteSize());
        } catch (WriteRejectedException e) {
            throw new IOException("decode rejected the write: " + e.getMessage());
        }
        boolean landed = false;
        try {
            MemorySegment.copy(source, 0, landing.target(), 0, source.byteSize());
            landed = true;
        } finally {
            sink.end(landing, landed);
        }
    }
}
