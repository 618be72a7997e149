package io.kvferry.engine.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.http.BearerToken;
import io.kvferry.http.SecretFiles;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.io.IOException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.regex.Pattern;

/**
 * The router's tenants ({@code serve --tenants-file}): each client's bearer key names its tenant, which decides its
 * concurrency limit and its prefix-cache salt, and tags its meters. The file (JSON) is checked whole at start, every
 * fault named by tenant and field ({@link #parse}); the router re-reads it when its modification time changes
 * ({@link #reloadIfChanged}, on the router's health thread): an invalid new file is logged and the old set kept.
 *
 * <p>Keys are kept as SHA-256 digests only; {@link #identify} compares the presented key's digest with every tenant's
 * ({@link MessageDigest#isEqual}, no early exit), so neither the match nor its position shows in the time taken.
 *
 * <p>Concurrency: each tenant has one fair {@link Slots} semaphore (without a limit, {@link #UNLIMITED} permits), the only
 * owner of its count, kept across reloads by name (a new limit resizes it; requests under way keep their admission and give it back to it).
 * The set itself is an immutable snapshot swapped whole.
 *
 * <p>Rates: a tenant's {@code requests_per_minute} and {@code tokens_per_minute} are {@link RateBucket}s, kept across reloads
 * by name as the slots are (an unchanged limit keeps its bucket as it is, so a reload never refills one; a changed one keeps
 * the fraction in use), read on an injectable clock ({@link #of(String, String, LongSupplier)}); the router charges them at
 * admission ({@link RateLimits}).
 *
 * <p>Cache salts: an isolated tenant's requests reach the engines with the salt HMAC-SHA256(k, name) (with the client's
 * own salt: HMAC-SHA256(k, name LF salt)), 64 hex characters, where k is derived from the cluster token (the same on every
 * router of a cluster, so several routers share a tenant's pages and a restart keeps them), or random per process without
 * one. No other tenant can send that salt's pages' requests: its salt is a different HMAC whatever it sends.
 */
public final class Tenants {
    private static final Logger log = LoggerFactory.getLogger(Tenants.class);
    /**
     * A tenant's name: what its meters and the request log show; bounded so a file cannot blow up the meters' tags. It starts
     * with a letter or digit: {@code -} alone is the tag of the requests no key opened ({@link RouterMeters#NO_TENANT}).
     */
    static final Pattern NAME = Pattern.compile("[a-z0-9][a-z0-9._-]{0,63}");
    static final int MIN_KEY_CHARS = 16;
    /** The text of a JSON parser's "Unrecognized token 'TEXT'": a bare word of the file, such as an unquoted key. */
    private static final Pattern UNREAD_TOKEN = Pattern.compile("Unrecognized token '[^']*'");
    /** The slots of a tenant without a limit: it is admitted whatever its count, which is still kept. */
    static final int UNLIMITED = Integer.MAX_VALUE;
    /** The most tenants one file holds (each has its meters). */
    static final int MAX_TENANTS = 10_000;

    /** How a tenant's requests use the engines' prefix caches. */
    public enum CacheSalt {
        /** Its own pages only: the router salts every request of the tenant (the default). */
        ISOLATED,
        /** The client's {@code cache_salt} passes through as sent: pages are shared with other tenants sending the same (or none). */
        SHARED
    }

    /**
     * One tenant. {@code maxConcurrent}: 0 for no limit of its own. {@code slots}: its admission count (set once adopted).
     */
    public static final class Tenant {
        final String name;
        final int maxConcurrent;
        /** {@code requests_per_minute}, {@code tokens_per_minute}: 0 for no limit. */
        final int requestsPerMinute;
        final int tokensPerMinute;
        final CacheSalt cacheSalt;
        private final byte[] keyDigest;
        private final byte[] saltKey;
        Slots slots;
        /** Its rate buckets (set once adopted), null without that limit. */
        RateBucket requests;
        RateBucket tokens;

