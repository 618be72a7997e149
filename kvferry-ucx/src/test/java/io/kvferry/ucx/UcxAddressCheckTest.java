package io.kvferry.ucx;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The structural check of UCX worker addresses and remote keys, on addresses and keys UCX 1.13.1
 * produced (captured from JUCX's {@code UcpWorker.getAddress()} and {@code UcpMemory.getRemoteKeyBuffer()}
 * on Debian 12): pure, no UCX needed, never skipped.
 */
class UcxAddressCheckTest {
    /** UCX_TLS=tcp: header v1 + uuid flag, uuid, then tcp on lo (18-byte device address) and on eth0 (6-byte), 2-byte ports. */
    static final byte[] TCP = HexFormat.of().parseHex("2024450c7ec2805d01201201023d1cdc3a8d1cfcb7f9ffffef00000000cf1917b75138539e3e4bd7e0"
            + "37370113230082e7e920860002c0000202cf1917b751389763344bd7e0373700132300829a21");
    /** All transports: self, tcp (lo, eth0), sysv, posix, cma. */
    static final byte[] ALL = HexFormat.of().parseHex("2096a220e50e737d1d2000637577cc2b3200f8d74f00000000004f030088a6db50efb3dab90a2112"
            + "01023d1cdc3a8d1cfcb7f9ffffef00000000cf1917b75138539e3e4bd7e037370113230082dcfb21060002c0000202cf1917b751389763344bd7e03737"
            + "00132300828dd742083d1cdc3a8d1cfc378d5377cc2b32004c3e5077ccab33004f2300882e0007000000000043083d1cdc3a8d1cfc37a7d377cc2b3200"
            + "4c3e5077ccab33004f230088a74100c0070000c024883d1cdc3a8d1cfc37478bbd37063600242e5077ccab330092210084a7410000");
    /** Remote keys of registered host memory: UCX_TLS=tcp (domain 0) and all transports (domains 0, 1, 4: self, tcp, cma); all empty. */
    static final byte[] TCP_KEY = HexFormat.of().parseHex("01000000000000000000");
    static final byte[] ALL_KEY = HexFormat.of().parseHex("130000000000000000000000");
    static final int HOST = 0;

    /** Another process's address: the same transports, another uuid, other ports and addresses. */
    static byte[] peerOf(byte[] own, long uuid) {
        byte[] p = own.clone();
        ByteBuffer.wrap(p).order(ByteOrder.LITTLE_ENDIAN).putLong(1, uuid);
        return p;
    }

    static String refusal(UcxAddressCheck c, byte[] address) {
        return assertThrows(UcxAddressCheck.Refused.class, () -> c.checkAddress(address)).getMessage();
    }

    @Test
    void parsesWhatUcxProduces() throws Exception {
        UcxAddressCheck.Layout tcp = UcxAddressCheck.parse(TCP);
        assertEquals(0, tcp.version());
        assertEquals(2, tcp.transports().size());
        assertEquals(18, tcp.transports().get(0).deviceAddressLength());
        assertEquals(6, tcp.transports().get(1).deviceAddressLength());
        assertEquals(2, tcp.transports().get(1).ifaceAddressLength());
        assertEquals(6, UcxAddressCheck.parse(ALL).transports().size());
        UcxAddressCheck.KeyLayout key = UcxAddressCheck.parseKey(ALL_KEY);
        assertEquals(0x13, key.mdMap());
        assertEquals(0, key.keyLengths().get(1));
        assertEquals(0, key.trailing());
    }

    @Test
    void anotherProcessOfTheSameUcxIsAccepted() throws Exception {
        UcxAddressCheck c = new UcxAddressCheck(TCP, TCP_KEY);
        byte[] peer = peerOf(TCP, 0x1234567890L);
        peer[peer.length - 1] ^= 0x55; // another port
        peer[56] ^= 0x7; // another IPv4 address byte in eth0's device address (52..57)
        UcxAddressCheck.Layout l = c.checkAddress(peer);
        c.checkKey(TCP_KEY, HOST, l);
        UcxAddressCheck all = new UcxAddressCheck(ALL, ALL_KEY);
        all.checkKey(ALL_KEY, HOST, all.checkAddress(peerOf(ALL, 99)));
        // A prefill with tcp only accepts a decode offering more transports: those it does not run are never parsed.
        c.checkKey(ALL_KEY, HOST, c.checkAddress(peerOf(ALL, 99)));
    }

