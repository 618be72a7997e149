package io.kvferry.engine.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.ClientRegex;
import io.kvferry.engine.model.JsonSchemaAutomaton;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.ToolCalls;
import io.kvferry.http.BearerToken;

import java.math.BigDecimal;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A request's structured output (docs/SERVING.md, "Structured outputs"), as the clients of vLLM and SGLang send it:
 * OpenAI's {@code response_format} ({@code text}, {@code json_object}, {@code json_schema}), vLLM's {@code guided_choice},
 * {@code guided_regex}, {@code guided_json} and {@code structured_outputs} ({@code choice}, {@code regex}, {@code json},
 * {@code json_object}) on the OpenAI routes; SGLang's {@code regex} and {@code json_schema} in {@code /generate}'s
 * {@code sampling_params}, which is also how the router hands it to the engines (a choice list as a regex, a
 * {@code json_object} as the schema {@code {"type":"object"}}, a schema as compact JSON); grammars (GBNF: vLLM's
 * {@code guided_grammar} and {@code structured_outputs.grammar}, SGLang's {@code ebnf}) travel to the engines as
 * {@code sampling_params.ebnf}. At most one per request. Each refusal is a 400 naming the field.
 */
final class StructuredOutputs {
    private StructuredOutputs() {
    }

    /**
     * What a request asks for: its kind, the source the engines compile, the field that asked (a 400's {@code param}), and
     * where the schema itself is ({@code response_format.json_schema.schema}; else the field): a fault inside the schema is
     * a 400 whose {@code param} goes on into it ({@code response_format.json_schema.schema.properties.age}).
     */
    record Spec(OutputConstraint.Kind kind, String source, String param, String root) {
        Spec(OutputConstraint.Kind kind, String source, String param) {
            this(kind, source, param, param);
        }
    }

    /**
     * The client a request's compilation is for ({@link OutputConstraint.Compiler#compile(OutputConstraint.Kind, String,
     * String)}: the compiler's turns go round-robin between clients): bound by {@link Http#handle} to the caller's
     * address ({@link #caller}), by the router to the tenant where it has tenants ({@link #tenant}), and at an engine to
     * the client the router names ({@link #forwardedClient}); unbound: one client for all.
     */
    static final ScopedValue<String> CLIENT = ScopedValue.newInstance();

    /** The client of a request from {@code ex}'s peer: its IP address (not the port: one client opens many connections). */
    static String caller(HttpExchange ex) {
        InetSocketAddress peer = ex.getRemoteAddress();
        if (peer == null) return OutputConstraint.Compiler.ANYONE;
        return "address " + (peer.getAddress() != null ? peer.getAddress().getHostAddress() : peer.getHostString());
    }

    /** The client of a tenant's request. */
    static String tenant(String name) {
        return "tenant " + name;
    }

    /**
     * The header in which the router names the client of a request it forwards to an engine ({@link #CLIENT}'s value there:
     * {@code tenant NAME} or {@code address IP}), so the engines' compilers share their turns between the router's clients,
     * not give them all to the router's one address.
     */
    static final String CLIENT_HEADER = "X-Kvferry-Client";
    /** The longest {@link #CLIENT_HEADER} an engine takes (a tenant's name is 64 characters at most; an IPv6 address 45). */
    static final int CLIENT_HEADER_MAX = 128;

    /**
     * Runs an engine's route {@code h} with {@link #CLIENT} bound to the router's {@link #CLIENT_HEADER} where the request
     * carries the cluster token {@code auth}: only a router holds it. Without a token on the engine ({@code auth} null:
     * anyone may call it), without the header, or with one that is not short printable ASCII, the client stays the
     * caller's address ({@link Http#handle}): a header from a caller not proven to be the router is never believed.
     */
    static Http.Handler forwardedClient(BearerToken auth, Http.Handler h) {
        return ex -> {
            String named = ex.getRequestHeaders().getFirst(CLIENT_HEADER);
            if (auth == null || named == null || !auth.accepts(ex.getRequestHeaders().getFirst("Authorization")) || !printable(named)) {
                h.handle(ex);
                return;
            }
            ScopedValue.where(CLIENT, named).call(() -> {
                h.handle(ex);
                return null;
            });
        };
    }

    private static boolean printable(String s) {
        if (s.isEmpty() || s.length() > CLIENT_HEADER_MAX) return false;
        for (int i = 0; i < s.length(); i++) {
            if (s.charAt(i) < 0x20 || s.charAt(i) > 0x7e) return false;
        }
        return true;
    }

    /** json_object's schema: any JSON object (JsonSchemaAutomaton#ANY_DEPTH levels deep at most). */
    static final String ANY_OBJECT = "{\"type\":\"object\"}";

    /** A schema's JSON text read with its decimals as written. */
    private static final ObjectMapper DECIMALS = JsonMapper.builder().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS).build();
    private static final Set<String> STRUCTURED_OUTPUTS_KEYS = Set.of("choice", "regex", "json", "json_object", "grammar");
    /** A schema's keywords whose value is a list of schemas (their pointer segments after them are indices). */
    private static final Set<String> LISTS = Set.of("anyOf", "allOf", "oneOf");
    private static final Set<String> BACKEND_OPTIONS = Set.of("disable_fallback", "disable_additional_properties");

    /** The OpenAI routes' constraint, or null for none. */
    static Spec openAi(JsonNode req) {
        List<Spec> found = new ArrayList<>();
        JsonNode rf = req.get("response_format");
        if (rf != null && !rf.isNull()) {
            if (!rf.isObject()) throw new Http.BadRequest("response_format", "response_format must be an object with a type, got " + rf);
            String type = rf.path("type").asText("");
            if (rf.has("schema") && !rf.get("schema").isNull()) {
                // Together's and Fireworks' {"type": "json_object", "schema": …}: vLLM drops the schema with a logged warning,
                // which would answer any JSON object where the client asked for its schema.
                throw new Http.BadRequest("response_format.schema", "response_format.schema is not supported: send the schema as"
                        + " {\"type\": \"json_schema\", \"json_schema\": {\"name\": …, \"schema\": …}}");
            }
            switch (type) {
                case "text" -> {
                }
                case "json_object" -> found.add(new Spec(OutputConstraint.Kind.JSON_SCHEMA, ANY_OBJECT, "response_format"));
                case "json_schema" -> {
                    JsonNode js = rf.get("json_schema");
                    if (js == null || !js.isObject()) {
                        throw new Http.BadRequest("response_format", "response_format of type json_schema needs a json_schema object, got " + js);
                    }
                    JsonNode schema = js.get("schema");
                    if (schema == null || !schema.isObject()) {
                        throw new Http.BadRequest("response_format", "response_format.json_schema.schema must be a JSON schema (an object), got " + schema);
                    }
                    found.add(new Spec(OutputConstraint.Kind.JSON_SCHEMA, compact(schema, "response_format.json_schema.schema"), "response_format",
                            "response_format.json_schema.schema"));
                }
                default -> throw new Http.BadRequest("response_format", "response_format.type must be text, json_object or json_schema, got "
                        + rf.path("type"));
            }
        }
        JsonNode ws = req.get("guided_whitespace_pattern");
        if (ws != null && !ws.isNull()) {
            throw new Http.BadRequest("guided_whitespace_pattern", "guided_whitespace_pattern is not supported (a JSON answer's whitespace is fixed:"
                    + " at most one space after each , and :)");
        }
        add(found, req, "guided_grammar", "guided_grammar", "grammar");
        add(found, req, "guided_regex", "guided_regex", "regex");
        add(found, req, "guided_json", "guided_json", "json");
        add(found, req, "guided_choice", "guided_choice", "choice");
        JsonNode so = req.get("structured_outputs");
        if (so != null && !so.isNull()) {
            if (!so.isObject()) throw new Http.BadRequest("structured_outputs", "structured_outputs must be an object, got " + so);
            for (Map.Entry<String, JsonNode> e : so.properties()) {
                if (e.getValue().isNull() || STRUCTURED_OUTPUTS_KEYS.contains(e.getKey())) continue;
                // vLLM's backend options that leave the answer as this engine gives it: no fallback backend here, and no
                // property a schema does not declare is ever generated.
                if (BACKEND_OPTIONS.contains(e.getKey())) {
                    if (e.getValue().isBoolean()) continue;
                    throw new Http.BadRequest("structured_outputs." + e.getKey(),
                            "structured_outputs." + e.getKey() + " must be true or false, got " + e.getValue());
                }
                throw new Http.BadRequest("structured_outputs." + e.getKey(), "structured_outputs." + e.getKey()
                        + " is not supported (this engine takes choice, regex, json, json_object or grammar)");
            }
            add(found, so, "grammar", "structured_outputs.grammar", "grammar");
            add(found, so, "regex", "structured_outputs.regex", "regex");
            add(found, so, "json", "structured_outputs.json", "json");
            add(found, so, "choice", "structured_outputs.choice", "choice");
            JsonNode jo = so.get("json_object");
            if (jo != null && !jo.isNull()) {
                if (!jo.isBoolean()) throw new Http.BadRequest("structured_outputs.json_object", "structured_outputs.json_object must be true or false, got " + jo);
                if (jo.booleanValue()) found.add(new Spec(OutputConstraint.Kind.JSON_SCHEMA, ANY_OBJECT, "structured_outputs.json_object"));
            }
        }
        return one(found);
    }

    /** {@code /generate}'s (and the engines') {@code sampling_params} constraint: SGLang's {@code regex}, {@code json_schema} or {@code ebnf}; null for none. */
    static Spec sglang(JsonNode sp) {
        if (sp == null || !sp.isObject()) return null;
        List<Spec> found = new ArrayList<>();
        JsonNode regex = sp.get("regex");
        if (regex != null && !regex.isNull()) {
            if (!regex.isTextual()) throw new Http.BadRequest("sampling_params.regex", "sampling_params.regex must be a string, got " + regex);
            found.add(new Spec(OutputConstraint.Kind.REGEX, regex.textValue(), "sampling_params.regex"));
        }
        JsonNode schema = sp.get("json_schema");
        if (schema != null && !schema.isNull()) {
            if (!schema.isTextual()) {
                throw new Http.BadRequest("sampling_params.json_schema", "sampling_params.json_schema must be a string (the schema as JSON text), got " + schema);
            }
            found.add(new Spec(OutputConstraint.Kind.JSON_SCHEMA, schema.textValue(), "sampling_params.json_schema"));
        }
        add(found, sp, "ebnf", "sampling_params.ebnf", "grammar");
        // The router's tool calling (ChatTools) to the engines; the router's own /generate refuses it (not SGLang's).
        JsonNode tools = sp.get("tool_calls");
        if (tools != null && !tools.isNull()) {
            if (!tools.isTextual()) throw new Http.BadRequest("sampling_params.tool_calls", "sampling_params.tool_calls must be a string, got " + tools);
            found.add(new Spec(OutputConstraint.Kind.TOOL_CALLS, tools.textValue(), "sampling_params.tool_calls"));
        }
        return one(found);
    }

    /**
     * The spec compiled ({@code compiler} null: an engine started without a tokenizer); a bad one is a 400 naming its field,
     * one the busy compiler could not take in time ({@link OutputConstraint.Busy}) a 503 naming it, with {@code Retry-After}.
     */
    static OutputConstraint compile(Spec spec, OutputConstraint.Compiler compiler) {
        if (spec == null) return null;
        if (compiler == null) {
            throw new Http.BadRequest(spec.param(), spec.param() + ": structured outputs need the model's tokenizer, and this server was started without one");
        }
        try {
            return compiler.compile(spec.kind(), spec.source(), CLIENT.orElse(OutputConstraint.Compiler.ANYONE));
        } catch (OutputConstraint.Busy e) {
            throw new Http.Unavailable(spec.param(), spec.param() + ": " + what(spec) + " " + e.getMessage(), e.retryAfterSeconds());
        } catch (ToolCalls.Fault f) {
            // A tool's parameters schema: its place in a chat's request (ChatTools.of: the source lists every tool, in the
            // request's order); an engine's sampling_params.tool_calls (the router checked it first) names that field.
            if (!spec.param().equals("tools")) throw new Http.BadRequest(spec.param(), spec.param() + ": tools[" + f.tool() + "]: " + f.getMessage());
            String root = "tools[" + f.tool() + "].function.parameters";
            throw new Http.BadRequest(root + path(f.at()), root + ": the JSON schema " + f.getMessage());
        } catch (IllegalArgumentException e) {
            String param = e instanceof JsonSchemaAutomaton.Fault f ? spec.root() + path(f.at()) : spec.param();
            throw new Http.BadRequest(param, spec.param() + ": " + what(spec) + " " + e.getMessage());
        }
    }

    private static String what(Spec spec) {
        return switch (spec.kind()) {
            case REGEX -> "the regex";
            case JSON_SCHEMA -> "the JSON schema";
            case TOOL_CALLS -> "the tool calls' language";
            case EBNF -> "the grammar";
        };
    }

    /**
     * A JSON pointer into a schema ({@code #/properties/a~1b/anyOf/1}) as a {@code param}'s tail: each name after a dot,
     * each index of a list in brackets ({@code .properties.a/b.anyOf[1]}); {@code #} itself is nothing.
     */
    static String path(String pointer) {
        StringBuilder b = new StringBuilder();
        String[] parts = pointer.split("/", -1);
        for (int i = 1; i < parts.length; i++) {
            String seg = parts[i].replace("~1", "/").replace("~0", "~");
            boolean index = i > 1 && LISTS.contains(parts[i - 1]) && seg.matches("[0-9]+");
            b.append(index ? "[" + seg + "]" : "." + seg);
        }
        return b.toString();
    }

    /** The constraint's SGLang sampling parameter, as the router sends it to the engines. */
    static void json(ObjectNode sp, OutputConstraint c) {
        if (c != null) sp.put(c.kind().param, c.source());
    }

    private static void add(List<Spec> found, JsonNode in, String key, String param, String as) {
        JsonNode v = in.get(key);
        if (v == null || v.isNull()) return;
        switch (as) {
            case "grammar" -> {
                if (!v.isTextual()) throw new Http.BadRequest(param, param + " must be a string (a grammar: GBNF, root ::= …), got " + v);
                found.add(new Spec(OutputConstraint.Kind.EBNF, v.textValue(), param));
            }
            case "regex" -> {
                if (!v.isTextual()) throw new Http.BadRequest(param, param + " must be a string (a regular expression), got " + v);
                found.add(new Spec(OutputConstraint.Kind.REGEX, v.textValue(), param));
            }
            case "json" -> {
                JsonNode schema = v;
                if (v.isTextual()) {
                    try {
                        schema = DECIMALS.readTree(v.textValue()); // its numbers as written (no double between)
                    } catch (JsonProcessingException e) {
                        throw new Http.BadRequest(param, param + " is not valid JSON: " + e.getOriginalMessage());
                    } catch (NumberFormatException e) { // a decimal no BigDecimal holds (1e9999999999999): Jackson's, an IllegalArgumentException
                        throw new Http.BadRequest(param, param + " is not valid JSON: " + e.getMessage());
                    }
                }
                if (schema == null || !schema.isObject()) throw new Http.BadRequest(param, param + " must be a JSON schema (an object, or its JSON text), got " + v);
                found.add(new Spec(OutputConstraint.Kind.JSON_SCHEMA, compact(schema, param), param));
            }
            default -> {
                if (!v.isArray() || v.isEmpty()) throw new Http.BadRequest(param, param + " must be a non-empty list of strings, got " + v);
                List<String> choices = new ArrayList<>();
                for (JsonNode c : v) {
                    if (!c.isTextual()) throw new Http.BadRequest(param, param + " must be a non-empty list of strings, got " + v);
                    choices.add(c.textValue());
                }
                found.add(new Spec(OutputConstraint.Kind.REGEX, ClientRegex.quote(choices), param));
            }
        }
    }

    private static Spec one(List<Spec> found) {
        if (found.isEmpty()) return null;
        if (found.size() > 1) {
            throw new Http.BadRequest(found.get(1).param(), "send one structured output per request: " + found.get(0).param() + " and "
                    + found.get(1).param() + " are both set");
        }
        return found.getFirst();
    }

    /**
     * The schema as compact JSON, its decimals as the client wrote them: a request body is read keeping them exact
     * ({@link Http#REQUEST_JSON}). A tree that came another way with doubles in it is checked: a decimal of more than 15
     * significant digits (or past a double's range) may have been rounded, moving a bound, and is a 400 naming its place.
     */
    static String compact(JsonNode schema, String param) {
        checkDoubles(schema, param);
        return compact(schema);
    }

    private static void checkDoubles(JsonNode n, String at) {
        if (n.isDouble() || n.isFloat()) {
            double d = n.doubleValue();
            if (!Double.isFinite(d) || BigDecimal.valueOf(d).stripTrailingZeros().precision() > 15) {
                throw new Http.BadRequest(at, at + " is " + n + ", a number of more than 15 significant digits or past a double's range:"
                        + " the schema would be checked against it rounded (send the schema as JSON text to keep every digit)");
            }
        } else if (n.isObject()) {
            for (Map.Entry<String, JsonNode> e : n.properties()) checkDoubles(e.getValue(), at + "." + e.getKey());
        } else if (n.isArray()) {
            for (int i = 0; i < n.size(); i++) checkDoubles(n.get(i), at + "[" + i + "]");
        }
    }

    private static String compact(JsonNode schema) {
        try {
            return Http.JSON.writeValueAsString(schema);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }
}
