package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code /v1/chat/completions}' {@code messages} as the prompt of a model with no chat template, and the chat
 * parameters this engine does not implement.
 *
 * <p>The template: the messages' contents in the order sent, each on its own line (joined by {@code "\n"}), with
 * no role names or markers. The reference model (llama2.c's stories260K) was trained on plain stories and knows no
 * turn format: markers such as {@code "User:"} would be text it never saw, which it would echo or continue into
 * its answer. The order is the client's (a system or developer message sent first stays first), so nothing is moved;
 * an assistant message is text of the story so far, so a client can ask the model to continue it. Content given as
 * text parts is those parts' texts, joined the same way.
 */
final class ChatPrompt {
    /** The roles a message may have: OpenAI's, less {@code tool} and {@code function} (tools are refused). */
    static final Set<String> ROLES = Set.of("system", "developer", "user", "assistant");
    /** What joins two messages' contents (and two text parts of one). */
    static final String SEPARATOR = "\n";

    private ChatPrompt() {
    }

    /** The prompt of {@code messages}, or a 400 naming the first field at fault. */
    static String of(JsonNode messages) {
        if (messages == null || !messages.isArray()) throw new Http.BadRequest("messages", "messages must be an array of messages, got " + messages);
        if (messages.isEmpty()) throw new Http.BadRequest("messages", "messages must hold at least one message");
        StringBuilder prompt = new StringBuilder();
        for (int i = 0; i < messages.size(); i++) {
            String at = "messages[" + i + "]";
            JsonNode m = messages.get(i);
            if (!m.isObject()) throw new Http.BadRequest(at, at + " must be an object with role and content, got " + m);
            JsonNode role = m.get("role");
            if (role == null || !role.isTextual() || !ROLES.contains(role.textValue())) {
                throw new Http.BadRequest(at + ".role", at + ".role must be one of system, developer, user, assistant (tools are not supported), got "
                        + role);
            }
            for (String tooling : List.of("tool_calls", "function_call", "audio")) {
                JsonNode v = m.get(tooling);
                if (v != null && !v.isNull() && !(v.isArray() && v.isEmpty())) {
                    throw new Http.BadRequest(at + "." + tooling, at + "." + tooling + " is not supported (must be null or absent)");
                }
            }
            if (i > 0) prompt.append(SEPARATOR);
            prompt.append(content(m.get("content"), at + ".content"));
        }
        return prompt.toString();
    }

    /** A message's content: a string, or an array of {@code {"type": "text", "text": ...}} parts. */
    private static String content(JsonNode c, String at) {
        if (c != null && c.isTextual()) return PromptResolver.refuseLoneSurrogate(c.textValue(), at);
        if (c == null || !c.isArray()) {
            throw new Http.BadRequest(at, at + " must be a string or an array of text parts, got " + c);
        }
        StringBuilder text = new StringBuilder();
        for (int j = 0; j < c.size(); j++) {
            String partAt = at + "[" + j + "]";
            JsonNode part = c.get(j);
            JsonNode type = part.path("type");
            if (!"text".equals(type.asText(null)) || !type.isTextual()) {
                throw new Http.BadRequest(partAt + ".type", partAt + " must be a text part ({\"type\":\"text\",\"text\":...}); this model reads "
                        + "only text, got type " + (type.isMissingNode() ? "none" : type.toString()));
            }
            JsonNode t = part.get("text");
            if (t == null || !t.isTextual()) throw new Http.BadRequest(partAt + ".text", partAt + ".text must be a string, got " + t);
            if (j > 0) text.append(SEPARATOR);
            text.append(PromptResolver.refuseLoneSurrogate(t.textValue(), partAt + ".text"));
        }
        return text.toString();
    }

    /**
     * Chat parameters that would change the answer and that this engine does not implement, each with what a
     * request may send instead: tools and function calling, audio, predicted output ({@code response_format} is
     * implemented: {@link StructuredOutputs}). {@code n} and the sampling parameters ({@link RequestParams#rules}) are the router's for both routes.
     */
    private static final Map<String, String> UNSUPPORTED = Map.of(
            "tools", "null, [] or absent",
            "tool_choice", "null, \"none\" or absent",
            "functions", "null, [] or absent",
            "function_call", "null, \"none\" or absent",
            "audio", "null or absent",
            "prediction", "null or absent",
            "modalities", "[\"text\"], null or absent");

    /** Adds to {@code refused} each of {@link #UNSUPPORTED} that {@code req} sets to something other than its no-op. */
    static void refuseUnsupported(JsonNode req, RequestParams.Refusals refused) {
        for (String key : UNSUPPORTED.keySet().stream().sorted().toList()) {
            JsonNode v = req.get(key);
            if (v == null || v.isNull() || isNoOp(key, v)) continue;
            refused.add(key, key + " is not supported (must be " + UNSUPPORTED.get(key) + "), got " + v);
        }
    }

    private static boolean isNoOp(String key, JsonNode v) {
        return switch (key) {
            case "tools", "functions" -> v.isArray() && v.isEmpty();
            case "tool_choice", "function_call" -> v.isTextual() && "none".equals(v.textValue());
            case "modalities" -> v.isArray() && v.size() == 1 && "text".equals(v.get(0).asText(null));
            default -> false;
        };
    }
}
