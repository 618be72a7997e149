package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class StopSequencesTest {
    static final ObjectMapper JSON = new ObjectMapper();

    static StopSequences parse(String json) throws Exception {
        return StopSequences.parse(JSON.readTree(json), "stop");
    }

    @Test
    void theEarliestMatchOfAnyStringWinsAndOnlyNewTextIsSearchedAgain() throws Exception {
        StopSequences s = parse("[\"girl\",\"was\"]");
        assertEquals(8, s.firstMatch(new StringBuilder(", there was a little girl"), 0)); // "was", before "girl"
        // A match that straddles the old and the new text is found from newFrom.
        assertEquals(3, s.firstMatch(new StringBuilder("ab girl"), 5));
        assertEquals(-1, s.firstMatch(new StringBuilder("nothing here"), 0));
    }

    /** The match says which string it was (vLLM's stop_reason): the earliest; of two at the same place, the first listed. */
    @Test
    void aMatchNamesItsString() throws Exception {
        StopSequences s = parse("[\"girl\",\"was\",\"wa\"]");
        assertEquals(new StopSequences.Match(8, "was"), s.match(new StringBuilder(", there was a little girl"), 0));
        assertEquals(new StopSequences.Match(8, "wa"), parse("[\"wa\",\"was\"]").match(new StringBuilder(", there was"), 0));
        assertNull(s.match(new StringBuilder("nothing here"), 0));
    }

    @Test
    void aTailThatMayStartAStopStringIsHeldBack() throws Exception {
        StopSequences s = parse("[\"\\nEnd\",\"xyz\"]");
        assertEquals(2, s.heldBack(new StringBuilder("the\nE")));
        assertEquals(1, s.heldBack(new StringBuilder("abcx")));
        assertEquals(0, s.heldBack(new StringBuilder("abc")));
        assertEquals(0, StopSequences.NONE.heldBack(new StringBuilder("abc")));
    }

    @Test
    void badStopValuesAreRefusedNamingStop() {
        for (String bad : new String[]{"5", "[1]", "[\"a\",\"b\",\"c\",\"d\",\"e\"]", "[\"\"]", "{}", "\"" + "x".repeat(StopSequences.MAX_CHARS + 1) + "\""}) {
            Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> parse(bad), bad);
            assertTrue(e.getMessage().startsWith("stop"), e.getMessage());
            // The error's param names the field (docs/SERVING.md: "param names the field at fault where one is"); it was null.
            assertEquals("stop", e.param, bad);
        }
        assertEquals("sampling_params.stop", assertThrows(Http.BadRequest.class,
                () -> StopSequences.parse(JSON.readTree("5"), "sampling_params.stop")).param);
    }
}
