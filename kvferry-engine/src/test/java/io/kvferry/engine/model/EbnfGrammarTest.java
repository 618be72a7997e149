package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.RunAutomaton;
import io.kvferry.engine.TestModels;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Grammars (GBNF, {@link EbnfGrammar}) and their exact recogniser ({@link Earley}): the syntax (literals and their
 * escapes, classes, repetitions, comments, rules over lines), the refusals with their line and column, regular grammars
 * accepting exactly what the equivalent regex does (a property on generated grammars and strings), recursive ones
 * (parentheses, arithmetic, JSON, left recursion) exactly, the mask on the real tokenizer, and the run-time bounds.
 */
class EbnfGrammarTest {
    static boolean accepts(String grammar, String text) {
        return new Earley(EbnfGrammar.parse(grammar)).matches(text);
    }

    static void check(String grammar, List<String> yes, List<String> no) {
        Earley e = new Earley(EbnfGrammar.parse(grammar));
        for (String s : yes) assertTrue(e.matches(s), "'" + s + "' under " + grammar);
        for (String s : no) assertFalse(e.matches(s), "'" + s + "' under " + grammar);
    }

    @Test
    void theSyntaxLiteralsEscapesClassesRepetitionsAndComments() {
        check("root ::= \"ab\" \"\" \"c\"", List.of("abc"), List.of("", "ab", "abcc", "a"));
        check("root ::= \"\\n\\r\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"", List.of("\n\r\t\\\"Aé😀"), List.of("\n\r\t\\\"Ae😀"));
        check("root ::= [a-c0-9_]+", List.of("a", "abc_09", "_"), List.of("", "d", "a-b"));
        check("root ::= [^\"\\\\]*", List.of("", "abc", "é", "😀x"), List.of("\"", "a\\b"));
        check("root ::= [\\]\\-\\[^]", List.of("]", "-", "[", "^"), List.of("a", "\\"));
        check("root ::= . .", List.of("ab", "😀x", "é!"), List.of("a", "abc"));
        check("root ::= [-a] [a-] [^-]", List.of("-ab", "a-x"), List.of("-a-", "b-a")); // '-' first or last is itself
        check("root ::= \"a\"{3}", List.of("aaa"), List.of("aa", "aaaa"));
        check("root ::= \"ab\"{2,}", List.of("abab", "ababab"), List.of("ab", "aba", ""));
        check("root ::= [x]{1,3} \"y\"?", List.of("x", "xxx", "xxy", "xy"), List.of("", "xxxx", "y", "xyy"));
        check("root ::= (\"a\" | \"b\" \"c\")* \"!\"", List.of("!", "a!", "bca!", "abcbc!"), List.of("b!", "a", "ac!"));
        check("""
                # a comment
                root ::= greeting
                         " " name   # rules span lines
                greeting ::= "hi" | "hello"
                name ::=
                  "Lily"
                  | "Tom"
                """, List.of("hi Lily", "hello Tom"), List.of("hi", "hey Tom", "hi Lily Tom"));
        check("root ::= a | \na ::= \"x\"", List.of("", "x"), List.of("xx"));
        check("root ::= x-y_1\nx-y_1 ::= \"ok\"", List.of("ok"), List.of("o"));
        check("root ::= \"a\" * [b] {1,2} (\"c\") +", List.of("bc", "aabbcc"), List.of("ac", "abbbc")); // space before an operator
    }

    @Test
    void refusalsSayWhatIsWrongWithLineAndColumn() {
        String[][] cases = {
                {"root ::= value\nvalue ::= \"a\" | valu\n", "has an undefined rule 'valu' at line 2, column 17"},
                {"start ::= \"a\"", "has no root rule"},
                {"", "is empty"},
                {"root ::= \"a\"\nroot ::= \"b\"", "defines the rule 'root' twice (first at line 1, column 1) at line 2, column 1"},
                {"root = \"a\"", "expected '::=' after the rule name 'root' but found '=' at line 1, column 6"},
                {"root ::= \"abc", "string literal never closed at line 1, column 10"},
                {"root ::= [a-", "character class '[' never closed at line 1, column 10"},
                {"root ::= []", "empty character class"},
                {"root ::= []a]", "has an empty character class '[]' (a ']' in a class is written \\]) at line 1, column 10"},
                {"root ::= [^]", "has an empty character class '[^]' (any one character is written .; a ']' in a class \\]) at line 1, column 10"},
                {"root ::= [z-a]", "wrong order"},
                {"root ::= (\"a\"", "'(' never closed at line 1, column 10"},
                {"root ::= \"a\")", "')' with no '('"},
                {"root ::= \"\\q\"", "unknown escape '\\q' at line 1, column 11"},
                {"root ::= \"\\x4\"", "fewer than 2 hex digits"},
                {"root ::= \"a\"{2,1}", "maximum is below its minimum"},
                {"root ::= \"a\"{1001}", "count above 1000"},
                {"root ::= \"a\"{,3}", "without a count"},
                {"root ::= 'a'", "double quotes"},
                {"root ::= <tok>", "token reference"},
                {"root ::= (= \"a\")", "lookahead"},
                {"root ::= \"a\" $", "unexpected '$' at line 1, column 14"},
                {"root ::= [\\U0001F600]", "outside the Basic Multilingual Plane"},
                {"root ::= x\nx ::= x \"a\"", "matches no text at all"},
        };
        for (String[] c : cases) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> EbnfGrammar.parse(c[0]), c[0]);
            assertTrue(e.getMessage().contains(c[1]), c[0] + " -> " + e.getMessage());
        }
        // The bounds on its size: symbols after the repetitions are expanded (a refusal for its complexity: remembered).
        IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                () -> EbnfGrammar.parse("root ::= \"a\"{0,1000} \"b\"{0,1000} \"c\"{0,1000}"));
        assertInstanceOf(ClientRegex.TooComplex.class, big);
        assertTrue(big.getMessage().contains("more than " + EbnfGrammar.MAX_SYMBOLS + " symbols"), big.getMessage());
        // Groups nested at most 256 deep: the parser descends once per group, and thousands overflowed its stack (a
        // StackOverflowError, no refusal); one past the limit is refused where that group opens.
        int most = EbnfGrammar.MAX_DEPTH;
        check("root ::= " + "(".repeat(most) + "\"x\"" + ")".repeat(most), List.of("x"), List.of("", "xx"));
        for (int depth : new int[]{EbnfGrammar.MAX_DEPTH + 1, 100_000}) {
            String g = "root ::= " + "(".repeat(depth) + "\"x\"" + ")".repeat(depth);
            IllegalArgumentException deep = assertThrows(IllegalArgumentException.class, () -> EbnfGrammar.parse(g), "depth " + depth);
            assertEquals("has groups '(' nested deeper than 256 at line 1, column " + (10 + EbnfGrammar.MAX_DEPTH), deep.getMessage());
        }
    }

    @Test
    void recursiveGrammarsAreExact() {
        check("root ::= \"(\" root \")\" root | \"\"", List.of("", "()", "(())()", "((()())())"), List.of("(", ")(", "(()", "())"));
        String arith = """
                root ::= expr
                expr ::= expr ("+" | "-") term | term
                term ::= term ("*" | "/") factor | factor
                factor ::= [0-9]+ | "(" expr ")" | "-" factor
                """;
        check(arith, List.of("1", "1+2*3", "(1+2)*3", "-(4/2)--1", "((((7))))"), List.of("", "1+", "(1+2", "1**2", "()", "1)"));
        String json = """
                root ::= value
                value ::= object | array | string | number | "true" | "false" | "null"
                object ::= "{" ws ( member ( "," ws member )* )? "}"
                member ::= string ws ":" ws value ws
                array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
                string ::= "\\"" ( [^"\\\\] | "\\\\" ["\\\\/bfnrt] )* "\\""
                number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )?
                ws ::= [ ]?
                """;
        check(json, List.of("{}", "[1, [2, {\"a\": [true, null]}], -0.5]", "{\"k\": {\"k\": {\"k\": \"v\\\"\"}}}", "\"x\""),
                List.of("{", "[1,]", "{\"a\" 1}", "01", "[[[]]", "{\"a\":1}}"));
        check("root ::= list\nlist ::= list \",\" item | item\nitem ::= [a-z]+", List.of("a", "a,bc,d"), List.of("", ",", "a,", "a,,b"));
        // Deep nesting: no depth limit.
        String deep = "(".repeat(300) + ")".repeat(300);
        assertTrue(accepts("root ::= \"(\" root \")\" | \"\"", deep));
        assertFalse(accepts("root ::= \"(\" root \")\" | \"\"", deep + ")"));
        // Nullable rules in every place (Aycock–Horspool): a ::= b b b with b nullable, c after an empty a.
        check("root ::= a \"c\" a\na ::= b b b\nb ::= \"x\" | e\ne ::= ", List.of("c", "xc", "xxxcx", "cxxx"), List.of("xxxxc", "", "cc"));
    }

    /** A random regular expression, written both as a regex (ClientRegex's syntax) and as a grammar's alternatives. */
    record Both(String regex, String gbnf) {
    }

    static Both random(SplittableRandom r, int depth) {
        int k = depth <= 0 ? r.nextInt(3) : r.nextInt(9);
        return switch (k) {
            case 0 -> {
                char c = "abc".charAt(r.nextInt(3));
                yield new Both(String.valueOf(c), "\"" + c + "\"");
            }
            case 1 -> new Both("[ab]", "[ab]");
            case 2 -> new Both("[^a]", "[^a]");
            case 3 -> {
                Both x = random(r, depth - 1), y = random(r, depth - 1);
                yield new Both("(?:" + x.regex + ")(?:" + y.regex + ")", "(" + x.gbnf + ") (" + y.gbnf + ")");
            }
            case 4 -> {
                Both x = random(r, depth - 1), y = random(r, depth - 1);
                yield new Both("(?:" + x.regex + "|" + y.regex + ")", "(" + x.gbnf + " | " + y.gbnf + ")");
            }
            case 5 -> {
                Both x = random(r, depth - 1);
                yield new Both("(?:" + x.regex + ")*", "(" + x.gbnf + ")*");
            }
            case 6 -> {
                Both x = random(r, depth - 1);
                yield new Both("(?:" + x.regex + ")+", "(" + x.gbnf + ")+");
            }
            case 7 -> {
                Both x = random(r, depth - 1);
                yield new Both("(?:" + x.regex + ")?", "(" + x.gbnf + ")?");
            }
            default -> {
                Both x = random(r, depth - 1);
                int m = r.nextInt(3), n = m + r.nextInt(3);
                String count = r.nextBoolean() ? "{" + m + "," + n + "}" : "{" + m + ",}";
                yield new Both("(?:" + x.regex + ")" + count, "(" + x.gbnf + ")" + count);
            }
        };
    }

    /** For regular grammars the recogniser accepts exactly what the equivalent regex (dk.brics, via ClientRegex) accepts. */
    @Property(seed = "20261207", tries = 200)
    void regularGrammarsAcceptWhatTheirRegexAccepts(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        Both b = random(r, 4);
        // the same language split over rules: root names a rule that holds it
        Earley e = new Earley(EbnfGrammar.parse("root ::= body\nbody ::= " + b.gbnf));
        Automaton a = ClientRegex.compile(b.regex);
        RunAutomaton run = new RunAutomaton(a);
        List<String> probes = new ArrayList<>();
        for (int i = 0; i < 60; i++) {
            StringBuilder s = new StringBuilder();
            int len = r.nextInt(9);
            for (int k = 0; k < len; k++) s.append("abcd".charAt(r.nextInt(4)));
            probes.add(s.toString());
        }
        for (int i = 0; i < 20; i++) {
            String w = walk(run, r);
            if (w != null) probes.add(w);
        }
        for (String s : probes) assertEquals(run.run(s), e.matches(s), b.regex + " / " + b.gbnf + " on '" + s + "'");
    }

    /** A random accepted string of the automaton (null if the walk found none). */
    static String walk(RunAutomaton run, SplittableRandom r) {
        StringBuilder s = new StringBuilder();
        int st = run.getInitialState();
        for (int i = 0; i < 12; i++) {
            if (run.isAccept(st) && r.nextInt(3) == 0) return s.toString();
            char c = "abcd".charAt(r.nextInt(4));
            int t = run.step(st, c);
            if (t < 0) continue;
            s.append(c);
            st = t;
        }
        return run.isAccept(st) ? s.toString() : null;
    }

    /**
     * The mask on the real tokenizer: a regular grammar masks exactly as its regex's DFA does at every step of a path; a
     * recursive one (balanced parentheses) keeps exactly the tokens whose text keeps the output a viable prefix, and the
     * end only where it is balanced.
     */
    @Test
    void theMaskOnTheRealTokenizer() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        OutputConstraint g = compiler.ebnf("root ::= name \" \" verb \" \" mood \".\"\nname ::= \"Lily\" | \"Tom\"\n"
                + "verb ::= \"is\" | \"was\"\nmood ::= \"happy\" | \"sad\"");
        OutputConstraint re = compiler.regex("(Lily|Tom) (is|was) (happy|sad)\\.");
        int vocab = tok.vocabSize();
        int[] seq = tok.encode("Once upon a time", true, false);
        int promptLength = seq.length;
        for (int step = 0; step < 30; step++) {
            float[] lg = new float[vocab], lr = new float[vocab];
            g.mask(lg, seq, promptLength, step, true, true, new int[0]);
            re.mask(lr, seq, promptLength, step, true, true, new int[0]);
            assertTrue(Arrays.equals(lr, lg), "step " + step);
            assertEquals(re.wholeMatch(seq, promptLength, step), g.wholeMatch(seq, promptLength, step));
            int next = -1;
            for (int t = vocab - 1; t > Tokenizer.EOS && next < 0; t--) if (lg[t] != Float.NEGATIVE_INFINITY) next = t;
            if (next < 0) break;
            seq = Arrays.copyOf(seq, seq.length + 1);
            seq[seq.length - 1] = next;
        }
        assertTrue(g.wholeMatch(seq, promptLength, seq.length - promptLength), tok.decode(Arrays.copyOfRange(seq, promptLength, seq.length)));
        // Balanced parentheses (not regular): after "((" a token is kept iff its text keeps the depth >= 0 with only ( and ).
        OutputConstraint parens = compiler.ebnf("root ::= \"(\" root \")\" root | \"\"");
        int open = -1, close = -1;
        for (int t = Tokenizer.EOS + 1; t < vocab; t++) {
            String text = new String(tok.pieceBytes(-1, t), StandardCharsets.UTF_8);
            if (text.equals("(")) open = t;
            if (text.equals(")")) close = t;
        }
        assertTrue(open > 0 && close > 0, "the vocabulary spells ( and )");
        int[] p = tok.encode("x", true, false);
        int[] out = {open, open};
        int[] s2 = Arrays.copyOf(p, p.length + 2);
        s2[p.length] = open;
        s2[p.length + 1] = open;
        float[] l = new float[vocab];
        parens.mask(l, s2, p.length, out.length, true, true, new int[0]);
        for (int t = 0; t < vocab; t++) {
            String text = t <= Tokenizer.EOS ? null : new String(tok.pieceBytes(-1, t), StandardCharsets.UTF_8);
            boolean viable = text != null && !text.isEmpty() && text.chars().allMatch(ch -> ch == '(' || ch == ')') && depthOk(2, text);
            assertEquals(viable, l[t] != Float.NEGATIVE_INFINITY, "token " + t + " '" + text + "'");
        }
        assertFalse(parens.wholeMatch(s2, p.length, 2));
        int[] s4 = Arrays.copyOf(s2, s2.length + 2);
        s4[s2.length] = close;
        s4[s2.length + 1] = close;
        assertTrue(parens.wholeMatch(s4, p.length, 4));
        float[] end = new float[vocab];
        parens.mask(end, s4, p.length, 4, true, true, new int[0]);
        assertTrue(end[Tokenizer.EOS] != Float.NEGATIVE_INFINITY && end[open] != Float.NEGATIVE_INFINITY && end[close] == Float.NEGATIVE_INFINITY);
    }

    /**
     * A grammar masks as the DFA of its regex under every rule of the end (EOS and BOS allowed or not: ignore_eos,
     * min_tokens; stop token ids allowed or not, one of them a text token), after a prompt of BOS alone (the first token's
     * text loses its leading space) and after a longer one, on a path of tokens through the language: the empty string's
     * language (EOS alone), optional and repeated parts, non-ASCII text; the grammar's chart kept across the path.
     */
    @Test
    void aGrammarMasksAsItsRegexUnderEveryRuleOfTheEnd() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        int vocab = tok.vocabSize();
        String[][] pairs = {{"root ::= \"\"", "()"}, {"root ::= \"a\"?", "a?"}, {"root ::= \"Once\" \" upon\"?", "Once( upon)?"},
                {"root ::= [A-Z] [a-z]* (\" \" [a-z]+)* \".\"", "[A-Z][a-z]*( [a-z]+)*\\."}, {"root ::= \"é\" | \"\\n\"", "é|\n"}};
        int[][] prompts = {tok.encode("", true, false), tok.encode("x", true, false)};
        assertEquals(1, prompts[0].length);
        for (String[] pr : pairs) {
            OutputConstraint g = compiler.ebnf(pr[0]), re = compiler.regex(pr[1]);
            for (int[] prompt : prompts) {
                int[] seq = prompt.clone();
                SplittableRandom r = new SplittableRandom(1);
                OutputConstraint.Progress progress = new OutputConstraint.Progress();
                for (int step = 0; step < 20; step++) {
                    for (int flags = 0; flags < 4; flags++) {
                        for (int[] stops : new int[][]{{}, {Tokenizer.EOS + 1, 100}}) {
                            float[] lg = new float[vocab], lr = new float[vocab];
                            g.mask(lg, seq, prompt.length, step, (flags & 1) != 0, (flags & 2) != 0, stops, progress);
                            re.mask(lr, seq, prompt.length, step, (flags & 1) != 0, (flags & 2) != 0, stops);
                            assertTrue(Arrays.equals(lr, lg), pr[0] + ", prompt " + prompt.length + ", step " + step + ", flags " + flags);
                        }
                    }
                    float[] l = new float[vocab];
                    re.mask(l, seq, prompt.length, step, false, false, new int[0]);
                    List<Integer> ok = new ArrayList<>();
                    for (int t = Tokenizer.EOS + 1; t < vocab; t++) if (l[t] == 0f) ok.add(t);
                    if (ok.isEmpty()) break;
                    seq = Arrays.copyOf(seq, seq.length + 1);
                    seq[seq.length - 1] = ok.get(r.nextInt(ok.size()));
                }
                assertTrue(g.wholeMatch(seq, prompt.length, seq.length - prompt.length) || pr[0].contains("[A-Z]"), pr[0]);
            }
        }
    }

    private static boolean depthOk(int depth, String text) {
        for (char c : text.toCharArray()) {
            depth += c == '(' ? 1 : -1;
            if (depth < 0) return false;
        }
        return true;
    }

    /**
     * A highly ambiguous grammar passes a run-time bound of the recogniser after some characters: the mask throws
     * {@link OutputConstraint.Exceeded} naming the grammar and the bound (the engines end that request with it), never a
     * hang or a wrong mask; compiling it is fine (its first set is small).
     */
    @Test
    void anAmbiguousGrammarPassesARunTimeBoundWithAClearError() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        String hostile = HostileGrammars.ambiguous();
        OutputConstraint c = new OutputConstraint.Compiler(tok).ebnf(hostile);
        int a = -1;
        for (int t = Tokenizer.EOS + 1; t < tok.vocabSize() && a < 0; t++) {
            if (new String(tok.pieceBytes(-1, t), StandardCharsets.UTF_8).equals("a")) a = t;
        }
        int[] prompt = tok.encode("x", true, false);
        int[] seq = Arrays.copyOf(prompt, prompt.length + 150);
        Arrays.fill(seq, prompt.length, seq.length, a);
        for (int step = 0; step < 4; step++) c.mask(new float[tok.vocabSize()], seq, prompt.length, step, true, true, new int[0]);
        OutputConstraint.Exceeded e = assertThrows(OutputConstraint.Exceeded.class,
                () -> c.mask(new float[tok.vocabSize()], seq, prompt.length, 150, true, true, new int[0]));
        assertTrue(e.getMessage().startsWith("the grammar (ebnf=root ::= s") && e.getMessage().contains("passed a bound of its recognizer at output token 150"),
                e.getMessage());
    }

    /**
     * A grammar goes through the same compiler as a regex or a schema: cached by its text (sent again, not compiled
     * again), a refusal for its size remembered (refused again without compiling), one for how it is written not kept.
     */
    @Test
    void theCompilerCachesGrammarsAndRemembersTheirComplexityRefusals() throws Exception {
        TestModels.requireStories();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(ModelFiles.load(null, null).tokenizer());
        String g = "root ::= \"(\" root \")\" | \"x\"";
        OutputConstraint c = compiler.ebnf(g);
        assertEquals(OutputConstraint.Kind.EBNF, c.kind());
        assertEquals(g, c.source());
        assertTrue(c == compiler.ebnf(g), "the cached constraint");
        assertTrue(c == compiler.compile(OutputConstraint.Kind.EBNF, g), "the cached constraint");
        assertEquals(1, compiler.compileCount());
        assertEquals(2, compiler.outcomes(OutputConstraint.Compiler.Outcome.CACHED));
        assertFalse(c.equals(compiler.regex("\\(x\\)")), "a regex of another text is another constraint");
        String big = "root ::= \"a\"{0,1000} \"b\"{0,1000} \"c\"{0,1000}";
        for (int i = 0; i < 2; i++) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> compiler.ebnf(big));
            assertTrue(e.getMessage().contains("more than " + EbnfGrammar.MAX_SYMBOLS + " symbols"), e.getMessage());
        }
        assertEquals(3, compiler.compileCount(), "the second refusal from memory: " + compiler.compileCount());
        assertEquals(1, compiler.refusedCount());
        for (int i = 0; i < 2; i++) assertThrows(IllegalArgumentException.class, () -> compiler.ebnf("root ::= x"));
        assertEquals(5, compiler.compileCount(), "a fault in how it is written is found again, not kept");
    }

    /** A random recursive grammar's text, and its rules: each alternative's symbols (0 "a", 1 "b", 2 root, 3 n1, 4 n2). */
    record Recursive(String text, int[][][] rules) {
    }

    /**
     * Three rules over "a" and "b" (root, n1, n2), each of one to three alternatives of zero to three symbols: left, right
     * and middle recursion, nullable rules, cycles.
     */
    static Recursive randomRecursive(SplittableRandom r) {
        String[] names = {"root", "n1", "n2"};
        String[] syms = {"\"a\"", "\"b\"", "root", "n1", "n2"};
        int[][][] rules = new int[3][][];
        StringBuilder text = new StringBuilder();
        for (int n = 0; n < 3; n++) {
            rules[n] = new int[1 + r.nextInt(3)][];
            text.append(names[n]).append(" ::=");
            for (int a = 0; a < rules[n].length; a++) {
                rules[n][a] = new int[r.nextInt(4)];
                if (a > 0) text.append(" |");
                for (int k = 0; k < rules[n][a].length; k++) {
                    rules[n][a][k] = r.nextInt(syms.length);
                    text.append(' ').append(syms[rules[n][a][k]]);
                }
            }
            text.append('\n');
        }
        return new Recursive(text.toString(), rules);
    }

    /**
     * Random recursive grammars (three rules over "a" and "b", alternatives of zero to three symbols: left, right and
     * middle recursion, nullable rules, cycles) against their language computed directly: every string of up to six
     * characters derivable from each rule, by a fixpoint over the productions. The recogniser accepts exactly those.
     */
    @Property(seed = "20261207", tries = 300)
    void randomRecursiveGrammarsAcceptExactlyTheirLanguage(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        Recursive random = randomRecursive(r);
        int[][][] rules = random.rules();
        String text = random.text();
        int max = 6;
        List<Set<String>> lang = new ArrayList<>();
        for (int n = 0; n < 3; n++) lang.add(new HashSet<>());
        for (boolean changed = true; changed; ) {
            changed = false;
            for (int n = 0; n < 3; n++) {
                for (int[] alt : rules[n]) {
                    Set<String> cur = Set.of("");
                    for (int sym : alt) {
                        Set<String> next = new HashSet<>();
                        Set<String> parts = sym == 0 ? Set.of("a") : sym == 1 ? Set.of("b") : lang.get(sym - 2);
                        for (String x : cur) for (String y : parts) if (x.length() + y.length() <= max) next.add(x + y);
                        cur = next;
                    }
                    changed |= lang.get(n).addAll(cur);
                }
            }
        }
        Earley e;
        try {
            e = new Earley(EbnfGrammar.parse(text));
        } catch (IllegalArgumentException refused) {
            assertTrue(lang.get(0).isEmpty(), text + " was refused (" + refused.getMessage() + ") but derives " + lang.get(0));
            return;
        }
        for (int len = 0; len <= max; len++) {
            for (int bits = 0; bits < 1 << len; bits++) {
                StringBuilder w = new StringBuilder();
                for (int k = 0; k < len; k++) w.append((bits >> k & 1) == 0 ? 'a' : 'b');
                assertEquals(lang.get(0).contains(w.toString()), e.matches(w), text + "on '" + w + "'");
            }
        }
    }
}
