package io.kvferry.decode;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.LogSafe;
import io.kvferry.plan.PlanException;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillServerInfo;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.registry.RegistryNotReadyException;
import io.kvferry.registry.RetryPolicy;
import io.kvferry.session.Authentication;
import io.kvferry.session.SessionTimer;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.Transports;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.http.HttpClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;

/**
 * Where a decode rank finds its prefill ranks: cached bootstrap lookups (topology, rank endpoints)
 * and one registered {@link PrefillLink} per prefill rank, opened on first use — HELLO with the
 * transports this rank offers, HELLO_ACK with the one the prefill chose, extra TCP stripes — and
 * read by a {@link LinkReader} thread per connection.
 *
 * <p>Everything here that waits on a peer (registry lookups, connect, handshake) is called by a
 * {@link RouteResolver} thread, never by the scheduler thread: a silent or slow prefill holds up only
 * the rooms bound for it.
 */
final class LinkDirectory {
    private static final Logger log = LoggerFactory.getLogger(LinkDirectory.class);
    /** How long a failed lookup or link set-up is answered from memory instead of being tried again. */
    private static final long RETRY_NANOS = 1_000_000_000L;

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    private final Backend backend;
    private final String sessionId;
    /** How this decode's session shows in the prefill ranks' logs and status pages (never the id itself). */
    private final String sessionLabel;
    private final int engineRank;
    private final int ppRank;
    private final Fingerprint fingerprint;
    private final byte[] clusterKey;
    private final List<DestinationTransport> destinations;
    private final SessionTimer timer;
    private final int helloAckLimit;
    private final LinkReader reader;
    private final ConcurrentHashMap<String, PrefillServerInfo> topologies = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, RankEndpoint> endpoints = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, PrefillLink> links = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, BootstrapClient> clients = new ConcurrentHashMap<>();
    /** Failed topology lookups, by bootstrap address. */
    private final RecentFailures<RuntimeException> recentFailures = new RecentFailures<>(RETRY_NANOS);
    /** Link set-ups that ran out of time (connect, or CHALLENGE / HELLO_ACK by the deadline), by prefill endpoint. */
    private final RecentFailures<IOException> recentLinkFailures = new RecentFailures<>(RETRY_NANOS);
    /** The last session key agreed with each prefill rank, by endpoint: a reconnection proves it (resume). */
    private final ConcurrentHashMap<String, byte[]> sessionKeys = new ConcurrentHashMap<>();
    /**
     * The link set-up under way per endpoint (an entry lives only while it runs). One at a time per
     * endpoint, and only there: a silent prefill rank holds up the rooms that wait for its link, not
     * those of every other rank.
     */
    private final ConcurrentHashMap<String, CompletableFuture<PrefillLink>> setups = new ConcurrentHashMap<>();
    private volatile boolean closed;

    LinkDirectory(KVManagerConfig config, RegisteredMemory memory, Backend backend, String sessionId, int engineRank, int ppRank,
                  Fingerprint fingerprint, List<DestinationTransport> destinations,
                  SessionTimer timer, Function<LinkDirectory, LinkReader> readerFactory) {
        this.config = config;
        this.memory = memory;
        this.backend = backend;
        this.sessionId = sessionId;
        this.sessionLabel = LogSafe.session(sessionId);
        this.engineRank = engineRank;
        this.ppRank = ppRank;
        this.fingerprint = fingerprint;
        this.clusterKey = Handshake.key(config.authToken());
        this.destinations = destinations;
        this.timer = timer;
        this.helloAckLimit = HelloAck.maxBodyBytes(memory.describe());
        this.reader = readerFactory.apply(this);
    }

    /** One try per call: the resolver and DP lookup threads retry themselves (the receiver a pause later). */
    private static final RetryPolicy LOOKUPS = new RetryPolicy(1, Duration.ofMillis(100), Duration.ofMillis(100), Duration.ofSeconds(3));
    /**
     * Entries kept at most in each map keyed by what requests name (registry clients, topologies and the
     * DP lookups' state per bootstrap address; rank endpoints and session keys per prefill rank): addresses
     * come with requests (prefills restarted on new IPs, or any a sender makes up), so a map keeps an entry
     * per address ever seen unless bounded. A full map is emptied: each entry is made again on demand.
     */
    static final int MAX_ADDRESSES = 4096;
    /** {@link #MAX_ADDRESSES}, lowered by tests to fill the maps with a few addresses. */
    int maxAddresses = MAX_ADDRESSES;

