package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.BasicAutomata;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.function.IntPredicate;
import java.util.function.Supplier;

/**
 * A client's regular expression (Python's {@code re} and JavaScript's syntax, as vLLM's {@code guided_regex} and SGLang's
 * {@code regex} take it) as an automaton of the language it matches whole: literals, escapes ({@code \d \w \s \D \W \S},
 * {@code \n \t \r \f \v}, {@code \xhh}, {@code \\uhhhh}, an escaped punctuation character), classes ({@code [a-z_]},
 * {@code [^"\\]}), {@code .} (any character but a line break), groups ({@code (…)}, {@code (?:…)}), alternation, the
 * quantifiers {@code * + ? {m} {m,} {m,n} {,n}} (lazy ones too: the language is the same), and {@code ^} and {@code $} at the
 * very ends only. Built with dk.brics.automaton's operations, never its own regex syntax ({@code & ~ # @ < > "} are
 * operators there). Refused, with the construct and its position: lookarounds, backreferences, named groups, inline
 * flags, anchors inside, word boundaries, possessive quantifiers, Unicode properties, nested classes.
 *
 * <p>Determinization is capped ({@link #MAX_STATES}): a hostile expression ({@code (a|b)*a(a|b){40}}) is a refusal, not an
 * engine busy for minutes. Pure; callers serialize (dk.brics numbers its states with a static counter).
 */
public final class ClientRegex {
    /** Most characters of an expression. */
    public static final int MAX_LENGTH = 16_384;
    /** Largest count of a {@code {m,n}} quantifier. */
    public static final int MAX_REPEAT = 256;
    /** Most states of a compiled (deterministic) automaton. */
    public static final int MAX_STATES = 20_000;
    /** Most states of an automaton before it is made deterministic (the expression's size, repetitions expanded). */
    static final int MAX_NFA_STATES = 50_000;
    /**
     * Most transitions by character class of one minimization ({@link #minimize}, {@link DfaMinimizer}): a bound on its
     * memory, not its time, which the compilation's deadline bounds (the minimizer checks it every few thousand steps).
     * Each costs 44 bytes of the refinement's arrays (one transition over a range is one per class inside it, so these
     * can outgrow the automaton itself): 2M is 88 MB while it runs. {@code HostileSchemaTimes}'s realistic schemas need at
     * most 14,088, its twenty optional emails 89,518, its hostile ones up to 372,086 (the allOf of six multipleOf); 2M (200,000 random states × 10 letters) took
     * 2.4 s at load 3.6 and 7.8 s at load 7 on the shared 2-core VM, 4M 4.9 s at load 3.2 (1 GB resident with its
     * automaton): 2M is about the most the 5 s deadline lets finish on a busy machine, so the bound refuses little the
     * deadline would let through, at half 4M's memory (docs/PERFORMANCE.md, session 13).
     */
    static final long MAX_MINIMIZE_TRANSITIONS = 2_000_000L;
    /** Deepest nesting of groups (the parser recurses once per level: deeper would overflow the HTTP thread's stack). */
    public static final int MAX_DEPTH = 256;

    /** The running compilation's deadline ({@link System#nanoTime}), per thread; absent: none. */
    private static final ThreadLocal<long[]> DEADLINE = new ThreadLocal<>();

    private final String src;
    private int pos;

    /**
     * A refusal for the work a spec takes, not for how it is written: past a compilation's deadline or one of the bounds on
     * its automaton and table. The compiler remembers these ({@link OutputConstraint.Compiler}), as they cost time to reach.
     */
    static final class TooComplex extends IllegalArgumentException {
        private final boolean deadline;

        TooComplex(String message) {
            this(message, false);
        }

        private TooComplex(String message, boolean deadline) {
            super(message);
            this.deadline = deadline;
        }

        /** Whether the compilation's deadline refused it (not one of the bounds on its size). */
        boolean deadline() {
            return deadline;
        }

        /** The same refusal (the deadline's or a bound's) with {@code message}, which says where it happened. */
        TooComplex reworded(String message) {
            return new TooComplex(message, deadline);
        }
    }

