package io.kvferry.api;

import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.Test;

import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RedactedTest {
    private static final String TOKEN = "s3cr3t-cluster-token-value";

    @Test
    void aManagerConfigNeverPrintsItsToken() {
        KVManagerConfig c = KVManagerConfig.builder().attnTp(2, 1).authToken(TOKEN).build();
        String shown = c.toString();
        assertFalse(shown.contains(TOKEN), shown);
        assertTrue(shown.contains("authToken=<set>"), shown);
        assertTrue(shown.contains("attnTpSize=2") && shown.contains("attnTpRank=1"), "the other fields are shown: " + shown);
        String registry = RegistryOptions.defaults(TOKEN).toString();
        assertFalse(registry.contains(TOKEN), registry);
    }

    private record Login(String user, String authToken) {
    }

    @Test
    void namedComponentsShowOnlyWhetherTheyAreSet() {
        assertEquals("Login[user=ann, authToken=<set>]", Redacted.toString(new Login("ann", "x"), Set.of("authToken")));
        assertEquals("Login[user=ann, authToken=<none>]", Redacted.toString(new Login("ann", " "), Set.of("authToken")));
        assertEquals("Login[user=null, authToken=<none>]", Redacted.toString(new Login(null, null), Set.of("authToken")));
        assertThrows(IllegalArgumentException.class, () -> Redacted.toString(new Login("ann", "x"), Set.of("token")),
                "a secret that names no component (renamed) must not let the record print in full");
    }
}