    /** Puts {@code key} into {@code map}, emptied first when it holds {@link #maxAddresses} other entries. */
    private <K, V> void putBounded(Map<K, V> map, K key, V value) {
        if (map.size() >= maxAddresses && !map.containsKey(key)) map.clear();
        map.put(key, value);
    }
    /**
     * The one HTTP client of every registry client here: each JDK client starts a selector thread that
     * lives until it is shut down, and bootstrap addresses come with requests (prefill instances come and go
     * on new addresses, and a request may name any): a client each was a thread per address for the
     * manager's life. Shut down by {@link #close}.
     */
    private final HttpClient http = BootstrapClient.httpClient(LOOKUPS);

    private BootstrapClient client(String addr) {
        if (closed) throw new IllegalStateException("the decode KV manager was torn down");
        BootstrapClient c = clients.get(addr);
        if (c != null) return c;
        if (clients.size() >= maxAddresses) clients.clear(); // holding none costs nothing now: made again on demand
        return clients.computeIfAbsent(addr, a -> BootstrapClient.sharing(http, a, config.authToken(), LOOKUPS));
    }

    PrefillServerInfo topology(String addr) {
        PrefillServerInfo info = topologies.get(addr);
        if (info != null) return info;
        // A recent failure answers at once, so a burst of requests for a dead address fails fast.
        RecentFailures.Recent<RuntimeException> recent = recentFailures.recent(addr);
        if (recent != null) {
            // A prefill still starting up stays recognisable as such: its callers wait it out.
            if (recent.error() instanceof RegistryNotReadyException nr) throw new RegistryNotReadyException(nr.getMessage(), nr.responseBody());
            throw new IllegalStateException(recent.error().getMessage());
        }
        try {
            info = client(addr).fetchTopology();
        } catch (RuntimeException e) {
            recentFailures.remember(addr, e);
            throw e;
        }
        recentFailures.forget(addr);
        putBounded(topologies, addr, info);
        return info;
    }

    RankEndpoint endpoint(String addr, int dp, int cp, int tp, int pp) {
        String key = addr + "/" + dp + "/" + cp + "/" + tp + "/" + pp;
        RankEndpoint ep = endpoints.get(key);
        if (ep != null) return ep;
        ep = client(addr).fetchRankEndpoint(dp, cp, tp, pp);
        putBounded(endpoints, key, ep);
        return ep;
    }

    /** The prefill's topology if it was fetched already, else null; never asks the registry. */
    PrefillServerInfo cachedTopology(String addr) {
        return topologies.get(addr);
    }

    /** {@code POST /query_dp_ranks} to the registry at {@code addr}: blocks on it (the DP lookup thread's call). */
    Map<Long, Integer> queryDpRanks(String addr, List<Long> rooms) {
        return client(addr).queryDpRanks(rooms);
    }

    /** Drops every cached lookup for a prefill instance (its rank endpoints may have moved). */
    void forgetPrefill(String addr) {
        topologies.remove(addr);
        endpoints.keySet().removeIf(k -> k.startsWith(addr + "/"));
        routes.keySet().removeIf(k -> k.addr().equals(addr));
    }

    /** A lost link leaves the directory (the next room opens a new one), and so do the routes through it. */
    void remove(PrefillLink link) {
        links.remove(link.endpoint, link);
        routes.values().removeIf(r -> r.uses(link));
    }

    /**
     * Where the rooms of one (prefill instance, DP group) go: their prefill ranks and how many must
     * answer. The same for every room of that group while its links live, so it is worked out once
     * (registry lookups, rank mapping, link set-up) and shared; the targets are immutable.
     */
    record Route(List<DecodeRoom.Target> targets, int requiredResponses, int requiredDstInfoNum, int prefillCpSize,
                 boolean allCpRanks, CoverageMemo memo) {
        boolean uses(PrefillLink link) {
            for (DecodeRoom.Target t : targets) if (t.link() == link) return true;
            return false;
        }

        boolean alive() {
            for (DecodeRoom.Target t : targets) if (t.link().connection.isClosed()) return false;
            return true;
        }
    }

    /** The route's coverage verdict for the last (aux needed, state needed) pattern asked: rooms alike share it. */
    static final class CoverageMemo {
        volatile Verdict last;

