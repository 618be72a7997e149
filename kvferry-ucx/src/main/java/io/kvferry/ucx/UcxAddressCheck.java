package io.kvferry.ucx;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Checks a peer's UCX worker address and packed remote keys before libucp sees them. libucp parses
 * both without knowing their length and trusts what it reads: a first byte with an unknown version
 * aborts the process ({@code ucs_assertv_always} in {@code ucp_address_unpack_header}), a memory
 * domain index of 64 or more writes past a stack array ({@code ucp_wireup_get_reachable_mds}), a
 * short device or interface address is read past its end by the transport that unpacks it. So
 * kvferry parses them itself first, in the packed format of UCX 1.13 and 1.14 (identical there:
 * {@code src/ucp/wireup/address.c}, {@code src/ucp/core/ucp_rkey.c}), and lets through only what
 * has exactly the structure its own worker produces:
 *
 * <ul>
 *   <li>address: the same format version (v1 or v2) as this worker's, known header flags, a worker
 *       uuid that is not this worker's (else libucp would connect the endpoint to this process itself,
 *       and the peer's remote addresses would name this process's memory), every length inside the
 *       bytes, nothing left over, at most 64 devices and 128 transports, memory domain indices below
 *       64, no endpoint addresses (a worker address has none), performance figures libucp can score
 *       (times of 0 to 1 s, a bandwidth of 1 B/s to 10^15 B/s: a negative score trips an assertion), and
 *       for each transport this UCX also runs (by name checksum) the shape this worker's entry for it
 *       has: device and interface address lengths, capability flags, (v2) segment size and posix's segment
 *       id mode bits (a transport
 *       unknown here is ignored by libucp, never parsed; capabilities it does not have would steer
 *       libucp's lane selection and wireup into states it asserts never happen);
 *   <li>remote key: the memory domain map, the memory type the offer declares, each domain's key
 *       inside the bytes, and for each domain the peer's address reaches through a transport known
 *       here, the key length this process's own keys have for that transport's domain.
 * </ul>
 *
 * What it cannot check is the meaning of the bytes inside those fixed-size fields (an IP address, a
 * port, a pid, a segment id): UCX trusts its peer there, which is why only authenticated peers reach
 * this (README: "Trust"). Not supported: UCX's unified mode ({@code UCX_UNIFIED_MODE=y}, which packs
 * resource indices instead of lengths) and other UCX releases; then ucx links are declined (tcp is
 * used) with the reason logged.
 */
final class UcxAddressCheck {
    /** UCX releases whose packed formats this parser follows. */
    static boolean knownRelease(int major, int minor) {
        return major == 1 && (minor == 13 || minor == 14);
    }

    static final int MAX_DEVICES = 64, MAX_TRANSPORTS = 128, MAX_MD_INDEX = 63, MAX_LANES = 6;
    private static final int V1 = 0, V2 = 1;
    private static final int FLAG_DEBUG_INFO = 1, FLAG_WORKER_UUID = 2, FLAG_CLIENT_ID = 4, FLAG_AM_ONLY = 8;
    private static final int NULL_RESOURCE = 0xFF;
    private static final int LAST = 0x80, HAS_EP_ADDR = 0x40, NUM_PATHS = 0x40, SYS_DEVICE = 0x20, EMPTY_DEV = 0x80;
    private static final int DEVICE_LEN_MASK = 0x1F, IFACE_LEN_MASK = 0x3F, MD_MASK_V1 = 0x1F, MD_MASK_V2 = 0x7F;
    /** v1 flags word above the priority byte: 13 interface flags, 1 event flag, 8 unused bits (the atomics sit above). */
    private static final int V1_CAPS_MASK = (1 << 22) - 1;
    /** v2 flags: 8 capability bits, then atomic32 and atomic64. */
    private static final int V2_CAPS_MASK = 0xFF, V2_KNOWN_FLAGS = 0x3FF;

    /** The address or key is not one libucp may be given; the message names what is wrong (for the local log). */
    static final class Refused extends Exception {
        Refused(String message) {
            super(message);
        }
    }

    /**
     * One transport entry of an address: its name checksum, memory domain, and its shape: what of it
     * is the transport's and not the peer's (address lengths, capability flags, v2's segment size;
     * -1 where the format has none). Two processes of one UCX release and configuration produce the
     * same shapes for a transport; the peer-specific bytes (device and interface addresses, uuid,
     * performance figures, priority, atomics) are not part of it.
     */
    record Transport(int nameChecksum, int mdIndex, int deviceAddressLength, int ifaceAddressLength, int capabilities, int segmentSize,
                     long addressMode) {
        Shape shape() {
            return new Shape(deviceAddressLength, ifaceAddressLength, capabilities, segmentSize, addressMode);
        }
    }