    @Test
    void theProcessesOwnWorkerIsRefused() throws Exception {
        UcxAddressCheck c = new UcxAddressCheck(TCP, TCP_KEY);
        assertTrue(refusal(c, TCP).contains("names this very worker"));
    }

    @Test
    void unknownVersionsThatLibucpWouldAbortOnAreRefused() throws Exception {
        UcxAddressCheck c = new UcxAddressCheck(TCP, TCP_KEY);
        for (int v = 2; v < 16; v++) {
            byte[] a = peerOf(TCP, 7);
            a[0] = (byte) (0x20 | v);
            assertTrue(refusal(c, a).contains("address format version " + v), "version " + v);
        }
        byte[] unknownFlag = peerOf(TCP, 7);
        unknownFlag[0] = 0x01; // v2: the flags are the second byte
        unknownFlag[1] = 0x12;
        assertTrue(refusal(c, unknownFlag).contains("unknown header flags"));
        byte[] amOnly = peerOf(TCP, 7);
        amOnly[0] = (byte) 0xA0; // v1 with the uuid and active-message-only flags
        assertTrue(refusal(c, amOnly).contains("active-message-only"));
    }

    @Test
    void everyTruncationAndAnyTrailingByteIsRefused() throws Exception {
        UcxAddressCheck c = new UcxAddressCheck(ALL, ALL_KEY);
        byte[] peer = peerOf(ALL, 5);
        for (int len = 0; len < peer.length; len++) {
            byte[] cut = Arrays.copyOf(peer, len);
            assertThrows(UcxAddressCheck.Refused.class, () -> c.checkAddress(cut), "length " + len);
        }
        assertTrue(refusal(c, Arrays.copyOf(peer, peer.length + 1)).contains("after the last device"));
    }

    @Test
    void aMemoryDomainIndexPastLibucpsArraysIsRefused() throws Exception {
        // v2 extends the index to a whole byte; libucp's per-domain arrays hold 64.
        byte[] v2 = HexFormat.of().parseHex("0102" + "0102030405060708" + "7f40" + "80" + "cf19" + "0010000000000000" + "82" + "e7e9");
        UcxAddressCheck.Refused e = assertThrows(UcxAddressCheck.Refused.class, () -> UcxAddressCheck.parse(v2));
        assertTrue(e.getMessage().contains("memory domain index 64"), e.getMessage());
        byte[] ok = v2.clone();
        ok[11] = 63;
        assertDoesNotThrow(() -> UcxAddressCheck.parse(ok.clone()));
    }

    @Test
    void transportsWhoseShapeDiffersFromThisUcxsAreRefused() throws Exception {
        UcxAddressCheck c = new UcxAddressCheck(TCP, TCP_KEY);
        byte[] peer = peerOf(TCP, 9);
        // eth0's tcp entry: attributes at 60..75, the interface length byte at 76.
        byte[] caps = peer.clone();
        caps[72 + 1] ^= 0x01; // a capability bit (the flags word starts at 72; its low byte is the priority)
        assertTrue(refusal(c, caps).contains("capabilities"), refusal(c, caps));
        byte[] priority = peer.clone();
        priority[72] ^= 0x01;
        assertDoesNotThrow(() -> c.checkAddress(priority), "the priority is the peer device's own");
        byte[] endpoint = peer.clone();
        endpoint[76] |= 0x40;
        assertTrue(refusal(c, endpoint).contains("endpoint address"));
        ByteBuffer b = ByteBuffer.wrap(peer.clone()).order(ByteOrder.LITTLE_ENDIAN);
        b.putFloat(60, -1e-3f); // a negative overhead: libucp's score would turn negative (a debug-build assertion)
        assertTrue(refusal(c, b.array()).contains("performance figures"));
        b = ByteBuffer.wrap(peer.clone()).order(ByteOrder.LITTLE_ENDIAN);
        b.putFloat(64, Float.NaN);
        assertTrue(refusal(c, b.array()).contains("performance figures"));
    }

