package io.kvferry.engine.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.engine.model.ToolCalls;

import java.util.ArrayList;
import java.util.HashSet;
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
 *
 * <p>Tool calling's history ({@link ChatTools}): an assistant message's {@code tool_calls} (its content then null,
 * absent or text before them) is the text the model would have written for them ({@link ToolCalls#render}: each
 * {@code <tool_call>{"name": …, "arguments": …}</tool_call>}, joined by {@code "\n"}, its arguments compact, or as sent
 * where they are not a JSON object's text: a cut call's); a
 * {@code tool} message's content (the tool's result) is text like any other, its {@code tool_call_id} one of an earlier
 * assistant message's calls. Legacy function calling (role {@code function}, a message's {@code function_call}) is
 * refused with what to send instead.
 */
final class ChatPrompt {
    /** The roles a message may have: OpenAI's, less the legacy {@code function} (send {@code tool}). */
    static final Set<String> ROLES = Set.of("system", "developer", "user", "assistant", "tool");
    /** What joins two messages' contents (and two text parts of one). */
    static final String SEPARATOR = "\n";

    private ChatPrompt() {
    }

    /** The prompt of {@code messages}, or a 400 naming the first field at fault. */
    static String of(JsonNode messages) {
        if (messages == null || !messages.isArray()) throw new Http.BadRequest("messages", "messages must be an array of messages, got " + messages);
        if (messages.isEmpty()) throw new Http.BadRequest("messages", "messages must hold at least one message");
        StringBuilder prompt = new StringBuilder();
        Set<String> callIds = new HashSet<>();
        for (int i = 0; i < messages.size(); i++) {
            String at = "messages[" + i + "]";
            JsonNode m = messages.get(i);
            if (!m.isObject()) throw new Http.BadRequest(at, at + " must be an object with role and content, got " + m);
            JsonNode role = m.get("role");
            if (role != null && "function".equals(role.asText(null)) && role.isTextual()) {
                throw new Http.BadRequest(at + ".role", at + ".role function (legacy function calling) is not supported: send the tool's result as"
                        + " a message of role tool with its tool_call_id");
            }
            if (role == null || !role.isTextual() || !ROLES.contains(role.textValue())) {
                throw new Http.BadRequest(at + ".role", at + ".role must be one of system, developer, user, assistant, tool, got " + role);
            }
            JsonNode fc = m.get("function_call");
            if (fc != null && !fc.isNull()) {
                throw new Http.BadRequest(at + ".function_call", at + ".function_call (legacy function calling) is not supported: send tool_calls");
            }
            JsonNode audio = m.get("audio");
            if (audio != null && !audio.isNull()) throw new Http.BadRequest(at + ".audio", at + ".audio is not supported (must be null or absent)");
            JsonNode calls = m.get("tool_calls");
            boolean hasCalls = calls != null && !calls.isNull() && !(calls.isArray() && calls.isEmpty());
            if (hasCalls && !role.textValue().equals("assistant")) {
                throw new Http.BadRequest(at + ".tool_calls", at + ".tool_calls: only an assistant message has tool calls");
            }
            if (role.textValue().equals("tool")) {
                JsonNode id = m.get("tool_call_id");
                if (id == null || !id.isTextual() || !callIds.contains(id.textValue())) {
                    throw new Http.BadRequest(at + ".tool_call_id", at + ".tool_call_id must be the id of a call of an earlier assistant message's"
                            + " tool_calls " + callIds.stream().sorted().toList() + ", got " + id);
                }
            }
            if (i > 0) prompt.append(SEPARATOR);
            JsonNode c = m.get("content");
            if (hasCalls) {
                if (c != null && !c.isNull()) {
                    String text = content(c, at + ".content");
                    if (!text.isEmpty()) prompt.append(text).append(SEPARATOR);
                }
                prompt.append(calls(calls, at + ".tool_calls", callIds));
            } else {
                prompt.append(content(c, at + ".content"));
            }
        }
        return prompt.toString();
    }

    /** An assistant message's tool calls as the model's text ({@link ToolCalls#render}); their ids go into {@code ids}. */
    private static String calls(JsonNode calls, String at, Set<String> ids) {
        if (!calls.isArray()) throw new Http.BadRequest(at, at + " must be an array of tool calls, got " + calls);
        List<ToolCalls.Call> out = new ArrayList<>();
        for (int j = 0; j < calls.size(); j++) {
            String cat = at + "[" + j + "]";
            JsonNode call = calls.get(j);
            if (!call.isObject()) throw new Http.BadRequest(cat, cat + " must be {\"id\": …, \"type\": \"function\", \"function\": {…}}, got " + call);
            JsonNode id = call.get("id");
            if (id == null || !id.isTextual() || id.textValue().isEmpty()) throw new Http.BadRequest(cat + ".id", cat + ".id must be a string, got " + id);
            JsonNode type = call.get("type");
            if (type != null && !type.isNull() && !"function".equals(type.asText(null))) {
                throw new Http.BadRequest(cat + ".type", cat + ".type must be function, got " + type);
            }
            JsonNode name = call.path("function").path("name");
            if (!name.isTextual()) throw new Http.BadRequest(cat + ".function.name", cat + ".function.name must be a string, got " + name);
            PromptResolver.refuseLoneSurrogate(name.textValue(), cat + ".function.name"); // the prompt's text, as a content's
            JsonNode args = call.path("function").path("arguments");
            if (!args.isTextual()) {
                throw new Http.BadRequest(cat + ".function.arguments", cat + ".function.arguments must be a string (the arguments' JSON text,"
                        + " as the answer gave them), got " + args);
            }
            String argsText = PromptResolver.refuseLoneSurrogate(args.textValue(), cat + ".function.arguments");
            // A whole call's arguments (a JSON object's text) compact, as the model writes them; any other string (a call cut
            // by max_tokens, finish_reason length: its arguments as generated, not valid JSON) as sent, as OpenAI takes any.
            boolean object;
            try {
                JsonNode parsed = Http.JSON.readTree(argsText);
                object = parsed != null && parsed.isObject();
            } catch (JsonProcessingException e) {
                object = false;
            }
            ids.add(id.textValue());
            out.add(new ToolCalls.Call(name.textValue(), object ? ToolCalls.compact(argsText) : argsText));
        }
        return ToolCalls.render(out);
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
     * request may send instead: legacy function calling (send {@code tools}: {@link ChatTools}), audio, predicted output
     * ({@code response_format} is implemented: {@link StructuredOutputs}). {@code n} and the sampling parameters
     * ({@link RequestParams#rules}) are the router's for both routes.
     */
    private static final Map<String, String> UNSUPPORTED = Map.of(
            "functions", "null, [] or absent: legacy function calling, send tools",
            "function_call", "null, \"none\" or absent: legacy function calling, send tools and tool_choice",
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
            case "functions" -> v.isArray() && v.isEmpty();
            case "function_call" -> v.isTextual() && "none".equals(v.textValue());
            case "modalities" -> v.isArray() && v.size() == 1 && "text".equals(v.get(0).asText(null));
            default -> false;
        };
    }
}
