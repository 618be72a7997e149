package io.kvferry.transport;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.function.BooleanSupplier;

/**
 * Same-JVM data path: plain {@link MemorySegment#copy}s into the decode's memory, gated by the
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
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        for (int op = 0; op < plan.size(); op++) {
            if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
            MemorySegment src = source.slice(plan.region(op), plan.component(op), plan.buffer(op), plan.srcOffset(op),
                    plan.srcSpan(op));
            WriteSink.Landing landing;
            try {
                landing = sink.begin(room, plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op),
                        plan.dstSpan(op), plan.length(op));
            } catch (WriteRejectedException e) {
                throw new IOException("decode rejected the write: " + e.getMessage());
            }
            boolean landed = false;
            try {
                if (!plan.strided(op)) {
                    MemorySegment.copy(src, 0, landing.target(), 0, plan.length(op));
                } else {
                    long piece = plan.pieceLength(op), n = plan.pieces(op);
                    for (long i = 0; i < n; i++) {
                        MemorySegment.copy(src, i * plan.srcStride(op), landing.target(), i * plan.dstStride(op), piece);
                    }
                }
                landed = true;
            } finally {
                sink.end(landing, landed);
            }
        }
    }
}
