package io.kvferry.cli;

import io.kvferry.engine.http.Router;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Bad input on the command line (a port in use, no registry, a transport that cannot run here, an unwritable
 * output, a negative or huge count, a bad token file): exit 2 and one line naming what is wrong, no stack trace,
 * before anything long runs.
 */
@Timeout(60)
class CommandLineBadInputTest {
    @TempDir
    Path dir;

    /** Exit 2, no stack trace, and the last line (log warnings may come before it) names the problem. */
    static void assertRefused(CliRun r, String... parts) {
        assertEquals(2, r.code(), r.err());
        assertFalse(r.err().contains("\tat ") || r.err().contains("Exception:"), "a stack trace: " + r.err());
        List<String> lines = r.err().strip().lines().toList();
        assertFalse(lines.isEmpty(), "no message");
        String last = lines.getLast();
        for (String p : parts) assertTrue(last.contains(p), r.err());
    }

    /** Exactly one line on standard error. */
    static void assertOneLine(CliRun r, String... parts) {
        assertRefused(r, parts);
        assertEquals(1, r.err().strip().lines().count(), r.err());
    }

    /** A secret file as it should be: its owner's only (any other is warned about). */
    private Path tokenFile(String token) throws Exception {
        return secretFile(token, "rw-------");
    }