    /** {@code work} run with a deadline {@code nanos} from now: past it, the next {@link #checkDeadline} refuses. */
    static <T> T withDeadline(long nanos, Supplier<T> work) {
        long[] prev = DEADLINE.get();
        DEADLINE.set(new long[]{System.nanoTime() + nanos, nanos});
        try {
            return work.get();
        } finally {
            if (prev == null) DEADLINE.remove();
            else DEADLINE.set(prev);
        }
    }

    /** A refusal once the running compilation is past its deadline (a compilation runs one at a time: it bounds each turn). */
    static void checkDeadline() {
        long[] d = DEADLINE.get();
        if (d != null && System.nanoTime() - d[0] > 0) {
            throw new TooComplex("is too complex: it took over " + d[1] / 1_000_000 + " ms to compile", true);
        }
    }

    private ClientRegex(String src) {
        this.src = src;
    }

    /** The minimal deterministic automaton of the strings {@code regex} matches whole; a refusal names the construct and its position. */
    public static Automaton compile(String regex) {
        if (regex.length() > MAX_LENGTH) throw new IllegalArgumentException("is " + regex.length() + " characters long; at most " + MAX_LENGTH);
        ClientRegex p = new ClientRegex(regex);
        if (p.peek('^')) p.pos++;
        Automaton a = p.alternation(0);
        if (p.pos < regex.length()) {
            throw p.bad("an unbalanced ')'"); // the only character a whole alternation stops before
        }
        return minimal(a);
    }

    /** {@code a} deterministic (at most {@link #MAX_STATES} states, else a refusal) and minimal. */
    public static Automaton minimal(Automaton a) {
        Automaton d = determinize(a, MAX_STATES);
        minimize(d);
        return d;
    }

    /**
     * {@code d} (deterministic) minimized in place by {@link DfaMinimizer}, which stops at the compilation's deadline
     * (dk.brics's Hopcroft could not: 39,791 states × 372,086 transitions ran 6–7 s past the 5 s deadline, so a budget of
     * states × transitions refused such before they started); past {@link #MAX_MINIMIZE_TRANSITIONS} of its transitions
     * by character class it is refused before its arrays are made, naming the sizes.
     */
    static void minimize(Automaton d) {
        checkDeadline();
        DfaMinimizer.minimize(d);
    }

