package io.kvferry.conn;

import io.kvferry.plan.HeadSlice;
import io.kvferry.protocol.Hello;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DataPath;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A decode rank connected to this prefill rank: its accepted connection, what it registered in
 * HELLO, and how bytes reach it. Created and closed by the connection's reader thread.
 */
final class PeerSession {
    final ControlConnection connection;
    volatile Hello hello;
    volatile DataPath dataPath;
    /** Per KV buffer head slice when this decode's attention TP differs (MHA); null for page copies. */
    volatile HeadSlice[] kvSlices;
    /** Decode KV buffer of each local KV buffer, paired by layer id (PP stages hold a subset). */
    volatile int[] kvBufferMap;
    /** For an extra TCP data stripe: the session it belongs to (its loss is that session's loss); else null. */
    volatile PeerSession stripeOf;
    /** The data stripes attached to this session (closed with it). */
    final Set<PeerSession> stripes = ConcurrentHashMap.newKeySet();
    /** Rooms that hold a destination on this session, so its loss fails exactly them. */
    final Set<Long> rooms = ConcurrentHashMap.newKeySet();

    PeerSession(ControlConnection connection) {
        this.connection = connection;
    }

    /** The connection a room's success status must follow its writes on. */
    ControlConnection statusConnection(long room) {
        return dataPath instanceof io.kvferry.transport.TcpDataPath tcp ? tcp.connectionFor(room) : connection;
    }

    String sessionId() {
        Hello h = hello;
        return h == null ? "unregistered@" + connection.peer() : h.sessionId();
    }

    @Override
    public String toString() {
        return sessionId() + " (" + connection.peer() + ")";
    }
}