    @Test
    void posixSegmentIdsInAModeThisUcxIsNotConfiguredForAreRefused() throws Exception {
        assertEquals(0x19cf, UcxAddressCheck.nameChecksum("tcp"));
        assertEquals(0xd3a7, UcxAddressCheck.nameChecksum("posix"));
        UcxAddressCheck c = new UcxAddressCheck(ALL, ALL_KEY);
        // posix's interface address (174..181) starts with its FIFO's segment id; bits 60-63 say how to attach it.
        // Found by fuzzing: a mode the receiver is not configured for trips uct_posix_mem_attach_common's assertion.
        for (int bit = 4; bit < 8; bit++) {
            byte[] a = peerOf(ALL, 11);
            a[181] ^= (byte) (1 << bit);
            String why = refusal(c, a);
            assertTrue(why.contains("transport 0xd3a7"), why);
        }
        byte[] otherSegment = peerOf(ALL, 11);
        otherSegment[175] ^= 0x5a; // another segment, same mode: the peer's own
        assertDoesNotThrow(() -> c.checkAddress(otherSegment));
    }

    @Test
    void remoteKeysAreCheckedAgainstTheDomainsTheAddressReaches() throws Exception {
        UcxAddressCheck all = new UcxAddressCheck(ALL, ALL_KEY);
        UcxAddressCheck.Layout peer = all.checkAddress(peerOf(ALL, 3));
        UcxAddressCheck.Refused e = assertThrows(UcxAddressCheck.Refused.class, () -> all.checkKey(ALL_KEY, 1, peer));
        assertTrue(e.getMessage().contains("memory type 0, the offer says 1"), e.getMessage());
        for (int len = 0; len < ALL_KEY.length; len++) {
            byte[] cut = Arrays.copyOf(ALL_KEY, len);
            assertThrows(UcxAddressCheck.Refused.class, () -> all.checkKey(cut, HOST, peer), "length " + len);
        }
        // tcp's key (domain 1 in this address) of another length than this UCX packs: libucp unpacks a fixed-size key
        // for each domain the endpoint reaches, so a length other than its own means reading past it or misreading it.
        byte[] otherLength = HexFormat.of().parseHex("1300000000000000" + "00" + "00" + "01ab" + "00");
        e = assertThrows(UcxAddressCheck.Refused.class, () -> all.checkKey(otherLength, HOST, peer));
        assertTrue(e.getMessage().contains("key for domain 1 is 1 bytes; this UCX's are 0"), e.getMessage());
        e = assertThrows(UcxAddressCheck.Refused.class, () -> all.checkKey(Arrays.copyOf(ALL_KEY, ALL_KEY.length + 3), HOST, peer));
        assertTrue(e.getMessage().contains("3 bytes after its domain keys"), e.getMessage());
    }

    @Test
    void randomBytesAreRefusedWithAReasonAndNothingElse() throws Exception {
        UcxAddressCheck c = new UcxAddressCheck(ALL, ALL_KEY);
        Random r = new Random(13);
        for (int i = 0; i < 20000; i++) {
            byte[] a = new byte[r.nextInt(300)];
            r.nextBytes(a);
            UcxAddressCheck.Refused e = assertThrows(UcxAddressCheck.Refused.class, () -> c.checkAddress(a), "sample " + i);
            assertTrue(e.getMessage() != null && !e.getMessage().isEmpty());
            byte[] k = Arrays.copyOf(a, r.nextInt(40));
            try {
                c.checkKey(k, HOST, c.checkAddress(peerOf(ALL, 1)));
            } catch (UcxAddressCheck.Refused expected) {
                assertTrue(expected.getMessage() != null);
            }
        }
    }

    @Test
    void anOwnAddressInAFormatThisCheckDoesNotKnowMakesEveryPeerUncheckable() {
        byte[] unified = Arrays.copyOf(TCP, TCP.length - 3); // e.g. UCX_UNIFIED_MODE=y: lengths are not packed
        UcxAddressCheck.Refused e = assertThrows(UcxAddressCheck.Refused.class, () -> new UcxAddressCheck(unified, TCP_KEY));
        assertTrue(e.getMessage().contains("UCX_UNIFIED_MODE"), e.getMessage());
        assertTrue(UcxAddressCheck.knownRelease(1, 13) && UcxAddressCheck.knownRelease(1, 14));
        assertTrue(!UcxAddressCheck.knownRelease(1, 15) && !UcxAddressCheck.knownRelease(1, 12) && !UcxAddressCheck.knownRelease(2, 13));
    }
}