    /**
     * What must be equal to this process's entry for the same transport. {@code addressMode}: for
     * posix, the mode bits of the segment id its interface address starts with (procfs, shm_open, a
     * file in a directory, hugetlb, pid namespace: chosen by configuration, and a mode the receiving
     * side was not configured for trips an assertion in {@code uct_posix_mem_attach_common}); 0 for
     * the others.
     */
    record Shape(int deviceAddressLength, int ifaceAddressLength, int capabilities, int segmentSize, long addressMode) {
        @Override
        public String toString() {
            return deviceAddressLength + "-byte device and " + ifaceAddressLength + "-byte interface address, capabilities 0x"
                    + Integer.toHexString(capabilities) + (segmentSize >= 0 ? ", segment size " + segmentSize : "")
                    + (addressMode != 0 ? ", address mode 0x" + Long.toHexString(addressMode) : "");
        }
    }

    /** UCX's name checksum (CRC-16-CCITT, reflected, as {@code ucs_crc16_string}) of a transport name. */
    static int nameChecksum(String name) {
        int crc = 0xFFFF;
        for (byte c : name.getBytes(StandardCharsets.US_ASCII)) {
            crc ^= c & 0xFF;
            for (int bit = 0; bit < 8; bit++) crc = (crc >>> 1) ^ ((crc & 1) != 0 ? 0x8408 : 0);
        }
        return ~crc & 0xFFFF;
    }

    private static final int POSIX = nameChecksum("posix");
    /** {@code UCT_POSIX_SEG_FLAGS_MASK}: procfs, shm_open, hugetlb, pid namespace (bits 60-63 of the segment id). */
    private static final long POSIX_MODE_MASK = 0xFL << 60;

    /** The parsed structure of a worker address. */
    record Layout(int version, int flags, long uuid, List<Transport> transports) {}

    /** The parsed structure of a packed remote key: domain index → key length, and what follows the keys. */
    record KeyLayout(long mdMap, int memoryType, Map<Integer, Integer> keyLengths, int trailing) {}

    private final Layout own;
    /** Name checksum → the shapes this worker's entries for that transport have (one per device). */
    private final Map<Integer, Set<Shape>> shapes = new HashMap<>();
    /** Name checksum → this process's memory domain index of that transport. */
    private final Map<Integer, Integer> ownMd = new HashMap<>();
    private final KeyLayout ownKey;

    /**
     * @param ownAddress this process's worker address (a template of what this UCX produces)
     * @param ownKey     a remote key this process packed for host memory, or null when it has none
     * @throws Refused when this process's own address does not parse: this UCX's configuration is one
     *                 kvferry cannot check (unified mode), so no peer address can be checked either
     */
    UcxAddressCheck(byte[] ownAddress, byte[] ownKey) throws Refused {
        try {
            this.own = parse(ownAddress);
        } catch (Refused e) {
            throw new Refused("this UCX's own worker address does not have the packed format kvferry checks (" + e.getMessage()
                    + "; UCX_UNIFIED_MODE=y is not supported)");
        }
        for (Transport t : own.transports) {
            shapes.computeIfAbsent(t.nameChecksum, k -> new HashSet<>()).add(t.shape());
            ownMd.putIfAbsent(t.nameChecksum, t.mdIndex);
        }
        this.ownKey = ownKey == null ? null : parseKey(ownKey);
    }

    /** Checks a peer's worker address against this worker's; returns its layout. */
    Layout checkAddress(byte[] peer) throws Refused {
        Layout l = parse(peer);
        if (l.version != own.version) {
            throw new Refused("address format v" + (l.version + 1) + ", this worker uses v" + (own.version + 1)
                    + " (UCX_ADDRESS_VERSION differs between the two sides)");
        }
        if ((l.flags & FLAG_AM_ONLY) != 0) throw new Refused("an active-message-only address, not a worker address");
        if (l.uuid == own.uuid) throw new Refused("the address names this very worker (its uuid)");
        if (l.transports.isEmpty()) throw new Refused("the address lists no transport");
        for (Transport t : l.transports) {
            Set<Shape> known = shapes.get(t.nameChecksum);
            if (known != null && !known.contains(t.shape())) {
                throw new Refused(String.format("transport 0x%04x has a %s; this UCX's has %s", t.nameChecksum, t.shape(), known));
            }
        }
        return l;
    }

