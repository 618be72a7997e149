package io.kvferry.registry;

import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;

/** The one mapper of this package: strict on what it parses, lenient about keys it does not know. */
final class Json {
    private Json() {}

    /**
     * Duplicate keys and trailing garbage are rejected because a registry that silently picks one of
     * two values would store something the sender may not have meant. Unknown keys are ignored so that
     * newer SGLang fields do not break older peers.
     */
    static final JsonMapper MAPPER = JsonMapper.builder()
            .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
            .build();
}
