package io.kvferry.transport.tcp;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.TransportUnavailableException;
import io.kvferry.transport.WriteSink;

import java.util.function.Consumer;

/**
 * Bytes as WRITE frames on the link's own TCP connections: works between any two hosts, so it is
 * the fallback every link has when no other transport was offered or could be used. Nothing is
 * offered in HELLO for it; the decode lands its frames through its write gate ({@link TcpDestination}).
 */
public final class TcpTransportProvider implements TransportProvider {
    public static final String NAME = "tcp";

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean offeredByAuto() {
        return false; // auto always ends on tcp anyway: it is the fallback
    }

    @Override
    public String unavailableReason(KVFerrySettings settings) {
        return null;
    }

    @Override
    public TcpDestination openDestination(RegisteredMemory memory, int engineRank, KVFerrySettings settings, WriteSink gate,
                                          Consumer<String> why) {
        return new TcpDestination(gate);
    }

    @Override
    public SourceTransport openSource(RegisteredMemory memory, int engineRank, KVFerrySettings settings) {
        return new SourceTransport() {
            @Override
            public String name() {
                return NAME;
            }

            @Override
            public DataPath connect(byte[] offer, MemoryDescriptor destination, PeerLink link) throws TransportUnavailableException {
                if (link.control() == null) throw new TransportUnavailableException("tcp writes need the link's control connection");
                return new TcpDataPath(link.control(), link.stripes());
            }

            @Override
            public void close() {
                // the connections belong to the links
            }
        };
    }
}
