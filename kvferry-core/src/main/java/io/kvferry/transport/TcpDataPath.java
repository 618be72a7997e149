package io.kvferry.transport;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;

import java.io.IOException;
import java.util.function.BooleanSupplier;

/** Streams each op over the control connection as a WRITE frame; the decode reader lands it in place. */
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
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        connection.writePlan(room, plan, source, cancelled);
    }
}
