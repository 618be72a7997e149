package io.kvferry.metrics;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LogSafeTest {
    @Test
    void controlCharactersBecomeVisibleEscapes() {
        assertEquals("a\\nb\\rc\\td\\u001b[31m\\u0085\\u2028", LogSafe.text("a\nb\rc\td\u001b[31m\u0085\u2028"));
        assertEquals(null, LogSafe.text(null));
    }

    /** A right-to-left override or isolate would let a peer reorder what an operator reads on the line. */
    @Test
    void bidirectionalControlsBecomeVisibleEscapes() {
        assertEquals("room=\\u202e7 \\u2066ok\\u2069", LogSafe.text("room=\u202e7 \u2066ok\u2069"));
        assertEquals("\"\\u202aa\\u202d\"", LogSafe.value("\u202aa\u202d"));
        assertSame("naïve café ✓", LogSafe.text("naïve café ✓"), "other non-ASCII text is left alone");
    }

    @Test
    void cleanTextIsReturnedAsIs() {
        String s = "kv_cache_dtype mismatch: prefill uses bf16, decode uses fp8";
        assertSame(s, LogSafe.text(s));
    }

    @Test
    void longTextIsClippedSayingItsLength() {
        String t = LogSafe.text("x".repeat(5000));
        assertTrue(t.length() < LogSafe.MAX_CHARS + 32, t.length() + "");
        assertTrue(t.endsWith("…(5000 chars)"), t);
    }

    @Test
    void valuesAreQuotedWhenTheyCouldBreakKeyValueParsing() {
        assertEquals("tcp", LogSafe.value("tcp"));
        assertEquals("-", LogSafe.value(null));
        assertEquals("\"\"", LogSafe.value(""));
        assertEquals("\"a b\"", LogSafe.value("a b"));
        assertEquals("\"k=v\"", LogSafe.value("k=v"));
        assertEquals("\"say \\\"hi\\\" \\\\ bye\"", LogSafe.value("say \"hi\" \\ bye"));
        assertEquals("\"x\\ny\"", LogSafe.value("x\ny"));
    }

    @Property(seed = "20261207")
    void noOutputHoldsALineBreakOrAControlCharacter(@ForAll String s) {
        for (String out : new String[]{LogSafe.text(s), LogSafe.value(s)}) {
            for (int i = 0; i < out.length(); i++) assertFalse(LogSafe.needsEscape(out.charAt(i)), "char " + (int) out.charAt(i) + " in " + out);
        }
    }
}