        private Tenant(String name, String key, int maxConcurrent, int requestsPerMinute, int tokensPerMinute, CacheSalt cacheSalt,
                       byte[] saltKey) {
            this.name = name;
            this.keyDigest = sha256(key);
            this.maxConcurrent = maxConcurrent;
            this.requestsPerMinute = requestsPerMinute;
            this.tokensPerMinute = tokensPerMinute;
            this.cacheSalt = cacheSalt;
            this.saltKey = saltKey;
        }

        public String name() {
            return name;
        }

        public int maxConcurrent() {
            return maxConcurrent;
        }

        public CacheSalt cacheSalt() {
            return cacheSalt;
        }

        /** Its {@code requests_per_minute}; 0: no limit. */
        public int requestsPerMinute() {
            return requestsPerMinute;
        }

        /** Its {@code tokens_per_minute}; 0: no limit. */
        public int tokensPerMinute() {
            return tokensPerMinute;
        }

        /** The salt the engines get for a request of this tenant whose client sent {@code clientSalt} (null: none). */
        String salt(String clientSalt) {
            if (cacheSalt == CacheSalt.SHARED) return clientSalt;
            // A name has no LF: "name" and "name LF salt" never collide, and neither do two tenants' inputs.
            return hmacHex(saltKey, clientSalt == null ? name : name + '\n' + clientSalt);
        }

        @Override
        public String toString() {
            return "Tenant[" + name + ", max_concurrent_requests=" + maxConcurrent + ", requests_per_minute=" + requestsPerMinute
                    + ", tokens_per_minute=" + tokensPerMinute + ", cache_salt=" + cacheSalt + "]"; // never the key
        }
    }

    /**
     * A tenant's admission count: a fair semaphore whose permits follow the limit across reloads (a lower one may leave
     * it negative until requests under way end: they keep their admission). In flight = limit - available permits.
     */
    static final class Slots extends Semaphore {
        private int limit;

        Slots(int limit) {
            super(limit, true);
            this.limit = limit;
        }

        synchronized void resize(int to) {
            if (to > limit) release(to - limit);
            else if (to < limit) reducePermits(limit - to);
            limit = to;
        }

        synchronized int limit() {
            return limit;
        }

        int inFlight() {
            return limit() - availablePermits();
        }
    }

    /** What a file holds once checked: its tenants in order. */
    record Parsed(List<Tenant> tenants) {
    }

    private final Path file;
    private final byte[] saltKey;
    private final byte[] clusterTokenDigest;
    private volatile List<Tenant> current;
    /** Every limited tenant's slots by name: the one owner of the counts, kept across reloads; changed under {@code this}. */
    private final Map<String, Slots> slotsByName = new ConcurrentHashMap<>();
    /** Every rate-limited tenant's buckets by name, kept across reloads as the slots are; changed under {@code this}. */
    private final Map<String, RateBucket> requestBuckets = new ConcurrentHashMap<>();
    private final Map<String, RateBucket> tokenBuckets = new ConcurrentHashMap<>();
    /** The buckets' clock (nanoseconds, as {@link System#nanoTime}): a test's own makes them deterministic. */
    private final LongSupplier nanos;
    private FileTime seen;
    /** What the last re-read found wrong with the file (logged once until it changes), or null. Under {@code this}. */
    private String failed;
    /** Told of the tenants added and removed by a reload (the router's meters); set once by the router. */
    private volatile Listener listener = new Listener() {
    };

    /**
     * What a reload changes, for the meters, around the swap of the set (which {@link #reload} alone does): the tenants new
     * by name before it, so their meters are there for their first request, and the names gone after it, so no request
     * of theirs is identified once their meters are gone.
     */
    interface Listener {
        /** Before the new set is visible: the tenants it adds. */
        default void adding(List<Tenant> added) {
        }

        /** After the new set is visible: the names it no longer has. */
        default void removed(List<String> removed) {
        }
    }

