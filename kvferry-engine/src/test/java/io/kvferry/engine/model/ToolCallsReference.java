package io.kvferry.engine.model;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import static io.kvferry.engine.model.ToolCalls.BETWEEN;
import static io.kvferry.engine.model.ToolCalls.CLOSE;
import static io.kvferry.engine.model.ToolCalls.OPEN;
import static io.kvferry.engine.model.ToolCalls.compact;

/**
 * A whole text of calls read by Jackson's parser, apart from {@link ToolCalls.Scanner}: what the tests hold the scanner
 * (and the language's texts) to. It was the product's reader before the scanner streamed calls; nothing in the product
 * calls it now.
 */
final class ToolCallsReference {
    private static final ObjectMapper JSON = new ObjectMapper();

    private ToolCallsReference() {
    }

    /**
     * The calls {@code text} is, or null where it is not wholly calls: each {@link ToolCalls#OPEN}, a JSON object with exactly a
     * string {@code name} and an object {@code arguments} (in either order, any JSON whitespace), {@link ToolCalls#CLOSE}; calls
     * joined by {@link ToolCalls#BETWEEN}; nothing before, between or after. Text cut anywhere (max_tokens), malformed JSON or any
     * other key is null. Each call's arguments are their text with the whitespace outside strings removed ({@link ToolCalls#compact}).
     */
    static List<ToolCalls.Call> parse(String text) {
        List<ToolCalls.Call> calls = new ArrayList<>();
        int at = 0;
        while (true) {
            if (!text.startsWith(OPEN, at)) return null;
            at += OPEN.length();
            String name = null, args = null;
            int end;
            try (JsonParser p = JSON.getFactory().createParser(text.substring(at))) {
                if (p.nextToken() != JsonToken.START_OBJECT) return null;
                JsonToken t;
                while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
                    String key = p.currentName();
                    JsonToken v = p.nextToken();
                    if (key.equals("name") && name == null && v == JsonToken.VALUE_STRING) {
                        name = p.getText();
                    } else if (key.equals("arguments") && args == null && v == JsonToken.START_OBJECT) {
                        int from = (int) p.currentTokenLocation().getCharOffset();
                        p.skipChildren();
                        args = compact(text.substring(at + from, at + (int) p.currentLocation().getCharOffset()));
                    } else {
                        return null;
                    }
                }
                if (t != JsonToken.END_OBJECT || name == null || args == null) return null;
                end = at + (int) p.currentLocation().getCharOffset();
            } catch (IOException e) {
                return null; // malformed or cut JSON
            }
            if (!text.startsWith(CLOSE, end)) return null;
            calls.add(new ToolCalls.Call(name, args));
            at = end + CLOSE.length();
            if (at == text.length()) return calls;
            if (!text.startsWith(BETWEEN, at)) return null;
            at += BETWEEN.length();
        }
    }
}
