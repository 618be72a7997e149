package io.kvferry.protocol;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import static io.kvferry.protocol.WireReader.bool;
import static io.kvferry.protocol.WireReader.checksum;
import static io.kvferry.protocol.WireReader.count;
import static io.kvferry.protocol.WireReader.failureKind;
import static io.kvferry.protocol.WireReader.nonNegative;
import static io.kvferry.protocol.WireReader.positive;
import static io.kvferry.protocol.WireReader.raw;
import static io.kvferry.protocol.WireReader.str;

/** The bodies of the handshake frames, HELLO and HELLO_ACK (docs/PROTOCOL.md §3): the largest ones, kept apart. */
final class HandshakeCodec {
    private HandshakeCodec() {}

    static void encodeHello(WireWriter b, Hello h) {
        b.str(h.sessionId());
        b.str(h.instanceId());
        Fingerprint f = h.fingerprint();
        b.str(f.kvferryVersion());
        b.str(f.model());
        b.str(f.kvCacheDtype());
        b.i32(f.pageSize());
        b.u8(f.mla() ? 1 : 0);
        b.i32(f.totalKvHeads());
        b.str(h.dataPath());
        b.i32(h.engineRank());
        b.i32(h.attnTpSize());
        b.i32(h.ppRank());
        b.i32(h.flags());
        b.u8(h.checksum().code());
        MemoryDescriptor m = h.memory();
        b.i32(m.kvLengths().length);
        for (int i = 0; i < m.kvLengths().length; i++) {
            b.i64(m.kvLengths()[i]);
            b.i64(m.kvItemLens()[i]);
            b.i32(m.kvLayerIds()[i]);
        }
        b.i32(m.auxLengths().length);
        for (int i = 0; i < m.auxLengths().length; i++) {
            b.i64(m.auxLengths()[i]);
            b.i64(m.auxItemLens()[i]);
        }
        b.i32(m.states().size());
        for (MemoryDescriptor.StateDescriptor s : m.states()) {
            b.str(s.type());
            b.i32(s.lengths().length);
            for (int i = 0; i < s.lengths().length; i++) {
                b.i64(s.lengths()[i]);
                b.i64(s.itemLens()[i]);
            }
        }
        if (h.offers().size() > TransportOffer.MAX_OFFERS) {
            throw new IllegalArgumentException("HELLO carries " + h.offers().size() + " offers; at most " + TransportOffer.MAX_OFFERS);
        }
        b.i32(h.offers().size());
        for (TransportOffer o : h.offers()) {
            b.str(o.transport());
            b.bytes(o.blob());
        }
        b.raw(h.decodeNonce());
        b.raw(h.resumeProof());
        b.raw(h.mac());
    }

    static void encodeHelloAck(WireWriter body, HelloAck a) {
        body.u8(a.accepted() ? 1 : 0);
        body.u8(a.refusal() == null ? 0 : a.refusal().code());
        body.str(a.error());
        body.i32(a.prefillEngineRank());
        body.i32(a.prefillUniqueRank());
        body.str(a.dataPath());
        body.str(a.fallback());
        body.u8(a.checksum().code());
        Coverage c = a.coverage();
        body.i32(c.kvUnit().length);
        for (int b = 0; b < c.kvUnit().length; b++) {
            body.i64(c.kvUnit()[b]);
            body.i64(c.kvOffset()[b]);
            body.i64(c.kvLength()[b]);
        }
        body.u8(c.aux() ? 1 : 0);
        body.u8(c.state() ? 1 : 0);
        body.i32(c.stateUnit().length);
        for (int k = 0; k < c.stateUnit().length; k++) {
            body.i32(c.stateUnit()[k].length);
            for (int t = 0; t < c.stateUnit()[k].length; t++) {
                body.i64(c.stateUnit()[k][t]);
                body.i64(c.stateOffset()[k][t]);
                body.i64(c.stateLength()[k][t]);
            }
        }
        body.raw(a.mac());
    }