    private Tenants(Path file, String clusterToken, String json, LongSupplier nanos) {
        this.file = file;
        this.nanos = nanos;
        String token = BearerToken.of(clusterToken) == null ? null : clusterToken.strip(); // as BearerToken reads it
        this.clusterTokenDigest = token == null ? null : sha256(token);
        this.saltKey = token == null ? randomKey() : hmac(token.getBytes(StandardCharsets.UTF_8), "kvferry router tenant cache_salt v1");
        List<Tenant> first;
        try {
            first = parse(json, saltKey, clusterTokenDigest).tenants();
        } catch (IllegalArgumentException e) {
            throw file == null ? e : named(file, e);
        }
        synchronized (this) {
            current = adopt(first);
        }
    }

    /**
     * The tenants of {@code file}, checked whole: an {@link IllegalArgumentException} whose message names the file, the
     * tenant and the field at fault. {@code clusterToken}: the engines' token (no key may equal it), null for none.
     */
    public static Tenants open(Path file, String clusterToken) throws IOException {
        return open(file, clusterToken, System::nanoTime);
    }

    /** As {@link #open(Path, String)}, its rate buckets read on {@code nanos} (tests: a clock of their own). */
    static Tenants open(Path file, String clusterToken, LongSupplier nanos) throws IOException {
        FileTime t;
        try {
            t = Files.getLastModifiedTime(file); // before the read: a change made while it is read is seen at the next check
        } catch (NoSuchFileException e) {
            throw new IllegalArgumentException("--tenants-file " + file + " does not exist", e);
        }
        Tenants ts = new Tenants(file, clusterToken, read(file), nanos);
        synchronized (ts) {
            ts.seen = t;
        }
        return ts;
    }

    /** Tenants from {@code json} (no file: never reloaded); tests. */
    static Tenants of(String json, String clusterToken) {
        return of(json, clusterToken, System::nanoTime);
    }

    /** As {@link #of(String, String)}, its rate buckets read on {@code nanos} (tests: a clock of their own). */
    static Tenants of(String json, String clusterToken, LongSupplier nanos) {
        return new Tenants(null, clusterToken, json, nanos);
    }

    /**
     * Why {@code file} should not be left as it is, or null: it holds every tenant's key, so group or other read
     * permission lets local users act as any tenant. Null where the file system has no POSIX permissions.
     */
    public static String permissionWarning(Path file) {
        return SecretFiles.permissionWarning("--tenants-file", file, "every tenant's key");
    }

    private static String read(Path file) throws IOException {
        String what = "--tenants-file " + file;
        if (Files.isDirectory(file)) throw new IllegalArgumentException(what + " is a directory, not a file");
        try {
            return Files.readString(file);
        } catch (NoSuchFileException e) {
            throw new IllegalArgumentException(what + " does not exist", e);
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException(what + " is not UTF-8 text", e);
        } catch (AccessDeniedException e) {
            throw new IllegalArgumentException(what + " is not readable (permission denied)", e);
        }
    }

