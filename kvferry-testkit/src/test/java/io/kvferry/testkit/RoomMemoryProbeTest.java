package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The probe's steps open only when every party arrived, and it sees what the parked rooms hold. */
class RoomMemoryProbeTest {
    @Test
    void measuresWhatEachParkedRoomHoldsOnceEveryPartyArrived() {
        RoomMemoryProbe probe = new RoomMemoryProbe(2, 1000, "both");
        probe.arriveBaseline();
        assertFalse(probe.baselineTaken(), "one of two parties");
        probe.arriveBaseline();
        assertTrue(probe.baselineTaken());
        // Each "room" holds 16 KiB of heap until the measurement is over.
        List<byte[]> rooms = new ArrayList<>();
        for (int i = 0; i < 1000; i++) rooms.add(new byte[16 * 1024]);
        probe.arriveParked();
        assertFalse(probe.measured());
        assertNull(probe.result());
        probe.arriveParked();
        assertTrue(probe.measured());
        RoomMemoryProbe.Result r = probe.result();
        assertEquals(1000, r.rooms());
        assertEquals("both", r.scope());
        assertTrue(r.heapBytesPerRoom() > 15 * 1024 && r.heapBytesPerRoom() < 20 * 1024, "heap per room " + r.heapBytesPerRoom());
        assertEquals(r.heapBytesPerRoom() + r.nativeBytesPerRoom(), r.totalBytesPerRoom());
        assertEquals(1000, rooms.size()); // held until here
    }

    @Test
    void needsPartiesAndRooms() {
        assertThrows(IllegalArgumentException.class, () -> new RoomMemoryProbe(0, 1, "decode"));
        assertThrows(IllegalArgumentException.class, () -> new RoomMemoryProbe(1, 0, "decode"));
    }
}
