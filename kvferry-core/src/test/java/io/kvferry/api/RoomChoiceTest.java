package io.kvferry.api;

import org.junit.jupiter.api.Test;

import java.util.stream.LongStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RoomChoiceTest {
    @Test
    void choosesAboutTheAskedFractionOfRooms() {
        for (double p : new double[] {0.05, 0.5, 0.9}) {
            long chosen = LongStream.rangeClosed(1, 100_000).filter(room -> RoomChoice.chosen(room, 7, p)).count();
            assertEquals(p * 100_000, chosen, 1_000, "p=" + p);
        }
    }

    @Test
    void theChoiceIsAFunctionOfRoomAndSalt() {
        long sameAnswers = LongStream.rangeClosed(1, 10_000)
                .filter(room -> RoomChoice.chosen(room, 1, 0.5) == RoomChoice.chosen(room, 1, 0.5)).count();
        assertEquals(10_000, sameAnswers);
        long agreeAcrossSalts = LongStream.rangeClosed(1, 10_000)
                .filter(room -> RoomChoice.chosen(room, 1, 0.5) == RoomChoice.chosen(room, 2, 0.5)).count();
        assertTrue(agreeAcrossSalts > 4_000 && agreeAcrossSalts < 6_000, "another salt picks other rooms: " + agreeAcrossSalts);
    }

    @Test
    void zeroChoosesNoneAndOneChoosesAll() {
        for (long room : new long[] {1, 42, Long.MAX_VALUE, -1}) {
            assertFalse(RoomChoice.chosen(room, 3, 0));
            assertTrue(RoomChoice.chosen(room, 3, 1));
        }
    }
}