    /**
     * Checks a tenants file's text: {@code {"tenants": [{"name", "key", "max_concurrent_requests", "requests_per_minute",
     * "tokens_per_minute", "cache_salt"}, …]}}, at least one tenant; names {@link #NAME}, unique; keys at least
     * {@link #MIN_KEY_CHARS} visible ASCII characters, unique, not the cluster token; {@code max_concurrent_requests} absent
     * (no limit) or at least 1; {@code requests_per_minute}, {@code tokens_per_minute} absent (no limit) or 1 to
     * {@link RateBucket#MAX_PER_MINUTE}; {@code cache_salt}
     * {@code "isolated"} (default) or {@code "shared"}; any other field refused.
     */
    static Parsed parse(String json, byte[] saltKey, byte[] clusterTokenDigest) {
        JsonNode root;
        try {
            root = Http.JSON.readTree(json);
        } catch (JsonProcessingException e) {
            // The parser quotes a token it cannot read: a key written without its quotes would be logged (at start, at each re-read).
            String why = UNREAD_TOKEN.matcher(String.valueOf(e.getOriginalMessage())).replaceAll("Unrecognized token (not shown: it may be a key)");
            throw new IllegalArgumentException("is not valid JSON: " + why
                    + (e.getLocation() != null ? " (line " + e.getLocation().getLineNr() + ", column " + e.getLocation().getColumnNr() + ")" : ""));
        }
        if (root == null || !root.isObject()) throw new IllegalArgumentException("must be a JSON object {\"tenants\": [...]}");
        for (Iterator<String> it = root.fieldNames(); it.hasNext(); ) {
            String f = it.next();
            if (!f.equals("tenants")) throw new IllegalArgumentException("has an unknown field '" + f + "' (only \"tenants\")");
        }
        JsonNode list = root.get("tenants");
        if (list == null || !list.isArray() || list.isEmpty()) {
            throw new IllegalArgumentException("tenants must be a non-empty array of {\"name\", \"key\", ...}");
        }
        if (list.size() > MAX_TENANTS) throw new IllegalArgumentException("tenants has " + list.size() + " entries; at most " + MAX_TENANTS);
        List<Tenant> out = new ArrayList<>();
        Map<String, Integer> names = new HashMap<>();
        Map<String, String> digests = new HashMap<>(); // hex digest -> tenant name
        for (int i = 0; i < list.size(); i++) {
            JsonNode t = list.get(i);
            String at = "tenants[" + i + "]";
            if (!t.isObject()) throw new IllegalArgumentException(at + " must be an object {\"name\", \"key\", ...}");
            JsonNode n = t.get("name");
            if (n == null || !n.isTextual() || !NAME.matcher(n.textValue()).matches()) {
                throw new IllegalArgumentException(at + ".name must be 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit, got " + (n == null ? "nothing" : n));
            }
            String name = n.textValue();
            at = at + " (" + name + ")";
            Integer before = names.putIfAbsent(name, i);
            if (before != null) throw new IllegalArgumentException(at + ".name is tenants[" + before + "]'s too: names must be unique");
            for (Iterator<String> it = t.fieldNames(); it.hasNext(); ) {
                String f = it.next();
                if (!FIELDS.contains(f)) {
                    throw new IllegalArgumentException(at + " has an unknown field '" + f
                            + "' (name, key, max_concurrent_requests, requests_per_minute, tokens_per_minute, cache_salt)");
                }
            }
            JsonNode k = t.get("key");
            if (k == null || !k.isTextual()) throw new IllegalArgumentException(at + ".key must be a string (the tenant's bearer key)");
            String key = k.textValue();
            if (key.length() < MIN_KEY_CHARS) {
                throw new IllegalArgumentException(at + ".key has " + key.length() + " characters; at least " + MIN_KEY_CHARS + " are needed");
            }
            if (!key.chars().allMatch(c -> c > 0x20 && c < 0x7f)) {
                throw new IllegalArgumentException(at + ".key must be visible ASCII characters only (no spaces): an Authorization header carries it");
            }
            byte[] d = sha256(key);
            if (clusterTokenDigest != null && MessageDigest.isEqual(d, clusterTokenDigest)) {
                throw new IllegalArgumentException(at + ".key is the cluster token: the tenant would hold the token that lets a caller "
                        + "abort any room on the engines and register with the bootstrap registry");
            }
            String other = digests.putIfAbsent(HexFormat.of().formatHex(d), name);
            if (other != null) throw new IllegalArgumentException(at + ".key is " + other + "'s too: keys must be unique");
            JsonNode m = t.get("max_concurrent_requests");
            int limit = 0;
            if (m != null && !m.isNull()) {
                if (!m.isIntegralNumber() || !m.canConvertToInt() || m.intValue() < 1) {
                    throw new IllegalArgumentException(at + ".max_concurrent_requests must be a whole number of at least 1 (absent: no limit), got " + m);
                }
                limit = m.intValue();
            }
            int rpm = perMinute(t, "requests_per_minute", at);
            int tpm = perMinute(t, "tokens_per_minute", at);
            JsonNode s = t.get("cache_salt");
            CacheSalt salt = CacheSalt.ISOLATED;
            if (s != null && !s.isNull()) {
                if (s.isTextual() && s.textValue().equals("isolated")) salt = CacheSalt.ISOLATED;
                else if (s.isTextual() && s.textValue().equals("shared")) salt = CacheSalt.SHARED;
                else throw new IllegalArgumentException(at + ".cache_salt must be \"isolated\" (the default) or \"shared\", got " + s);
            }
            out.add(new Tenant(name, key, limit, rpm, tpm, salt, saltKey));
        }
        return new Parsed(List.copyOf(out));
    }

