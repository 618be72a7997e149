package io.kvferry.transport;

import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The checks every one-sided transport shares, without any transport. */
class RemoteBuffersTest {
    /** Two KV buffers of 4 pages × 256 bytes, one aux buffer, one state component with one tensor. */
    private static MemoryDescriptor shape() {
        return new MemoryDescriptor(new long[] {1024, 1024}, new long[] {256, 256}, new int[] {0, 1}, new long[] {64},
                new long[] {8}, List.of(new MemoryDescriptor.StateDescriptor("mamba", new long[] {32}, new long[] {16})));
    }

    private static RemoteBuffers offered() throws IOException {
        RemoteBuffers.Builder b = RemoteBuffers.builder(shape(), "decode-1");
        assertEquals(0, b.add(Region.AUX, 0, 0, 64));
        assertEquals(1, b.add(Region.KV, 0, 1, 1024));
        assertEquals(2, b.add(Region.KV, 0, 0, 1024));
        assertEquals(3, b.add(Region.STATE, 0, 0, 32));
        return b.build();
    }

    @Test
    void entriesFollowTheOfferOrder() throws IOException {
        RemoteBuffers r = offered();
        assertEquals(4, r.size());
        assertEquals(2, r.entry(Region.KV, 0, 0));
        assertEquals(1, r.entry(Region.KV, 0, 1));
        assertEquals(0, r.entry(Region.AUX, 0, 0));
        assertEquals(3, r.entry(Region.STATE, 0, 0));
        assertEquals(-1, r.entry(Region.KV, 0, 2));
        assertEquals(-1, r.entry(Region.KV, 1, 0));
        assertEquals(-1, r.entry(Region.STATE, 1, 0));
        assertEquals(-1, r.entry(Region.AUX, 0, -1));
        assertEquals(1024, r.length(1));
    }

    @Test
    void anOfferThatContradictsHelloIsRefusedNamingTheBuffer() {
        RemoteBuffers.Builder undeclared = RemoteBuffers.builder(shape(), "d");
        assertTrue(assertThrows(RemoteBuffers.OfferMismatch.class, () -> undeclared.add(Region.KV, 0, 2, 1024)).getMessage()
                .contains("names KV buffer 0/2, which the decode's HELLO does not declare"));
        RemoteBuffers.Builder wrongLength = RemoteBuffers.builder(shape(), "d");
        assertTrue(assertThrows(RemoteBuffers.OfferMismatch.class, () -> wrongLength.add(Region.KV, 0, 0, 1 << 30)).getMessage()
                .contains("gives KV buffer 0/0 1073741824 bytes but HELLO declares 1024"));
        RemoteBuffers.Builder twice = RemoteBuffers.builder(shape(), "d");
        assertThrows(RemoteBuffers.OfferMismatch.class, () -> {
            twice.add(Region.AUX, 0, 0, 64);
            twice.add(Region.AUX, 0, 0, 64);
        });
        RemoteBuffers.Builder missing = RemoteBuffers.builder(shape(), "d");
        assertTrue(assertThrows(RemoteBuffers.OfferMismatch.class, () -> {
            missing.add(Region.KV, 0, 0, 1024);
            missing.build();
        }).getMessage().contains("lacks KV buffer 1"));
        RemoteBuffers.Builder negative = RemoteBuffers.builder(shape(), "d");
        assertThrows(RemoteBuffers.OfferMismatch.class, () -> negative.add(Region.STATE, -1, 0, 32));
    }

    @Test
    void everyOpOfAPlanInsideThePoolPassesAndOneBeyondItFailsNamingIt() throws IOException {
        RemoteBuffers r = offered();
        CopyPlan inside = TransferPlanner.planKv(new int[] {0, 1}, new int[] {2, 3}, new long[] {256, 256});
        AtomicInteger passed = new AtomicInteger();
        for (int op = 0; op < inside.size(); op++) {
            int e = r.checkDestination(7, inside, op);
            assertEquals(r.entry(Region.KV, 0, inside.dstBuffer(op)), e);
            passed.incrementAndGet();
        }
        assertEquals(inside.size(), passed.get());
        CopyPlan beyond = TransferPlanner.planKv(new int[] {0}, new int[] {4}, new long[] {256, 256});
        IOException e = assertThrows(IOException.class, () -> r.checkDestination(7, beyond, 0));
        assertTrue(e.getMessage().contains("room 7: write [1024, +256) is outside KV buffer 0/0 of 1024 bytes at decode-1"),
                e.getMessage());
        CopyPlan noSuchBuffer = TransferPlanner.planKv(new int[] {0}, new int[] {0}, new long[] {256, 256}, new int[] {5, 6});
        assertTrue(assertThrows(IOException.class, () -> r.checkDestination(7, noSuchBuffer, 0)).getMessage()
                .contains("decode decode-1 has no KV buffer 0/5"));
    }
}
