package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A JSON schema whose {@code $ref}s recurse (a tree node's children, a comment's replies) as an exact grammar
 * ({@link EbnfGrammar}), in the layout {@link JsonSchemaAutomaton} generates: the schema is compiled as on the DFA path,
 * except that a recursive {@code $ref} is a <em>hole</em>, one control character (never in a JSON text that class
 * generates: JSON escapes them, and its whitespace is a space) standing for its definition's whole value. Each
 * automaton (the root's, and each recursive definition's, holes inside) becomes right-linear rules: a state a rule, a
 * transition its character class followed by the target's rule, a hole's transition the definition's first rule
 * followed by the target's rule, an accepting state an empty alternative. So every leaf keyword the DFA path supports
 * (formats, patterns, lengths, ranges, enum / const, the optional space after {@code ,} and {@code :}) is exactly as
 * there, and the nesting is the grammar's. A hole cannot be intersected with other keywords' automata (the product would
 * read it as its character): {@link JsonSchemaAutomaton} refuses a recursive {@code $ref} beside other keywords of the
 * same value. A definition that can never end (a required self-reference with no base case) derives no text: refused
 * ("matches no text at all"). Bounded: {@link #MAX_SYMBOLS}.
 */
final class JsonSchemaGrammar {
    /** Most recursive definitions (holes: the control characters U+0000 to U+001F). */
    static final int MAX_HOLES = 32;
    /** Most symbols of the grammar (as {@link EbnfGrammar} counts them): what its mask and chart cost. */
    static final int MAX_SYMBOLS = EbnfGrammar.MAX_SYMBOLS;

    private JsonSchemaGrammar() {
    }

    /** Whether {@code a} has a hole's transition (a character below U+0020). */
    static boolean hasHole(Automaton a) {
        for (State s : a.getStates()) {
            for (Transition t : s.getTransitions()) if (t.getMin() < MAX_HOLES) return true;
        }
        return false;
    }

    /**
     * The grammar of {@code top} whose holes (by character, {@code defs}: each definition's automaton, holes inside)
     * derive their definitions; {@code refs} names each hole's definition, {@code refAt} where its $ref is (for messages).
     */
    static EbnfGrammar of(Automaton top, Map<Character, Automaton> defs, Map<String, Character> refs, Map<String, String> refAt) {
        Rules rules = new Rules("is too complex: its recursive $refs (" + String.join(", ", refs.keySet()) + ") make a grammar of over "
                + MAX_SYMBOLS + " symbols (its automata's states and transitions)");
        Map<Character, Integer> index = new HashMap<>();
        int k = 1;
        for (Character h : defs.keySet()) index.put(h, k++);
        rules.add(0, top, index);
        for (Map.Entry<Character, Automaton> d : defs.entrySet()) rules.add(index.get(d.getKey()), d.getValue(), index);
        String text = rules.text();
        try {
            return EbnfGrammar.parse("root ::= " + start(0) + "\n" + text);
        } catch (ClientRegex.TooComplex e) {
            throw e;
        } catch (IllegalArgumentException e) {
            if (!e.getMessage().startsWith("matches no text")) throw e;
            // Name the first definition that derives no text (each tried as the root).
            for (Map.Entry<String, Character> r : refs.entrySet()) {
                try {
                    EbnfGrammar.parse("root ::= " + start(index.get(r.getValue())) + "\n" + text);
                } catch (IllegalArgumentException none) {
                    throw new JsonSchemaAutomaton.Fault("matches no text at all: its recursive $ref '" + r.getKey() + "' at " + refAt.get(r.getKey())
                            + " never ends (a value that must hold itself, with no way out such as an optional property, an empty array"
                            + " or an anyOf branch)", refAt.get(r.getKey()));
                }
            }
            throw new IllegalArgumentException("matches no text at all");
        }
    }

    /** The rule that derives automaton {@code k}'s language ({@link Rules#add}). */
    static String start(int k) {
        return "a" + k + "s0";
    }

    /**
     * Right-linear rules of automata, each numbered by its caller ({@link #start}: its first rule): a state a rule, a
     * transition its character class followed by the target's rule, an accepting state an empty alternative; a hole's
     * transition (a character below U+0020 that {@code holes} maps) the rules of the automaton it names, then the target's.
     * Counted as {@link EbnfGrammar} counts symbols, refused past {@link #MAX_SYMBOLS} ({@link ClientRegex.TooComplex}).
     */
    static final class Rules {
        private final StringBuilder g = new StringBuilder();
        private final String tooComplex;
        private long symbols = 2 + 2; // root ::= …, and the parser's start ::= root

        /** {@code tooComplex}: the refusal's message past {@link #MAX_SYMBOLS}. */
        Rules(String tooComplex) {
            this.tooComplex = tooComplex;
        }

        /** Symbols of rules written elsewhere (the caller's own around these), counted toward the bound. */
        void count(long more) {
            symbols += more;
            if (symbols > MAX_SYMBOLS) throw new ClientRegex.TooComplex(tooComplex);
        }

        /**
         * Automaton {@code k}'s rules: a character below U+0020 in {@code holes} is its automaton's value, one not in it no
         * text (a hole of no definition: never generated); {@code holes} null: every character is itself (no holes).
         */
        void add(int k, Automaton a, Map<Character, Integer> holes) {
            ClientRegex.checkDeadline();
            Map<State, Integer> numbers = new LinkedHashMap<>();
            numbers.put(a.getInitialState(), 0);
            for (State s : a.getStates()) numbers.putIfAbsent(s, numbers.size());
            char plainFrom = holes == null ? 0 : (char) MAX_HOLES;
            for (Map.Entry<State, Integer> e : numbers.entrySet()) {
                State s = e.getKey();
                // The transitions by target: one character class each; a hole's apart.
                Map<Integer, StringBuilder> classes = new TreeMap<>();
                List<String> alts = new ArrayList<>();
                for (Transition t : s.getTransitions()) {
                    int target = numbers.get(t.getDest());
                    char lo = t.getMin(), hi = t.getMax();
                    for (char c = lo; c <= hi && c < plainFrom; c++) {
                        Integer def = holes.get(c);
                        if (def == null) continue; // no such hole (not generated): no text
                        alts.add(start(def) + " a" + k + "s" + target);
                    }
                    if (hi >= plainFrom) {
                        char from = (char) Math.max(lo, plainFrom);
                        classes.computeIfAbsent(target, x -> new StringBuilder()).append(hex(from)).append('-').append(hex(hi));
                    }
                }
                for (Map.Entry<Integer, StringBuilder> c : classes.entrySet()) alts.add("[" + c.getValue() + "] a" + k + "s" + c.getKey());
                if (s.isAccept()) alts.add("\"\"");
                count(3L * alts.size() - (s.isAccept() ? 2 : 0));
                if (alts.isEmpty()) alts.add("a" + k + "s" + e.getValue()); // a dead state: derives no text (pruned)
                g.append('a').append(k).append('s').append(e.getValue()).append(" ::= ").append(String.join(" | ", alts)).append('\n');
            }
        }

        /** The rules so far, one a line. */
        String text() {
            return g.toString();
        }
    }

    private static String hex(char c) {
        return String.format("\\u%04X", (int) c);
    }
}
