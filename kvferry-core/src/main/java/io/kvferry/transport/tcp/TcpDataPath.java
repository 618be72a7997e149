package io.kvferry.transport.tcp;

import io.kvferry.api.ChecksumMode;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DataPath;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.BooleanSupplier;

/**
 * Streams a plan as WRITE_LIST (and, for strided ops, WRITE) frames; the decode reader lands them in
 * place. With striping, a room's writes (and its final STATUS, see {@link #connectionFor}) all use
 * stripe {@code room mod n}, so they stay in order while different rooms spread over the
 * connections. Each connection has its own {@link TcpFrameWriter}.
 */
public final class TcpDataPath implements DataPath {
    private final TcpFrameWriter main;
    /** Index 0 writes on the control connection; others are attached as the decode opens them (before its first request). */
    private final AtomicReferenceArray<TcpFrameWriter> stripes;
    /** Set once at link set-up, before the first write. */
    private volatile ChecksumMode checksum = ChecksumMode.OFF;

    TcpDataPath(ControlConnection connection, int stripes) {
        this.main = new TcpFrameWriter(connection);
        this.stripes = new AtomicReferenceArray<>(Math.max(1, stripes));
        this.stripes.set(0, main);
    }

    @Override
    public boolean attachStripe(int index, ControlConnection connection) {
        return index > 0 && index < stripes.length() && stripes.compareAndSet(index, null, new TcpFrameWriter(connection));
    }

    private TcpFrameWriter writerFor(long room) {
        TcpFrameWriter w = stripes.get((int) Math.floorMod(room, (long) stripes.length()));
        return w == null ? main : w;
    }

    @Override
    public ControlConnection connectionFor(long room) {
        return writerFor(room).connection();
    }

    @Override
    public String name() {
        return "tcp";
    }

    /** tcp checks each frame as it lands: its frames carry the CRC32C of their payload. */
    @Override
    public boolean carryChecksums(ChecksumMode mode) {
        checksum = mode;
        return true;
    }

    @Override
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        writerFor(room).writePlan(room, plan, source, cancelled, checksum, null);
    }

    /** The trailer rides in the same gathering write as the plan's last frame, on the room's stripe. */
    @Override
    public boolean write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled, ByteBuffer trailer)
            throws IOException {
        writerFor(room).writePlan(room, plan, source, cancelled, checksum, trailer);
        return true;
    }
}