    /** The literal strings as an expression of this syntax: each one's punctuation escaped, the strings alternated. */
    public static String quote(List<String> literals) {
        StringBuilder b = new StringBuilder();
        for (String s : literals) {
            if (!b.isEmpty()) b.append('|');
            b.append('(');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '\n') b.append("\\n");
                else if (c < 128 && !Character.isLetterOrDigit(c) && c != ' ') b.append('\\').append(c);
                else b.append(c);
            }
            b.append(')');
        }
        return b.toString();
    }

    private IllegalArgumentException refuse(String what) {
        return new IllegalArgumentException("has " + what + " at position " + pos + ", which structured outputs do not support");
    }

    private IllegalArgumentException bad(String what) {
        return new IllegalArgumentException("is invalid at position " + pos + ": " + what);
    }

    private boolean peek(char c) {
        return pos < src.length() && src.charAt(pos) == c;
    }

    private Automaton alternation(int depth) {
        List<Automaton> alts = new ArrayList<>();
        alts.add(sequence(depth));
        while (peek('|')) {
            pos++;
            alts.add(sequence(depth));
        }
        return alts.size() == 1 ? alts.getFirst() : Automaton.union(alts);
    }

    private Automaton sequence(int depth) {
        List<Automaton> parts = new ArrayList<>();
        while (pos < src.length() && !peek('|') && !peek(')')) {
            if (peek('$')) {
                if (pos == src.length() - 1 && depth == 0) {
                    pos++;
                    break;
                }
                throw refuse("an anchor '$' inside the expression (only at its end)");
            }
            if (peek('^')) throw refuse("an anchor '^' inside the expression (only at its start)");
            parts.add(quantified(atom(depth)));
        }
        if (parts.isEmpty()) return BasicAutomata.makeEmptyString();
        Automaton a = concatenation(parts);
        checkSize(a);
        return a;
    }

    /** Parts concatenated at most this many at a time ({@link #concatenation}). */
    static final int CONCATENATION_BATCH = 32;

    /**
     * The parts concatenated. dk.brics joins them by epsilon moves: each part's accepting states take the next part's
     * start's transitions, so a run of parts that accept the empty string ({@code .*} 2,000 times, 4,000 characters) gave
     * every state a transition to each later one: millions of transitions, built for minutes with no look at the deadline,
     * the compiler's turn held meanwhile. So at most {@link #CONCATENATION_BATCH} at a time, the deadline checked between,
     * and a batch that grew more transitions than a few per state made minimal (deterministic: {@code .*.*…} is one
     * state) before the batches are joined the same way; the same language.
     */
    static Automaton concatenation(List<Automaton> parts) {
        if (parts.size() <= CONCATENATION_BATCH) return Automaton.concatenate(parts);
        List<Automaton> batches = new ArrayList<>();
        for (int i = 0; i < parts.size(); i += CONCATENATION_BATCH) {
            checkDeadline();
            Automaton b = Automaton.concatenate(parts.subList(i, Math.min(parts.size(), i + CONCATENATION_BATCH)));
            if (b.getNumberOfTransitions() > 4L * b.getNumberOfStates() + 64) b = minimal(b);
            batches.add(b);
        }
        return concatenation(batches);
    }

    private static void checkSize(Automaton a) {
        if (a.getNumberOfStates() > MAX_NFA_STATES) {
            throw new TooComplex("is too large: over " + MAX_NFA_STATES + " automaton states before determinization");
        }
    }

    private Automaton quantified(Automaton a) {
        while (pos < src.length()) {
            char c = src.charAt(pos);
            int min, max; // max -1: no limit
            int at = pos;
            if (c == '*') {
                min = 0;
                max = -1;
                pos++;
            } else if (c == '+') {
                min = 1;
                max = -1;
                pos++;
            } else if (c == '?') {
                min = 0;
                max = 1;
                pos++;
            } else if (c == '{' && isCount()) {
                pos++;
                min = number();
                max = min;
                if (peek(',')) {
                    pos++;
                    max = peek('}') ? -1 : number();
                }
                pos++; // '}'
                if (max != -1 && max < min) {
                    pos = at;
                    throw bad("{" + min + "," + max + "} has its maximum below its minimum");
                }
                if (min > MAX_REPEAT || max > MAX_REPEAT) {
                    pos = at;
                    throw refuse("a count above " + MAX_REPEAT);
                }
            } else {
                return a;
            }
            checkDeadline();
            if (peek('+')) throw refuse("a possessive quantifier");
            if (peek('?')) pos++; // lazy: the same language
            // The repeated part minimal first: its copies stay small ((a|b){0,256} nested again costs a DFA of hundreds, not
            // a subset construction over an NFA of hundreds of thousands).
            a = minimal(a);
            if ((long) a.getNumberOfStates() * Math.max(max, min + 1) > MAX_NFA_STATES) { // the copies, before they are made
                pos = at;
                throw new TooComplex("is too large at position " + at + ": over " + MAX_NFA_STATES
                        + " automaton states before determinization");
            }
            a = max == -1 ? a.repeat(min) : a.repeat(min, max);
            checkSize(a);
            if (peek('*') || peek('+') || peek('?') || peek('{') && isCount()) throw bad("a quantifier after a quantifier ('" + src.charAt(pos) + "')");
        }
        return a;
    }

    /** Whether a '{' at pos starts a count ({m}, {m,}, {m,n}); else it is a literal, as Python reads it. */
    private boolean isCount() {
        int i = pos + 1, digits = 0;
        while (i < src.length() && Character.isDigit(src.charAt(i))) {
            i++;
            digits++;
        }
        if (digits == 0) { // Python's {,n}: zero to n
            if (i >= src.length() || src.charAt(i) != ',' || i + 1 >= src.length() || !Character.isDigit(src.charAt(i + 1))) return false;
        }
        if (i < src.length() && src.charAt(i) == ',') {
            i++;
            while (i < src.length() && Character.isDigit(src.charAt(i))) i++;
        }
        return i < src.length() && src.charAt(i) == '}';
    }

    private int number() {
        int start = pos;
        while (pos < src.length() && Character.isDigit(src.charAt(pos))) pos++;
        String digits = src.substring(start, pos);
        if (digits.isEmpty()) return 0;
        return digits.length() > 6 ? Integer.MAX_VALUE : Integer.parseInt(digits);
    }

    private Automaton atom(int depth) {
        char c = src.charAt(pos);
        switch (c) {
            case '(' -> {
                return group(depth);
            }
            case '[' -> {
                return charClass();
            }
            case '.' -> {
                pos++;
                return anyBut("\n\r\u0085\u2028\u2029");
            }
            case '\\' -> {
                return escape(false);
            }
            case '*', '+', '?' -> throw bad("nothing to repeat before '" + c + "'");
            default -> {
                if (c == '{' && isCount()) throw bad("nothing to repeat before '{'");
                if (src.startsWith("{,}", pos)) throw refuse("'{,}' (zero or more in Python, the characters themselves in JavaScript)");
                noSurrogate(c);
                pos++;
                return BasicAutomata.makeChar(c);
            }
        }
    }

    private Automaton group(int depth) {
        int open = pos;
        if (depth >= MAX_DEPTH) throw refuse("groups nested deeper than " + MAX_DEPTH);
        pos++;
        if (peek('?')) {
            String rest = src.substring(pos, Math.min(src.length(), pos + 3));
            if (rest.startsWith("?:")) {
                pos += 2;
            } else {
                pos = open;
                if (rest.startsWith("?=") || rest.startsWith("?!")) throw refuse("a lookahead '(" + rest.substring(0, 2) + "'");
                if (rest.startsWith("?<=") || rest.startsWith("?<!")) throw refuse("a lookbehind '(" + rest + "'");
                if (rest.startsWith("?P<") || rest.startsWith("?<")) throw refuse("a named group");
                if (rest.startsWith("?P=")) throw refuse("a named backreference");
                if (rest.startsWith("?#")) throw refuse("a comment group");
                if (rest.startsWith("?(")) throw refuse("a conditional group");
                if (rest.startsWith("?>")) throw refuse("an atomic group");
                throw refuse("an inline flag group '(" + rest + "'");
            }
        }
        Automaton a = alternation(depth + 1);
        if (!peek(')')) {
            pos = open;
            throw bad("'(' is never closed");
        }
        pos++;
        return a;
    }

    /** A backslash escape at pos: in a class ({@code inClass}) too, where only single characters and \d \w \s… are meaningful. */
    private Automaton escape(boolean inClass) {
        return escape(inClass, BOTH);
    }

    /** Which language's class escapes {@link #escape} means: both (what both admit), Python's (str: Unicode), JavaScript's. */
    private static final int BOTH = 0, PYTHON = 1, JAVASCRIPT = 2;

    private Automaton escape(boolean inClass, int lang) {
        int at = pos;
        pos++;
        if (pos >= src.length()) {
            pos = at;
            throw bad("a trailing backslash");
        }
        char c = src.charAt(pos++);
        switch (c) {
            case 'd' -> {
                return lang == PYTHON ? UNICODE_DIGIT.clone() : BasicAutomata.makeCharRange('0', '9');
            }
            case 'D' -> {
                return lang == JAVASCRIPT ? anyBut("0123456789") : anyChar().minus(UNICODE_DIGIT);
            }
            case 'w' -> {
                return lang == PYTHON ? UNICODE_WORD.clone() : word();
            }
            case 'W' -> {
                return anyChar().minus(lang == JAVASCRIPT ? word() : UNICODE_WORD);
            }
            case 's' -> {
                return BasicAutomata.makeCharSet(lang == PYTHON ? SPACE + PYTHON_SPACE : lang == JAVASCRIPT ? SPACE + JS_SPACE : SPACE);
            }
            case 'S' -> {
                return anyBut(lang == PYTHON ? SPACE + PYTHON_SPACE : lang == JAVASCRIPT ? SPACE + JS_SPACE : SPACE + PYTHON_SPACE + JS_SPACE);
            }
            case 'n' -> {
                return BasicAutomata.makeChar('\n');
            }
            case 't' -> {
                return BasicAutomata.makeChar('\t');
            }
            case 'r' -> {
                return BasicAutomata.makeChar('\r');
            }
            case 'f' -> {
                return BasicAutomata.makeChar('\f');
            }
            case 'v' -> {
                return BasicAutomata.makeChar('\u000B');
            }
            case '0' -> { // Python's (and JavaScript's legacy) octal escape: \0 and up to two more octal digits
                int v = 0;
                for (int k = 0; k < 2 && pos < src.length() && src.charAt(pos) >= '0' && src.charAt(pos) <= '7'; k++) v = v * 8 + src.charAt(pos++) - '0';
                return BasicAutomata.makeChar((char) v);
            }
            case 'x' -> {
                return BasicAutomata.makeChar(hex(2, at));
            }
            case 'u' -> {
                return BasicAutomata.makeChar(hex(4, at));
            }
            case 'b' -> {
                if (inClass) return BasicAutomata.makeChar('\b');
                pos = at;
                throw refuse("a word boundary '\\b'");
            }
            default -> {
                pos = at;
                if (c >= '1' && c <= '9') throw refuse("a backreference '\\" + c + "'");
                if (c == 'B') throw refuse("a word boundary '\\B'");
                if (c == 'A' || c == 'Z' || c == 'z' || c == 'G') throw refuse("an anchor '\\" + c + "'");
                if (c == 'p' || c == 'P') throw refuse("a Unicode property '\\" + c + "'");
                if (c == 'k') throw refuse("a named backreference '\\k'");
                if (Character.isLetterOrDigit(c)) throw bad("an unknown escape '\\" + c + "'");
                pos = at + 2;
                return BasicAutomata.makeChar(c); // an escaped punctuation character (or any other non-alphanumeric) is itself
            }
        }
    }

    /**
     * {@code \s} in both Python (str patterns: Unicode) and JavaScript; Python's adds {@link #PYTHON_SPACE}, JavaScript's
     * {@link #JS_SPACE}. An expression admits only what both languages admit, so a text it matches passes in both
     * ({@code \S} took U+200A, a token of stories260K's vocabulary that both call a space).
     */
    private static final String SPACE = " \t\n\r\f\u000B\u00A0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200A"
            + "\u2028\u2029\u202F\u205F\u3000";
    private static final String PYTHON_SPACE = "\u001C\u001D\u001E\u001F\u0085", JS_SPACE = "\uFEFF";

    /** Python's {@code \w} in a str pattern: alphanumeric (letters, digits, other numerics) or '_'. */
    private static boolean isUnicodeWord(int c) {
        int t = Character.getType(c);
        return c == '_' || Character.isLetterOrDigit(c) || t == Character.LETTER_NUMBER || t == Character.OTHER_NUMBER;
    }

    private static final Automaton UNICODE_WORD = set(ClientRegex::isUnicodeWord), UNICODE_DIGIT = set(Character::isDigit);

    /** The one-character automaton of the BMP characters {@code in} holds. */
    private static Automaton set(IntPredicate in) {
        List<Automaton> ranges = new ArrayList<>();
        for (int c = 0; c <= Character.MAX_VALUE; c++) {
            if (!in.test(c)) continue;
            int start = c;
            while (c + 1 <= Character.MAX_VALUE && in.test(c + 1)) c++;
            ranges.add(BasicAutomata.makeCharRange((char) start, (char) c));
        }
        return Automaton.union(ranges);
    }

    private static Automaton word() {
        return BasicAutomata.makeCharRange('a', 'z').union(BasicAutomata.makeCharRange('A', 'Z')).union(BasicAutomata.makeCharRange('0', '9'))
                .union(BasicAutomata.makeChar('_'));
    }

    /**
     * Any one character the output can hold: a BMP character, never half of a surrogate pair. The automaton steps over
     * UTF-16 units, so '.' or a negated class taking a half would match an emoji as two characters, and a quantifier
     * after an emoji would repeat its second half; characters beyond U+FFFF are refused in an expression and never
     * generated (narrower than Python's and JavaScript's u-mode languages, never wider).
     */
    private static Automaton anyChar() {
        return BasicAutomata.makeCharRange('\u0000', '\uD7FF').union(BasicAutomata.makeCharRange('\uE000', '\uFFFF'));
    }

    private void noSurrogate(char c) {
        if (Character.isSurrogate(c)) throw refuse("a character beyond U+FFFF (or half of one)");
    }

    private static Automaton anyBut(String chars) {
        return anyChar().minus(BasicAutomata.makeCharSet(chars));
    }

    private char hex(int digits, int at) {
        if (pos + digits > src.length()) {
            pos = at;
            throw bad("an escape needs " + digits + " hex digits");
        }
        int v = 0;
        for (int i = 0; i < digits; i++) {
            int d = Character.digit(src.charAt(pos + i), 16);
            if (d < 0) {
                pos = at;
                throw bad("an escape needs " + digits + " hex digits");
            }
            v = v * 16 + d;
        }
        pos += digits;
        if (Character.isSurrogate((char) v)) {
            pos = at;
            noSurrogate((char) v);
        }
        return (char) v;
    }

    /**
     * A class at pos ('['): its characters' automaton (one character long), those it holds in Python and in JavaScript
     * ({@code [^\W]}, {@code [\s\S]} differ by language; each of their one-language sets is exact, so the two meet).
     */
    private Automaton charClass() {
        int open = pos;
        Automaton python = charClass(PYTHON);
        int end = pos;
        pos = open;
        Automaton js = charClass(JAVASCRIPT);
        pos = end;
        return python.intersection(js);
    }

    private Automaton charClass(int lang) {
        int open = pos;
        pos++;
        boolean negated = peek('^');
        if (negated) pos++;
        List<Automaton> items = new ArrayList<>();
        boolean first = true;
        while (true) {
            if (pos >= src.length()) {
                pos = open;
                throw bad("'[' is never closed");
            }
            char c = src.charAt(pos);
            if (c == ']' && !first) {
                pos++;
                break;
            }
            first = false;
            if (c == '[') throw refuse("a nested class or set operation '['");
            char lo;
            if (c == '\\') {
                Automaton e = escape(true, lang);
                String single = e.getSingleton();
                if (single == null || single.length() != 1) { // \d, \w, \s and their negations: not a range's end
                    items.add(e);
                    continue;
                }
                lo = single.charAt(0);
            } else {
                noSurrogate(c);
                lo = c;
                pos++;
            }
            if (peek('-') && pos + 1 < src.length() && src.charAt(pos + 1) != ']') {
                int dash = pos;
                pos++;
                char hi;
                if (peek('\\')) {
                    Automaton e = escape(true);
                    String single = e.getSingleton();
                    if (single == null || single.length() != 1) {
                        pos = dash;
                        throw bad("a range ending in a class escape");
                    }
                    hi = single.charAt(0);
                } else {
                    if (peek('[')) throw refuse("a nested class or set operation '['");
                    noSurrogate(src.charAt(pos));
                    hi = src.charAt(pos++);
                }
                if (hi < lo) {
                    pos = dash;
                    throw bad("the range " + lo + "-" + hi + " is reversed");
                }
                items.add(BasicAutomata.makeCharRange(lo, hi));
            } else {
                items.add(BasicAutomata.makeChar(lo));
            }
        }
        Automaton set = items.isEmpty() ? BasicAutomata.makeEmpty() : Automaton.union(items);
        if (negated) set = anyChar().minus(set);
        return set;
    }

    /**
     * The intersection of two automata with a cap: the strings both accept, minimal; a product of over {@link #MAX_NFA_STATES} reachable state pairs, or a minimal one of over {@link #MAX_STATES},
     * is a refusal ("too complex"), as dk.brics's own would go on for as long as the pairs come.
     */
    static Automaton product(Automaton a, Automaton b) {
        a = determinize(a, MAX_STATES);
        b = determinize(b, MAX_STATES);
        record Pair(State p, State q) {
        }
        Map<Pair, State> made = new HashMap<>();
        ArrayDeque<Pair> work = new ArrayDeque<>();
        Pair start = new Pair(a.getInitialState(), b.getInitialState());
        State init = new State();
        made.put(start, init);
        work.add(start);
        while (!work.isEmpty()) {
            if ((made.size() & 255) == 0) checkDeadline();
            Pair pq = work.poll();
            State from = made.get(pq);
            from.setAccept(pq.p().isAccept() && pq.q().isAccept());
            List<Transition> qs = pq.q().getSortedTransitions(false);
            for (Transition tp : pq.p().getSortedTransitions(false)) {
                for (Transition tq : qs) {
                    if (tq.getMax() < tp.getMin() || tq.getMin() > tp.getMax()) continue;
                    char lo = (char) Math.max(tp.getMin(), tq.getMin()), hi = (char) Math.min(tp.getMax(), tq.getMax());
                    step(made, work, from, lo, hi, new Pair(tp.getDest(), tq.getDest()));
                }
            }
        }
        Automaton d = new Automaton();
        d.setInitialState(init);
        d.setDeterministic(true);
        d.reduce();
        minimize(d);
        if (d.getNumberOfStates() > MAX_STATES) throw new TooComplex("is too complex: its automaton has over " + MAX_STATES + " states");
        return d;
    }

    private static <P> void step(Map<P, State> made, ArrayDeque<P> work, State from, char lo, char hi, P to) {
        State dest = made.get(to);
        if (dest == null) {
            if (made.size() >= MAX_NFA_STATES) {
                throw new TooComplex("is too complex: combining its automata takes over " + MAX_NFA_STATES + " states");
            }
            dest = new State();
            made.put(to, dest);
            work.add(to);
        }
        from.addTransition(new Transition(lo, hi, dest));
    }

    /**
     * The subset construction with a cap: {@code a} as a deterministic automaton of at most {@code maxStates} states, or a
     * refusal saying the language is too complex. (dk.brics's own would go on for as long as the states come.)
     */
    static Automaton determinize(Automaton a, int maxStates) {
        if (a.isDeterministic() && a.getNumberOfStates() <= maxStates) return a;
        a = a.clone();
        State[] nfa = a.getStates().toArray(new State[0]);
        Map<State, Integer> index = new HashMap<>();
        for (int i = 0; i < nfa.length; i++) index.put(nfa[i], i);
        Map<BitSet, State> seen = new HashMap<>();
        ArrayDeque<BitSet> work = new ArrayDeque<>();
        BitSet start = new BitSet();
        start.set(index.get(a.getInitialState()));
        State init = new State();
        seen.put(start, init);
        work.add(start);
        while (!work.isEmpty()) {
            checkDeadline();
            BitSet set = work.poll();
            State from = seen.get(set);
            TreeSet<Integer> points = new TreeSet<>();
            for (int s = set.nextSetBit(0); s >= 0; s = set.nextSetBit(s + 1)) {
                if (nfa[s].isAccept()) from.setAccept(true);
                for (Transition t : nfa[s].getTransitions()) {
                    points.add((int) t.getMin());
                    points.add(t.getMax() + 1);
                }
            }
            Integer[] p = points.toArray(new Integer[0]);
            for (int k = 0; k + 1 < p.length; k++) {
                char lo = (char) (int) p[k], hi = (char) (p[k + 1] - 1);
                BitSet to = new BitSet();
                for (int s = set.nextSetBit(0); s >= 0; s = set.nextSetBit(s + 1)) {
                    for (Transition t : nfa[s].getTransitions()) {
                        if (t.getMin() <= lo && hi <= t.getMax()) to.set(index.get(t.getDest()));
                    }
                }
                if (to.isEmpty()) continue;
                State dest = seen.get(to);
                if (dest == null) {
                    if (seen.size() >= maxStates) {
                        throw new TooComplex("is too complex: its automaton has over " + maxStates + " states");
                    }
                    dest = new State();
                    seen.put(to, dest);
                    work.add(to);
                }
                from.addTransition(new Transition(lo, hi, dest));
            }
        }
        Automaton d = new Automaton();
        d.setInitialState(init);
        d.setDeterministic(true);
        d.reduce();
        return d;
    }
}