    static Hello decodeHello(ByteBuffer in) throws ProtocolException {
        String session = str(in);
        String instance = str(in);
        String version = str(in);
        String model = str(in);
        String dtype = str(in);
        int pageSize = positive(in.getInt(), "page_size");
        boolean mla = bool(in, "is_mla");
        int heads = nonNegative(in.getInt(), "total KV heads");
        String dataPath = str(in);
        int engineRank = nonNegative(in.getInt(), "engine_rank");
        int tpSize = positive(in.getInt(), "attn_tp_size");
        int ppRank = nonNegative(in.getInt(), "pp_rank");
        int flags = in.getInt();
        if ((flags & ~Hello.KNOWN_FLAGS) != 0) throw new ProtocolException("unknown HELLO flags 0x" + Integer.toHexString(flags));
        ChecksumMode checksum = checksum(in.get() & 0xFF, "HELLO");
        int nKv = count(in, 20, "kv buffer");
        long[] kvLen = new long[nKv], kvItem = new long[nKv];
        int[] kvLayer = new int[nKv];
        for (int i = 0; i < nKv; i++) {
            kvLen[i] = nonNegative(in.getLong(), "kv buffer length");
            kvItem[i] = positive(in.getLong(), "kv item length");
            kvLayer[i] = in.getInt();
        }
        int nAux = count(in, 16, "aux buffer");
        long[] auxLen = new long[nAux], auxItem = new long[nAux];
        for (int i = 0; i < nAux; i++) {
            auxLen[i] = nonNegative(in.getLong(), "aux buffer length");
            auxItem[i] = positive(in.getLong(), "aux item length");
        }
        int nState = count(in, 6, "state component");
        List<MemoryDescriptor.StateDescriptor> states = new ArrayList<>(nState);
        for (int c = 0; c < nState; c++) {
            String stype = str(in);
            int nt = count(in, 16, "state tensor");
            long[] len = new long[nt], item = new long[nt];
            for (int i = 0; i < nt; i++) {
                len[i] = nonNegative(in.getLong(), "state tensor length");
                item[i] = positive(in.getLong(), "state item length");
            }
            states.add(new MemoryDescriptor.StateDescriptor(stype, len, item));
        }
        int nOffers = in.getInt();
        if (nOffers < 0 || nOffers > TransportOffer.MAX_OFFERS) {
            throw new ProtocolException("transport offer count " + nOffers + " is outside [0, " + TransportOffer.MAX_OFFERS + "]");
        }
        List<TransportOffer> offers = new ArrayList<>(nOffers);
        for (int i = 0; i < nOffers; i++) {
            String transport = str(in);
            if (transport.isEmpty()) throw new ProtocolException("transport offer " + i + " has no name");
            int n = in.getInt();
            if (n < 0 || n > TransportOffer.MAX_BLOB_BYTES || n > in.remaining()) {
                throw new ProtocolException("transport offer '" + transport + "' declares " + n + " bytes but "
                        + in.remaining() + " are left (limit " + TransportOffer.MAX_BLOB_BYTES + ")");
            }
            byte[] blob = new byte[n];
            in.get(blob);
            offers.add(new TransportOffer(transport, blob));
        }
        byte[] nonce = raw(in, Handshake.BYTES);
        byte[] resume = raw(in, Handshake.BYTES);
        byte[] mac = raw(in, Handshake.BYTES);
        return new Hello(session, instance, new Fingerprint(version, model, dtype, pageSize, mla, heads), dataPath, engineRank,
                tpSize, ppRank, flags, checksum, new MemoryDescriptor(kvLen, kvItem, kvLayer, auxLen, auxItem, states), offers,
                nonce, resume, mac);
    }

    static HelloAck decodeHelloAck(ByteBuffer in) throws ProtocolException {
        boolean accepted = bool(in, "accepted");
        FailureKind refusal = failureKind(in.get() & 0xFF, !accepted, "HELLO_ACK");
        String error = str(in);
        int engineRank = nonNegative(in.getInt(), "prefill engine rank");
        int uniqueRank = nonNegative(in.getInt(), "prefill unique rank");
        String dataPath = str(in);
        String fallback = str(in);
        ChecksumMode checksum = checksum(in.get() & 0xFF, "HELLO_ACK");
        int nKv = count(in, 24, "coverage KV buffer");
        long[] unit = new long[nKv], offset = new long[nKv], length = new long[nKv];
        for (int b = 0; b < nKv; b++) {
            unit[b] = nonNegative(in.getLong(), "coverage unit");
            offset[b] = nonNegative(in.getLong(), "coverage offset");
            length[b] = nonNegative(in.getLong(), "coverage length");
        }
        boolean aux = bool(in, "coverage aux");
        boolean state = bool(in, "coverage state");
        int nState = count(in, 4, "coverage state component");
        long[][] sUnit = new long[nState][], sOffset = new long[nState][], sLength = new long[nState][];
        for (int c = 0; c < nState; c++) {
            int nt = count(in, 24, "coverage state tensor");
            sUnit[c] = new long[nt];
            sOffset[c] = new long[nt];
            sLength[c] = new long[nt];
            for (int t = 0; t < nt; t++) {
                sUnit[c][t] = nonNegative(in.getLong(), "coverage unit");
                sOffset[c][t] = nonNegative(in.getLong(), "coverage offset");
                sLength[c][t] = nonNegative(in.getLong(), "coverage length");
            }
        }
        byte[] mac = raw(in, Handshake.BYTES);
        return new HelloAck(accepted, error, refusal, engineRank, uniqueRank, dataPath, fallback, checksum,
                new Coverage(unit, offset, length, aux, state, sUnit, sOffset, sLength), mac);
    }
}
