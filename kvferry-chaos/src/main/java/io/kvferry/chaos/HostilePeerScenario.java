package io.kvferry.chaos;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.protocol.Abort;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RankPool;
import io.kvferry.testkit.RoleReport;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * hostile-peer: while a legitimate workload runs, a hostile peer plays every attack of issue 13's
 * "Hostile input" list that can be played from outside against the live prefill rank and its
 * registry, one after the other, and records what each met:
 *
 * <ol>
 *   <li>{@code preauth-amplification}: 300 connections each announce a 16 MiB TRANSFER_INFO or a
 *       2 MiB HELLO before authenticating (sized from the header, 4.8 GiB): each must be closed unread;</li>
 *   <li>{@code stalled-handshakes}: 100 connections announce a 1 MiB HELLO and never send it: at most
 *       64 may be held, the oldest are evicted;</li>
 *   <li>{@code registry-slowloris}: 16 connections hold half-sent requests at the registry while
 *       {@code /health} and the topology route must still be answered;</li>
 *   <li>{@code unsigned-hello}, {@code wrong-token-hello}: refused, the token never proven;</li>
 *   <li>{@code forged-offers}: a HELLO with a UCX worker address and a shm offer of random bytes,
 *       signed with a wrong token: refused as unauthorised, before any offer is parsed (the prefill
 *       process must survive: libucp aborts on a garbage address);</li>
 *   <li>{@code session-takeover}: a token holder names a registered session's id, without and with
 *       a forged resume proof: refused, the session lives on;</li>
 *   <li>{@code forged-stripe}: a data stripe for that session not signed with its session key: refused;</li>
 *   <li>{@code unstarted-rooms}: a token holder sends 40 TRANSFER_INFOs of 4 MiB for rooms the
 *       prefill never started: at most 64 MiB are held, the rest refused, all dropped with the link;</li>
 *   <li>{@code abort-flood}: a registered peer floods ABORTs and never reads: cut;</li>
 *   <li>{@code log-injection}: a HELLO whose dtype (signed) and session id (unsigned) carry a line
 *       break and a forged log line: the prefill's log must not show the forged line as a line.</li>
 * </ol>
 *
 * The verdict also requires every legitimate request to succeed, nothing to leak, the prefill
 * alive after the attacks, and its resident memory and thread count (sampled from
 * {@code /proc/PID/status} every 20 ms) to stay within {@link #RSS_GROWTH_LIMIT_MB} and
 * {@link #THREAD_GROWTH_LIMIT} of what they were before the first attack.
 */
final class HostilePeerScenario implements ChaosScenario {
    /** Growth of the prefill's resident memory over its pre-attack value that still counts as bounded (MiB). */
    static final long RSS_GROWTH_LIMIT_MB = 512;
    /** Extra threads the prefill may have at the peak of the attacks. */
    static final long THREAD_GROWTH_LIMIT = 128;
    /** Extra threads it may still have once the attacks ended and its extra transfer workers retired. */
    static final long THREADS_LEFT_LIMIT = 8;
    /**
     * How long a prefill's transfer workers beyond the per-link count stay idle before they end
     * (ARCHITECTURE.md, TransferWorkers: "those beyond N end after 30 s idle"). The attacks' rooms start
     * such workers, more of them on a loaded machine: they are bounded by that retirement, not gone
     * within a fixed few seconds.
     */
    static final long WORKER_IDLE_RETIREMENT_SECONDS = 30;
    static final int PREAUTH_CONNECTIONS = 300;
    static final int STALLED_HANDSHAKES = 100;
    /** The rank's cap on connections in their handshake (docs/PROTOCOL.md §2). */
    static final int HANDSHAKE_CAP = 64;
    static final int SLOW_REGISTRY_CLIENTS = 16;
    static final int UNSTARTED_ROOMS = 40;
    /** Transfer infos one link may hold for rooms not started: 64 MiB of index arrays, i.e. 16 of 4 MiB. */
    static final int UNSTARTED_HELD = 16;
    static final Duration REGISTRY_REQUEST_TIMEOUT = Duration.ofSeconds(2);
    private static final Duration CLOSE_WAIT = Duration.ofSeconds(5);
    private static final Duration ANSWER_WAIT = Duration.ofSeconds(10);

    public String name() {
        return "hostile-peer";
    }

    @Override
    public String netnsUnsupported() {
        return "the hostile peer attacks the prefill from the root namespace";
    }

    @Override
    public boolean keepsPrefillLog() {
        return true;
    }

    /** Short, so the slow clients' cut is seen within the run (the default is 10 s); the attack is the same. */
    @Override
    public Duration registryRequestTimeout() {
        return REGISTRY_REQUEST_TIMEOUT;
    }

    @Override
    public boolean patientPrefill() {
        return true; // no peer dies: a room must not time out because its prefill was busy refusing attackers
    }

    /**
     * The decode pauses this long per request, so the workload outlasts the attacks (about 15 s on a
     * loaded 2-core machine) at the default 64 requests; the verdict checks that it did.
     */
    static final long PACE_MILLIS = 300;

    @Override
    public int minRequests(BenchConfig config) {
        return 64;
    }

    @Override
    public BenchConfig.Faults faults() {
        return new BenchConfig.Faults(0, PACE_MILLIS, 0);
    }

    public void strike(Strike s) throws Exception {
        BenchConfig c = s.config();
        RankEndpoint ep;
        try (BootstrapClient client = new BootstrapClient(s.registry(), c.authToken())) {
            ep = client.fetchRankEndpoint(0, 0, 0, 0);
        }
        InetSocketAddress rank = new InetSocketAddress(ep.rankIp(), ep.rankPort());
        List<ChaosRunner.Hostile.Attack> attacks = new ArrayList<>();
        String marker = "hostile-peer-forged-line-" + HexFormat.of().formatHex(Handshake.nonce(), 0, 6);
        ChaosRunner.Hostile.Usage rss, threads;
        try (ProcessUsage usage = new ProcessUsage(s.prefill().pid(), 20);
             RankPool pool = new RankPool(c.shape(), c.workload().pageSize(), c.decodeTp(), 0, 8, 2, 7L)) {
            ProcessUsage.Sample before = usage.now();
            Peer peer = new Peer(rank, c, pool.kvArgs(0));
            SlowRegistryClients slow = new SlowRegistryClients(s.registry(), SLOW_REGISTRY_CLIENTS);
            try {
                attacks.add(run("preauth-amplification", s, () -> preauthAmplification(rank)));
                attacks.add(run("stalled-handshakes", s, () -> stalledHandshakes(rank)));
                attacks.add(run("registry-slowloris", s, () -> slow.attack()));
                attacks.add(run("unsigned-hello", s, () -> peer.refusedHello(null, "an unsigned HELLO")));
                attacks.add(run("wrong-token-hello", s, () -> peer.refusedHello(Handshake.key("not-" + c.authToken()), "a HELLO signed with a wrong token")));
                attacks.add(run("forged-offers", s, peer::forgedOffers));
                attacks.add(run("session-takeover", s, peer::sessionTakeover));
                attacks.add(run("forged-stripe", s, peer::forgedStripe));
                attacks.add(run("unstarted-rooms", s, peer::unstartedRooms));
                attacks.add(run("abort-flood", s, peer::abortFlood));
                attacks.add(run("log-injection", s, () -> peer.logInjection(marker, s.prefillLog())));
                attacks.add(run("registry-slowloris-cut", s, slow::awaitCut));
            } finally {
                slow.close();
                peer.close();
            }
            boolean alive = s.prefill().isAlive();
            int requests = c.workload().requests(), concluded = s.concluded().get();
            boolean overlapped = alive && concluded < requests;
            attacks.add(new ChaosRunner.Hostile.Attack("prefill-survived", alive ? "the prefill process is alive after every attack"
                    : "the prefill process exited during the attacks (status " + s.prefill().exitValue() + ")",
                    alive || s.prefill().exitValue() == 0));
            attacks.add(new ChaosRunner.Hostile.Attack("under-load", overlapped
                    ? "the legitimate workload ran throughout the attacks (" + concluded + " of " + requests + " requests concluded)"
                    : "the legitimate workload ended before the attacks did (" + concluded + " of " + requests
                    + " concluded): run more --requests", overlapped));
            ProcessUsage.Sample after = settled(usage, before);
            ProcessUsage.Sample peak = usage.peak();
            rss = new ChaosRunner.Hostile.Usage(before.rssMb(), peak.rssMb(), after.rssMb());
            threads = new ChaosRunner.Hostile.Usage(before.threads(), peak.threads(), after.threads());
        }
        s.setup().hostile = new ChaosRunner.Hostile(rss, threads, attacks, false); // holds is decided by the verdict
    }

    /**
     * The prefill's usage once its attack connections are gone and the transfer workers the attacks started
     * retired: threads back within the limit (waited for up to the workers' idle retirement and 5 s more),
     * else the last reading.
     */
    private static ProcessUsage.Sample settled(ProcessUsage usage, ProcessUsage.Sample before) throws InterruptedException {
        long until = System.nanoTime() + (WORKER_IDLE_RETIREMENT_SECONDS + 5) * 1_000_000_000L;
        ProcessUsage.Sample now = usage.now();
        while (now.threads() > before.threads() + THREADS_LEFT_LIMIT && System.nanoTime() < until) {
            Thread.sleep(50);
            now = usage.now();
        }
        return now;
    }

    @Override
    public void judge(Judgement j) {
        ChaosRunner.Hostile h = j.setup.hostile;
        if (h == null) return;
        int requests = j.setup.config.workload().requests(), ok = 0, failed = 0;
        for (RoleReport r : j.judged) {
            ok += r.succeeded();
            failed += r.failed() + r.hung() + r.corrupted();
        }
        List<ChaosRunner.Hostile.Attack> attacks = new ArrayList<>(h.attacks());
        boolean legit = failed == 0 && ok >= requests;
        attacks.add(new ChaosRunner.Hostile.Attack("legitimate-requests", ok + " of " + requests + " succeeded byte-exact, "
                + failed + " failed", legit));
        boolean rssOk = h.rssMb().peak() >= 0 && h.rssMb().peak() - h.rssMb().before() <= RSS_GROWTH_LIMIT_MB;
        boolean threadsOk = h.threads().peak() - h.threads().before() <= THREAD_GROWTH_LIMIT
                && h.threads().after() - h.threads().before() <= THREADS_LEFT_LIMIT;
        attacks.add(new ChaosRunner.Hostile.Attack("bounded-memory", "resident memory " + h.rssMb().before() + " MiB before, "
                + h.rssMb().peak() + " at the peak (limit +" + RSS_GROWTH_LIMIT_MB + ")", rssOk));
        attacks.add(new ChaosRunner.Hostile.Attack("bounded-threads", "threads " + h.threads().before() + " before, "
                + h.threads().peak() + " at the peak (limit +" + THREAD_GROWTH_LIMIT + "), " + h.threads().after()
                + " after (limit +" + THREADS_LEFT_LIMIT + ")", threadsOk));
        boolean all = attacks.stream().allMatch(ChaosRunner.Hostile.Attack::ok);
        j.hostile = new ChaosRunner.Hostile(h.rssMb(), h.threads(), attacks, all);
    }

    /** One attack: its outcome, or what went wrong playing it (an attack the harness could not play does not pass). */
    private static ChaosRunner.Hostile.Attack run(String name, Strike s, Attack attack) {
        long t0 = System.nanoTime();
        ChaosRunner.Hostile.Attack a;
        try {
            a = attack.play().named(name);
        } catch (Exception e) {
            a = new ChaosRunner.Hostile.Attack(name, "could not be played: " + e, false);
        }
        s.log().printf("[chaos] attack %s (%d ms): %s%s%n", name, (System.nanoTime() - t0) / 1_000_000, a.ok() ? "" : "NOT REFUSED: ",
                a.outcome());
        return a;
    }

    @FunctionalInterface
    private interface Attack {
        Outcome play() throws Exception;
    }

    /** What an attack met and whether that is the refusal asked for. */
    private record Outcome(String what, boolean ok) {
        ChaosRunner.Hostile.Attack named(String name) {
            return new ChaosRunner.Hostile.Attack(name, what, ok);
        }
    }

    // ------------------------------------------------------------------ unauthenticated

    private static Outcome preauthAmplification(InetSocketAddress rank) throws IOException {
        List<PeerConnection> flood = new ArrayList<>();
        try {
            for (int i = 0; i < PREAUTH_CONNECTIONS; i++) {
                PeerConnection c = PeerConnection.open(rank);
                flood.add(c);
                if (i % 2 == 0) c.sendHeader(MessageType.TRANSFER_INFO, 16 << 20);
                else c.sendHeader(MessageType.HELLO, 2 << 20);
            }
            int closed = PeerConnection.closedAmong(flood, PREAUTH_CONNECTIONS, CLOSE_WAIT);
            return new Outcome(closed + " of " + PREAUTH_CONNECTIONS + " connections announcing a 16 MiB TRANSFER_INFO or a "
                    + "2 MiB HELLO before authenticating were closed unread", closed == PREAUTH_CONNECTIONS);
        } finally {
            for (PeerConnection c : flood) c.close();
        }
    }

    private static Outcome stalledHandshakes(InetSocketAddress rank) throws IOException, InterruptedException {
        List<PeerConnection> stalled = new ArrayList<>();
        try {
            for (int i = 0; i < STALLED_HANDSHAKES; i++) {
                PeerConnection c = PeerConnection.open(rank);
                stalled.add(c);
                c.sendHeader(MessageType.HELLO, 1 << 20); // within the cap; the body never comes
                Thread.sleep(1); // accept order = age order
            }
            // Which ones go depends on the order the rank accepted them in; how many may stay does not.
            int evicted = PeerConnection.closedAmong(stalled, STALLED_HANDSHAKES - HANDSHAKE_CAP, CLOSE_WAIT);
            int held = STALLED_HANDSHAKES - evicted;
            return new Outcome(evicted + " of " + STALLED_HANDSHAKES + " stalled handshakes were evicted, " + held + " held (at most "
                    + HANDSHAKE_CAP + " may be)", held <= HANDSHAKE_CAP);
        } finally {
            for (PeerConnection c : stalled) c.close();
        }
    }

    /** Half-sent requests held open at the registry while real requests must still be answered. */
    private static final class SlowRegistryClients implements AutoCloseable {
        private final String registry;
        private final int count;
        private final List<Socket> sockets = new ArrayList<>();
        private final List<Thread> watchers = new ArrayList<>();
        private final AtomicLong cut = new AtomicLong(), lastCutNanos = new AtomicLong();
        private long startedAt;

        SlowRegistryClients(String registry, int count) {
            this.registry = registry;
            this.count = count;
        }

        Outcome attack() throws Exception {
            String[] hp = registry.split(":");
            startedAt = System.nanoTime();
            for (int i = 0; i < count; i++) {
                Socket sock = new Socket();
                sock.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 5000);
                sockets.add(sock);
                OutputStream out = sock.getOutputStream();
                out.write(("GET /health HTTP/1.1\r\nHost: " + hp[0] + "\r\nX-Slow: ").getBytes(StandardCharsets.US_ASCII));
                out.flush();
                InputStream in = sock.getInputStream();
                watchers.add(Thread.ofPlatform().daemon().name("chaos-slowloris-" + i).start(() -> {
                    try {
                        while (in.read() >= 0) {
                            // the registry may answer 408 or just close: either ends the request
                        }
                    } catch (IOException ignored) {
                        // reset: closed too
                    }
                    lastCutNanos.accumulateAndGet(System.nanoTime(), Math::max);
                    cut.incrementAndGet();
                }));
            }
            HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
            long t0 = System.nanoTime();
            HttpResponse<String> health = http.send(HttpRequest.newBuilder(URI.create("http://" + registry + "/health"))
                    .timeout(Duration.ofSeconds(5)).GET().build(), HttpResponse.BodyHandlers.ofString());
            long healthMs = (System.nanoTime() - t0) / 1_000_000;
            t0 = System.nanoTime();
            HttpResponse<String> route = http.send(HttpRequest.newBuilder(URI.create("http://" + registry
                    + "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"))
                    .timeout(Duration.ofSeconds(5)).GET().build(), HttpResponse.BodyHandlers.ofString());
            long routeMs = (System.nanoTime() - t0) / 1_000_000;
            boolean ok = health.statusCode() == 200 && route.statusCode() == 200;
            return new Outcome("with " + count + " half-sent requests held open, /health answered " + health.statusCode() + " in "
                    + healthMs + " ms and the topology route " + route.statusCode() + " in " + routeMs + " ms", ok);
        }

        /** Whether the registry closed every slow request within its request timeout (plus 5 s) of the attack. */
        Outcome awaitCut() throws InterruptedException {
            if (startedAt == 0) return new Outcome("the slow clients never connected", false);
            long until = startedAt + REGISTRY_REQUEST_TIMEOUT.toNanos() + 5_000_000_000L;
            for (Thread w : watchers) w.join(Math.max(1, (until - System.nanoTime()) / 1_000_000));
            long ms = (lastCutNanos.get() - startedAt) / 1_000_000;
            return new Outcome(cut.get() + " of " + count + " half-sent requests were closed by the registry, the last "
                    + ms + " ms after it was sent (request timeout " + REGISTRY_REQUEST_TIMEOUT.toMillis() + " ms)", cut.get() == count);
        }

        @Override
        public void close() {
            for (Socket sock : sockets) {
                try {
                    sock.close();
                } catch (IOException ignored) {
                    // closing
                }
            }
            for (Thread w : watchers) {
                try {
                    w.join(2000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    // ------------------------------------------------------------------ a peer that knows the protocol (and maybe the token)

    /** Plays a decode rank at the prefill's control port: with the cluster token or without, by the rules or not. */
    private static final class Peer implements AutoCloseable {
        private final InetSocketAddress rank;
        private final BenchConfig config;
        private final byte[] key;
        private final MemoryDescriptor memory;
        private final Fingerprint fingerprint;
        private final List<PeerConnection> open = new ArrayList<>();
        private final SecureRandom random = new SecureRandom();

        Peer(InetSocketAddress rank, BenchConfig config, KVArgs decodeArgs) {
            this.rank = rank;
            this.config = config;
            this.key = Handshake.key(config.authToken());
            this.memory = RegisteredMemory.from(decodeArgs).describe();
            this.fingerprint = Fingerprint.of("", decodeArgs.kvCacheDtypeStr, decodeArgs.pageSize, config.shape().mla(),
                    decodeArgs.totalKvHeadNum);
        }

        /** A HELLO as the bench decode's rank 0 sends it (tcp, one data stripe per {@code stripes}), unsigned. */
        Hello hello(String session, String instance, Fingerprint fp, String dataPath, int flags, List<TransportOffer> offers,
                    byte[] resumeProof) {
            return new Hello(session, instance, fp, dataPath, 0, config.decodeTp(), 0, flags, ChecksumMode.OFF, memory, offers,
                    Handshake.nonce(), resumeProof, null);
        }

        String session(String what) {
            return "hostile-" + what + "-" + HexFormat.of().formatHex(Handshake.nonce(), 0, 4);
        }

        /** Connects, reads the CHALLENGE and answers it with {@code h} signed with {@code signWith} (null: unsigned). */
        private PeerConnection handshake(Hello h, byte[] signWith) throws IOException {
            PeerConnection c = PeerConnection.open(rank);
            open.add(c);
            ControlMessage first = c.read(ANSWER_WAIT);
            if (!(first instanceof Challenge ch)) throw new IOException("the rank opened with " + first.type() + ", not CHALLENGE");
            c.send(signWith == null ? h : h.signed(signWith, ch.nonce()));
            return c;
        }

        /** The HELLO_ACK the rank answers with, or null when it closed the connection without one. */
        private static HelloAck ack(PeerConnection c) {
            try {
                return c.read(ANSWER_WAIT) instanceof HelloAck a ? a : null;
            } catch (IOException closed) {
                return null;
            }
        }

        /** A registered session of this peer (accepted), the victim of takeovers. */
        private PeerConnection victim;
        private String victimSession;

        private PeerConnection register(String session, int flags) throws IOException {
            PeerConnection c = handshake(hello(session, "hostile-instance", fingerprint, "tcp", flags, List.of(), null), key);
            HelloAck a = ack(c);
            if (a == null || !a.accepted()) {
                throw new IOException("a correctly signed HELLO was refused: " + (a == null ? "closed" : a.error()));
            }
            return c;
        }

        /** A refusal's description, and whether it is a handshake refusal followed by the rank closing the connection. */
        private static String refusal(PeerConnection c, HelloAck a, boolean[] ok) {
            boolean closed = c.closedByPeer(CLOSE_WAIT);
            ok[0] = a != null && !a.accepted() && closed;
            if (a == null) return closed ? "closed without an answer" : "no answer, connection left open";
            if (a.accepted()) return "ACCEPTED";
            return "refused (" + a.refusal().label() + ": " + a.error() + ")" + (closed ? ", connection closed" : ", connection left open");
        }

        Outcome refusedHello(byte[] signWith, String what) throws IOException {
            PeerConnection c = handshake(hello(session("unauth"), "hostile-instance", fingerprint, "tcp", 0, List.of(), null), signWith);
            HelloAck a = ack(c);
            boolean[] ok = new boolean[1];
            String r = refusal(c, a, ok);
            return new Outcome(what + ": " + r, ok[0] && a.refusal() == FailureKind.HANDSHAKE_REFUSED);
        }

        Outcome forgedOffers() throws IOException {
            byte[] ucx = new byte[4096], shm = new byte[2048];
            random.nextBytes(ucx);
            random.nextBytes(shm);
            List<TransportOffer> offers = List.of(new TransportOffer("ucx", ucx), new TransportOffer("shm", shm));
            PeerConnection c = handshake(hello(session("offers"), "hostile-instance", fingerprint, "auto", 0, offers, null),
                    Handshake.key("not-" + config.authToken()));
            HelloAck a = ack(c);
            boolean[] ok = new boolean[1];
            String r = refusal(c, a, ok);
            // Refused for the signature, not for an offer it looked at.
            boolean unparsed = a != null && a.error().contains("Unauthorized") && !a.error().contains("ucx") && !a.error().contains("shm");
            return new Outcome("a wrong-token HELLO offering a random UCX worker address and shm files: " + r, ok[0] && unparsed);
        }

        Outcome sessionTakeover() throws IOException {
            victimSession = session("victim");
            victim = register(victimSession, 2 << Hello.STRIPES_SHIFT);
            // A token holder reuses the id: without a resume proof, then with a forged one.
            PeerConnection plain = handshake(hello(victimSession, "hostile-other", fingerprint, "tcp", 0, List.of(), null), key);
            boolean[] ok1 = new boolean[1];
            String r1 = refusal(plain, ack(plain), ok1);
            byte[] proof = new byte[Handshake.BYTES];
            random.nextBytes(proof);
            PeerConnection resume = handshake(hello(victimSession, "hostile-other", fingerprint, "tcp", Hello.FLAG_RESUME, List.of(),
                    proof), key);
            boolean[] ok2 = new boolean[1];
            String r2 = refusal(resume, ack(resume), ok2);
            boolean alive = !victim.closedByPeer(Duration.ofMillis(300));
            return new Outcome("reusing a registered session's id: " + r1 + "; with a forged resume proof: " + r2 + "; the session "
                    + (alive ? "lives on" : "WAS CLOSED"), ok1[0] && ok2[0] && alive);
        }

        Outcome forgedStripe() throws IOException {
            if (victim == null) throw new IOException("no registered session to attach to (session-takeover did not run)");
            int flags = Hello.FLAG_STRIPE | (1 << Hello.STRIPE_INDEX_SHIFT);
            // Signed with the cluster key (what a token holder has), not the session key (derived from nonces never sent).
            PeerConnection stripe = handshake(hello(victimSession, "hostile-instance", fingerprint, "tcp", flags, List.of(), null), key);
            boolean[] ok = new boolean[1];
            String r = refusal(stripe, ack(stripe), ok);
            boolean alive = !victim.closedByPeer(Duration.ofMillis(300));
            return new Outcome("a data stripe for another session signed with the cluster key: " + r + "; the session "
                    + (alive ? "lives on" : "WAS CLOSED"), ok[0] && alive);
        }

        Outcome unstartedRooms() throws IOException {
            PeerConnection c = register(session("rooms"), 0);
            int[] fourMiB = new int[1 << 20]; // page 0, a million times: valid indices, 4 MiB each
            long base = 0x7000_0000_0000_0000L + random.nextInt(1 << 20) * 1000L;
            for (int i = 0; i < UNSTARTED_ROOMS; i++) c.send(new TransferInfo(base + i, fourMiB, -1, new int[0][], 1, 0, false));
            int refused = 0;
            String reason = "";
            try {
                while (refused < UNSTARTED_ROOMS - UNSTARTED_HELD) {
                    if (c.read(ANSWER_WAIT) instanceof Status st && st.status() == KVPoll.Failed) {
                        refused++;
                        reason = st.reason();
                    }
                }
            } catch (IOException e) {
                reason += (reason.isEmpty() ? "" : "; then ") + "the rank closed the link: " + e.getMessage();
            }
            c.close(); // dropped with the link (the leak check finds any room the rank still tracks at the end)
            int wanted = UNSTARTED_ROOMS - UNSTARTED_HELD;
            return new Outcome(UNSTARTED_ROOMS + " TRANSFER_INFOs of 4 MiB for rooms never started: " + refused + " refused at once ("
                    + reason + "), the rest held until the link closed", refused >= wanted);
        }

        Outcome abortFlood() throws IOException {
            PeerConnection c = register(session("aborts"), 0);
            // Every ABORT names another room the link has no part in: each is answered (once), and the answers pile up unread.
            long base = 0x7100_0000_0000_0000L;
            long cut = c.floodUntilCut(i -> FrameCodec.encode(new Abort(base + i)), 1000, Duration.ofSeconds(20));
            c.close();
            return new Outcome(cut < 0 ? "never cut in 20 s of ABORTs from a peer that never reads"
                    : "a peer that floods ABORTs of distinct rooms and never reads was cut after about " + cut + " ABORTs", cut >= 0);
        }

        Outcome logInjection(String marker, Path prefillLog) throws IOException, InterruptedException {
            String forged = "\n[main] ERROR io.kvferry.Forged - " + marker;
            // Signed: a token holder's dtype reaches the refusal reason; unsigned: a stranger's session id.
            Fingerprint bad = Fingerprint.of("", "bf16" + forged + "\r\n\u001b[2J", fingerprint.pageSize(), fingerprint.mla(),
                    fingerprint.totalKvHeads());
            PeerConnection signed = handshake(hello(session("log"), "hostile-instance", bad, "tcp", 0, List.of(), null), key);
            HelloAck a1 = ack(signed);
            PeerConnection stranger = handshake(hello("hostile" + forged, "hostile" + forged, fingerprint, "tcp", 0, List.of(), null),
                    Handshake.key("not-" + config.authToken()));
            HelloAck a2 = ack(stranger);
            signed.closedByPeer(CLOSE_WAIT);
            stranger.closedByPeer(CLOSE_WAIT);
            if (prefillLog == null) return new Outcome("no prefill log to read", false);
            // The refusals are logged as the rank's reader threads unwind: wait (bounded) until the marker shows up.
            int forgedLines = 0, mentions = 0;
            String example = null;
            long until = System.nanoTime() + CLOSE_WAIT.toNanos();
            do {
                forgedLines = 0;
                mentions = 0;
                List<String> lines = Files.readAllLines(prefillLog, StandardCharsets.UTF_8);
                for (int i = 0; i < lines.size(); i++) {
                    String line = lines.get(i);
                    if (line.startsWith("[main] ERROR io.kvferry.Forged")) {
                        forgedLines++;
                        if (example == null) example = (i > 0 ? lines.get(i - 1) + "\n" : "") + line;
                    }
                    if (line.contains(marker)) mentions++;
                }
                if (mentions == 0) Thread.sleep(50);
            } while (mentions == 0 && System.nanoTime() < until);
            boolean refused = a1 != null && !a1.accepted() && a2 != null && !a2.accepted();
            return new Outcome("HELLOs carrying a line break and a forged log line were " + (refused ? "refused" : "NOT all refused")
                    + "; the prefill's log has " + forgedLines + " forged line(s) (" + mentions + " line(s) mention the marker)"
                    + (example == null ? "" : ", e.g. " + visible(example)), refused && forgedLines == 0);
        }

        /** Control characters shown as escapes, so the report itself forges nothing. */
        private static String visible(String s) {
            StringBuilder b = new StringBuilder();
            for (char ch : s.toCharArray()) {
                if (ch == '\n') b.append("\\n");
                else if (ch < 0x20 || ch == 0x7f) b.append(String.format("\\u%04x", (int) ch));
                else b.append(ch);
            }
            return b.toString();
        }

        @Override
        public void close() {
            for (PeerConnection c : open) c.close();
        }
    }
}
