package io.kvferry.engine.http;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.CharRange;
import net.jqwik.api.constraints.Chars;
import net.jqwik.api.constraints.StringLength;
import org.junit.jupiter.api.Test;

import java.util.HashSet;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A request's id ({@link RequestId}): the rule a given one must meet, and the ids the router makes. */
class RequestIdTest {
    @Test
    void commonIdsAreTaken() {
        for (String id : new String[]{"0f8fad5b-d9cb-469f-a165-70867728950e", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "dGhpcyBpcyBiYXNlNjQ=",
                "my-app/worker-7:req.42", "a", "user@tenant~1+2", "x".repeat(128)}) {
            assertTrue(RequestId.valid(id), id);
            assertSame(id, RequestId.orNew(id, "X-Request-Id"));
        }
    }

    @Test
    void idsWithSpacesControlCharactersOrPastTheLengthAreRefusedNamingTheField() {
        for (String id : new String[]{"", "has space", "line\nbreak", "tab\t", "nul\u0000", "x".repeat(129), "quote\"", "é", "semi;colon"}) {
            assertFalse(RequestId.valid(id), id);
            Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> RequestId.orNew(id, "rid[2]"), id);
            assertEquals("rid[2]", e.param);
            assertTrue(e.getMessage().contains("1 to 128 characters"), e.getMessage());
            assertTrue(e.getMessage().chars().noneMatch(c -> c < 0x20 || c == 0x7f), "the message holds no control character: " + e.getMessage());
        }
        assertFalse(RequestId.valid(null));
    }

    @Test
    void aMissingIdIsMadeAs128RandomBitsInHexDifferentEachTime() {
        Set<String> seen = new HashSet<>();
        for (int i = 0; i < 1000; i++) {
            String id = RequestId.orNew(null, "X-Request-Id");
            assertTrue(id.matches("[0-9a-f]{32}"), id);
            assertTrue(RequestId.valid(id), id);
            assertTrue(seen.add(id), "made twice: " + id);
        }
        assertNotEquals(RequestId.generate(), RequestId.generate());
    }

    /** Any string of the rule's characters of 1 to 128 is an id, as it is. */
    @Property(seed = "20261207", tries = 300)
    void everyStringOfTheAlphabetIsTaken(@ForAll @StringLength(min = 1, max = 128) @CharRange(from = 'a', to = 'z') @CharRange(from = 'A', to = 'Z')
                                         @CharRange(from = '0', to = '9') @Chars({'.', '_', '~', ':', '@', '+', '=', '/', '-'}) String id) {
        assertTrue(RequestId.valid(id), id);
        assertSame(id, RequestId.orNew(id, "X-Request-Id"));
    }

    /** Any string with a character outside the rule is refused, wherever that character is. */
    @Property(seed = "20261207", tries = 300)
    void aStringWithAnyOtherCharacterIsRefused(@ForAll @StringLength(max = 60) @CharRange(from = 'a', to = 'z') String before,
                                               @ForAll char bad, @ForAll @StringLength(max = 60) @CharRange(from = '0', to = '9') String after) {
        boolean allowed = Character.isLetterOrDigit(bad) && bad < 128 || "._~:@+=/-".indexOf(bad) >= 0;
        String id = before + bad + after;
        assertEquals(allowed, RequestId.valid(id), id);
        if (!allowed) assertThrows(Http.BadRequest.class, () -> RequestId.check(id, "X-Request-Id"));
    }
}
