package io.kvferry.engine.model;

import io.kvferry.engine.TestModels;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.function.Function;
import java.util.function.ToIntFunction;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The grammar's precomputed mask ({@link GrammarMaskCache}) equals the walk of the whole trie against the chart
 * ({@link Earley#viable(OutputConstraint.Trie, List, boolean[], Earley.Budget)}, the reference) for every chart: random
 * grammars (EbnfGrammarTest's: recursive ones with nullable rules, cycles, left and right recursion; regular ones with
 * every repetition; the two mixed) × random vocabularies × random accepted prefixes; and on the real tokenizer
 * (stories260K) with the grammars of GrammarOutputsTest and GrammarProgressTest along random answers, the end tokens
 * included. Checked to fail when the context-dependent tokens are not checked against the chart (the cache's union
 * alone), and when the static contexts are taken for the whole context (no context-dependent tokens at all). Each mask
 * is held equal with the shared-suffix groups and without them (session 14's way); the groups' own tests (JSON keys and
 * values over a small alphabet, a rule with several parents, the two small grammars below) fail when a group is taken
 * without reading its text, and when a group is keyed by its suffix alone (not its state); two more fail each when a
 * group's text is read through the whole last set (not its position's items alone) and when its state leaves out the
 * text its items' other origins were read after.
 */
class GrammarMaskCacheTest {
    private static final long LOTS = Long.MAX_VALUE / 4;

    /** Random token texts over {@code alphabet}: one to four characters, some texts twice (two tokens, one trie node); 0-2 none (the specials). */
    static char[][] vocabulary(SplittableRandom r, String alphabet, int n) {
        return vocabulary(r, alphabet, n, true, q -> 1 + q.nextInt(4));
    }

    /**
     * Random token texts over {@code alphabet}, each {@code length} characters (drawn from {@code r}); where {@code twice},
     * one in ten after the first a copy of an earlier one (two tokens, one trie node); 0-2 none (the specials).
     */
    static char[][] vocabulary(SplittableRandom r, String alphabet, int n, boolean twice, ToIntFunction<SplittableRandom> length) {
        char[][] texts = new char[n][];
        for (int t = 3; t < n; t++) {
            if (twice && t > 3 && r.nextInt(10) == 0) {
                texts[t] = texts[3 + r.nextInt(t - 3)].clone();
                continue;
            }
            char[] c = new char[length.applyAsInt(r)];
            for (int k = 0; k < c.length; k++) c[k] = alphabet.charAt(r.nextInt(alphabet.length()));
            texts[t] = c;
        }
        return texts;
    }

    /**
     * Random rules named {@code names} (in that order, the first the root), each of one to three alternatives of
     * {@code minLength} to {@code minLength + lengths - 1} symbols (none: {@code ""}), each symbol drawn by {@code symbol}
     * and followed by one of {@code postfixes}.
     */
    static String randomRules(SplittableRandom r, String[] names, int minLength, int lengths, Function<SplittableRandom, String> symbol,
                              String[] postfixes) {
        StringBuilder text = new StringBuilder();
        for (String name : names) {
            text.append(name).append(" ::=");
            int alts = 1 + r.nextInt(3);
            for (int a = 0; a < alts; a++) {
                if (a > 0) text.append(" |");
                int len = minLength + r.nextInt(lengths);
                if (len == 0) text.append(" \"\"");
                for (int k = 0; k < len; k++) text.append(' ').append(symbol.apply(r)).append(postfixes[r.nextInt(postfixes.length)]);
            }
            text.append('\n');
        }
        return text.toString();
    }

    /**
     * Along random accepted prefixes of {@code e}'s language (each character one the chart takes), the cache's mask equals
     * the full walk's at every length, with the shared-suffix groups and without them; answers how many tokens the cache
     * left to the chart in all. The full walk (the reference, most of the time) is computed once a prefix: the paths
     * share their first characters, and a prefix's chart is the same whichever path read it.
     */
    static long assertSameMasks(Earley e, char[][] texts, SplittableRandom r, String alphabet, String what) {
        OutputConstraint.Trie trie = OutputConstraint.Trie.of(texts);
        GrammarMaskCache cache = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(cache, what);
        long checked = 0;
        Map<String, boolean[]> reference = new HashMap<>();
        for (int path = 0; path < 5; path++) {
            List<Earley.ItemSet> chart = e.start(new Earley.Budget(LOTS));
            StringBuilder prefix = new StringBuilder();
            for (int len = 0; len < 14; len++) {
                boolean[] full = reference.get(prefix.toString());
                if (full == null) {
                    full = new boolean[texts.length];
                    e.viable(trie, chart, full, new Earley.Budget(LOTS));
                    reference.put(prefix.toString(), full);
                }
                for (boolean grouped : new boolean[]{true, false}) {
                    boolean[] cached = new boolean[texts.length];
                    int sets = chart.size();
                    Earley.ItemSet last = chart.getLast();
                    int n = cache.viable(e, chart, cached, new Earley.Budget(LOTS), grouped);
                    if (grouped) checked += n;
                    assertEquals(sets, chart.size(), "the chart is left as it was");
                    assertTrue(last == chart.getLast(), "the chart's last set is put back");
                    if (!Arrays.equals(full, cached)) {
                        StringBuilder diff = new StringBuilder();
                        for (int t = 0; t < texts.length; t++) {
                            if (full[t] != cached[t]) diff.append(' ').append(new String(texts[t])).append(full[t] ? "(+)" : "(-)");
                        }
                        assertArrayEquals(full, cached, what + "after '" + prefix + "'" + (grouped ? "" : " (ungrouped)")
                                + ": the full walk's (+) the cache's (-):" + diff);
                    }
                }
                char next = 0;
                int from = r.nextInt(alphabet.length());
                for (int k = 0; k < alphabet.length() && next == 0; k++) {
                    char c = alphabet.charAt((from + k) % alphabet.length());
                    if (e.read(chart, c, new Earley.Budget(LOTS))) next = c;
                }
                if (next == 0) break;
                prefix.append(next);
            }
        }
        return checked;
    }

    @Property(seed = "20261207", tries = 300)
    void recursiveGrammars(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        EbnfGrammarTest.Recursive g = EbnfGrammarTest.randomRecursive(r);
        Earley e;
        try {
            e = new Earley(EbnfGrammar.parse(g.text()));
        } catch (IllegalArgumentException derivesNothing) {
            return;
        }
        assertSameMasks(e, vocabulary(r, "abc", 40), r, "abc", g.text());
    }

    @Property(seed = "20261207", tries = 300)
    void regularGrammars(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        EbnfGrammarTest.Both b = EbnfGrammarTest.random(r, 4);
        String text = r.nextBoolean() ? "root ::= " + b.gbnf() : "root ::= body \"d\"? body\nbody ::= " + b.gbnf();
        assertSameMasks(new Earley(EbnfGrammar.parse(text)), vocabulary(r, "abcd", 50), r, "abcd", text + "\n");
    }

    /**
     * Three rules whose alternatives mix rule references (any recursion) with regular parts and repetitions (the
     * flattening's left-recursive and single-use nonterminals: the static contexts) under postfix operators.
     */
    @Property(seed = "20261207", tries = 300)
    void mixedGrammars(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        String[] names = {"root", "n1", "n2"};
        String text = randomRules(r, names, 0, 4, q -> switch (q.nextInt(6)) {
            case 0, 1 -> names[q.nextInt(3)];
            case 2 -> "\"" + "abcd".charAt(q.nextInt(4)) + "\"";
            case 3 -> "\"ab\"";
            default -> "(" + EbnfGrammarTest.random(q, 2).gbnf() + ")";
        }, new String[]{"", "", "*", "+", "?", "{1,2}"});
        Earley e;
        try {
            e = new Earley(EbnfGrammar.parse(text));
        } catch (IllegalArgumentException derivesNothing) {
            return;
        }
        assertSameMasks(e, vocabulary(r, "abcd", 50), r, "abcd", text);
    }

    /**
     * Harder than the three above: five rules (any mutual recursion, root used nested as well as at the root), nullable
     * chains (empty alternatives, rules of optional rules), multi-character literals and classes under postfix
     * operators, and vocabularies of one to six characters (texts that cross several rules' ends); 1,200 grammars from
     * three fixed bases, each along longer random prefixes, against the full walk at every length.
     */
    @Test
    void harderRandomGrammarsAtThreeSeeds() {
        int tried = 0;
        for (long base : new long[]{7, 20261207, 987654321}) {
            for (int k = 0; k < 400; k++) {
                SplittableRandom r = new SplittableRandom(base * 1_000_003L + k);
                String text = hardGrammar(r);
                Earley e;
                try {
                    e = new Earley(EbnfGrammar.parse(text));
                } catch (IllegalArgumentException derivesNothing) {
                    continue;
                }
                tried++;
                char[][] texts = vocabulary(r, "abc", 60, false, q -> 1 + q.nextInt(q.nextInt(4) == 0 ? 6 : 3));
                assertSameMasks(e, texts, r, "abc", text);
            }
        }
        assertTrue(tried > 600, "grammars tried: " + tried);
    }

    private static String hardGrammar(SplittableRandom r) {
        String[] names = {"root", "n1", "n2", "n3", "n4"};
        return randomRules(r, names, 0, 5, q -> switch (q.nextInt(8)) {
            case 0, 1, 2 -> names[q.nextInt(names.length)];
            case 3 -> "\"" + "abc".charAt(q.nextInt(3)) + "\"";
            case 4 -> "\"" + "abc".charAt(q.nextInt(3)) + "abc".charAt(q.nextInt(3)) + "\"";
            case 5 -> "[ab]";
            case 6 -> "(" + names[q.nextInt(names.length)] + " \"" + "abc".charAt(q.nextInt(3)) + "\"" + ")";
            default -> "(" + EbnfGrammarTest.random(q, 2).gbnf() + ")";
        }, new String[]{"", "", "", "*", "+", "?", "{0,2}"});
    }

    /**
     * JSON over a small alphabet: a string is a key (then {@code :}) or a value (then {@code ,} {@code ]} {@code \}}),
     * values nest: the string rule has several parents with different continuations, and so has value.
     */
    static final String SMALL_JSON = """
            root ::= value
            value ::= object | array | string | "1"
            object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"
            array ::= "[" ( value ( "," value )* )? "]"
            string ::= "\\"" [ab]* "\\""
            """;
    static final String JSON_ALPHABET = "ab\"{}[],:1";
    /** JSON punctuation that crosses a string's end and its parents' ({@code a",} {@code "]}} {@code ":}). */
    private static final String[] JSON_PIECES = {"\"", "\",", "\":", "\"]", "\"}", "\"]}", "\"}]", "\"],", "\"},", ",\"", ":\"", "{\"",
        "[\"", "]", "}", "],", "},", "]}", "}]", ",", ":", "{", "[", "1", ",1", ":1", "1]", "1}", "1,", "\":\"", "\",\""};

    /**
     * Random token texts that span the ends of JSON strings and values: a word of {@code [ab]} (up to three characters)
     * alone, before or after a piece of JSON punctuation ({@link #JSON_PIECES}), or the piece alone; 0-2 none.
     */
    static char[][] jsonVocabulary(SplittableRandom r, int n) {
        char[][] texts = new char[n][];
        for (int t = 3; t < n; t++) {
            StringBuilder word = new StringBuilder();
            for (int k = r.nextInt(4); k > 0; k--) word.append(r.nextBoolean() ? 'a' : 'b');
            String piece = JSON_PIECES[r.nextInt(JSON_PIECES.length)];
            String text = switch (r.nextInt(4)) {
                case 0 -> word.isEmpty() ? piece : word.toString();
                case 1 -> word + piece;
                case 2 -> piece + word;
                default -> piece;
            };
            texts[t] = text.toCharArray();
        }
        return texts;
    }

    /**
     * Keys and values: along random prefixes of {@link #SMALL_JSON} (nested objects and arrays), with vocabularies whose
     * tokens span a string's end and what follows it, the cache's mask (its shared-suffix groups deciding {@code ab",}
     * and {@code ab":} a group at a time) equals the full walk's.
     */
    @Property(seed = "20261207", tries = 200)
    void jsonKeysAndValuesWithTokensAcrossTheirEnds(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        assertSameMasks(new Earley(EbnfGrammar.parse(SMALL_JSON)), jsonVocabulary(r, 120), r, JSON_ALPHABET, SMALL_JSON);
    }

    /**
     * Random grammars where a string-like rule (and the random rules) have several parents, each with its own
     * continuation (any of {@code , : ] [} or a rule, under postfix operators): the cache equals the full walk.
     */
    @Property(seed = "20261207", tries = 300)
    void aRuleWithSeveralParentsAndDifferentContinuations(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        String[] names = {"root", "x", "y"};
        String[] symbols = {"s", "s", "x", "y", "\",\"", "\":\"", "\"]\"", "\"[\"", "\"1\"", "(s \":\" x)", "(\"[\" y \"]\")"};
        String text = randomRules(r, names, 1, 3, q -> symbols[q.nextInt(symbols.length)], new String[]{"", "", "", "*", "?", "+"})
                + "s ::= \"\\\"\" [ab]* \"\\\"\"\n";
        Earley e;
        try {
            e = new Earley(EbnfGrammar.parse(text));
        } catch (IllegalArgumentException derivesNothing) {
            return;
        }
        assertSameMasks(e, jsonVocabulary(r, 120), r, JSON_ALPHABET, text);
    }

    /**
     * The groups at work on {@link #SMALL_JSON}: inside a string, {@code b":} goes on after a key and not after a value,
     * {@code b",} the other way, {@code b"]} in an array; each decided by one read of its group's text, the full walk's
     * mask either way, and fewer tokens checked than without the groups.
     */
    @Test
    void aStringsEndIsDecidedByItsParentsAGroupAtATime() {
        Earley e = new Earley(EbnfGrammar.parse(SMALL_JSON));
        String[] words = {"a", "b", "ab", "ba", "aa", "bb", "aab", "abb", "bab"};
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (String w : words) {
            for (String end : new String[]{"\",", "\":", "\"]", "\"}", "\""}) vocab.add(w + end);
        }
        char[][] texts = vocab.stream().map(t -> t.isEmpty() ? null : t.toCharArray()).toArray(char[][]::new);
        OutputConstraint.Trie trie = OutputConstraint.Trie.of(texts);
        GrammarMaskCache cache = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(cache);
        assertTrue(cache.groupsAndMembers()[0] > 0 && cache.groupsAndMembers()[1] > 2 * cache.groupsAndMembers()[0],
                "groups, tokens in them: " + Arrays.toString(cache.groupsAndMembers()));
        String[][] cases = { // prefix, a token that goes on, one that does not
            {"{\"a", "ab\":", "ab\","}, {"{\"a\":\"b", "ab\",", "ab\":"}, {"[\"a", "bab\"]", "bab\":"}, {"{\"a\":[\"b", "b\"]", "b\"}"},
            {"{\"a\":{\"b", "aa\":", "aa\"}"}, {"[[\"", "ba\"]", "ba\"}"}};
        for (String[] c : cases) {
            List<Earley.ItemSet> chart = e.start(new Earley.Budget(LOTS));
            for (char ch : c[0].toCharArray()) assertTrue(e.read(chart, ch, new Earley.Budget(LOTS)), c[0]);
            boolean[] full = new boolean[texts.length], grouped = new boolean[texts.length], ungrouped = new boolean[texts.length];
            e.viable(trie, chart, full, new Earley.Budget(LOTS));
            int checkedGrouped = cache.viable(e, chart, grouped, new Earley.Budget(LOTS), true);
            int checkedUngrouped = cache.viable(e, chart, ungrouped, new Earley.Budget(LOTS), false);
            assertArrayEquals(full, grouped, c[0]);
            assertArrayEquals(full, ungrouped, c[0]);
            assertTrue(full[vocab.indexOf(c[1])], c[0] + " then " + c[1]);
            assertFalse(full[vocab.indexOf(c[2])], c[0] + " then " + c[2]);
            assertTrue(checkedGrouped < checkedUngrouped, c[0] + ": checked " + checkedGrouped + " grouped, " + checkedUngrouped + " not");
        }
    }

    /**
     * Items that began in the walk's own sets: after {@code <akc} and {@code <bkc} the items left are the same
     * ({@code q} begun after the first letter), what {@code q}'s end goes on with is not ({@code y} ends after
     * {@code akc.}, waits for {@code ,} after {@code bkc.}); the groups' masks along those prefixes, held against the full
     * walk. (Not a check of the state's text part: {@code bkc.;} is rejected outright, in no group; a key without that
     * text passes this and the properties, and fails {@link #aGroupsStateNamesTheTextItsItemsOtherOriginsWereReadAfter}.)
     */
    @Test
    void aGroupsStateNamesTheTextItsItemsBeganAfter() {
        String grammar = """
                root ::= x ";" | "(" x ")"
                x ::= "<" y
                y ::= "a" q | "b" q ","
                q ::= "k" [c]* "."
                """;
        Earley e = new Earley(EbnfGrammar.parse(grammar));
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (String first : new String[]{"a", "b"}) {
            for (String cs : new String[]{"", "c", "cc", "ccc"}) {
                for (String end : new String[]{";", ")", ",;", ",)"}) vocab.add(first + "k" + cs + "." + end);
            }
        }
        char[][] texts = vocab.stream().map(t -> t.isEmpty() ? null : t.toCharArray()).toArray(char[][]::new);
        OutputConstraint.Trie trie = OutputConstraint.Trie.of(texts);
        GrammarMaskCache cache = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(cache);
        assertTrue(cache.groupsAndMembers()[0] > 0, "groups: " + Arrays.toString(cache.groupsAndMembers()));
        String[][] cases = {{"<", "akc.;", "bkc.;"}, {"<", "bkc.,;", "akc.,;"}, {"(<", "akcc.)", "bkcc.)"}, {"(<", "bk.,)", "bk.,;"}};
        assertGroupedCases(e, trie, cache, vocab, cases);
    }

    /**
     * A group is the state and the suffix, not the suffix alone: after {@code <ac} and {@code <bc} the suffix {@code .!;}
     * reaches {@code x}'s end (a context that varies) at {@code .} in both, but after {@code b} the {@code !} is still
     * {@code y}'s own, after {@code a} it is {@code x}'s parent's: {@code bc.!;} goes on after {@code <}, {@code ac.!;}
     * does not (it does after {@code [<}: each is some chart's, so neither is left out by the widened walk).
     */
    @Test
    void aGroupIsItsStateAndItsSuffix() {
        String grammar = """
                root ::= x ";" | "(" x ")" | "[" x "!;"
                x ::= "<" y
                y ::= "a" [c]* "." | "b" [c]* "." "!"?
                """;
        Earley e = new Earley(EbnfGrammar.parse(grammar));
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (String first : new String[]{"a", "b"}) {
            for (String cs : new String[]{"", "c", "cc"}) {
                for (String end : new String[]{".;", ".)", ".!;", ".!)"}) vocab.add(first + cs + end);
            }
        }
        char[][] texts = vocab.stream().map(t -> t.isEmpty() ? null : t.toCharArray()).toArray(char[][]::new);
        OutputConstraint.Trie trie = OutputConstraint.Trie.of(texts);
        GrammarMaskCache cache = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(cache);
        assertTrue(cache.groupsAndMembers()[0] > 0, "groups: " + Arrays.toString(cache.groupsAndMembers()));
        String[][] cases = {{"<", "bc.!;", "ac.!;"}, {"<", "ac.;", "ac.)"}, {"(<", "bcc.!)", "acc.!)"}, {"[<", "ac.!;", "ac.;"}};
        assertGroupedCases(e, trie, cache, vocab, cases);
    }

    /**
     * The masks after each prefix of {@code cases} ({prefix, a token that goes on, one that does not}): the full walk's
     * takes the first and not the second, and the cache's with its groups equals it; the cache has groups.
     */
    private static void assertGroupsMaskAlike(String grammar, List<String> vocab, String[][] cases) {
        Earley e = new Earley(EbnfGrammar.parse(grammar));
        char[][] texts = vocab.stream().map(t -> t.isEmpty() ? null : t.toCharArray()).toArray(char[][]::new);
        OutputConstraint.Trie trie = OutputConstraint.Trie.of(texts);
        GrammarMaskCache cache = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(cache);
        assertTrue(cache.groupsAndMembers()[0] > 0, "groups: " + Arrays.toString(cache.groupsAndMembers()));
        assertGroupedCases(e, trie, cache, vocab, cases);
    }

    /**
     * A group is read through its position's items alone, not the whole last set: after {@code ["} the string's items
     * (its parent then wants {@code ]}) and the literal {@code ["a",]}'s share the last set. {@code a",} and {@code b",}
     * are one group of the string's position ({@code a} or {@code b} read within the string, then {@code ",}), its text
     * {@code a",}: through the string's items it does not go on, through the literal's it does (accepted there
     * whatever the chart). Read through the whole last set, the group's text would go on and take {@code b",} with it,
     * which nothing takes after {@code ["}.
     */
    @Test
    void aGroupIsReadThroughItsPositionsItemsAlone() {
        String grammar = """
                root ::= "[" s "]" | "{" s ":" s "}" | "(" s "," ")" | "[\\"a\\",]"
                s ::= "\\"" [ab]* "\\""
                """;
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (String w : new String[]{"a", "b", "ab", "ba"}) {
            for (String end : new String[]{"\",", "\"]", "\":", "\"}"}) vocab.add(w + end);
        }
        String[][] cases = {{"[\"", "a\",", "b\","}, {"[\"", "ab\"]", "ab\","}, {"(\"", "b\",", "b\"]"}, {"{\"", "ba\":", "a\"]"}};
        assertGroupsMaskAlike(grammar, vocab, cases);
    }

    /**
     * A group's state names the text its items' other origins were read after: after {@code xA} and {@code yA} (or
     * {@code C}) the items left are the same ({@code r} begun after the first letter, {@code B} to come), but {@code r}'s end goes on
     * to {@code v}'s own {@code 2} after {@code x} and not after {@code y}, and both end {@code w} there (a context that
     * varies). So after {@code aq} ({@code w}'s parent wants {@code ;}) {@code xAB2;} goes on and {@code yAB2;} does not
     * (after {@code bq} both do: each is some chart's, in no way left out by the widened walk). The groups are
     * {@code xAB2;} with {@code xCB2;}, and {@code y…} likewise; a state without that text would make the four one group,
     * {@code xAB2;} its text, and take {@code yAB2;} after {@code aq}.
     */
    @Test
    void aGroupsStateNamesTheTextItsItemsOtherOriginsWereReadAfter() {
        String grammar = """
                root ::= "a" w ";" | "b" w "2;"
                w ::= "q" v
                v ::= "x" r | "x" r "2" | "y" r
                r ::= [AC] "B"
                """;
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (String first : new String[]{"x", "y"}) {
            for (String mid : new String[]{"A", "C"}) {
                for (String end : new String[]{"B2;", "B;", "B2", "B2;;"}) vocab.add(first + mid + end);
            }
        }
        String[][] cases = {{"aq", "xAB2;", "yAB2;"}, {"aq", "yCB;", "yCB2;"}, {"bq", "yAB2;", "xCB;"}, {"bq", "xCB2;", "yAB;"}};
        assertGroupsMaskAlike(grammar, vocab, cases);
    }

    /**
     * A bound passed while the groups are read or the other context-dependent tokens are walked against the chart (the
     * step budget, at every count short of the mask's whole work) throws {@link Earley.Over} and leaves the chart as it
     * was: its sets (the last one put back in place of the group's items) and their items; the mask with enough steps is
     * then the full walk's. (Checked to fail with the groups' restore out of its finally, and without the walk's.)
     */
    @Test
    void aBoundPassedWhileTheGroupsAreReadLeavesTheChartAsItWas() {
        Earley e = new Earley(EbnfGrammar.parse(SMALL_JSON));
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (String w : new String[]{"a", "b", "ab", "ba", "aab"}) {
            for (String end : new String[]{"\",", "\":", "\"]", "\"}"}) vocab.add(w + end);
        }
        vocab.addAll(List.of("\",", "\":", "\"]", "\"]}"));
        char[][] texts = vocab.stream().map(t -> t.isEmpty() ? null : t.toCharArray()).toArray(char[][]::new);
        OutputConstraint.Trie trie = OutputConstraint.Trie.of(texts);
        GrammarMaskCache cache = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(cache);
        List<Earley.ItemSet> chart = e.start(new Earley.Budget(LOTS));
        for (char ch : "{\"a\":[\"b".toCharArray()) assertTrue(e.read(chart, ch, new Earley.Budget(LOTS)));
        List<Earley.ItemSet> sets = List.copyOf(chart);
        int[] sizes = chart.stream().mapToInt(s -> s.size).toArray();
        Earley.Budget enough = new Earley.Budget(LOTS);
        int checked = cache.viable(e, chart, new boolean[texts.length], enough, true);
        assertTrue(checked > 0 && enough.work() > 0, "groups read: " + checked + ", steps: " + enough.work());
        for (long limit = 0; limit < enough.work(); limit++) {
            long l = limit;
            assertThrows(Earley.Over.class, () -> cache.viable(e, chart, new boolean[texts.length], new Earley.Budget(l), true), "limit " + l);
            assertEquals(sets.size(), chart.size(), "limit " + limit);
            for (int i = 0; i < sets.size(); i++) {
                assertTrue(sets.get(i) == chart.get(i), "limit " + limit + ": set " + i + " put back");
                assertEquals(sizes[i], chart.get(i).size, "limit " + limit + ": set " + i + "'s items");
            }
        }
        boolean[] full = new boolean[texts.length], cached = new boolean[texts.length];
        e.viable(trie, chart, full, new Earley.Budget(LOTS));
        cache.viable(e, chart, cached, new Earley.Budget(LOTS), true);
        assertArrayEquals(full, cached);
    }

    /**
     * Grammars biased toward what a group's exactness rests on: a rule {@code w} with several parents, each its own
     * continuation; inside it, {@code r} begun after different letters ({@code v}'s alternatives, some with their own
     * continuation after {@code r}: the same items left, different completions); and literal alternatives of the root
     * beside {@code w} that spell a token's text (another item in the last set that takes one member of a group and not
     * the others). Tokens are a letter, {@code r}'s text and a continuation: the groups' members. The cache with its groups
     * equals the full walk along random prefixes. (Checked to fail when a group's text is read through the whole last
     * set, and when its state leaves out the text its items' other origins were read after.)
     */
    @Property(seed = "20261207", tries = 300)
    void groupsOfTokensWhoseItemsBeganAfterDifferentTexts(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        String[] ends = {"", ";", "2", "2;", ";;", "2;2", ";2"};
        String[] rs = {"[AC] \"B\"", "[AC] \"B\"?", "[AC]+ \"B\"", "[AC] [B2]"};
        List<String> vocab = new ArrayList<>(List.of("", "", ""));
        for (int t = 3; t < 60; t++) {
            String text = "xyz".charAt(r.nextInt(3)) + (r.nextBoolean() ? "A" : "C") + (r.nextInt(4) == 0 ? "C" : "") + (r.nextInt(5) > 0 ? "B" : "")
                    + ends[r.nextInt(ends.length)];
            vocab.add(r.nextInt(8) == 0 ? ends[1 + r.nextInt(ends.length - 1)] : text);
        }
        StringBuilder g = new StringBuilder("root ::=");
        int parents = 2 + r.nextInt(2);
        for (int i = 0; i < parents; i++) g.append(i > 0 ? " |" : "").append(" \"").append("abc".charAt(i)).append("\" w \"").append(ends[1 + r.nextInt(ends.length - 1)]).append('"');
        for (int k = r.nextInt(3); k > 0; k--) g.append(" | \"").append("abc".charAt(r.nextInt(parents))).append('q').append(vocab.get(3 + r.nextInt(vocab.size() - 3))).append('"');
        g.append("\nw ::= \"q\" v\nv ::=");
        for (int i = 0; i < 3; i++) {
            char letter = "xyz".charAt(i);
            g.append(i > 0 ? " |" : "").append(" \"").append(letter).append("\" r");
            if (r.nextBoolean()) g.append(" | \"").append(letter).append("\" r \"").append(ends[1 + r.nextInt(ends.length - 1)]).append('"');
        }
        g.append("\nr ::= ").append(rs[r.nextInt(rs.length)]).append('\n');
        char[][] texts = vocab.stream().map(t -> t.isEmpty() ? null : t.toCharArray()).toArray(char[][]::new);
        assertSameMasks(new Earley(EbnfGrammar.parse(g.toString())), texts, r, "abcqxyzACB2;", g.toString());
    }

    /**
     * A clean state is built once a set, not once a trie node: after {@code k} a set of some 400 items ({@code y}'s
     * alternatives), then {@code 0} reaches {@code x}'s end (a context that varies) while {@code y}'s own letters go on,
     * so every node below {@code k0} has a context-dependent child ({@code !}) that splits at that same set. Built at
     * each node, its state (four characters an item) was built hundreds of times over, memory held by the subtrees and
     * the groups' keys that no bound counted (a set's items times the trie's nodes); now once (the masks still the full
     * walk's).
     */
    @Test
    void aCleanStateIsBuiltOnceASetNotOnceANode() {
        StringBuilder grammar = new StringBuilder("root ::= \"a\" x [a-z!]* | \"b\" x [a-z!]* \";\"\nx ::= \"q\" y\ny ::= \"k\" \"0\" [a-z]*");
        for (int i = 0; i < 400; i++) grammar.append(" | \"k\" \"1\" \"").append(i).append('"');
        grammar.append('\n');
        Earley e = new Earley(EbnfGrammar.parse(grammar.toString()));
        SplittableRandom r = new SplittableRandom(20261207);
        char[][] texts = new char[400][];
        for (int t = 3; t < texts.length; t++) {
            StringBuilder word = new StringBuilder("k0");
            for (int k = 1 + r.nextInt(5); k > 0; k--) word.append((char) ('a' + r.nextInt(26)));
            texts[t] = word.append('!').toString().toCharArray();
        }
        GrammarMaskCache cache = GrammarMaskCache.build(e, OutputConstraint.Trie.of(texts), LOTS, LOTS);
        assertNotNull(cache);
        // The big set's state is some 1,600 characters (401 items); built at each node below k0 with a child ! (some 350)
        // it came to 553,725.
        assertTrue(cache.stateChars > 1_600 && cache.stateChars < 4_000 && cache.stateChars <= 4 * cache.work,
                "state characters " + cache.stateChars + ", steps " + cache.work);
        assertSameMasks(e, texts, r, "abqk0!;", grammar.toString());
    }

    /** The grammars of GrammarOutputsTest ({@link RecursiveGrammars}), GrammarProgressTest's JSON, and two small ones. */
    static final List<String> GRAMMARS = Stream.concat(RecursiveGrammars.EXAMPLES.stream(), Stream.of(
            GrammarProgressTest.JSON_GRAMMAR,
            "root ::= \"(\" root \")\" root | \"\"",
            "root ::= [a-z ]* (\".\" | \"!\")")).toList();

    /**
     * On the real tokenizer: along random answers (each token drawn from the reference's mask, end tokens aside), with
     * the end allowed or not, stop token ids or none, and after a prompt of BOS alone (the first step's texts lose a
     * leading space: the full walk, which the cache is not for), the mask with the cache equals the full walk's.
     */
    @Test
    void theRealTokenizerMasksAlikeAlongRandomAnswers() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        int vocab = tok.vocabSize();
        SplittableRandom r = new SplittableRandom(20261207);
        long checked = 0, steps = 0;
        for (String grammar : GRAMMARS) {
            OutputConstraint c = compiler.ebnf(grammar);
            assertTrue(c.maskCached(), grammar);
            for (int path = 0; path < 6; path++) {
                int[] seq = path == 0 ? new int[]{Tokenizer.BOS} : tok.encode("Once upon a time", true, false);
                int promptLength = seq.length;
                OutputConstraint.Progress kept = new OutputConstraint.Progress(), reference = new OutputConstraint.Progress();
                for (int step = 0; step < 48; step++) {
                    boolean eos = r.nextInt(4) > 0, stop = r.nextBoolean();
                    int[] stopIds = r.nextBoolean() ? new int[0] : new int[]{Tokenizer.EOS + 1 + r.nextInt(vocab - 3)};
                    float[] cached = new float[vocab], full = new float[vocab];
                    c.mask(cached, seq, promptLength, step, eos, stop, stopIds, kept);
                    c.maskFullWalk(full, seq, promptLength, step, eos, stop, stopIds, reference, Earley.MAX_WORK);
                    assertArrayEquals(full, cached, grammar + " step " + step + " after '" + tok.decode(Arrays.copyOfRange(seq, promptLength, seq.length)) + "'");
                    if (kept.lastCheckedTokens() >= 0) {
                        checked += kept.lastCheckedTokens();
                        steps++;
                    }
                    int[] open = new int[vocab];
                    int n = 0;
                    for (int t = Tokenizer.EOS + 1; t < vocab; t++) if (full[t] != Float.NEGATIVE_INFINITY && Arrays.binarySearch(stopIds, t) < 0) open[n++] = t;
                    if (n == 0) break;
                    seq = Arrays.copyOf(seq, seq.length + 1);
                    seq[seq.length - 1] = open[r.nextInt(n)];
                }
            }
        }
        assertTrue(steps > 500, "steps through the cache: " + steps);
        // The precomputed sets decide almost every token: the chart checks fewer than one a step on average (322 in
        // 1,348 steps when written), where the full walk reads the whole vocabulary's trie at every step.
        assertTrue(checked < steps, "tokens checked against the chart: " + checked + " in " + steps + " steps");
    }

    /**
     * The precomputation's step bound leaves the compile's deadline its room on a busy machine: at the measured 10 ns or
     * so a step (docs/PERFORMANCE.md: 94 million steps in 0.9 s) it is at most a fifth of the deadline, which refuses (and
     * remembers the refusal) where the bound serves by the full walk. 400 million steps (about 4 s) was not.
     */
    @Test
    void theStepBoundFitsAFifthOfTheCompileDeadline() {
        long nanosAStep = 10;
        assertTrue(GrammarMaskCache.MAX_WORK * nanosAStep <= OutputConstraint.Compiler.DEADLINE_MS * 1_000_000 / 5,
                "bound " + GrammarMaskCache.MAX_WORK + " steps, deadline " + OutputConstraint.Compiler.DEADLINE_MS + " ms");
    }

    /**
     * Past a bound the grammar is served by the full walk, never refused for it (its memory, its steps: counts, the same
     * on every engine); past the compile's deadline it is refused as any spec is; the cache counts in the compiler's bound.
     */
    @Test
    void pastItsBoundsAGrammarIsServedByTheFullWalk() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        Earley e = new Earley(EbnfGrammar.parse(GrammarProgressTest.JSON_GRAMMAR));
        OutputConstraint.Trie trie = new OutputConstraint.TokenTexts(tok).trie();
        GrammarMaskCache whole = GrammarMaskCache.build(e, trie, LOTS, LOTS);
        assertNotNull(whole);
        assertTrue(whole.ints() > 100 && whole.ints() < OutputConstraint.MAX_TABLE, "its size: " + whole.ints());
        assertTrue(whole.work < GrammarMaskCache.MAX_WORK / 100, "its steps: " + whole.work);
        assertNull(GrammarMaskCache.build(e, trie, whole.ints() - 1, LOTS), "over its memory bound");
        assertNull(GrammarMaskCache.build(e, trie, LOTS, whole.work - 1), "over its steps");
        assertNotNull(GrammarMaskCache.build(e, trie, whole.ints(), whole.work), "at both");
        // A grammar whose precomputation passes a bound (a set of more than MAX_ITEMS items) compiles, and masks by the walk.
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        OutputConstraint hostile = compiler.ebnf(HostileGrammars.ambiguousAtOnce());
        assertFalse(hostile.maskCached());
        OutputConstraint json = compiler.ebnf(GrammarProgressTest.JSON_GRAMMAR);
        assertTrue(json.maskCached());
        assertEquals(EbnfGrammar.parse(GrammarProgressTest.JSON_GRAMMAR).symbols() + whole.ints(), json.tableEntries(), "counted in the cache's bound");
        int[] seq = tok.encode("Once upon a time", true, false);
        OutputConstraint.Progress p = new OutputConstraint.Progress();
        json.mask(new float[tok.vocabSize()], seq, seq.length, 0, true, true, new int[0], p);
        assertEquals(0, p.lastCheckedTokens(), "the first set's mask: all precomputed");
        json.maskFullWalk(new float[tok.vocabSize()], seq, seq.length, 0, true, true, new int[0], p, Earley.MAX_WORK);
        assertEquals(-1, p.lastCheckedTokens(), "the full walk");
        // The compile's deadline: checked as the precomputation goes, a refusal as for any spec.
        OutputConstraint.Compiler late = new OutputConstraint.Compiler(tok, 1, OutputConstraint.Compiler.CACHED_TABLE);
        ClientRegex.TooComplex refused = assertThrows(ClientRegex.TooComplex.class, () -> late.ebnf(GrammarProgressTest.JSON_GRAMMAR));
        assertTrue(refused.deadline(), refused.getMessage());
    }

    /**
     * Each case {prefix, a token the full walk takes after it, one it refuses}: the full walk says so, and the grouped mask
     * equals it.
     */
    private static void assertGroupedCases(Earley e, OutputConstraint.Trie trie, GrammarMaskCache cache, List<String> vocab,
                                           String[][] cases) {
        for (String[] c : cases) {
            List<Earley.ItemSet> chart = e.start(new Earley.Budget(LOTS));
            for (char ch : c[0].toCharArray()) assertTrue(e.read(chart, ch, new Earley.Budget(LOTS)), c[0]);
            boolean[] full = new boolean[vocab.size()], grouped = new boolean[vocab.size()];
            e.viable(trie, chart, full, new Earley.Budget(LOTS));
            cache.viable(e, chart, grouped, new Earley.Budget(LOTS), true);
            assertTrue(full[vocab.indexOf(c[1])], c[0] + " then " + c[1]);
            assertFalse(full[vocab.indexOf(c[2])], c[0] + " then " + c[2]);
            assertArrayEquals(full, grouped, c[0]);
        }
    }
}