        record Verdict(boolean needsAux, long stateMask, String gap) {}
    }

    record RouteKey(String addr, int dp) {}

    private final ConcurrentHashMap<RouteKey, Route> routes = new ConcurrentHashMap<>();

    /** The cached route of (addr, dp) while all its links are open, or null. */
    Route route(String addr, int dp) {
        Route r = routes.get(new RouteKey(addr, dp));
        return r != null && r.alive() ? r : null;
    }

    void keepRoute(String addr, int dp, Route route) {
        if (routes.size() > 4096) routes.clear(); // bounded: instances and groups come and go
        if (route.alive()) routes.put(new RouteKey(addr, dp), route);
    }

    Collection<PrefillLink> links() {
        return links.values();
    }

    int size() {
        return links.size();
    }

    /** Registry clients held, one per bootstrap address asked (tests). */
    int clientCount() {
        return clients.size();
    }

    /** Rank endpoints cached (tests). */
    int endpointCount() {
        return endpoints.size();
    }

    /** How many topology lookups are cached (for status pages: prefill instances this rank knows). */
    int knownPrefills() {
        return topologies.size();
    }

    /** The registered connection to a prefill rank, opened and registered (HELLO) on first use. */
    PrefillLink link(String addr, RankEndpoint ep) throws IOException {
        String key = ep.rankIp() + ":" + ep.rankPort();
        CompletableFuture<PrefillLink> mine = new CompletableFuture<>();
        while (true) {
            PrefillLink link = links.get(key);
            if (link != null && !link.connection.isClosed()) return link;
            if (closed) throw new IllegalStateException("the decode KV manager was torn down");
            // A set-up that just failed answers at once: a burst of rooms for a dead or silent rank must not
            // each hold the scheduler thread for the connect timeout.
            failFastIfRecent(key);
            CompletableFuture<PrefillLink> running = setups.putIfAbsent(key, mine);
            if (running == null) break;
            try {
                running.join(); // bounded by that set-up's deadline; then look again (its link, or its failure)
            } catch (CompletionException | CancellationException e) {
                // its failure is remembered, or (not an I/O failure) this thread tries itself
            }
        }
        try {
            PrefillLink link;
            try {
                link = openLink(addr, ep, key);
            } catch (IOException e) {
                // Only a set-up that ran out of time (a silent or unreachable rank: the next room would wait as
                // long) is answered from memory. A refusal or a close is the peer acting, or a path coming back
                // (a partition healing closes its stalled connections): the next room tries again, so the rooms
                // right after get through instead of a whole burst failing within the window.
                if (e instanceof SocketTimeoutException || e instanceof SetupTimedOut) recentLinkFailures.remember(key, e);
                throw e;
            }
            recentLinkFailures.forget(key);
            links.put(key, link);
            // Its reader already runs: a link lost before it was listed had its reader's removal find nothing, and
            // it would stay listed (a peer connection that is dead) until a next set-up of this endpoint succeeded.
            if (link.connection.isClosed()) links.remove(key, link);
            if (closed) { // torn down during the set-up: the manager may already have closed the links it saw
                links.remove(key, link);
                link.closeAll(FailureKind.SHUTDOWN, "the decode KV manager was torn down");
                throw new IllegalStateException("the decode KV manager was torn down");
            }
            mine.complete(link);
            return link;
        } catch (IOException | RuntimeException | Error e) {
            mine.completeExceptionally(e);
            throw e;
        } finally {
            setups.remove(key, mine);
        }
    }

    /** Throws the recent timed-out set-up of {@code key} again (the room fails as the first one did). */
    private void failFastIfRecent(String key) throws IOException {
        RecentFailures.Recent<IOException> f = recentLinkFailures.recent(key);
        if (f == null) return;
        throw new IOException(f.error().getMessage() + " (link set-up failed " + f.ageMillis() + " ms ago; not retried for "
                + recentLinkFailures.windowMillis() + " ms)", f.error());
    }

