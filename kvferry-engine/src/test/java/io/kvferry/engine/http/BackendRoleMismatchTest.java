package io.kvferry.engine.http;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;

/** A backend whose /health names the other role is out of rotation, and the reason quotes its role escaped (it is the backend's text). */
class BackendRoleMismatchTest {
    @Test
    void aWrongRoleIsNamedAndItsControlCharactersEscaped() throws Exception {
        Backend decode = new Backend("http://127.0.0.1:1", false, null);
        assertNull(Backends.roleMismatch(decode, Http.JSON.readTree("{\"role\":\"decode\"}")));
        assertNull(Backends.roleMismatch(decode, Http.JSON.readTree("{}")), "an engine that names no role is taken at its word");
        assertEquals("its /health says it is a prefill engine, listed as a decode",
                Backends.roleMismatch(decode, Http.JSON.readTree("{\"role\":\"prefill\"}")));
        String forged = Backends.roleMismatch(decode, Http.JSON.readTree("{\"role\":\"x\\n[main] WARN io.kvferry.Forged - line\"}"));
        assertFalse(forged.contains("\n"), "a newline in the role would forge a line in the router's log: " + forged);
        assertEquals("its /health says it is a x\\n[main] WARN io.kvferry.Forged - line engine, listed as a decode", forged);
    }
}
