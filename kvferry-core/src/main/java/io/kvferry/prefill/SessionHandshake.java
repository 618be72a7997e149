package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.HandshakeRefusal;
import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.RankTelemetry;
import io.kvferry.plan.LayerPairing;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.util.Set;

/**
 * Registers a decode link from its HELLO, on the link's reader thread: checks the MAC against the
 * challenge the connection was opened with, the fingerprint and layout ({@link HandshakeValidator}),
 * that a session id is only reused by the holder of its key (resume), picks the data path
 * ({@link OfferNegotiator}), and answers with a signed HELLO_ACK carrying the link's coverage and
 * checksum mode. Extra TCP stripes join a session only with its session key.
 */
final class SessionHandshake {
    private static final Logger log = LoggerFactory.getLogger(SessionHandshake.class);

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    private final int engineRank;
    private final int uniqueRank;
    private final HandshakeValidator validator;
    private final OfferNegotiator negotiator;
    /** The rank's live links (owned by {@link DecodeSessions}; read here to find a session). */
    private final Set<DecodeLink> links;
    /** Counts refusals by reason; resolves each link's data-path meters. */
    private final RankTelemetry telemetry;

    SessionHandshake(KVManagerConfig config, RegisteredMemory memory, int engineRank, int uniqueRank, HandshakeValidator validator,
                     OfferNegotiator negotiator, Set<DecodeLink> links, RankTelemetry telemetry) {
        this.config = config;
        this.memory = memory;
        this.engineRank = engineRank;
        this.uniqueRank = uniqueRank;
        this.validator = validator;
        this.negotiator = negotiator;
        this.links = links;
        this.telemetry = telemetry;
    }

    void onHello(DecodeLink link, Hello h) throws IOException {
        if (link.hello != null) throw new ProtocolException("duplicate HELLO on one connection");
        if (h.isStripe()) {
            attachStripe(link, h);
            return;
        }
        HandshakeValidator.Refusal refusal = validator.checkMac(h, link.challenge);
        HandshakeRefusal why = HandshakeRefusal.AUTH;
        if (refusal == null) {
            refusal = validator.checkHello(h);
            why = refusal != null && refusal.kind() == FailureKind.LAYOUT_REFUSED ? HandshakeRefusal.LAYOUT : HandshakeRefusal.PROTOCOL;
        }
        if (refusal != null) refuse(link, refusal.kind(), refusal.reason(), "refused decode registration: ", why);
        if (h.sessionId().isEmpty() || h.instanceId().isEmpty()) {
            refuse(link, FailureKind.HANDSHAKE_REFUSED, "HELLO names no session or decode instance", "refused decode registration: ",
                    HandshakeRefusal.PROTOCOL);
        }
        DecodeLink previous = registered(h.sessionId());
        if (previous != null && !(h.isResume()
                && Handshake.equal(Handshake.resumeProof(previous.sessionKey, link.challenge), h.resumeProof()))) {
            // Only the decode that holds the session's key may replace its link (a reconnection after a loss
            // this rank has not noticed yet); anyone else naming the session id is refused, not obeyed.
            refuse(link, FailureKind.HANDSHAKE_REFUSED, LogSafe.session(h.sessionId()) + " is already registered on this rank "
                    + "and the registration does not prove its session key", "refused decode registration: ", HandshakeRefusal.AUTH);
        }
        StringBuilder fallback = new StringBuilder();
        DataPath path = negotiator.choose(h, new PeerLink(LogSafe.session(h.sessionId()) + " (" + link.connection.peer() + ")", link.connection,
                h.stripes()), fallback); // the name goes into the data paths' log lines: the session's label, not its id
        link.kvBufferMap = LayerPairing.pair(memory.kvLayerIds(), h.memory().kvLayerIds());
        link.kvSlices = validator.headSlices(h, link.kvBufferMap);
        link.checksum = config.checksum().max(h.checksum());
        link.digestInStatus = link.checksum != ChecksumMode.OFF && !path.carryChecksums(link.checksum);
        Coverage coverage = validator.coverage(h, link.kvBufferMap, link.kvSlices);
        link.sessionKey = Handshake.sessionKey(validator.key(), link.challenge, h.decodeNonce(), h.sessionId());
        if (previous != null) previous.connection.close(FailureKind.PEER_LOST, "replaced by a new registration of " + LogSafe.session(h.sessionId()));
        link.meters = telemetry.dataPath(path.name());
        link.dataPath = path;
        link.dataPathNote = fallback.toString();
        link.hello = h;
        link.connection.acceptAll();
        link.connection.send(HelloAck.accept(engineRank, uniqueRank, path.name(), fallback.toString(), link.checksum, coverage)
                .signed(validator.key(), h.decodeNonce()));
        if (fallback.isEmpty()) log.info("decode {} registered; data path {}", link, path.name());
        else log.info("decode {} registered; data path {} ({})", link, path.name(), LogSafe.text(fallback.toString())); // quotes offer names
    }

    /** The registered (not stripe) link of a session, or null. */
    private DecodeLink registered(String sessionId) {
        for (DecodeLink l : links) {
            if (l.stripeOf == null && l.hello != null && l.hello.sessionId().equals(sessionId) && !l.connection.isClosed()) return l;
        }
        return null;
    }

    /** Answers a refused HELLO and ends the connection (the caller's reader unwinds). */
    private void refuse(DecodeLink link, FailureKind kind, String reason, String logPrefix, HandshakeRefusal why) throws ProtocolException {
        telemetry.refused(why);
        link.sendQuietly(HelloAck.refused(kind, reason, engineRank, uniqueRank));
        throw new ProtocolException(logPrefix + reason);
    }

    /** An extra TCP data connection of a registered decode link (tcpStripes > 1 on the decode), signed with the session key. */
    private void attachStripe(DecodeLink stripe, Hello h) throws IOException {
        DecodeLink main = registered(h.sessionId());
        if (main == null) {
            refuse(stripe, FailureKind.HANDSHAKE_REFUSED, "no " + LogSafe.session(h.sessionId()) + " to add a data stripe to",
                    "refused data stripe: ", HandshakeRefusal.STRIPE);
            return;
        }
        if (!h.verify(main.sessionKey, stripe.challenge)) {
            refuse(stripe, FailureKind.HANDSHAKE_REFUSED, "Unauthorized: data stripe not signed with its session's key",
                    "refused data stripe: ", HandshakeRefusal.AUTH);
        }
        if (!main.dataPath.attachStripe(h.stripeIndex(), stripe.connection)) {
            refuse(stripe, FailureKind.HANDSHAKE_REFUSED, "stripe " + h.stripeIndex() + " of " + LogSafe.session(h.sessionId())
                    + " is out of range, already attached, or its data path (" + main.dataPath.name() + ") takes none",
                    "refused data stripe: ", HandshakeRefusal.STRIPE);
        }
        stripe.stripeOf = main;
        stripe.hello = h;
        stripe.connection.acceptAll();
        main.stripes.add(stripe);
        stripe.connection.send(HelloAck.accept(engineRank, uniqueRank, main.dataPath.name(), "", main.checksum, Coverage.NONE)
                .signed(validator.key(), h.decodeNonce()));
        if (main.connection.isClosed()) stripe.connection.close(); // lost while attaching: go with it
    }
}
