package io.kvferry.engine.model;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dk.brics.automaton.Automaton;
import dk.brics.automaton.BasicAutomata;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Tool calls (OpenAI's function calling) as text the model writes, Hermes' wire format (as Qwen's and Hermes' models
 * write it): one call is {@code <tool_call>{"name": "NAME", "arguments": ARGS}</tool_call>}, ARGS a JSON object valid for
 * the tool's {@code parameters} schema; several calls are joined by {@link #BETWEEN}. Pure parts: {@link #render}
 * (a call as that text, also how a conversation's earlier calls enter the prompt), {@link Scanner} (the text read as it
 * is generated, as an answer's calls are streamed and made: the calls on whole calls, the calls so far on a cut one) and {@link #language} (the
 * language of the answers a request admits, regular, or a grammar where a called tool's parameters recurse,
 * structured outputs' {@link OutputConstraint.Kind#TOOL_CALLS}, compiled to the token mask alike by the router, the
 * prefill and the decode).
 *
 * <p>The language's source is JSON: {@code {"mode": "auto"|"required", "parallel": bool, "tools": [{"name": N,
 * "parameters": SCHEMA as JSON text}, …], "name": N?}}. {@code required}: one call of any of the tools, or (parallel) one or
 * more joined by {@link #BETWEEN}; {@code auto}: those, or any text that does not start with {@link #OPEN}; {@code name}
 * (a named tool_choice, with {@code required}): the calls are of that tool alone, every tool's schema still compiled, so
 * a fault in any is refused as OpenAI refuses it. A tool's call is
 * its wrapper, literal, around its schema's automaton ({@link JsonSchemaAutomaton}: what it admits is valid for the
 * schema) less any value but an object (a schema that admits no object is a {@link Fault}); a recursive schema's automaton
 * has holes, each recursive definition a rule of the grammar ({@link JsonSchemaGrammar}).
 */
public final class ToolCalls {
    /** What opens a call. */
    public static final String OPEN = "<tool_call>";
    /** What closes a call. */
    public static final String CLOSE = "</tool_call>";
    /** What joins two calls of one answer. */
    public static final String BETWEEN = "\n";
    /** The most tools a request may have: OpenAI's bound ({@code tools} array too long past it). */
    public static final int MAX_TOOLS = 128;

    private static final ObjectMapper JSON = new ObjectMapper();

    private ToolCalls() {
    }

    /** One call: the tool's name and its arguments, a JSON object's text. */
    public record Call(String name, String arguments) {
    }

    /**
     * A refusal of a tool's {@code parameters} schema: which tool ({@link #tool}, its index in the source) and where in its
     * schema ({@link #at}, a JSON pointer, as {@link JsonSchemaAutomaton.Fault#at}).
     */
    public static final class Fault extends IllegalArgumentException {
        private final int tool;
        private final String at;

        Fault(int tool, String at, String message) {
            super(message);
            this.tool = tool;
            this.at = at;
        }

        public int tool() {
            return tool;
        }

        public String at() {
            return at;
        }
    }