    /** A link set-up whose handshake did not complete before the connect timeout. */
    static final class SetupTimedOut extends IOException {
        SetupTimedOut(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private Hello hello(List<TransportOffer> offers, int flags, byte[] nonce, byte[] resumeProof) {
        return new Hello(sessionId, config.instanceId(), fingerprint, backend.name(), engineRank, config.attnTpSize(), ppRank, flags,
                config.checksum(), memory.describe(), offers, nonce, resumeProof, null);
    }

    private PrefillLink openLink(String addr, RankEndpoint ep, String key) throws IOException {
        if (Authentication.tokenless(config) && !config.insecure() && !Authentication.isLoopback(ep.rankIp())) {
            throw new LinkRefusedException(FailureKind.HANDSHAKE_REFUSED, "no cluster auth token: this decode rank does not connect"
                    + " to the non-loopback prefill rank at " + key + " unauthenticated; set the token (KVFERRY_AUTH_TOKEN) or,"
                    + " for a trusted network only, KVFERRY_INSECURE=true");
        }
        Duration timeout = config.connectTimeout();
        ControlConnection conn = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), timeout);
        // A peer that accepts but never answers must not hang init: close the socket at the deadline. The flag is
        // set before the close, so the read that the close breaks already sees why (the future is done only later).
        AtomicBoolean expired = new AtomicBoolean();
        ScheduledFuture<?> deadline = timer.after(timeout, () -> {
            expired.set(true);
            conn.close();
        });
        Map<String, LinkOffer> made = new LinkedHashMap<>();
        List<ControlConnection> stripesOpened = new ArrayList<>();
        try {
            List<TransportOffer> offers = new ArrayList<>();
            for (DestinationTransport d : destinations) {
                LinkOffer o = d.offer(key);
                if (o == null) continue;
                made.put(d.name(), o);
                offers.add(new TransportOffer(d.name(), o.blob()));
            }
            byte[] challenge = awaitChallenge(conn, key);
            byte[] nonce = Handshake.nonce();
            byte[] previous = sessionKeys.get(key);
            int flags = (config.allCpRanksTransfer() ? Hello.FLAG_ALL_CP_RANKS : 0) | (config.tcpStripes() << Hello.STRIPES_SHIFT)
                    | (previous != null ? Hello.FLAG_RESUME : 0);
            conn.send(hello(offers, flags, nonce, previous == null ? null : Handshake.resumeProof(previous, challenge))
                    .signed(clusterKey, challenge));
            HelloAck ack = awaitAck(conn, "registration", key, nonce);
            String misfit = ack.coverage().checkAgainst(memory.describe());
            if (misfit != null) {
                throw new LinkRefusedException(FailureKind.LAYOUT_REFUSED, "prefill rank at " + key
                        + " declared which bytes it writes in a way that does not fit this rank: " + misfit);
            }
            LinkGranules granules;
            try {
                granules = LinkGranules.of(ack.coverage(), memory);
            } catch (PlanException e) {
                throw new LinkRefusedException(FailureKind.LAYOUT_REFUSED, "prefill rank at " + key
                        + " declared which bytes it writes in a way no op can carry: " + e.getMessage());
            }
            if (ack.checksum().max(config.checksum()) != ack.checksum()) {
                throw new LinkRefusedException(FailureKind.HANDSHAKE_REFUSED, "prefill rank at " + key + " answered checksum "
                        + ack.checksum().label() + " to this rank's " + config.checksum().label());
            }
            PrefillLink link = new PrefillLink(addr, key, conn, ack.prefillUniqueRank());
            link.coverage = ack.coverage();
            link.granules = granules;
            link.checksum = ack.checksum();
            link.sessionKey = Handshake.sessionKey(clusterKey, challenge, nonce, sessionId);
            LinkOffer chosen = made.remove(ack.dataPath());
            boolean fallback = chosen == null;
            if (fallback && !ack.dataPath().isEmpty() && !ack.dataPath().equals(Transports.fallback().name())) {
                throw new ProtocolException("prefill rank at " + key + " chose data path '" + ack.dataPath()
                        + "', which this decode did not offer");
            }
            link.dataPath = fallback ? Transports.fallback().name() : ack.dataPath();
            link.offer = chosen; // revoked when one-sided, closed with the link when two-sided
            link.digestInStatus = link.checksum != ChecksumMode.OFF && !link.dataPath.equals(Transports.fallback().name());
            if (!ack.fallback().isEmpty()) {
                String why = LogSafe.text(ack.fallback()); // the prefill's words
                link.dataPathNote = why;
                if (backend.isAuto()) log.info("link to {} ({}) uses {}: {}", key, sessionLabel, link.dataPath, why);
                else log.warn("link to {} ({}) uses {}: {}", key, sessionLabel, link.dataPath, why);
            } else {
                log.info("link to {} ({}) uses {}", key, sessionLabel, link.dataPath);
            }
            if (fallback && config.tcpStripes() > 1) {
                openStripes(link, ep, timeout, stripesOpened);
            }
            reader.start(link);
            putBounded(sessionKeys, key, link.sessionKey); // a dropped key costs a fresh (not resumed) session
            return link;
        } catch (IOException | RuntimeException e) {
            boolean timedOut = expired.get() && !(e instanceof LinkRefusedException);
            conn.close();
            for (LinkOffer o : made.values()) o.close();
            for (ControlConnection c : stripesOpened) c.close();
            made.clear();
            if (timedOut) {
                throw new SetupTimedOut("prefill rank at " + key + " did not complete the handshake within " + timeout.toMillis() + " ms", e);
            }
            throw e;
        } finally {
            deadline.cancel(false);
            for (LinkOffer o : made.values()) o.close(); // offers the prefill did not take
        }
    }

