package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.ToolCalls;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Pattern;

/**
 * OpenAI's tool calling on {@code /v1/chat/completions} (docs/SERVING.md, "Tool calling"): the request's {@code tools},
 * {@code tool_choice} and {@code parallel_tool_calls} checked (a 400 whose {@code param} names the place,
 * {@code tools[1].function.name}) and made a structured output of kind {@link OutputConstraint.Kind#TOOL_CALLS}
 * ({@link ToolCalls#language}: the model writes the calls under the token mask, each tool's {@code parameters} schema always
 * enforced, {@code strict} or not); and a choice's text made OpenAI's {@code tool_calls}, whole or streamed call by call and
 * argument fragment by fragment ({@link ToolCalls.Scanner}).
 */
final class ChatTools {
    /** A tool's name, as OpenAI allows it. */
    static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-]{1,64}");
    /** A tool without {@code parameters}: its arguments are {@code {}}. */
    static final String NO_PARAMETERS = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

    private ChatTools() {
    }

    /** What {@code tool_choice} asks: {@code auto}, {@code required}, or one named tool. */
    enum Mode { AUTO, REQUIRED, NAMED }

    /** A request's tool calling: its mode, whether several calls may come, and the structured output that writes them. */
    record Tools(Mode mode, boolean parallel, StructuredOutputs.Spec spec) {
        /** The finish reason of an answer that is calls: {@code stop} for a named tool_choice (as OpenAI), else {@code tool_calls}. */
        String finishReason() {
            return mode == Mode.NAMED ? "stop" : "tool_calls";
        }
    }

    /**
     * The request's tool calling, or null where it has none ({@code tools} absent, null or empty, or {@code tool_choice}
     * {@code none}): every fault a 400 naming its place. The spec's {@code param} and {@code root} are {@code tools}:
     * a tool's schema fault names the tool by its index (a named choice's source holds every tool too, so each is checked).
     */
    static Tools of(JsonNode req) {
        boolean parallel = true;
        JsonNode par = req.get("parallel_tool_calls");
        if (par != null && !par.isNull()) {
            if (!par.isBoolean()) throw new Http.BadRequest("parallel_tool_calls", "parallel_tool_calls must be true or false, got " + par);
            parallel = par.booleanValue();
        }
        List<String> names = new ArrayList<>(), schemas = new ArrayList<>();
        JsonNode tools = req.get("tools");
        if (tools != null && !tools.isNull()) {
            if (!tools.isArray()) throw new Http.BadRequest("tools", "tools must be an array of {\"type\": \"function\", \"function\": {…}}, got " + tools);
            if (tools.size() > ToolCalls.MAX_TOOLS) {
                throw new Http.BadRequest("tools", "tools has " + tools.size() + " tools, at most " + ToolCalls.MAX_TOOLS + " (OpenAI's limit)");
            }
            for (int i = 0; i < tools.size(); i++) tool(tools.get(i), "tools[" + i + "]", names, schemas);
        }
        JsonNode choice = req.get("tool_choice");
        Mode mode;
        String named = null;
        if (choice == null || choice.isNull()) {
            mode = names.isEmpty() ? null : Mode.AUTO;
        } else if (choice.isTextual()) {
            mode = switch (choice.textValue()) {
                case "none" -> null;
                case "auto" -> Mode.AUTO; // without tools a 400 below, as OpenAI's and vLLM's
                case "required" -> Mode.REQUIRED;
                default -> throw new Http.BadRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\":"
                        + " {\"name\": …}}, got " + choice);
            };
        } else if (choice.isObject()) {
            if (!"function".equals(choice.path("type").asText(null)) || !choice.path("type").isTextual()) {
                throw new Http.BadRequest("tool_choice.type", "tool_choice.type must be function, got " + choice.path("type"));
            }
            JsonNode name = choice.path("function").path("name");
            if (!name.isTextual()) throw new Http.BadRequest("tool_choice.function.name", "tool_choice.function.name must be a string, got " + name);
            named = name.textValue();
            mode = Mode.NAMED;
        } else {
            throw new Http.BadRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}},"
                    + " got " + choice);
        }
        if (mode == null) return null;
        if (names.isEmpty()) throw new Http.BadRequest("tool_choice", "tool_choice " + choice + " needs tools (none are given)");
        if (mode == Mode.NAMED) {
            int k = names.indexOf(named);
            if (k < 0) {
                throw new Http.BadRequest("tool_choice.function.name", "tool_choice.function.name " + named + " is none of the tools' names "
                        + names);
            }
            // Every tool's schema compiled (OpenAI validates them all), the calls the named tool's alone.
            String source = ToolCalls.source("required", false, names, schemas, named);
            return new Tools(mode, false, new StructuredOutputs.Spec(OutputConstraint.Kind.TOOL_CALLS, source, "tools", "tools"));
        }
        String source = ToolCalls.source(mode == Mode.AUTO ? "auto" : "required", parallel, names, schemas);
        return new Tools(mode, parallel, new StructuredOutputs.Spec(OutputConstraint.Kind.TOOL_CALLS, source, "tools", "tools"));
    }

    /** The fields of a tool's {@code function}, OpenAI's; any other is refused. */
    private static final Set<String> FUNCTION_KEYS = Set.of("name", "description", "parameters", "strict");

    private static void tool(JsonNode t, String at, List<String> names, List<String> schemas) {
        if (t == null || !t.isObject()) throw new Http.BadRequest(at, at + " must be {\"type\": \"function\", \"function\": {…}}, got " + t);
        JsonNode type = t.get("type");
        if (type == null || !type.isTextual() || !type.textValue().equals("function")) {
            throw new Http.BadRequest(at + ".type", at + ".type must be function, got " + type);
        }
        JsonNode f = t.get("function");
        if (f == null || !f.isObject()) throw new Http.BadRequest(at + ".function", at + ".function must be an object with a name, got " + f);
        for (String key : (Iterable<String>) f::fieldNames) {
            // A misspelt "paramters" would make a tool of no arguments, silently: the function's keys are OpenAI's four.
            if (!FUNCTION_KEYS.contains(key)) {
                throw new Http.BadRequest(at + ".function." + key, at + ".function." + key + " is not a function's field (name, description,"
                        + " parameters, strict)");
            }
        }
        JsonNode name = f.get("name");
        if (name == null || !name.isTextual() || !NAME.matcher(name.textValue()).matches()) {
            throw new Http.BadRequest(at + ".function.name", at + ".function.name must be 1 to 64 letters, digits, _ or -, got " + name);
        }
        if (names.contains(name.textValue())) {
            throw new Http.BadRequest(at + ".function.name", at + ".function.name " + name + " is another tool's name too: each must be unique");
        }
        JsonNode description = f.get("description");
        if (description != null && !description.isNull() && !description.isTextual()) {
            throw new Http.BadRequest(at + ".function.description", at + ".function.description must be a string, got " + description);
        }
        JsonNode strict = f.get("strict");
        if (strict != null && !strict.isNull() && !strict.isBoolean()) {
            throw new Http.BadRequest(at + ".function.strict", at + ".function.strict must be true or false, got " + strict);
        }
        JsonNode parameters = f.get("parameters");
        String schema;
        if (parameters == null || parameters.isNull()) {
            schema = NO_PARAMETERS;
        } else {
            String pat = at + ".function.parameters";
            if (!parameters.isObject()) throw new Http.BadRequest(pat, pat + " must be a JSON schema (an object), got " + parameters);
            JsonNode ptype = parameters.get("type");
            if (ptype != null && !(ptype.isTextual() && ptype.textValue().equals("object"))) {
                throw new Http.BadRequest(pat + ".type", pat + ".type must be object (a call's arguments are a JSON object), got " + ptype);
            }
            schema = StructuredOutputs.compact(parameters, pat);
        }
        names.add(name.textValue());
        schemas.add(schema);
    }

    /**
     * Whether a choice's text is answered as calls: tool calling on, and the answer must be calls ({@code required}, a
     * named tool) or (auto) the text starts with {@link ToolCalls#OPEN}; else the text is the answer ({@code content}).
     */
    static boolean isCalls(Tools t, CharSequence text) {
        if (t == null) return false;
        if (t.mode() != Mode.AUTO) return true;
        if (text.length() < ToolCalls.OPEN.length()) return false;
        for (int i = 0; i < ToolCalls.OPEN.length(); i++) {
            if (text.charAt(i) != ToolCalls.OPEN.charAt(i)) return false;
        }
        return true;
    }

    /**
     * The calls a finished choice's text is, read as a stream reads them ({@link ToolCalls.Scanner}), or null where its text
     * is the answer ({@link #isCalls}). A text cut short (max_tokens, a stop string) is the calls whose names are complete,
     * the last one's arguments as generated (OpenAI's rule), never plain content.
     */
    static ToolCalls.Scanner calls(Tools t, String text) {
        if (!isCalls(t, text)) return null;
        ToolCalls.Scanner s = new ToolCalls.Scanner();
        s.push(text);
        return s;
    }

    /**
     * The finish reason of an answer that is calls: the tools' ({@link Tools#finishReason}) where the calls are whole and
     * the answer ended of itself (or at a stop string after a call, before the next one's name is complete:
     * {@link ToolCalls.Scanner#whole}); else the answer's own ({@code length}, or {@code stop} for a stop string that cut a
     * call short, or came before any).
     */
    static String finishReason(Tools t, ToolCalls.Scanner calls, Finish finish) {
        return calls.whole() && !"length".equals(finish.reason()) ? t.finishReason() : finish.reason();
    }

    /**
     * A stream's role chunk's {@code delta} under tool calling, so that a client's accumulated message is the whole answer's
     * and each chunk OpenAI's: an answer of calls says content null (as OpenAI's; never "", which an SDK's accumulator
     * keeps beside the calls), a text answer (auto's, known to be text: {@code text} true) content "" (as OpenAI's plain
     * answer); {@code text} null, auto's answer not known yet (several choices: {@link #rolePerChoice}), no content at all
     * (a text answer's chunks then carry it, "" included: {@link Choice}).
     */
    static void roleDelta(Tools t, Boolean text, ObjectNode delta) {
        if (t.mode() != Mode.AUTO || Boolean.FALSE.equals(text)) delta.putNull("content");
        else if (text == null) delta.remove("content");
        else delta.put("content", "");
    }

    /**
     * Whether a stream's choice sends its own role chunk, once its answer is known to be text or calls (tool_choice auto, as
     * {@link #roleDelta} differs by the answer), rather than the stream's start sending it: with one choice. With several
     * the start sends each one's (without content), as openai-java's {@code ChatCompletionAccumulator} ends once every
     * choice it has seen has finished: a choice whose first chunk came after another's last would be refused.
     */
    static boolean rolePerChoice(Tools t, int choices) {
        return t != null && t.mode() == Mode.AUTO && choices == 1;
    }

    /** A call's id: {@code call_} and 24 random letters and digits. */
    static String id() {
        String digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        StringBuilder b = new StringBuilder("call_");
        for (int i = 0; i < 24; i++) b.append(digits.charAt(ThreadLocalRandom.current().nextInt(digits.length())));
        return b.toString();
    }

    /** OpenAI's {@code tool_calls} of a message: each {@code {id, type, function: {name, arguments}}}. */
    static ArrayNode message(List<ToolCalls.Call> calls) {
        ArrayNode out = Http.JSON.createArrayNode();
        for (ToolCalls.Call c : calls) {
            ObjectNode call = out.addObject();
            call.put("id", id());
            call.put("type", "function");
            call.putObject("function").put("name", c.name()).put("arguments", c.arguments());
        }
        return out;
    }

    /**
     * A whole answer's choice made the calls': its message's {@code content} null and its {@code tool_calls} (absent where a
     * cut left no call with a complete name), its {@code finish_reason} {@link #finishReason}.
     */
    static void whole(ObjectNode choice, Tools t, ToolCalls.Scanner calls, Finish finish) {
        ObjectNode message = (ObjectNode) choice.get("message");
        message.putNull("content");
        List<ToolCalls.Call> all = calls.calls();
        if (!all.isEmpty()) message.set("tool_calls", message(all));
        choice.put("finish_reason", finishReason(t, calls, finish));
    }

    /**
     * A stream's {@code delta.tool_calls}, OpenAI's: a call's head ({@code index}, {@code id}, {@code type},
     * {@code function.name}, {@code function.arguments} empty) as soon as its name is complete, then its arguments'
     * fragments as they are generated ({@code index}, {@code function.arguments}); concatenated per index (as the SDKs
     * accumulate them) they are the whole answer's {@code tool_calls}, the ids aside.
     */
    static final class Stream {
        private final ToolCalls.Scanner scanner = new ToolCalls.Scanner();

        /** The next text of the answer: its deltas, each a {@code tool_calls} array of one entry, in order (none: nothing to send yet). */
        List<ArrayNode> push(CharSequence text) {
            List<ArrayNode> out = new ArrayList<>();
            for (ToolCalls.Delta d : scanner.push(text)) {
                ObjectNode entry = Http.JSON.createObjectNode();
                entry.put("index", d.index());
                if (d.name() != null) {
                    entry.put("id", id());
                    entry.put("type", "function");
                    entry.putObject("function").put("name", d.name()).put("arguments", "");
                } else {
                    entry.putObject("function").put("arguments", d.arguments());
                }
                out.add(Http.JSON.createArrayNode().add(entry));
            }
            return out;
        }

        /** What was read: the calls so far, whether they are whole. */
        ToolCalls.Scanner calls() {
            return scanner;
        }
    }
}
