package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * vLLM's backend options in {@code structured_outputs} (docs/SERVING.md, "Structured outputs"): {@code disable_fallback} and
 * {@code disable_additional_properties} are booleans, accepted; any other value is a 400 saying the option takes true or
 * false (it used to say the option is not supported at all, which it is).
 */
class StructuredOutputsBackendOptionsTest {
    static final ObjectMapper JSON = new ObjectMapper();

    @Test
    void aBackendOptionThatIsNotABooleanIsRefusedAsOne() throws Exception {
        for (String option : new String[]{"disable_fallback", "disable_additional_properties"}) {
            assertNotNull(StructuredOutputs.openAi(JSON.readTree("{\"structured_outputs\":{\"regex\":\"a+\",\"" + option + "\":true}}")));
            Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> StructuredOutputs.openAi(
                    JSON.readTree("{\"structured_outputs\":{\"regex\":\"a+\",\"" + option + "\":\"yes\"}}")));
            assertEquals("structured_outputs." + option, e.param);
            assertEquals("structured_outputs." + option + " must be true or false, got \"yes\"", e.getMessage());
        }
    }
}