    /**
     * The nonce a prefill rank opens every connection with (its CHALLENGE). Until the peer has proven
     * the token (a verified HELLO_ACK) it may make this rank read nothing but that 32-byte frame and
     * then the HELLO_ACK: any other frame is refused from its header, before its body is read.
     */
    private byte[] awaitChallenge(ControlConnection c, String key) throws IOException {
        c.acceptOnly(MessageType.CHALLENGE, Handshake.BYTES);
        ControlMessage first = c.read();
        if (!(first instanceof Challenge ch)) {
            throw new ProtocolException("prefill rank at " + key + " opened with " + first.type() + " instead of CHALLENGE");
        }
        // A HELLO_ACK no larger than this rank's layout can need, and HEARTBEAT (an empty body): a prefill
        // marks the link registered just before it sends HELLO_ACK, so its heartbeat timer may get one in first.
        c.acceptOnly(EnumSet.of(MessageType.HELLO_ACK, MessageType.HEARTBEAT), helloAckLimit);
        return ch.nonce();
    }

    /** An acceptance signed with this cluster's key for {@code nonce} (a refusal is reported as it is: it can only deny). */
    private HelloAck awaitAck(ControlConnection c, String what, String key, byte[] nonce) throws IOException {
        ControlMessage reply;
        do {
            reply = c.read();
        } while (reply instanceof Heartbeat);
        if (!(reply instanceof HelloAck ack)) throw new ProtocolException("expected HELLO_ACK, got " + reply.type());
        if (!ack.accepted()) {
            // The prefill's words: escaped, they become the room's failure reason and reach logs and pages.
            throw new LinkRefusedException(ack.refusal(), "prefill rank at " + key + " refused " + what + ": " + LogSafe.text(ack.error()));
        }
        if (!ack.verify(clusterKey, nonce)) {
            throw new LinkRefusedException(FailureKind.HANDSHAKE_REFUSED, "prefill rank at " + key + " accepted " + what
                    + " without proving this cluster's auth token (its HELLO_ACK is not signed with it)");
        }
        c.acceptAll(); // proven: every frame type within its own limit from now on
        return ack;
    }

    /**
     * Opens the extra data connections of a TCP link (registered as stripes of this session) before
     * the link carries any request; {@code opened} collects them so a failed set-up closes them.
     */
    private void openStripes(PrefillLink link, RankEndpoint ep, Duration timeout, List<ControlConnection> opened)
            throws IOException {
        for (int k = 1; k < config.tcpStripes(); k++) {
            ControlConnection c = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), timeout);
            opened.add(c);
            ScheduledFuture<?> deadline = timer.after(timeout, c::close);
            try {
                byte[] challenge = awaitChallenge(c, link.endpoint);
                byte[] nonce = Handshake.nonce();
                c.send(hello(List.of(), Hello.FLAG_STRIPE | (k << Hello.STRIPE_INDEX_SHIFT), nonce, null)
                        .signed(link.sessionKey, challenge));
                awaitAck(c, "data stripe " + k, link.endpoint, nonce);
            } finally {
                deadline.cancel(false);
            }
            link.stripes.add(c);
        }
    }

    /** Refuses new links and closes the bootstrap clients (links are closed by the manager). */
    void close() {
        closed = true; // a set-up under way sees it when it ends and closes its link itself
        for (BootstrapClient c : clients.values()) c.close();
        http.shutdownNow();
    }
}