    private static final List<String> FIELDS = List.of("name", "key", "max_concurrent_requests", "requests_per_minute", "tokens_per_minute",
            "cache_salt");

    /** A tenant's per-minute limit {@code field}: 0 when absent (or null), else a whole number from 1 to {@link RateBucket#MAX_PER_MINUTE}. */
    private static int perMinute(JsonNode t, String field, String at) {
        JsonNode m = t.get(field);
        if (m == null || m.isNull()) return 0;
        if (!m.isIntegralNumber() || !m.canConvertToInt() || m.intValue() < 1 || m.intValue() > RateBucket.MAX_PER_MINUTE) {
            throw new IllegalArgumentException(at + "." + field + " must be a whole number from 1 to " + RateBucket.MAX_PER_MINUTE
                    + " (absent: no limit), got " + m);
        }
        return m.intValue();
    }

    /**
     * Gives {@code fresh}'s tenants their slots (kept by name, resized) and drops the slots of names gone. A tenant without
     * a limit has slots too ({@link #UNLIMITED} of them): its count goes on, so a limit a later reload sets counts the
     * requests under way.
     */
    private List<Tenant> adopt(List<Tenant> fresh) {
        Map<String, Slots> kept = new LinkedHashMap<>();
        for (Tenant t : fresh) {
            int limit = t.maxConcurrent == 0 ? UNLIMITED : t.maxConcurrent;
            Slots s = slotsByName.get(t.name);
            if (s == null) s = new Slots(limit);
            else s.resize(limit);
            t.slots = s;
            kept.put(t.name, s);
            t.requests = bucket(requestBuckets, t.name, t.requestsPerMinute);
            t.tokens = bucket(tokenBuckets, t.name, t.tokensPerMinute);
        }
        slotsByName.keySet().retainAll(kept.keySet());
        slotsByName.putAll(kept);
        requestBuckets.keySet().retainAll(kept.keySet());
        tokenBuckets.keySet().retainAll(kept.keySet());
        return fresh;
    }

    /**
     * Tenant {@code name}'s bucket of {@code buckets} for {@code limit} (0: none, and any it had is dropped: a limit set again
     * later starts full): the one it had, at the new limit (its state kept: {@link RateBucket}), or a new full one. A tenant
     * gone from the file loses its buckets with its slots ({@link #adopt}).
     */
    private RateBucket bucket(Map<String, RateBucket> buckets, String name, int limit) {
        if (limit == 0) {
            buckets.remove(name);
            return null;
        }
        RateBucket b = buckets.get(name);
        if (b == null) buckets.put(name, b = new RateBucket(limit, nanos));
        else b.limit(limit);
        return b;
    }

    /** Requests of tenant {@code name} waiting for one of its slots now (0: none, or no limit). */
    int waiting(String name) {
        Slots s = slotsByName.get(name);
        return s == null ? 0 : s.getQueueLength();
    }

    /** Requests of tenant {@code name} holding one of its slots now (with a limit or without). */
    int inFlight(String name) {
        Slots s = slotsByName.get(name);
        return s == null ? 0 : s.inFlight();
    }

    /** The tenants now. */
    public List<Tenant> list() {
        return current;
    }

    void listener(Listener l) {
        this.listener = l;
    }

    /**
     * The tenant whose key {@code authorization} (an {@code Authorization} header value, or null) carries, or null. Every
     * tenant's digest is compared, whatever matched: the time taken says nothing of which key matched or how far it got.
     */
    Tenant identify(String authorization) {
        String key = bearer(authorization);
        if (key == null) return null;
        byte[] d = sha256(key);
        Tenant found = null;
        for (Tenant t : current) {
            boolean eq = MessageDigest.isEqual(d, t.keyDigest);
            if (eq && found == null) found = t;
        }
        return found;
    }

