package io.kvferry.engine.model;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A client's grammar (SGLang's {@code ebnf}, vLLM's {@code guided_grammar}) as GBNF writes it (llama.cpp's grammars,
 * xgrammar's EBNF): {@code name ::= alternatives} rules, {@code root} the start; string literals, character classes
 * ({@code [a-z]}, negated {@code [^"\\]}), {@code .}, groups, {@code |}, postfix {@code * + ?} and {@code {m}},
 * {@code {m,}}, {@code {m,n}}; {@code #} comments; a rule may span lines (the next rule starts at a name followed by
 * {@code ::=}). Flattened to a context-free grammar over characters (UTF-16 units, as the output's text is read):
 * productions whose symbols are nonterminals or terminals (character sets as ranges), a repetition a new left-recursive
 * or optional nonterminal, a group a new nonterminal; the language is exact (any recursion, left recursion included),
 * recognised by {@link Earley}. A character outside the Basic Multilingual Plane in a literal is its two surrogates;
 * {@code .} and a negated class match one character, a surrogate pair included. Rules that derive no text are dropped
 * (a grammar whose root derives none is refused). A refusal is an {@link IllegalArgumentException} whose message reads
 * after "the grammar" and says where (line:column).
 */
public final class EbnfGrammar {
    /** Most symbols after flattening (every production's symbols, plus one per production): what a grammar costs to hold and predict. */
    public static final int MAX_SYMBOLS = 10_000;
    /** Largest count of a {@code {m,n}} repetition. */
    public static final int MAX_COUNT = 1_000;
    /**
     * Deepest nesting of groups {@code ( … )}: the parser descends once per group, and a few thousand nested ones overflowed
     * its stack (a StackOverflowError: the router's connection dropped with no answer). The regex limit's.
     */
    public static final int MAX_DEPTH = ClientRegex.MAX_DEPTH;

    /** Productions: the left side (a nonterminal) and the right side (a symbol &gt;= 0 a nonterminal, &lt; 0 terminal {@code -s-1}). */
    final int[] lhs;
    final int[][] rhs;
    /** Terminals: sorted, disjoint inclusive ranges {@code lo, hi, lo, hi, …}. */
    final char[][] terminals;
    /** Each nonterminal's productions. */
    final int[][] byLhs;
    final boolean[] nullable;
    /** The augmented start: {@code start ::= root}, production {@link #startProduction}. */
    final int start, startProduction;
    final String[] names;
    private final int symbols;

    private EbnfGrammar(int[] lhs, int[][] rhs, char[][] terminals, String[] names, int start, int startProduction, int symbols) {
        this.lhs = lhs;
        this.rhs = rhs;
        this.terminals = terminals;
        this.names = names;
        this.start = start;
        this.startProduction = startProduction;
        this.symbols = symbols;
        int n = names.length;
        List<List<Integer>> by = new ArrayList<>();
        for (int i = 0; i < n; i++) by.add(new ArrayList<>());
        for (int p = 0; p < lhs.length; p++) by.get(lhs[p]).add(p);
        byLhs = new int[n][];
        for (int i = 0; i < n; i++) byLhs[i] = by.get(i).stream().mapToInt(Integer::intValue).toArray();
        nullable = new boolean[n];
        for (boolean changed = true; changed; ) {
            changed = false;
            for (int p = 0; p < lhs.length; p++) {
                if (nullable[lhs[p]]) continue;
                boolean all = true;
                for (int s : rhs[p]) {
                    if (s < 0 || !nullable[s]) {
                        all = false;
                        break;
                    }
                }
                if (all) {
                    nullable[lhs[p]] = true;
                    changed = true;
                }
            }
        }
    }

    /** Symbols after flattening (the size the compiler's cache counts). */
    public int symbols() {
        return symbols;
    }

    /** Whether {@code c} is in terminal {@code t}. */
    boolean has(int t, char c) {
        char[] r = terminals[t];
        int lo = 0, hi = r.length / 2 - 1;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            if (c < r[2 * mid]) hi = mid - 1;
            else if (c > r[2 * mid + 1]) lo = mid + 1;
            else return true;
        }
        return false;
    }

    /** Parses and flattens {@code text}; a refusal's message says what is wrong and where. */
    public static EbnfGrammar parse(String text) {
        return new Parser(text).grammar();
    }

    private static final class Parser {
        private final String s;
        private int pos;
        private final Map<String, Integer> ids = new LinkedHashMap<>();
        private final List<String> names = new ArrayList<>();
        /** Where each rule is first referenced (for an undefined one), and where each is defined. */
        private final Map<String, Integer> firstUse = new HashMap<>(), definedAt = new HashMap<>();
        private final List<Integer> lhs = new ArrayList<>();
        private final List<int[]> rhs = new ArrayList<>();
        private final List<char[]> terminals = new ArrayList<>();
        private final Map<String, Integer> terminalIds = new HashMap<>();
        private int symbols;
        private int anyChar = -1;
        /** Groups open around the parser's place. */
        private int depth;

        Parser(String s) {
            this.s = s;
        }

        EbnfGrammar grammar() {
            skip();
            if (pos >= s.length()) throw fault("is empty: it needs a root rule (root ::= …)", pos);
            while (pos < s.length()) {
                rule();
                skip();
            }
            for (Map.Entry<String, Integer> e : firstUse.entrySet()) {
                if (!definedAt.containsKey(e.getKey())) {
                    // the first undefined one by place, so the message is the same every time
                    int at = firstUse.entrySet().stream().filter(x -> !definedAt.containsKey(x.getKey()))
                            .mapToInt(Map.Entry::getValue).min().orElseThrow();
                    String name = firstUse.entrySet().stream().filter(x -> x.getValue() == at).findFirst().orElseThrow().getKey();
                    throw fault("has an undefined rule '" + name + "'", at);
                }
            }
            if (!definedAt.containsKey("root")) throw fault("has no root rule (the start: root ::= …)", s.length());
            int start = nonterminal("<start>");
            int startProduction = production(start, new int[]{ids.get("root")}, pos);
            return prune(start, startProduction);
        }

        /** Drops the productions that derive no text (a symbol that derives none in them); refuses a root that derives none. */
        private EbnfGrammar prune(int start, int startProduction) {
            int n = names.size();
            boolean[] productive = new boolean[n];
            boolean[] emptyTerminal = new boolean[terminals.size()];
            for (int t = 0; t < terminals.size(); t++) emptyTerminal[t] = terminals.get(t).length == 0;
            for (boolean changed = true; changed; ) {
                changed = false;
                for (int p = 0; p < lhs.size(); p++) {
                    if (productive[lhs.get(p)]) continue;
                    if (derives(rhs.get(p), productive, emptyTerminal)) {
                        productive[lhs.get(p)] = true;
                        changed = true;
                    }
                }
            }
            if (!productive[start]) throw new IllegalArgumentException("matches no text at all (its root rule derives no text)");
            List<Integer> keep = new ArrayList<>();
            for (int p = 0; p < lhs.size(); p++) if (derives(rhs.get(p), productive, emptyTerminal)) keep.add(p);
            int[] l = new int[keep.size()];
            int[][] r = new int[keep.size()][];
            int sp = -1;
            for (int i = 0; i < keep.size(); i++) {
                l[i] = lhs.get(keep.get(i));
                r[i] = rhs.get(keep.get(i));
                if (keep.get(i) == startProduction) sp = i;
            }
            return new EbnfGrammar(l, r, terminals.toArray(new char[0][]), names.toArray(new String[0]), start, sp, symbols);
        }

        private static boolean derives(int[] rhs, boolean[] productive, boolean[] emptyTerminal) {
            for (int x : rhs) {
                if (x >= 0 ? !productive[x] : emptyTerminal[-x - 1]) return false;
            }
            return true;
        }

        private void rule() {
            int at = pos;
            String name = name();
            if (name == null) throw fault("expected a rule name (letters, digits, _ and -) but found " + found(), pos);
            skip();
            if (!s.startsWith("::=", pos)) throw fault("expected '::=' after the rule name '" + name + "' but found " + found(), pos);
            pos += 3;
            Integer before = definedAt.get(name);
            if (before != null) {
                throw fault("defines the rule '" + name + "' twice (first at " + where(before) + ")", at);
            }
            definedAt.put(name, at);
            int id = nonterminal(name);
            alternatives(id, false);
        }

        /** Alternatives of {@code id} up to the next rule (top level) or the closing parenthesis (a group). */
        private void alternatives(int id, boolean group) {
            while (true) {
                int at = pos;
                production(id, sequence(group), at);
                skip();
                if (pos < s.length() && s.charAt(pos) == '|') {
                    pos++;
                    continue;
                }
                return;
            }
        }

        private int[] sequence(boolean group) {
            List<Integer> seq = new ArrayList<>();
            while (true) {
                skip();
                if (pos >= s.length()) break; // a group's '(' never closed: its caller says where it opened
                char c = s.charAt(pos);
                if (c == '|') break;
                if (c == ')') {
                    if (!group) throw fault("has a ')' with no '(' before it", pos);
                    break;
                }
                if (!group && startsRule()) break;
                int at = pos;
                List<Integer> item = primary();
                item = postfix(item, at);
                seq.addAll(item);
            }
            return seq.stream().mapToInt(Integer::intValue).toArray();
        }

        /** Whether a rule (name ::=) starts here. */
        private boolean startsRule() {
            int save = pos;
            try {
                if (name() == null) return false;
                skip();
                return s.startsWith("::=", pos);
            } finally {
                pos = save;
            }
        }

        /** One primary's symbols (a literal is several). */
        private List<Integer> primary() {
            int at = pos;
            char c = s.charAt(pos);
            switch (c) {
                case '"' -> {
                    pos++;
                    List<Integer> out = new ArrayList<>();
                    while (true) {
                        if (pos >= s.length() || s.charAt(pos) == '\n') throw fault("has a string literal never closed", at);
                        char d = s.charAt(pos);
                        if (d == '"') {
                            pos++;
                            return out;
                        }
                        int cp = d == '\\' ? escape() : s.codePointAt(pos);
                        if (d != '\\') pos += Character.charCount(cp);
                        for (char u : Character.toChars(cp)) out.add(terminal(new char[]{u, u}));
                    }
                }
                case '[' -> {
                    return List.of(charClass());
                }
                case '.' -> {
                    pos++;
                    return List.of(anyChar());
                }
                case '(' -> {
                    pos++;
                    if (pos < s.length() && s.charAt(pos) == '=') throw fault("has a lookahead assertion '(=', which is not supported", at);
                    if (depth >= MAX_DEPTH) throw fault("has groups '(' nested deeper than " + MAX_DEPTH, at);
                    int id = nonterminal("<group " + names.size() + ">");
                    depth++;
                    alternatives(id, true);
                    depth--;
                    skip();
                    if (pos >= s.length() || s.charAt(pos) != ')') throw fault("has a '(' never closed", at);
                    pos++;
                    return List.of(id);
                }
                case '\'' -> throw fault("has a single-quoted string: write string literals in double quotes", at);
                case '<' -> throw fault("has a token reference '<…>', which is not supported (only text is matched)", at);
                default -> {
                    String name = name();
                    if (name == null) throw fault("has an unexpected " + found(), at);
                    firstUse.putIfAbsent(name, at);
                    return List.of(nonterminal(name));
                }
            }
        }

        private List<Integer> postfix(List<Integer> item, int at) {
            while (true) {
                int before = pos;
                skip(); // llama.cpp takes space before an operator ("x *"); no rule starts with one, so a newline too
                char c = pos < s.length() ? s.charAt(pos) : ' ';
                if (c != '*' && c != '+' && c != '?' && c != '{') {
                    pos = before;
                    break;
                }
                int opAt = pos;
                pos++;
                int sym = item.size() == 1 ? item.getFirst() : wrap(item, at);
                if (c == '*') {
                    int n = nonterminal("<star " + names.size() + ">");
                    production(n, new int[]{n, sym}, opAt);
                    production(n, new int[0], opAt);
                    item = List.of(n);
                } else if (c == '+') {
                    int n = nonterminal("<plus " + names.size() + ">");
                    production(n, new int[]{n, sym}, opAt);
                    production(n, new int[]{sym}, opAt);
                    item = List.of(n);
                } else if (c == '?') {
                    int n = nonterminal("<opt " + names.size() + ">");
                    production(n, new int[]{sym}, opAt);
                    production(n, new int[0], opAt);
                    item = List.of(n);
                } else {
                    int m = count(opAt);
                    int max = m;
                    skip();
                    if (pos < s.length() && s.charAt(pos) == ',') {
                        pos++;
                        skip();
                        max = pos < s.length() && s.charAt(pos) == '}' ? -1 : count(opAt);
                        if (max >= 0 && max < m) throw fault("has a repetition {" + m + "," + max + "} whose maximum is below its minimum", opAt);
                    }
                    skip();
                    if (pos >= s.length() || s.charAt(pos) != '}') throw fault("has a repetition '{' never closed with '}'", opAt);
                    pos++;
                    List<Integer> out = new ArrayList<>();
                    for (int i = 0; i < m; i++) {
                        out.add(sym);
                        count(1, opAt);
                    }
                    if (max < 0) {
                        int n = nonterminal("<star " + names.size() + ">");
                        production(n, new int[]{n, sym}, opAt);
                        production(n, new int[0], opAt);
                        out.add(n);
                    } else if (max > m) {
                        // x{0,k}: o_k ::= x o_{k-1} | ε, built from the innermost out
                        int inner = -1;
                        for (int i = 0; i < max - m; i++) {
                            int n = nonterminal("<upto " + names.size() + ">");
                            production(n, inner < 0 ? new int[]{sym} : new int[]{sym, inner}, opAt);
                            production(n, new int[0], opAt);
                            inner = n;
                        }
                        out.add(inner);
                    }
                    item = out;
                }
            }
            return item;
        }

        /** A sequence of symbols as one nonterminal (a literal under a postfix operator). */
        private int wrap(List<Integer> item, int at) {
            int n = nonterminal("<seq " + names.size() + ">");
            production(n, item.stream().mapToInt(Integer::intValue).toArray(), at);
            return n;
        }

        private int count(int opAt) {
            skip();
            int start = pos;
            while (pos < s.length() && Character.isDigit(s.charAt(pos)) && pos - start < 9) pos++;
            if (pos == start) throw fault("has a repetition '{' without a count (write {m}, {m,} or {m,n})", opAt);
            int v = Integer.parseInt(s.substring(start, pos));
            if (v > MAX_COUNT || (pos < s.length() && Character.isDigit(s.charAt(pos)))) {
                throw fault("has a repetition count above " + MAX_COUNT, opAt);
            }
            return v;
        }

        private int charClass() {
            int at = pos;
            pos++; // [
            boolean negated = pos < s.length() && s.charAt(pos) == '^';
            if (negated) pos++;
            List<int[]> ranges = new ArrayList<>();
            while (true) {
                if (pos >= s.length() || s.charAt(pos) == '\n') throw fault("has a character class '[' never closed", at);
                if (s.charAt(pos) == ']') {
                    pos++;
                    break;
                }
                int lo = classChar(at);
                int hi = lo;
                if (pos + 1 < s.length() && s.charAt(pos) == '-' && s.charAt(pos + 1) != ']') {
                    pos++;
                    hi = classChar(at);
                    if (hi < lo) throw fault("has a character class range in the wrong order", at);
                }
                ranges.add(new int[]{lo, hi});
            }
            if (ranges.isEmpty()) { // llama.cpp reads either as no symbol at all (the empty string): refused, not guessed
                throw fault(negated ? "has an empty character class '[^]' (any one character is written .; a ']' in a class \\])"
                        : "has an empty character class '[]' (a ']' in a class is written \\])", at);
            }
            char[] set = normalise(ranges);
            if (!negated) return terminal(set);
            // Every character but these: the BMP's (no surrogates) not in the class, and any surrogate pair.
            List<int[]> rest = new ArrayList<>();
            int from = 0;
            for (int i = 0; i < set.length; i += 2) {
                if (set[i] > from) rest.add(new int[]{from, set[i] - 1});
                from = set[i + 1] + 1;
            }
            if (from <= 0xFFFF) rest.add(new int[]{from, 0xFFFF});
            int n = nonterminal("<not " + names.size() + ">");
            production(n, new int[]{terminal(normalise(withoutSurrogates(rest)))}, at);
            production(n, new int[]{terminal(new char[]{0xD800, 0xDBFF}), terminal(new char[]{0xDC00, 0xDFFF})}, at);
            return n;
        }

        private static List<int[]> withoutSurrogates(List<int[]> ranges) {
            List<int[]> out = new ArrayList<>();
            for (int[] r : ranges) {
                if (r[1] < 0xD800 || r[0] > 0xDFFF) {
                    out.add(r);
                    continue;
                }
                if (r[0] < 0xD800) out.add(new int[]{r[0], 0xD7FF});
                if (r[1] > 0xDFFF) out.add(new int[]{0xE000, r[1]});
            }
            return out;
        }

        private int classChar(int classAt) {
            int at = pos;
            int cp = s.charAt(pos) == '\\' ? escape() : s.codePointAt(pos);
            if (s.charAt(at) != '\\') pos += Character.charCount(cp);
            if (cp > 0xFFFF) {
                throw fault("has a character outside the Basic Multilingual Plane in a character class, which is not supported"
                        + " (write it as a string literal)", at);
            }
            return cp;
        }

        /** An escape at pos (the backslash): its code point; pos after it. */
        private int escape() {
            int at = pos;
            if (pos + 1 >= s.length()) throw fault("has a '\\' at its end", at);
            char e = s.charAt(pos + 1);
            pos += 2;
            return switch (e) {
                case 'n' -> '\n';
                case 'r' -> '\r';
                case 't' -> '\t';
                case '\\', '"', '\'', '[', ']', '-', '^', '/' -> e;
                case 'x' -> hex(2, at);
                case 'u' -> hex(4, at);
                case 'U' -> hex(8, at);
                default -> throw new IllegalArgumentException("has an unknown escape '\\" + e + "' at " + where(at) + " (the escapes are"
                        + " \\n \\r \\t \\\\ \\\" \\' \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH)");
            };
        }

        private int hex(int digits, int at) {
            if (pos + digits > s.length()) throw fault("has an escape with fewer than " + digits + " hex digits", at);
            int v = 0;
            for (int i = 0; i < digits; i++) {
                int d = Character.digit(s.charAt(pos + i), 16);
                if (d < 0) throw fault("has an escape with fewer than " + digits + " hex digits", at);
                v = v * 16 + d;
                if (v > Character.MAX_CODE_POINT) throw fault("has an escape past the last Unicode character", at);
            }
            pos += digits;
            return v;
        }

        private int anyChar() {
            if (anyChar < 0) {
                anyChar = nonterminal("<any>");
                production(anyChar, new int[]{terminal(new char[]{0, 0xD7FF, 0xE000, 0xFFFF})}, pos);
                production(anyChar, new int[]{terminal(new char[]{0xD800, 0xDBFF}), terminal(new char[]{0xDC00, 0xDFFF})}, pos);
            }
            pos++;
            return anyChar;
        }

        private static char[] normalise(List<int[]> ranges) {
            ranges.sort((a, b) -> Integer.compare(a[0], b[0]));
            List<int[]> merged = new ArrayList<>();
            for (int[] r : ranges) {
                if (!merged.isEmpty() && r[0] <= merged.getLast()[1] + 1) merged.getLast()[1] = Math.max(merged.getLast()[1], r[1]);
                else merged.add(new int[]{r[0], r[1]});
            }
            char[] out = new char[merged.size() * 2];
            for (int i = 0; i < merged.size(); i++) {
                out[2 * i] = (char) merged.get(i)[0];
                out[2 * i + 1] = (char) merged.get(i)[1];
            }
            return out;
        }

        private int terminal(char[] ranges) {
            String key = new String(ranges);
            Integer t = terminalIds.get(key);
            if (t == null) {
                t = terminals.size();
                terminals.add(ranges);
                terminalIds.put(key, t);
            }
            return -t - 1;
        }

        private int nonterminal(String name) {
            Integer id = ids.get(name);
            if (id == null) {
                id = names.size();
                names.add(name);
                ids.put(name, id);
            }
            return id;
        }

        private int production(int lhsId, int[] symbolsOf, int at) {
            count(symbolsOf.length + 1, at);
            lhs.add(lhsId);
            rhs.add(symbolsOf);
            return lhs.size() - 1;
        }

        private void count(int n, int at) {
            symbols += n;
            if (symbols > MAX_SYMBOLS) {
                throw new ClientRegex.TooComplex("is too large: more than " + MAX_SYMBOLS + " symbols after its repetitions are expanded (at "
                        + where(at) + ")");
            }
        }

        private String name() {
            int start = pos;
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') pos++;
                else break;
            }
            return pos > start ? s.substring(start, pos) : null;
        }

        /** Skips whitespace and comments. */
        private void skip() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c == '#') {
                    while (pos < s.length() && s.charAt(pos) != '\n') pos++;
                } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                    pos++;
                } else {
                    break;
                }
            }
        }

        private String found() {
            if (pos >= s.length()) return "the end";
            int cp = s.codePointAt(pos);
            return cp < 0x20 ? String.format("U+%04X", cp) : "'" + new String(Character.toChars(cp)) + "'";
        }

        private String where(int at) {
            int line = 1, col = 1;
            for (int i = 0; i < at && i < s.length(); i++) {
                if (s.charAt(i) == '\n') {
                    line++;
                    col = 1;
                } else {
                    col++;
                }
            }
            return "line " + line + ", column " + col;
        }

        private IllegalArgumentException fault(String what, int at) {
            return new IllegalArgumentException(what + " at " + where(at));
        }
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder();
        for (int p = 0; p < lhs.length; p++) {
            b.append(names[lhs[p]]).append(" ::=");
            for (int x : rhs[p]) b.append(' ').append(x >= 0 ? names[x] : Arrays.toString(terminals[-x - 1]));
            b.append('\n');
        }
        return b.toString();
    }
}