    /** The text of one call: its arguments as given (compact JSON, as {@link Scanner} reads them). */
    public static String render(Call c) {
        try {
            return OPEN + "{\"name\": " + JSON.writeValueAsString(c.name()) + ", \"arguments\": " + c.arguments() + "}" + CLOSE;
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e); // a string always writes
        }
    }

    /** The text of several calls, joined by {@link #BETWEEN}. */
    public static String render(List<Call> calls) {
        StringBuilder b = new StringBuilder();
        for (Call c : calls) {
            if (!b.isEmpty()) b.append(BETWEEN);
            b.append(render(c));
        }
        return b.toString();
    }

    /**
     * One step of calls read as they are generated ({@link Scanner#push}): call {@code index}'s head (its {@code name}
     * complete, {@code arguments} empty) or, {@code name} null, the next characters of its arguments (compact, as
     * {@link #compact} gives them).
     */
    public record Delta(int index, String name, String arguments) {
    }

    /**
     * Calls read as their text is generated, character by character, each character once (linear in the text; nothing held
     * is copied again): the layout the tools' {@link #language} admits, {@link #OPEN}{@code {"name": "NAME", "arguments": }
     * ARGS{@code }}{@link #CLOSE}, calls joined by {@link #BETWEEN} (JSON whitespace in ARGS is left out, as {@link #compact}
     * does, and tolerated after it). A call exists once its name is complete (its closing quote read); its arguments are the
     * characters read so far, so a text cut anywhere (max_tokens, a stop string) gives the calls so far, the last one's
     * arguments possibly not yet valid JSON. Text out of that layout (never under the language's mask) ends the reading:
     * {@link #failed}, the calls so far kept. On a whole call text it gives the calls (tests: what a JSON parser reads in it).
     */
    public static final class Scanner {
        private static final String HEAD, MID, TAIL;

        static {
            String r = render(new Call("N", "A"));
            int name = r.indexOf("\"N\"") + 1, args = r.lastIndexOf('A');
            HEAD = r.substring(0, name); // <tool_call>{"name": "
            MID = r.substring(name + 2, args); // , "arguments": (after the name's closing quote)
            TAIL = r.substring(args + 1); // }</tool_call>
        }

        private enum State { HEAD, NAME, MID, ARGS, AFTER_ARGS, TAIL, BETWEEN, FAILED }

        private State state = State.HEAD;
        /** Characters of the current literal (HEAD, MID, TAIL, BETWEEN) read. */
        private int matched;
        private int depth;
        private boolean inString, escaped;
        private final StringBuilder name = new StringBuilder();
        private final List<String> names = new ArrayList<>();
        private final List<StringBuilder> arguments = new ArrayList<>();

        /** Reads the next characters; the calls' heads and argument fragments they complete, in order (consecutive characters of one call's arguments one fragment). */
        public List<Delta> push(CharSequence text) {
            List<Delta> out = new ArrayList<>();
            int fragmentFrom = -1; // where in the current call's arguments this push's fragment starts
            for (int i = 0; i < text.length() && state != State.FAILED; i++) {
                char c = text.charAt(i);
                switch (state) {
                    case HEAD -> literal(c, HEAD, State.NAME);
                    case NAME -> {
                        if (c == '"') {
                            names.add(name.toString());
                            arguments.add(new StringBuilder());
                            name.setLength(0);
                            out.add(new Delta(names.size() - 1, names.getLast(), ""));
                            state = State.MID;
                            matched = 0;
                        } else if (c == '\\' || c < 0x20) {
                            state = State.FAILED; // a tool's name has no escapes (ChatTools.NAME)
                        } else {
                            name.append(c);
                        }
                    }
                    case MID -> literal(c, MID, State.ARGS);
                    case ARGS -> {
                        StringBuilder args = arguments.getLast();
                        if (!inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) continue;
                        if (args.isEmpty() && c != '{') {
                            state = State.FAILED;
                            continue;
                        }
                        if (fragmentFrom < 0) fragmentFrom = args.length();
                        args.append(c);
                        if (inString) {
                            if (escaped) escaped = false;
                            else if (c == '\\') escaped = true;
                            else if (c == '"') inString = false;
                        } else if (c == '"') {
                            inString = true;
                        } else if (c == '{' || c == '[') {
                            depth++;
                        } else if ((c == '}' || c == ']') && --depth == 0) {
                            out.add(fragment(fragmentFrom));
                            fragmentFrom = -1;
                            state = State.AFTER_ARGS;
                        }
                    }
                    case AFTER_ARGS -> {
                        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
                        state = State.TAIL;
                        matched = 0;
                        literal(c, TAIL, State.BETWEEN);
                    }
                    case TAIL -> literal(c, TAIL, State.BETWEEN);
                    case BETWEEN -> literal(c, BETWEEN, State.HEAD);
                    default -> throw new IllegalStateException(state.toString());
                }
            }
            if (fragmentFrom >= 0) out.add(fragment(fragmentFrom));
            return out;
        }

        private Delta fragment(int from) {
            StringBuilder args = arguments.getLast();
            return new Delta(arguments.size() - 1, null, args.substring(from));
        }

        private void literal(char c, String lit, State next) {
            if (c != lit.charAt(matched)) {
                state = State.FAILED;
            } else if (++matched == lit.length()) {
                state = next;
                matched = 0;
            }
        }

        /** The calls read so far (each with a complete name), their arguments as read. */
        public List<Call> calls() {
            List<Call> out = new ArrayList<>(names.size());
            for (int i = 0; i < names.size(); i++) out.add(new Call(names.get(i), arguments.get(i).toString()));
            return out;
        }

        /** Whether the text read so far is one or more whole calls, nothing after the last one's {@link #CLOSE}. */
        public boolean complete() {
            return state == State.BETWEEN && matched == 0; // reached only by a call's TAIL
        }

        /**
         * Whether every call read is whole (one or more, each with its {@link #CLOSE}), a cut there cutting none short: the
         * text ends after a call's {@link #CLOSE} or in the next one's wrapping before its name is complete (a call that
         * does not exist yet, {@link #calls}).
         */
        public boolean whole() {
            return !names.isEmpty() && (state == State.BETWEEN || state == State.HEAD || state == State.NAME);
        }

        /** Whether the text left the calls' layout (the calls so far are kept; nothing more is read). */
        public boolean failed() {
            return state == State.FAILED;
        }
    }

    /** JSON text with the whitespace outside its strings removed (it is otherwise as written: numbers, escapes). */
    public static String compact(String json) {
        StringBuilder b = new StringBuilder(json.length());
        boolean inString = false, escaped = false;
        for (int i = 0; i < json.length(); i++) {
            char c = json.charAt(i);
            if (inString) {
                if (escaped) escaped = false;
                else if (c == '\\') escaped = true;
                else if (c == '"') inString = false;
            } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                continue;
            } else if (c == '"') {
                inString = true;
            }
            b.append(c);
        }
        return b.toString();
    }

    /** The language's source ({@link #language}): mode {@code auto} or {@code required}, each tool's name and schema text. */
    public static String source(String mode, boolean parallel, List<String> names, List<String> schemas) {
        return source(mode, parallel, names, schemas, null);
    }

    /** As above, the calls of the tool {@code only} alone (a named tool_choice; null: of any). */
    public static String source(String mode, boolean parallel, List<String> names, List<String> schemas, String only) {
        ObjectNode s = JSON.createObjectNode();
        s.put("mode", mode);
        s.put("parallel", parallel);
        ArrayNode tools = s.putArray("tools");
        for (int i = 0; i < names.size(); i++) tools.addObject().put("name", names.get(i)).put("parameters", schemas.get(i));
        if (only != null) s.put("name", only);
        return s.toString();
    }

    /**
     * The language of the answers {@code source} admits (see the class comment): its automaton, or where a called tool's
     * {@code parameters} recurse ({@code $ref}s a tree's nodes, a filter's sub-expressions), its exact grammar
     * ({@link #grammar}: the same layout, each recursive definition a rule); a tool's schema refused is a {@link Fault}
     * naming the tool and the place, a tool's bound passed a {@link ClientRegex.TooComplex} naming the tool, anything
     * else wrong with the source an {@link IllegalArgumentException}.
     */
    public static JsonSchemaAutomaton.Language language(String source) {
        return language(source, false);
    }

    /** {@link #language}, its grammar also where no called tool recurses ({@code grammar} true: the tests hold it to the DFA). */
    static JsonSchemaAutomaton.Language language(String source, boolean grammar) {
        JsonNode s;
        try {
            s = JSON.readTree(source);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("is not valid JSON: " + e.getOriginalMessage());
        }
        String mode = s == null ? "" : s.path("mode").asText("");
        if (!mode.equals("auto") && !mode.equals("required")) throw new IllegalArgumentException("mode must be auto or required, got " + s);
        JsonNode tools = s.path("tools");
        if (!tools.isArray() || tools.isEmpty()) throw new IllegalArgumentException("tools must be a non-empty array, got " + tools);
        if (tools.size() > MAX_TOOLS) throw new IllegalArgumentException("tools has " + tools.size() + " tools, at most " + MAX_TOOLS);
        JsonNode parallel = s.path("parallel");
        if (!parallel.isMissingNode() && !parallel.isBoolean()) throw new IllegalArgumentException("parallel must be true or false, got " + parallel);
        JsonNode only = s.path("name");
        if (!only.isMissingNode() && !(only.isTextual() && mode.equals("required"))) {
            throw new IllegalArgumentException("name (the one tool called) must be a string, with mode required, got " + only);
        }
        List<String> names = new ArrayList<>();
        List<Automaton> args = new ArrayList<>();
        List<JsonSchemaAutomaton.Holed> holed = new ArrayList<>();
        boolean recursive = false;
        for (int i = 0; i < tools.size(); i++) {
            JsonNode name = tools.get(i).path("name"), parameters = tools.get(i).path("parameters");
            if (!name.isTextual() || !parameters.isTextual()) {
                throw new IllegalArgumentException("tools[" + i + "] needs a name and its parameters' schema as JSON text, got " + tools.get(i));
            }
            Automaton a;
            JsonSchemaAutomaton.Holed h = null;
            try {
                try {
                    a = JsonSchemaAutomaton.compile(parameters.textValue());
                } catch (JsonSchemaAutomaton.Recursive r) {
                    // Its $refs recurse: compiled with holes, and its own grammar built, so that its refusals (a recursion
                    // with no way out, over 32 definitions, its size) name this tool as response_format's name the schema.
                    h = JsonSchemaAutomaton.holed(parameters.textValue());
                    h.grammar();
                    a = h.top();
                }
            } catch (JsonSchemaAutomaton.Fault f) {
                throw new Fault(i, f.at(), f.getMessage());
            } catch (ClientRegex.TooComplex e) {
                throw e.reworded("is too complex at tools[" + i + "] (" + name.textValue() + "): its parameters' schema " + e.getMessage());
            }
            // Only an object is arguments (parse): a schema that admits other values ({}, an anyOf with a string branch)
            // would let the model write a call the parser rejects, so the answer would silently be text. (A hole is never
            // a value's first character, so the product keeps a recursive tool's holes as they are.)
            a = ClientRegex.product(a, BasicAutomata.makeChar('{').concatenate(BasicAutomata.makeAnyString()));
            if (a.isEmpty()) throw new Fault(i, "#", "admits no JSON object, and a call's arguments are an object");
            if (only.isMissingNode() || only.textValue().equals(name.textValue())) {
                names.add(name.textValue());
                args.add(a);
                holed.add(h);
                recursive |= h != null;
            }
            ClientRegex.checkDeadline();
        }
        if (names.isEmpty()) throw new IllegalArgumentException("name " + only + " is none of the tools' names");
        if (recursive || grammar) return new JsonSchemaAutomaton.Language(null, grammar(mode.equals("auto"), parallel.asBoolean(true), names, args, holed));
        List<Automaton> calls = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            String head = render(new Call(names.get(i), "\0"));
            int cut = head.indexOf('\0');
            calls.add(BasicAutomata.makeString(head.substring(0, cut)).concatenate(args.get(i)).concatenate(BasicAutomata.makeString(head.substring(cut + 1))));
        }
        Automaton one = ClientRegex.minimal(Automaton.union(calls));
        Automaton answer = one;
        if (parallel.asBoolean(true)) answer = one.concatenate(BasicAutomata.makeString(BETWEEN).concatenate(one.clone()).repeat());
        if (mode.equals("auto")) answer = answer.union(text());
        return new JsonSchemaAutomaton.Language(ClientRegex.minimal(answer), null);
    }

    /** auto's text answer: any text that does not start with {@link #OPEN}. */
    private static Automaton text() {
        return BasicAutomata.makeAnyString().minus(BasicAutomata.makeString(OPEN).concatenate(BasicAutomata.makeAnyString()));
    }

    /**
     * The grammar of the calls where a tool's parameters recurse: the layout {@link #language}'s automaton has, in rules
     * ({@link JsonSchemaGrammar.Rules}): {@code root ::= calls} (auto: {@code | } the text's automaton as rules), {@code calls}
     * one call or (parallel) one then {@link #BETWEEN} and more, a call each tool's literal wrapping around its arguments'
     * automaton (a recursive tool's with its holes, each recursive definition an automaton of its own, holes inside).
     */
    private static EbnfGrammar grammar(boolean auto, boolean parallel, List<String> names, List<Automaton> args,
                                       List<JsonSchemaAutomaton.Holed> holed) {
        JsonSchemaGrammar.Rules rules = new JsonSchemaGrammar.Rules("is too complex: the tool calls' grammar (its tools' parameters, one"
                + " of them recursive) is over " + JsonSchemaGrammar.MAX_SYMBOLS + " symbols (their automata's states and transitions)");
        StringBuilder g = new StringBuilder("root ::= calls" + (auto ? " | " + JsonSchemaGrammar.start(0) : "") + "\n");
        g.append("calls ::= one").append(parallel ? " | one " + literal(BETWEEN) + " calls" : "").append('\n');
        StringBuilder one = new StringBuilder("one ::= ");
        if (auto) rules.add(0, text(), null);
        rules.count(8);
        int k = 1;
        for (int i = 0; i < names.size(); i++) {
            String head = render(new Call(names.get(i), "\0"));
            int cut = head.indexOf('\0'), a = k++;
            JsonSchemaAutomaton.Holed h = holed.get(i);
            try {
                if (h == null) {
                    rules.add(a, args.get(i), null);
                } else {
                    Map<Character, Integer> index = new HashMap<>();
                    for (Character c : h.defs().keySet()) index.put(c, k++);
                    rules.add(a, args.get(i), index);
                    for (Map.Entry<Character, Automaton> d : h.defs().entrySet()) rules.add(index.get(d.getKey()), d.getValue(), index);
                }
            } catch (ClientRegex.TooComplex e) {
                throw e.reworded(e.getMessage() + ", passed at tools[" + i + "] (" + names.get(i) + ")");
            }
            g.append("call").append(i).append(" ::= ").append(literal(head.substring(0, cut))).append(' ').append(JsonSchemaGrammar.start(a))
                    .append(' ').append(literal(head.substring(cut + 1))).append('\n');
            one.append(i == 0 ? "" : " | ").append("call").append(i);
            rules.count(head.length() + 4L); // the literals' characters, the rule's and the alternative's
        }
        return EbnfGrammar.parse(g + one.toString() + "\n" + rules.text());
    }

    /** A GBNF string literal of {@code s} (a tool's name is of {@code A-Za-z0-9_-}; the wrapping's quotes and line break escaped). */
    private static String literal(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04X", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