    /**
     * Checks a packed remote key of memory type {@code memoryType} (UCS ordinal) offered together with
     * the worker address of layout {@code peer}.
     *
     * @return the key as parsed (its memory domains: where a put lane can land)
     */
    KeyLayout checkKey(byte[] key, int memoryType, Layout peer) throws Refused {
        KeyLayout k = parseKey(key);
        if (k.memoryType != memoryType) throw new Refused("the remote key is of memory type " + k.memoryType + ", the offer says " + memoryType);
        if (ownKey != null && k.trailing != ownKey.trailing) {
            throw new Refused("the remote key has " + k.trailing + " bytes after its domain keys, this UCX's have " + ownKey.trailing);
        }
        for (Transport t : peer.transports) {
            Integer key0 = k.keyLengths.get(t.mdIndex);
            Integer mine = ownMd.get(t.nameChecksum);
            if (key0 == null || mine == null) continue; // no key for that domain, or a transport never used from here
            Integer expected = ownKey == null ? null : ownKey.keyLengths.get(mine);
            if (expected == null) {
                throw new Refused("the remote key has a " + key0 + "-byte key for domain " + t.mdIndex + ", which this process cannot check");
            }
            if (!expected.equals(key0)) {
                throw new Refused("the remote key's key for domain " + t.mdIndex + " is " + key0 + " bytes; this UCX's are " + expected);
            }
        }
        return k;
    }

    // ------------------------------------------------------------------ parsing (UCX 1.13/1.14 layout)

    /** Parses a worker address in the non-unified packed format; every read is bounds-checked. */
    static Layout parse(byte[] a) throws Refused {
        if (a == null || a.length < 2) throw new Refused("an address of " + (a == null ? 0 : a.length) + " bytes");
        Reader r = new Reader(a);
        int header = r.u8("header");
        int version = header & 0x0F, flags;
        if (version == V1) {
            flags = header >>> 4;
        } else if (version == V2) {
            if ((header & 0xF0) != 0) throw new Refused("header byte 0x" + Integer.toHexString(header));
            flags = r.u8("header flags");
        } else {
            throw new Refused("address format version " + version + " (libucp aborts on anything but v1 and v2)");
        }
        if ((flags & ~(FLAG_DEBUG_INFO | FLAG_WORKER_UUID | FLAG_CLIENT_ID | FLAG_AM_ONLY)) != 0) {
            throw new Refused("unknown header flags 0x" + Integer.toHexString(flags));
        }
        long uuid = 0;
        // Worker addresses are unpacked with the uuid flag, so in v1 the uuid is always there.
        if (version == V1 || (flags & FLAG_WORKER_UUID) != 0) uuid = r.u64("worker uuid");
        if ((flags & FLAG_CLIENT_ID) != 0) r.skip(8, "client id");
        if ((flags & FLAG_DEBUG_INFO) != 0) r.skip(r.u8("worker name length"), "worker name");
        List<Transport> transports = new ArrayList<>();
        if (r.peek("device list") == NULL_RESOURCE) {
            r.u8("empty device list");
            r.end();
            return new Layout(version, flags, uuid, transports);
        }
        int devices = 0;
        boolean lastDevice;
        do {
            if (++devices > MAX_DEVICES) throw new Refused("more than " + MAX_DEVICES + " devices");
            int mdByte = r.u8("memory domain index");
            boolean emptyDevice = (mdByte & EMPTY_DEV) != 0;
            int mdIndex = mdByte & (version == V1 ? MD_MASK_V1 : MD_MASK_V2);
            if (version == V2 && mdIndex == MD_MASK_V2) mdIndex = r.u8("extended memory domain index");
            if (mdIndex > MAX_MD_INDEX) throw new Refused("memory domain index " + mdIndex + " (at most " + MAX_MD_INDEX + ")");
            int lenByte = r.u8("device address length");
            lastDevice = (lenByte & LAST) != 0;
            int devLen = lenByte & DEVICE_LEN_MASK;
            if (version == V2 && devLen == DEVICE_LEN_MASK) devLen = r.u8("extended device address length");
            if ((lenByte & NUM_PATHS) != 0 && r.u8("number of paths") == 0) throw new Refused("a device with 0 paths");
            if ((lenByte & SYS_DEVICE) != 0) r.u8("system device");
            r.skip(devLen, "device address");
            boolean lastTransport = emptyDevice;
            while (!lastTransport) {
                if (transports.size() >= MAX_TRANSPORTS) throw new Refused("more than " + MAX_TRANSPORTS + " transports");
                int csum = r.u16("transport name checksum");
                int caps, segSize;
                if (version == V1) {
                    float overhead = r.f32("overhead"), bandwidth = r.f32("bandwidth"), latency = r.f32("latency overhead");
                    int prioCapFlags = r.u32("priority and flags");
                    // libucp scores transports from these (debug builds assert the score is not negative):
                    // times in [0, 1 s], a bandwidth (negative: an older peer's "dedicated - shared") of at least 1 B/s.
                    if (!(overhead >= 0 && overhead <= 1) || !(latency >= 0 && latency <= 1)
                            || !(Math.abs(bandwidth) >= 1 && Math.abs(bandwidth) <= 1e15)) {
                        throw new Refused(String.format("transport 0x%04x has performance figures overhead %s s, bandwidth %s B/s,"
                                + " latency %s s", csum, overhead, bandwidth, latency));
                    }
                    caps = (prioCapFlags >>> 8) & V1_CAPS_MASK; // without the priority (low byte) and the atomics (top bits)
                    segSize = -1;
                } else {
                    r.skip(1, "overhead");
                    if (r.u8("bandwidth") == 0) throw new Refused(String.format("transport 0x%04x has no bandwidth", csum));
                    r.skip(2, "latency and priority");
                    segSize = r.u16("segment size");
                    int ifFlags = r.u16("interface flags");
                    if ((ifFlags & ~V2_KNOWN_FLAGS) != 0) throw new Refused(String.format("transport 0x%04x has unknown flags 0x%x", csum, ifFlags));
                    caps = ifFlags & V2_CAPS_MASK;
                }
                int ifByte = r.u8("interface address length");
                lastTransport = (ifByte & LAST) != 0;
                if ((ifByte & HAS_EP_ADDR) != 0) throw new Refused("an endpoint address inside a worker address");
                int ifLen = ifByte & IFACE_LEN_MASK;
                if (version == V2 && ifLen == IFACE_LEN_MASK) ifLen = r.u8("extended interface address length");
                long mode = 0;
                if (csum == POSIX && ifLen >= 8) {
                    mode = r.u64("posix segment id") & POSIX_MODE_MASK;
                    r.skip(ifLen - 8, "interface address");
                } else {
                    r.skip(ifLen, "interface address");
                }
                transports.add(new Transport(csum, mdIndex, devLen, ifLen, caps, segSize, mode));
            }
        } while (!lastDevice);
        r.end();
        return new Layout(version, flags, uuid, List.copyOf(transports));
    }

