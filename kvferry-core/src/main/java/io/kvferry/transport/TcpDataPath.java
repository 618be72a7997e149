package io.kvferry.transport;

import io.kvferry.protocol.Region;

import java.io.IOException;
import java.lang.foreign.MemorySegment;

/** Streams each run over the control connection as a WRITE frame; the decode reader lands it in place. */
public final class TcpDataPath implements DataPath {
    private final ControlConnection connection;

    public TcpDataPath(ControlConnection connection) {
        this.connection = connection;
    }

    @Override
    public String name() {
        return "tcp";
    }

    @Override
    public void write(long room, Region region, int component, int buffer, long dstOffset, MemorySegment source)
            throws IOException {
        connection.write(room, region, component, buffer, dstOffset, source);
    }
}
