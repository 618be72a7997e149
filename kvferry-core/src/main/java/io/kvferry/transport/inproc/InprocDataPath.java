package io.kvferry.transport.inproc;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.RemoteBuffers;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.function.BooleanSupplier;

/**
 * Same-JVM data path: plain {@link MemorySegment#copy}s into the decode's memory, gated by the
 * same {@link WriteSink} checks a TCP write goes through. Control messages still use TCP.
 */
final class InprocDataPath implements DataPath {
    private final WriteSink sink;
    /** The decode's name for the link these writes come from (its gate counts them against it). */
    private final String link;

    InprocDataPath(WriteSink sink, String link) {
        this.sink = sink;
        this.link = link;
    }

    @Override
    public String name() {
        return "inproc";
    }

    @Override
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        WriteSink.Landing landing = new WriteSink.Landing(link, null); // one per plan, reused for each op
        for (int op = 0; op < plan.size(); op++) {
            if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
            MemorySegment src = RemoteBuffers.checkSource(room, plan, op, source);
            try {
                sink.begin(landing, room, plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op),
                        plan.dstSpan(op), plan.length(op), plan.pieceLength(op), plan.dstStride(op));
            } catch (WriteRejectedException e) {
                throw new IOException("decode rejected the write: " + e.getMessage());
            }
            boolean landed = false;
            try {
                long from = plan.srcOffset(op), at = landing.offset();
                if (!plan.strided(op)) {
                    MemorySegment.copy(src, from, landing.buffer(), at, plan.length(op));
                } else {
                    long piece = plan.pieceLength(op), n = plan.pieces(op);
                    for (long i = 0; i < n; i++) {
                        MemorySegment.copy(src, from + i * plan.srcStride(op), landing.buffer(), at + i * plan.dstStride(op), piece);
                    }
                }
                landed = true;
            } finally {
                sink.end(landing, landed);
            }
        }
    }
}