    /** Parses a packed remote key: md map (u64), memory type (u8), then per domain in the map a length byte and the key. */
    static KeyLayout parseKey(byte[] k) throws Refused {
        if (k == null) throw new Refused("no remote key");
        Reader r = new Reader(k);
        long mdMap = r.u64("memory domain map");
        int type = r.u8("memory type");
        Map<Integer, Integer> lengths = new HashMap<>();
        for (long m = mdMap; m != 0; m &= m - 1) {
            int md = Long.numberOfTrailingZeros(m);
            int n = r.u8("key length of domain " + md);
            r.skip(n, "key of domain " + md);
            lengths.put(md, n);
        }
        return new KeyLayout(mdMap, type, Map.copyOf(lengths), r.remaining());
    }

    /** Little-endian reads that never pass the end. */
    private static final class Reader {
        private final ByteBuffer b;

        Reader(byte[] bytes) {
            b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        }

        private void need(int n, String what) throws Refused {
            if (n > b.remaining()) {
                throw new Refused(what + " (" + n + " bytes) runs past the end (" + b.remaining() + " bytes left at offset " + b.position() + ")");
            }
        }

        int peek(String what) throws Refused {
            need(1, what);
            return b.get(b.position()) & 0xFF;
        }

        int u8(String what) throws Refused {
            need(1, what);
            return b.get() & 0xFF;
        }

        int u16(String what) throws Refused {
            need(2, what);
            return b.getShort() & 0xFFFF;
        }

        int u32(String what) throws Refused {
            need(4, what);
            return b.getInt();
        }

        float f32(String what) throws Refused {
            need(4, what);
            return b.getFloat();
        }

        long u64(String what) throws Refused {
            need(8, what);
            return b.getLong();
        }

        void skip(int n, String what) throws Refused {
            need(n, what);
            b.position(b.position() + n);
        }

        int remaining() {
            return b.remaining();
        }

        void end() throws Refused {
            if (b.hasRemaining()) throw new Refused(b.remaining() + " bytes after the last device");
        }
    }
}