    /** The credential of a {@code Bearer} header value, or null. */
    private static String bearer(String authorization) {
        if (authorization == null) return null;
        String h = authorization.strip();
        int sp = 0;
        while (sp < h.length() && !Character.isWhitespace(h.charAt(sp))) sp++;
        if (sp == 0 || sp == h.length() || !h.substring(0, sp).equalsIgnoreCase("Bearer")) return null;
        String token = h.substring(sp).strip();
        return token.isEmpty() ? null : token;
    }

    /**
     * Re-reads the file if its modification time changed since it was last read: a valid new set replaces the old one
     * (tenants kept by name keep their counts; a new limit applies to requests admitted from now); an invalid one is
     * logged (once), the old set kept, and read again at each check until it is valid (one caught half written may be
     * whole under the same modification time). Runs on the router's health thread (one at a time).
     */
    synchronized void reloadIfChanged() {
        try {
            reload();
        } catch (RuntimeException e) { // and it runs again at the next check: a throw would end the health thread's schedule of it
            log.warn("--tenants-file {}: re-reading it failed; keeping the {} tenants read before", file, current.size(), e);
        }
    }

    private void reload() {
        if (file == null) return;
        FileTime t;
        try {
            t = Files.getLastModifiedTime(file);
        } catch (IOException e) {
            if (seen != null) log.warn("--tenants-file {}: cannot read its modification time ({}); keeping the {} tenants read before",
                    file, e.toString(), current.size());
            seen = null; // logged once until it is back
            return;
        }
        if (t.equals(seen)) return;
        List<Tenant> fresh;
        try {
            String json = read(file);
            try {
                fresh = parse(json, saltKey, clusterTokenDigest).tenants();
            } catch (IllegalArgumentException e) {
                throw named(file, e);
            }
        } catch (IllegalArgumentException | IOException e) {
            // Not marked seen: read again at the next check. A file caught half written (its writer truncated it, the rest
            // comes within the clock's tick) keeps its modification time when whole, and would never be read whole.
            String why = e instanceof IOException ? "--tenants-file " + file + ": cannot read it: " + e : e.getMessage();
            if (!why.equals(failed)) log.warn("{}; keeping the {} tenants read before", why, current.size()); // once per fault
            failed = why;
            return;
        }
        seen = t;
        failed = null;
        String perm = permissionWarning(file);
        if (perm != null) log.warn(perm);
        List<Tenant> before = current;
        List<Tenant> added = new ArrayList<>();
        List<String> removed = new ArrayList<>();
        for (Tenant f : fresh) if (before.stream().noneMatch(b -> b.name.equals(f.name))) added.add(f);
        for (Tenant b : before) if (fresh.stream().noneMatch(f -> f.name.equals(b.name))) removed.add(b.name);
        List<Tenant> adopted = adopt(fresh);
        // A new tenant's meters before its key is identified (a request in between missed its running gauge and was
        // counted under "-"); a gone one's after its key no longer is.
        listener.adding(added);
        current = adopted;
        listener.removed(removed);
        log.info("--tenants-file {} re-read: {} tenants ({} new, {} gone)", file, fresh.size(), added.size(), removed.size());
    }

    /** A tenant's admission: true once it holds one of its slots (always, without a limit), false after {@code nanos}. */
    static boolean admit(Tenant t, long nanos) throws InterruptedException {
        return t.slots == null || t.slots.tryAcquire(Math.max(nanos, 0), TimeUnit.NANOSECONDS);
    }

    static void release(Tenant t) {
        if (t.slots != null) t.slots.release();
    }

    /** Wraps a problem with a file's content in a message naming the file. */
    static IllegalArgumentException named(Path file, IllegalArgumentException e) {
        return new IllegalArgumentException("--tenants-file " + file + " " + e.getMessage(), e);
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required of every JDK", e);
        }
    }

    private static byte[] randomKey() {
        byte[] k = new byte[32];
        new SecureRandom().nextBytes(k);
        return k;
    }

    private static byte[] hmac(byte[] key, String data) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is required of every JDK", e);
        }
    }

    private static String hmacHex(byte[] key, String data) {
        return HexFormat.of().formatHex(hmac(key, data));
    }
}
