package io.kvferry.transport.tcp;

import io.kvferry.api.ChecksumMode;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.transport.ControlConnection;
import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.DataPath;

import java.io.IOException;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.BooleanSupplier;

/**
 * Streams each op as a WRITE frame; the decode reader lands it in place. With striping, a room's
 * writes (and its final STATUS, see {@link #connectionFor}) all use stripe {@code room mod n}, so
 * they stay in order while different rooms spread over the connections.
 */
public final class TcpDataPath implements DataPath {
    private final ControlConnection main;
    /** Index 0 is the control connection; others are attached as the decode opens them (before its first request). */
    private final AtomicReferenceArray<ControlConnection> stripes;
    /** Set once at link set-up, before the first write. */
    private volatile ChecksumMode checksum = ChecksumMode.OFF;

    TcpDataPath(ControlConnection connection, int stripes) {
        this.main = connection;
        this.stripes = new AtomicReferenceArray<>(Math.max(1, stripes));
        this.stripes.set(0, connection);
    }

    @Override
    public boolean attachStripe(int index, ControlConnection connection) {
        return index > 0 && index < stripes.length() && stripes.compareAndSet(index, null, connection);
    }

    @Override
    public ControlConnection connectionFor(long room) {
        ControlConnection c = stripes.get((int) Math.floorMod(room, (long) stripes.length()));
        return c == null ? main : c;
    }

    @Override
    public String name() {
        return "tcp";
    }

    /** tcp checks each WRITE as it lands: its frames carry the CRC32C of their payload. */
    @Override
    public boolean carryChecksums(ChecksumMode mode) {
        checksum = mode;
        return true;
    }

    @Override
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        connectionFor(room).writePlan(room, plan, source, cancelled, checksum);
    }
}
