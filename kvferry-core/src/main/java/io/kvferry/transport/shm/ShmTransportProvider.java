package io.kvferry.transport.shm;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knob;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedMemory;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.WriteSink;

import java.io.IOException;
import java.util.List;
import java.util.function.Consumer;

/**
 * Same host, different processes: the decode's pools live in {@link SharedMemory} files, the
 * prefill maps them and each run is one {@code MemorySegment.copy}. Registered through
 * {@code META-INF/services}.
 */
public final class ShmTransportProvider implements TransportProvider {
    @Override
    public String name() {
        return "shm";
    }

    @Override
    public List<Knob> knobs() {
        return List.of(CopyLanes.COPY_THREADS);
    }

    @Override
    public String unavailableReason(KVFerrySettings settings) {
        String dir = SharedMemory.directoryProblem();
        if (dir != null) return dir + " (mount a tmpfs there, or set -Dkvferry.shm.dir)";
        String calls = ShmFiles.unavailableReason();
        if (calls != null) return calls;
        try {
            CopyLanes.configured(settings);
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
        return null;
    }

    @Override
    public DestinationTransport openDestination(RegisteredMemory memory, int engineRank, KVFerrySettings settings, WriteSink gate,
                                                Consumer<String> why) throws IOException {
        return ShmDestination.open(memory, engineRank, why);
    }

    @Override
    public SourceTransport openSource(RegisteredMemory memory, int engineRank, KVFerrySettings settings) {
        return new ShmSource(engineRank, CopyLanes.configured(settings));
    }
}