    private Path secretFile(String secret, String permissions) throws Exception {
        Path f = Files.writeString(dir.resolve("secret-" + secret + "-" + permissions), secret + "\n");
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString(permissions));
        return f;
    }

    /**
     * Every flag that names a file holding a secret (the cluster token in serve, bootstrap and bench, the router's API key) warns,
     * as --tenants-file does, when its group or every local user can read the file, then the run goes on (here to a refusal
     * that comes after the secret was read); an owner-only file is not warned about.
     */
    @Test
    void everySecretFileOthersCanReadIsWarnedAbout() throws Exception {
        Path open = secretFile("cluster-token-0123", "rw-r--r--"), group = secretFile("cluster-token-4567", "rw-r-----");
        Path key = secretFile("router-api-key-0123", "rw-r--r--");
        CliRun r = CliRun.of("serve", "--role", "router", "--port", "0", "--auth-token-file", open.toString());
        assertRefused(r, "give at least one --prefill URL and one --decode URL");
        assertTrue(r.err().contains("warning: --auth-token-file " + open + " is readable by every local user and holds the cluster token: "
                + "chmod 600 it"), r.err());
        r = CliRun.of("serve", "--role", "router", "--port", "0", "--auth-token-file", group.toString());
        assertTrue(r.err().contains("warning: --auth-token-file " + group + " is readable by its group"), r.err());
        r = CliRun.of("serve", "--role", "router", "--port", "0", "--api-key-file", key.toString(), "--auth-token-file", tokenFile("t").toString());
        assertRefused(r, "give at least one --prefill URL and one --decode URL");
        assertTrue(r.err().contains("warning: --api-key-file " + key + " is readable by every local user and holds the router's API key"), r.err());
        assertFalse(r.err().contains("--auth-token-file"), "an owner-only token file is not warned about: " + r.err());
        r = CliRun.of("bootstrap", "--port", "0", "--auth-token-file", open.toString(), "--max-connections", "0");
        assertRefused(r, "maxConnections must be >= 1, got 0");
        assertTrue(r.err().contains("warning: --auth-token-file " + open + " is readable by every local user"), r.err());
        r = CliRun.of("bench", "--model", "tiny", "--auth-token-file", open.toString(), "--transfer-workers", "5000");
        assertRefused(r, "--transfer-workers must be in [0, 1024]");
        assertTrue(r.err().contains("warning: --auth-token-file " + open + " is readable by every local user"), r.err());
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--auth-token-file", tokenFile("u").toString(), "--transfer-workers", "5000"),
                "--transfer-workers must be in [0, 1024]");
    }

    /**
     * The router's API key: never a flag value (like the cluster token), only where a router runs, never the
     * cluster token itself (every client would hold the engines' and the registry's token), a file that exists.
     */
    @Test
    void theRoutersApiKeyIsRefusedWhereItWouldLeakOrMeanNothing() throws Exception {
        assertOneLine(CliRun.of("serve", "--api-key", "k"), "kvferry serve: --api-key would put the router's API key on the command line",
                "KVFERRY_API_KEY or pass --api-key-file");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--api-key-file", tokenFile("k").toString(), "--auth-token-file",
                tokenFile("t").toString()), "kvferry serve: --api-key-file is not used by --role decode; it is for --role router and serve without --role");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--api-key-file", dir.resolve("missing").toString()),
                "--api-key-file " + dir.resolve("missing") + " does not exist");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--api-key-file", tokenFile("same").toString(),
                "--auth-token-file", tokenFile("same").toString()), "the router's API key", "must differ from the cluster token");
    }

    /**
     * The tenants file: only where a router runs, not with one API key, checked whole before anything starts (its fault
     * named by tenant and field), and a warning when other users can read it.
     */
    @Test
    void theTenantsFileIsRefusedWhereItMeansNothingOrIsBad() throws Exception {
        String good = "{\"tenants\":[{\"name\":\"team-a\",\"key\":\"team-a-key-0123456789\"}]}";
        Path tenants = Files.writeString(dir.resolve("tenants.json"), good);
        Files.setPosixFilePermissions(tenants, PosixFilePermissions.fromString("rw-------"));
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--tenants-file", tenants.toString(), "--auth-token-file",
                tokenFile("t").toString()), "kvferry serve: --tenants-file is not used by --role decode; it is for --role router and serve without --role");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--tenants-file", tenants.toString(), "--api-key-file",
                tokenFile("k").toString()), "kvferry serve: --tenants-file and --api-key-file are exclusive");
        Path bad = Files.writeString(dir.resolve("bad.json"), "{\"tenants\":[{\"name\":\"team-a\",\"key\":\"short\"}]}");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--tenants-file", bad.toString()),
                "kvferry serve: --tenants-file " + bad + " tenants[0] (team-a).key has 5 characters; at least 16 are needed");
        Path unknown = Files.writeString(dir.resolve("unknown.json"), good.replace("}]", ",\"limit\":2}]"));
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--tenants-file", unknown.toString()),
                "tenants[0] (team-a) has an unknown field 'limit'");
        Path rate = Files.writeString(dir.resolve("rate.json"), good.replace("}]", ",\"tokens_per_minute\":0}]"));
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--tenants-file", rate.toString()),
                "kvferry serve: --tenants-file " + rate + " tenants[0] (team-a).tokens_per_minute must be a whole number from 1 to 100000000 "
                        + "(absent: no limit), got 0");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--tenants-file", dir.resolve("none.json").toString()),
                "--tenants-file " + dir.resolve("none.json") + " does not exist");
        Path token = tokenFile("team-a-key-0123456789");
        assertOneLine(CliRun.of("serve", "--role", "router", "--port", "0", "--tenants-file", tenants.toString(), "--auth-token-file",
                token.toString()), "tenants[0] (team-a).key is the cluster token");
        // Readable by others: a warning, then the run goes on (here to the router's own refusal: no backends).
        Files.setPosixFilePermissions(tenants, PosixFilePermissions.fromString("rw-r--r--"));
        CliRun r = CliRun.of("serve", "--role", "router", "--port", "0", "--tenants-file", tenants.toString(), "--auth-token-file",
                tokenFile("t2").toString());
        assertRefused(r, "give at least one --prefill URL and one --decode URL");
        assertTrue(r.err().contains("kvferry serve: warning: --tenants-file " + tenants + " is readable by every local user"), r.err());
    }

    /** A TP or PP size the model cannot take said "tp 3 must divide…" without naming which of serve's or demo's flags set it. */
    @Test
    void aParallelismTheModelCannotTakeNamesItsFlag() throws Exception {
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--prefill-tp", "3"),
                "kvferry serve: --prefill-tp 3: tp 3 must divide the model's 4 KV heads");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--decode-tp", "0"), "kvferry serve: --decode-tp 0: tp 0");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--prefill-pp", "9"),
                "kvferry serve: --prefill-pp 9: pp 9 must be in 1..5 (the layers)");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--pp", "0", "--auth-token-file", tokenFile("t").toString()),
                "kvferry serve: --pp 0: pp 0 must be in 1..5");
        assertRefused(CliRun.of("demo", "--decode-tp", "-1"), "kvferry demo: --decode-tp -1: tp -1 must divide the model's 4 KV heads");
    }

    /** More transfer workers than the library takes failed deep in the manager's config, after the pools were allocated. */
    @Test
    void tooManyTransferWorkersAreRefusedNamingTheFlag() {
        assertRefused(CliRun.of("bench", "--model", "tiny", "--transfer-workers", "5000"),
                "--transfer-workers must be in [0, 1024] (0: the library default), got 5000");
    }

    /** The router's admission flags: a negative limit, a wait beyond an hour, or a mode without a router. */
    @Test
    void theRoutersAdmissionFlagsAreChecked() throws Exception {
        assertOneLine(CliRun.of("serve", "--max-concurrent-requests", "-1"), "kvferry serve: --max-concurrent-requests -1 is negative (0 = no limit)");
        assertOneLine(CliRun.of("serve", "--queue-timeout-ms", "99999999"), "kvferry serve: --queue-timeout-ms 99999999 is outside [0, 3600000]");
        assertOneLine(CliRun.of("serve", "--role", "prefill", "--port", "0", "--bootstrap-port", "0", "--queue-timeout-ms", "5",
                "--auth-token-file", tokenFile("t").toString()), "kvferry serve: --queue-timeout-ms is not used by --role prefill");
        assertOneLine(CliRun.of("serve", "--max-backends", "1"), "kvferry serve: --max-backends 1 is outside [2, 4096] (at least a prefill and a decode)");
        assertOneLine(CliRun.of("serve", "--max-backends", "5000"), "kvferry serve: --max-backends 5000 is outside [2, 4096] (at least a prefill and a decode)");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--max-backends", "8", "--auth-token-file", tokenFile("t").toString()),
                "kvferry serve: --max-backends is not used by --role decode");
        assertOneLine(CliRun.of("serve", "--role", "router", "--port", "0", "--max-backends", "2", "--prefill", "http://127.0.0.1:1",
                "--decode", "http://127.0.0.1:2", "--decode", "http://127.0.0.1:3", "--auth-token-file", tokenFile("t").toString()),
                "kvferry serve --role router: 3 --prefill and --decode URLs, more than --max-backends 2");
    }

    /**
     * A backend URL given twice in one role is refused before anything starts, named with its flag (it would count twice
     * against --max-backends for one server, as POST /workers answers 409 for a URL held already); a trailing slash makes
     * no other URL. One URL as a prefill and as a decode is two backends (one server may answer as both).
     */
    @Test
    void aBackendUrlGivenTwiceIsRefused() throws Exception {
        String token = tokenFile("t").toString();
        assertOneLine(CliRun.of("serve", "--role", "router", "--port", "0", "--max-backends", "3", "--prefill", "http://127.0.0.1:1",
                "--decode", "http://127.0.0.1:2", "--decode", "http://127.0.0.1:2", "--decode", "http://127.0.0.1:3", "--auth-token-file", token),
                "kvferry serve --role router: --decode http://127.0.0.1:2 is given twice: give each decode once");
        assertOneLine(CliRun.of("serve", "--role", "router", "--port", "0", "--prefill", "http://127.0.0.1:1", "--prefill", "http://127.0.0.1:1/",
                "--decode", "http://127.0.0.1:2", "--auth-token-file", token),
                "kvferry serve --role router: --prefill http://127.0.0.1:1 is given twice (as http://127.0.0.1:1 and http://127.0.0.1:1/): "
                        + "give each prefill once");
        assertNull(Router.givenTwice(List.of("http://127.0.0.1:1"), List.of("http://127.0.0.1:1")), "a prefill and a decode: two backends");
    }

    /**
     * --register-interval-s: how often a --register-with engine re-asserts its entry; refused out of [1, 300] s, without
     * --register-with, and where no engine registers (a router).
     */
    @Test
    void aRegisterIntervalOutOfRangeOrWithoutARouterIsRefused() throws Exception {
        String token = tokenFile("t").toString();
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--register-interval-s", "5", "--auth-token-file", token),
                "kvferry serve: --register-interval-s is used only with --register-with (the router to register with)");
        for (String bad : List.of("0", "301", "-5")) {
            assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--register-with", "http://127.0.0.1:1", "--register-interval-s", bad,
                    "--auth-token-file", token), "kvferry serve: --register-interval-s " + bad + " is outside [1, 300] (seconds between re-assertions of the entry)");
        }
        assertOneLine(CliRun.of("serve", "--role", "router", "--port", "0", "--register-interval-s", "5", "--prefill", "http://127.0.0.1:1",
                "--decode", "http://127.0.0.1:2", "--auth-token-file", token), "kvferry serve: --register-interval-s is not used by --role router");
    }

    /** --drain-timeout-s: negative, or beyond an hour, is refused before anything starts (every role reads it). */
    @Test
    void aDrainTimeoutOutOfRangeIsRefused() throws Exception {
        assertOneLine(CliRun.of("serve", "--drain-timeout-s", "-1"), "kvferry serve: --drain-timeout-s -1 is outside [0, 3600] (0 = stop at once)");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--drain-timeout-s", "3601",
                "--auth-token-file", tokenFile("t").toString()), "kvferry serve: --drain-timeout-s 3601 is outside [0, 3600] (0 = stop at once)");
    }

    /** A rate so low its first arrival is hours away ran for ever; a bad --checksum word did not name the flag. */
    @Test
    void aRateTooLowAndABadChecksumWordNameTheirFlags() {
        assertRefused(CliRun.of("bench", "--rate", "1e-300"), "--rate must be", ">= 0.01", "1.0E-300");
        assertRefused(CliRun.of("bench", "--checksum", "bogus"), "--checksum must be off, sampled or full, not 'bogus'");
    }

    @Test
    void anHttpPortInUseIsOneLineNamingHostAndPort() throws Exception {
        try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            int port = taken.getLocalPort();
            CliRun r = CliRun.of("serve", "--role", "decode", "--port", "" + port, "--auth-token-file", tokenFile("t").toString());
            assertOneLine(r, "kvferry serve: cannot bind the HTTP server to 127.0.0.1:" + port + ": Address already in use");
        }
    }

    /** A registry that refuses this process's token answers 401 at once: the prefill cannot register (as with none there). */
    @Test
    void aPrefillWhoseRegistryFailsIsOneLineNamingBootstrap() throws Exception {
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("theirs"))) {
            String addr = "127.0.0.1:" + registry.port();
            CliRun r = CliRun.of("prefill", "--bootstrap", addr, "--model", "tiny", "--requests", "1", "--status-port", "-1",
                    "--auth-token-file", tokenFile("mine").toString());
            assertRefused(r, "kvferry prefill: --bootstrap " + addr + ": no usable bootstrap registry there: ");
        }
    }

    @Test
    void aTransportThatCannotRunHereIsOneLine() throws Exception {
        try {
            CliRun r = CliRun.of("--set", "KVFERRY_SHM_COPY_THREADS=0", "decode", "--bootstrap", "127.0.0.1:1", "--model", "tiny",
                    "--requests", "1", "--status-port", "-1", "--transport", "shm", "--auth-token-file", tokenFile("t").toString());
            assertOneLine(r, "kvferry decode: transfer backend shm cannot run here: KVFERRY_SHM_COPY_THREADS / kvferry.shm.copyThreads "
                    + "must be in [1, 64], not 0");
        } finally {
            System.clearProperty("kvferry.shm.copyThreads");
        }
    }

    /**
     * A knob the role processes refuse: bench --processes printed the roles' lines and then an IllegalStateException's
     * stack trace (exit 1), chaos waited for roles that had exited. Both refuse it now before any process starts.
     */
    @Test
    void aBadKnobIsRefusedBeforeTheRoleProcessesStart() {
        try {
            assertOneLine(CliRun.of("--set", "KVFERRY_CONNECT_TIMEOUT_MS=abc", "bench", "--processes", "--model", "tiny", "--requests", "1"),
                    "kvferry bench: KVFERRY_CONNECT_TIMEOUT_MS / kvferry.connectTimeoutMs must be a whole number");
            assertOneLine(CliRun.of("--set", "KVFERRY_CONNECT_TIMEOUT_MS=abc", "chaos", "--scenario", "kill-decode", "--model", "tiny",
                    "--requests", "16"), "kvferry chaos: KVFERRY_CONNECT_TIMEOUT_MS / kvferry.connectTimeoutMs must be a whole number");
        } finally {
            System.clearProperty("kvferry.connectTimeoutMs");
        }
    }

    @Test
    void anUnwritableOutputIsRefusedBeforeTheRun() throws Exception {
        Path file = Files.writeString(dir.resolve("a-file"), "x");
        Path dump = file.resolve("sub").resolve("m.prom");
        long t0 = System.nanoTime();
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--metrics-dump", dump.toString()),
                "kvferry bench: --metrics-dump " + dump + ": cannot create directory " + file.resolve("sub"));
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--metrics-dump", dir.toString()),
                "--metrics-dump " + dir + " is a directory");
        assertOneLine(CliRun.of("bench", "--sweep-quick", "--out", file.resolve("sweep").toString()),
                "kvferry bench: --out " + file.resolve("sweep") + ": cannot create directory");
        assertTrue(System.nanoTime() - t0 < 10_000_000_000L, "refused before the run");
        // A missing directory is made.
        Path fresh = dir.resolve("new").resolve("m.prom");
        BenchCommand.requireWritableFile("--metrics-dump", fresh);
        assertTrue(Files.isDirectory(fresh.getParent()));
    }

    @Test
    void negativeCountsAndDelaysAreRefusedNamingTheFlag() {
        assertOneLine(CliRun.of("chaos", "--scenario", "kill-prefill", "--fault-after-ms", "-1"),
                "kvferry chaos: --fault-after-ms -1 is negative");
        assertOneLine(CliRun.of("demo", "--load", "-1"), "kvferry demo: --load -1 is negative");
    }

    @Test
    void anOpenLoopRunOfMoreRequestsThanItCanScheduleIsRefused() {
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "2147483647", "--warmup", "0", "--rate", "1e308"),
                "kvferry bench: --requests 2147483647 is more than an open-loop run (--rate) takes: at most 10000000");
    }

    @Test
    void aTokenFileThatIsMissingOrNotTextIsNamed() throws Exception {
        Path missing = dir.resolve("missing");
        assertOneLine(CliRun.of("bench", "--auth-token-file", missing.toString()), "--auth-token-file " + missing + " does not exist");
        Path binary = Files.write(dir.resolve("binary"), new byte[]{(byte) 0xff, (byte) 0xfe, 0, 1, 2});
        assertOneLine(CliRun.of("bootstrap", "--port", "0", "--auth-token-file", binary.toString()),
                "--auth-token-file " + binary + " is not UTF-8 text");
    }

    /** The engines' refusal of a request (too few pages) ends the demo with its message, not a 500's "Aborted by AbortReq.". */
    @Test
    void aDemoWhoseRequestTheEnginesRefuseFailsWithTheirMessage() {
        assertRefused(CliRun.of("demo", "--pages", "1", "--prompt", "Once upon a time"),
                "kvferry demo: the engines refused the request (HTTP 400): the request needs 4 pages (prompt + max_tokens); this decode has 1");
    }

    /** The decode process of demo --processes runs one PP stage: a state variant with a prefill of two would fail every request. */
    @Test
    void aDemoWhoseStateVariantCannotPairItsPpStagesIsRefusedBeforeStarting() {
        CliRun r = CliRun.of("demo", "--processes", "--model-variant", "swa", "--prefill-pp", "2");
        assertRefused(r, "swa variant's state pairs by PP stage", "prefill's PP (2) must equal the decode's (1)");
    }

    /** A timeout longer than a Duration holds in nanoseconds was an ArithmeticException's stack trace (exit 1). */
    @Test
    void aTimeoutTooLongForTheClockIsRefusedNamingTheFlag() {
        assertOneLine(CliRun.of("bootstrap", "--port", "0", "--no-auth", "--request-timeout-ms", "9223372036854775807"),
                "kvferry bootstrap: --request-timeout-ms 9223372036854775807: requestTimeout must be at most 9223372036854 ms");
        assertOneLine(CliRun.of("status", "--bootstrap", "127.0.0.1:1", "--timeout-ms", "9223372036854775807"),
                "kvferry status: --timeout-ms 9223372036854775807 is outside [1, 9223372036854]");
    }

    /** An unresolvable --host was "kvferry prefill: null" (the bind's UnresolvedAddressException has no message). */
    @Test
    void aRoleHostThatDoesNotResolveIsNamed() throws Exception {
        assertOneLine(CliRun.of("prefill", "--bootstrap", "127.0.0.1:1", "--model", "tiny", "--requests", "1", "--status-port", "-1",
                "--host", "no-such-host.invalid", "--auth-token-file", tokenFile("t").toString()),
                "kvferry prefill: --host no-such-host.invalid: no such host");
    }

    /** A bench prefill on the wildcard would publish 0.0.0.0 for its ranks: one line naming --advertise-host (the manager's refusal was a stack trace). */
    @Test
    void aPrefillRoleOnTheWildcardIsRefusedNamingAdvertiseHost() throws Exception {
        assertOneLine(CliRun.of("prefill", "--bootstrap", "127.0.0.1:1", "--model", "tiny", "--requests", "1", "--status-port", "-1",
                "--host", "0.0.0.0", "--auth-token-file", tokenFile("t").toString()),
                "kvferry prefill: --host 0.0.0.0 binds every address", "give --advertise-host");
    }

    /** A rank listed twice ran twice: the second copy's rooms all failed (bad_request), exit 1 after the run. */
    @Test
    void aRankGivenTwiceIsRefused() throws Exception {
        assertOneLine(CliRun.of("decode", "--bootstrap", "127.0.0.1:1", "--model", "tiny", "--requests", "1", "--status-port", "-1",
                "--rank", "0,0", "--auth-token-file", tokenFile("t").toString()),
                "kvferry decode: --rank 0 is given twice ([0, 0])");
    }

    /** status read a missing port as port 80 and answered other bad addresses with "unsupported URI" and exit 1. */
    @Test
    void aStatusAddressThatIsNotHostPortIsRefusedNamingTheFlag() {
        for (String bad : List.of("", "localhost", "::1:8998", "127.0.0.1:abc", "127.0.0.1:1/x", "a b:1")) {
            assertOneLine(CliRun.of("status", "--bootstrap", bad), "kvferry status: --bootstrap '" + bad + "' is not HOST:PORT");
        }
        assertOneLine(CliRun.of("status", "--bootstrap", "127.0.0.1:70000"), "kvferry status: --bootstrap '127.0.0.1:70000': port 70000 is "
                + "outside [1, 65535]");
        assertOneLine(CliRun.of("status", "--bootstrap", "127.0.0.1:0"), "port 0 is outside [1, 65535]");
        for (String good : List.of("127.0.0.1:1", "[::1]:1", "http://localhost:1/")) {
            CliRun r = CliRun.of("status", "--bootstrap", good); // nothing listens there: exit 1, "cannot reach"
            assertEquals(1, r.code(), r.err());
            assertTrue(r.err().contains("cannot reach"), r.err());
        }
    }

    /**
     * The hidden chaos timeouts: a negative one ran as if 0 (the default) without a word, and a deadline too long for the
     * drivers' nanosecond clock overflowed it, so the one request failed at once (exit 1).
     */
    @Test
    void aNegativeOrOverflowingHarnessTimeoutIsRefused() {
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--warmup", "0", "--bootstrap-timeout-ms", "-1"),
                "kvferry bench: --bootstrap-timeout-ms must be >= 0 (0 = the library's default), not -1");
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--warmup", "0", "--deadline-ms", "-1"),
                "kvferry bench: --deadline-ms must be in [0, 2305843009213] (0 = none), not -1");
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--warmup", "0", "--deadline-ms", "9223372036854775807"),
                "kvferry bench: --deadline-ms must be in [0, 2305843009213] (0 = none), not 9223372036854775807");
    }

    /**
     * chaos ran --transport inproc over tcp (its roles are separate processes) and passed naming inproc, and slept through
     * a --fault-after-ms past the drivers' deadline (9223372036854775807: for ever).
     */
    @Test
    void chaosRefusesInprocAndAFaultAfterTheDeadline() {
        assertOneLine(CliRun.of("chaos", "--scenario", "kill-prefill", "--model", "tiny", "--requests", "1", "--transport", "inproc"),
                "kvferry chaos: --transport inproc moves memory inside one JVM; chaos runs prefill and decode as separate processes");
        // fake moves no KV: kill-decode, judged by the prefill, passed while the decode found every room's bytes wrong.
        assertOneLine(CliRun.of("chaos", "--scenario", "kill-decode", "--model", "tiny", "--requests", "16", "--transport", "fake"),
                "kvferry chaos: --transport fake moves no KV");
        assertOneLine(CliRun.of("chaos", "--scenario", "kill-prefill", "--model", "tiny", "--requests", "1", "--fault-after-ms",
                "9223372036854775807"), "kvferry chaos: --fault-after-ms 9223372036854775807 is not before the drivers' deadline of 120000 ms");
    }

    /** serve took the flags of another mode and ignored them: serve --tp 0 (no --role) ran a tp1 prefill and exited 0 when stopped. */
    @Test
    void serveRefusesAFlagItsModeDoesNotRead() throws Exception {
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--tp", "0"),
                "kvferry serve: --tp is not used without --role; it is for --role prefill and --role decode");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--prefill-tp", "2", "--auth-token-file", tokenFile("t").toString()),
                "kvferry serve: --prefill-tp is not used by --role decode; it is for serve without --role");
        assertOneLine(CliRun.of("serve", "--role", "prefill", "--port", "0", "--decode", "http://127.0.0.1:1", "--auth-token-file",
                tokenFile("t").toString()), "kvferry serve: --decode is not used by --role prefill; it is for --role router");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--bootstrap-port", "9999", "--auth-token-file",
                tokenFile("t").toString()), "kvferry serve: --bootstrap-port is not used by --role decode; it is for --role prefill and serve without --role");
        // The engines' flags meant nothing to a router, which took and ignored them (--pages 5, --transport shm).
        for (String[] flag : new String[][]{{"--pages", "5"}, {"--transport", "shm"}, {"--model-variant", "mla"}, {"--chunk-tokens", "8"}}) {
            assertOneLine(CliRun.of("serve", "--role", "router", "--port", "0", "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2",
                    flag[0], flag[1], "--auth-token-file", tokenFile("t").toString()), "kvferry serve: " + flag[0]
                    + " is not used by --role router; it is for --role prefill and --role decode and serve without --role");
        }
    }

    /** --prefill-cache is on or off, and only for a process that runs a prefill. */
    @Test
    void thePrefillCacheFlagIsOnOrOffWhereAPrefillRuns() throws Exception {
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--prefill-cache", "maybe"),
                "--prefill-cache must be on or off, got 'maybe'");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--prefill-cache", "off", "--auth-token-file",
                tokenFile("t").toString()), "kvferry serve: --prefill-cache is not used by --role decode; it is for --role prefill and serve without --role");
    }

    /**
     * Engines in separate processes ran inproc over tcp (the demo's banner said inproc); serve's ports were "port out of range:70000",
     * bootstrap's "port -1 is outside [0, 65535]" and "cannot bind the bootstrap registry to nope.invalid:0" (no flag named).
     */
    @Test
    void engineProcessesRefuseInprocAndPortsAreNamed() throws Exception {
        assertOneLine(CliRun.of("demo", "--processes", "--transport", "inproc"),
                "kvferry demo: --transport inproc moves memory inside one JVM; it cannot be combined with --processes");
        assertOneLine(CliRun.of("serve", "--role", "decode", "--port", "0", "--transport", "inproc", "--auth-token-file",
                tokenFile("t").toString()), "kvferry serve: --transport inproc moves memory inside one JVM; it works only without --role");
        assertOneLine(CliRun.of("serve", "--port", "70000"), "kvferry serve: --port 70000 is outside [0, 65535]");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "-1"), "kvferry serve: --bootstrap-port -1 is outside [0, 65535]");
        assertOneLine(CliRun.of("bootstrap", "--no-auth", "--port", "-1"), "kvferry bootstrap: --port -1 is outside [0, 65535]");
        assertOneLine(CliRun.of("bootstrap", "--no-auth", "--port", "0", "--host", "nope.invalid"),
                "kvferry bootstrap: --host nope.invalid: no such host (cannot resolve it)");
        // The bench roles' peers are other processes too: their inproc links fell back to tcp with a warning.
        assertOneLine(CliRun.of("decode", "--bootstrap", "127.0.0.1:1", "--model", "tiny", "--requests", "1", "--status-port", "-1",
                "--transport", "inproc", "--auth-token-file", tokenFile("t").toString()),
                "kvferry decode: --transport inproc moves memory inside one JVM; the peer of a role process is another process");
    }

    /** demo --load 2147483647 built 2^31 requests up front: minutes of silence, then out of heap. */
    @Test
    void aDemoLoadTooLargeToHoldIsRefused() {
        assertOneLine(CliRun.of("demo", "--load", "2147483647"), "kvferry demo: --load 2147483647 is more than 100000 requests");
    }

    /**
     * demo's --shared-prefix-tokens shapes --load's prompts: without --load, negative, or so long that a prompt leaves the
     * context no room, it is refused before anything starts, naming the flag; --shared-prefix-cold without a prefix too.
     */
    @Test
    void aDemoSharedPrefixWithoutALoadOrPastTheContextIsRefused() {
        assertOneLine(CliRun.of("demo", "--shared-prefix-tokens", "8"), "kvferry demo: --shared-prefix-tokens shapes --load's requests");
        assertOneLine(CliRun.of("demo", "--load", "1", "--shared-prefix-tokens", "-1"), "kvferry demo: --shared-prefix-tokens -1 is negative");
        assertOneLine(CliRun.of("demo", "--load", "2", "--shared-prefix-tokens", "600"), "kvferry demo: --shared-prefix-tokens 600: load request 0's prompt has",
                "the model's context is 512");
        assertOneLine(CliRun.of("demo", "--load", "2", "--shared-prefix-cold"), "kvferry demo: --shared-prefix-cold needs --shared-prefix-tokens T");
    }

    /**
     * serve and demo took --transport fake, which moves no KV (the demo reported the bytes moved and the tokens differed),
     * and refused sizes, transports and hosts without naming the flag ("pages must be >= 1, got 0", "cannot bind the
     * bootstrap registry to nope.invalid:0"); a demo's --max-tokens 0 was sent to the engines first.
     */
    @Test
    void serveAndDemoNameTheEngineFlagAtFaultAndRefuseTheFakeTransport() {
        assertOneLine(CliRun.of("demo", "--transport", "fake"), "kvferry demo: --transport fake moves no KV");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--transport", "fake"), "kvferry serve: --transport fake moves no KV");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--transport", "nope"),
                "kvferry serve: --transport must be one of tcp, shm, ucx, auto or inproc, got 'nope'");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--pages", "0"), "kvferry serve: --pages must be >= 1, got 0");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--page-size", "0"), "kvferry serve: --page-size must be >= 1, got 0");
        assertOneLine(CliRun.of("demo", "--max-requests", "0"), "kvferry demo: --max-requests must be >= 1, got 0");
        assertOneLine(CliRun.of("demo", "--chunk-tokens", "-1"), "kvferry demo: --chunk-tokens must be >= 1, got -1");
        assertOneLine(CliRun.of("demo", "--max-tokens", "0"), "kvferry demo: --max-tokens must be >= 1, got 0");
        assertOneLine(CliRun.of("serve", "--port", "0", "--bootstrap-port", "0", "--host", "nope.invalid"),
                "kvferry serve: --host nope.invalid: no such host (cannot resolve it)");
    }

    /**
     * As root, Files.isWritable said yes to /proc, the bench ran, and writing the dump then failed with a stack trace
     * (exit 1, results lost). For other users /proc is refused as not writable: either way, before the run.
     */
    @Test
    void aMetricsDumpThatCannotBeCreatedIsRefusedBeforeTheRun() {
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--warmup", "0", "--metrics-dump", "/proc/kvferry-test.prom"),
                "kvferry bench: --metrics-dump /proc/kvferry-test.prom");
    }

    /**
     * A sweep directory no file system can make (root may "write" /proc) showed a raw java.nio.file.NoSuchFileException;
     * --out without a sweep was accepted, the bench ran, and nothing was written there.
     */
    @Test
    void aSweepDirectoryIsRefusedInWordsAndOnlyASweepTakesOne() {
        assertOneLine(CliRun.of("bench", "--sweep-quick", "--out", "/proc/kvferry-test-sweep"),
                "kvferry bench: --out /proc/kvferry-test-sweep: cannot create directory /proc/kvferry-test-sweep: ");
        CliRun proc = CliRun.of("bench", "--sweep-quick", "--out", "/proc/kvferry-test-sweep");
        assertFalse(proc.err().contains("Exception"), proc.err());
        assertOneLine(CliRun.of("bench", "--model", "tiny", "--requests", "1", "--out", dir.resolve("o").toString()),
                "kvferry bench: --out is the directory of a sweep; add --sweep or --sweep-quick");
        assertFalse(Files.exists(dir.resolve("o")), "nothing was made");
    }

    /** --netem and --netns-link without --netns were accepted and ignored: the run had no impaired link at all. */
    @Test
    void chaosRefusesLinkFlagsWithoutNetns() {
        assertOneLine(CliRun.of("chaos", "--scenario", "kill-prefill", "--model", "tiny", "--requests", "1", "--netem", "loss 50%"),
                "kvferry chaos: --netem shapes the --netns link; without --netns it does nothing");
        assertOneLine(CliRun.of("chaos", "--scenario", "kill-prefill", "--model", "tiny", "--requests", "1", "--netns-link", "tun"),
                "kvferry chaos: --netns-link shapes the --netns link; without --netns it does nothing");
    }
}
