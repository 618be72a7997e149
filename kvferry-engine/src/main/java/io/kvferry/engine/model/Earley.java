package io.kvferry.engine.model;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * An Earley recognizer over characters for an {@link EbnfGrammar}: the exact context-free language, any recursion (left
 * recursion included), nullable rules handled as Aycock and Horspool do (predicting a nullable nonterminal also moves
 * the dot past it, so an empty completion is never missed). A chart is the list of Earley sets after each character of
 * the output; a set is never empty for a prefix of some sentence (every rule kept derives text: {@link EbnfGrammar}
 * drops the others), so a token is viable where scanning its text leaves a non-empty set. Immutable and shared; each
 * call carries its own chart (a request's, kept between its steps: {@link OutputConstraint.Progress}) and its
 * {@link Budget}: at most {@link #MAX_ITEMS} items in one set and {@link #MAX_WORK} steps of one token's new work, past
 * which {@link Over} is thrown (a hostile, highly ambiguous grammar), never a hang.
 */
final class Earley {
    /** Most items in one Earley set. */
    static final int MAX_ITEMS = 10_000;
    /**
     * Most steps (items processed, items looked at for a completion or a scan) of one output token's new work: extending
     * the request's chart by the last token's text (at the first token: the first set) and the mask's walk of the token texts.
     */
    static final long MAX_WORK = 5_000_000;
    /**
     * What a set of a chart costs beside its items (the object, its two arrays' headers, the chart's slot: ~100 bytes),
     * in items (8 bytes each once the set is closed).
     */
    static final int SET_ITEMS = 12;
    /**
     * Most items in one request's chart, all its sets together, each set counting {@link #SET_ITEMS} more for itself
     * (one set a character of the output): about 8 bytes each, some 32 MB. The chart grows with the output ((items
     * per character + {@link #SET_ITEMS}) × characters), kept by the request between its steps.
     */
    static final long MAX_CHART_ITEMS = 4_000_000;
    private static final int END = Integer.MIN_VALUE;
    /**
     * Most context levels a {@link GrammarMaskCache} precomputation follows a completion up through ({@link #soleParent}):
     * past them the context is left to the run-time check.
     */
    static final int MAX_LEVELS = 16;
    /** {@link #soleParent}: the start symbol's (the end of the text follows it), and a nonterminal whose parents vary. */
    private static final int NO_PARENT = -2, PARENTS_VARY = -1;
    /** A widened precomputation's origin for any context ({@link ItemSet#widen}). */
    static final int ANY = Integer.MIN_VALUE;

    final EbnfGrammar g;
    /** Each production's first dotted position; each dotted position's symbol after the dot ({@link #END}: none) and production. */
    private final int[] dpStart, next, prodOf;
    private final int accept;
    /**
     * Static contexts, for the mask's precomputation ({@link GrammarMaskCache}): each nonterminal's one occurrence
     * (dotted position before it) outside its own left-recursive alternatives ({@code X ::= X …}), where it has exactly
     * one, else {@link #PARENTS_VARY}; {@link #NO_PARENT} for the start. Where an item of {@code X} has origin {@code o},
     * {@code X} was predicted at {@code o}, by an item at that one occurrence (nothing else predicts it) and with all of
     * {@code X}'s own alternatives {@code X ::= •X …} there too: the items a completion of {@code X} from {@code o} advances are
     * exactly those, whatever the chart.
     */
    private final int[] soleParent;
    /** Each nonterminal's left-recursive alternatives {@code X ::= X …}: the dotted positions after that first {@code X}. */
    private final int[][] selfLeft;
    /** Each nonterminal's occurrences: every dotted position before it. */
    private final int[][] occurrences;

    /** A run-time bound passed: what passed it. */
    static final class Over extends RuntimeException {
        Over(String what) {
            super(what, null, false, false);
        }
    }

    /** One call's work so far. */
    static final class Budget {
        private final long limit;
        private long work;

        /** One output token's new work: at most {@link #MAX_WORK} steps. */
        Budget() {
            this(MAX_WORK);
        }

        /** At most {@code limit} steps (a chart rebuilt by replay: {@link #MAX_WORK} for each token it reads). */
        Budget(long limit) {
            this.limit = limit;
        }

        void spend(long n) {
            work += n;
            if (work > limit) {
                throw new Over(limit == MAX_WORK ? "more than " + MAX_WORK + " steps of the Earley recognizer for one token"
                        : "more than " + limit + " steps of the Earley recognizer to rebuild the chart");
            }
        }

        long work() {
            return work;
        }
    }

    Earley(EbnfGrammar g) {
        this.g = g;
        dpStart = new int[g.rhs.length];
        int n = 0;
        for (int p = 0; p < g.rhs.length; p++) {
            dpStart[p] = n;
            n += g.rhs[p].length + 1;
        }
        next = new int[n];
        prodOf = new int[n];
        for (int p = 0; p < g.rhs.length; p++) {
            for (int d = 0; d <= g.rhs[p].length; d++) {
                next[dpStart[p] + d] = d < g.rhs[p].length ? g.rhs[p][d] : END;
                prodOf[dpStart[p] + d] = p;
            }
        }
        accept = dpStart[g.startProduction] + 1;
        int nts = g.names.length;
        soleParent = new int[nts];
        int[] others = new int[nts];
        List<List<Integer>> self = new ArrayList<>(), all = new ArrayList<>();
        for (int x = 0; x < nts; x++) {
            self.add(new ArrayList<>());
            all.add(new ArrayList<>());
        }
        for (int d = 0; d < n; d++) {
            int x = next[d];
            if (x < 0) continue; // a terminal, or the end
            all.get(x).add(d);
            int p = prodOf[d];
            if (g.lhs[p] == x && d == dpStart[p]) {
                self.get(x).add(d + 1);
            } else {
                others[x]++;
                soleParent[x] = d;
            }
        }
        selfLeft = new int[nts][];
        occurrences = new int[nts][];
        for (int x = 0; x < nts; x++) {
            if (others[x] != 1) soleParent[x] = PARENTS_VARY;
            selfLeft[x] = self.get(x).stream().mapToInt(Integer::intValue).toArray();
            occurrences[x] = all.get(x).stream().mapToInt(Integer::intValue).toArray();
        }
        soleParent[g.start] = NO_PARENT; // never on a right side: only the end of the text follows it
    }

    /**
     * An Earley set: its items (dotted position, origin), each once. In a chart an origin is the index of a set; in a
     * {@link GrammarMaskCache} precomputation's a negative origin stands for a context level ({@link #close}), and
     * {@link #context} says a completion there reached a context that varies with the chart.
     */
    static final class ItemSet {
        int[] dp = new int[16], origin = new int[16];
        int size;
        /** A precomputation's set only: whether an item completed into a context that varies (left to the run-time check). */
        boolean context;
        /**
         * A widened precomputation's set (and those read after it): a completion into a context that varies goes on into
         * every occurrence of its nonterminal, origin {@link #ANY}, and so on up: a language that holds every chart's.
         */
        boolean widen;
        private long[] keys = new long[32];
        private int used;

        boolean add(int d, int o) {
            long key = ((long) d << 32 | (o & 0xFFFF_FFFFL)) + 1; // 0: an empty slot (a negative origin: a context level)
            int mask = keys.length - 1;
            int h = (int) (mix(key) & mask);
            while (keys[h] != 0) {
                if (keys[h] == key) return false;
                h = (h + 1) & mask;
            }
            if (size == MAX_ITEMS) throw new Over("more than " + MAX_ITEMS + " items in one Earley set");
            keys[h] = key;
            if (++used * 2 > keys.length) rehash();
            if (size == dp.length) {
                dp = Arrays.copyOf(dp, size * 2);
                origin = Arrays.copyOf(origin, size * 2);
            }
            dp[size] = d;
            origin[size] = o;
            size++;
            return true;
        }

        /** Drops the hash of a closed set (nothing is added to it any more) and trims its arrays: 8 bytes an item. */
        void compact() {
            if (keys == null) return;
            keys = null;
            dp = Arrays.copyOf(dp, size);
            origin = Arrays.copyOf(origin, size);
        }

        private void rehash() {
            long[] old = keys;
            keys = new long[old.length * 2];
            int mask = keys.length - 1;
            for (long k : old) {
                if (k == 0) continue;
                int h = (int) (mix(k) & mask);
                while (keys[h] != 0) h = (h + 1) & mask;
                keys[h] = k;
            }
        }

        private static long mix(long k) {
            k *= 0x9E3779B97F4A7C15L;
            return k ^ (k >>> 29);
        }
    }

    /** The chart before any character: the first set, closed. */
    List<ItemSet> start(Budget b) {
        List<ItemSet> chart = new ArrayList<>();
        ItemSet s = new ItemSet();
        s.add(dpStart[g.startProduction], 0);
        chart.add(s);
        close(chart, b);
        return chart;
    }

    /** Reads {@code c}: the chart gets the next set, closed; false (the chart as it was) where no item takes it. */
    boolean read(List<ItemSet> chart, char c, Budget b) {
        ItemSet s = chart.getLast(), t = null;
        b.spend(s.size);
        for (int k = 0; k < s.size; k++) {
            int x = next[s.dp[k]];
            if (x != END && x < 0 && g.has(-x - 1, c)) {
                if (t == null) {
                    t = new ItemSet();
                    t.widen = s.widen;
                }
                t.add(s.dp[k] + 1, s.origin[k]);
            }
        }
        if (t == null) return false;
        chart.add(t);
        close(chart, b);
        return true;
    }

    /** Closes the chart's last set (a {@link GrammarMaskCache} precomputation's first set). */
    void closeLast(List<ItemSet> chart, Budget b) {
        close(chart, b);
    }

    /** Whether the chart's text so far is a whole sentence (the root complete from the start). */
    boolean complete(List<ItemSet> chart) {
        ItemSet s = chart.getLast();
        for (int k = 0; k < s.size; k++) {
            if (s.dp[k] == accept && s.origin[k] == 0) return true;
        }
        return false;
    }

    /**
     * Predicts and completes the last set of the chart to its closure. An item whose origin is negative (a
     * precomputation's: context level {@code -o - 1}, {@link GrammarMaskCache}) completes into its static context where
     * its nonterminal has one ({@link #soleParent}: its own left-recursive alternatives at the same level, its one parent at
     * the next), into nothing after the start (the end of the text), else marks the set {@link ItemSet#context} (and, in
     * a widened set, goes on into every occurrence of its nonterminal, origin {@link #ANY}).
     */
    private void close(List<ItemSet> chart, Budget b) {
        int i = chart.size() - 1;
        ItemSet cur = chart.get(i);
        for (int k = 0; k < cur.size; k++) {
            int d = cur.dp[k], o = cur.origin[k];
            int x = next[d];
            if (x == END) {
                int lhs = g.lhs[prodOf[d]];
                if (o < 0) {
                    int parent = soleParent[lhs];
                    if (parent == NO_PARENT) continue;
                    if (parent == PARENTS_VARY || o <= -MAX_LEVELS) { // ANY too
                        cur.context = true;
                        if (cur.widen) {
                            b.spend(occurrences[lhs].length + 1);
                            for (int q : occurrences[lhs]) cur.add(q + 1, ANY);
                        }
                        continue;
                    }
                    b.spend(selfLeft[lhs].length + 1);
                    for (int s : selfLeft[lhs]) cur.add(s, o);
                    cur.add(parent + 1, o - 1);
                    continue;
                }
                ItemSet from = chart.get(o);
                int n = from.size; // where o == i, the items so far: one waiting on lhs later predicts it, nullable, and moves on
                b.spend(n);
                for (int j = 0; j < n; j++) {
                    if (next[from.dp[j]] == lhs) cur.add(from.dp[j] + 1, from.origin[j]);
                }
            } else if (x >= 0) {
                int[] ps = g.byLhs[x];
                b.spend(ps.length + 1);
                for (int p : ps) cur.add(dpStart[p], i);
                if (g.nullable[x]) cur.add(d + 1, o); // Aycock–Horspool
            } else {
                b.spend(1);
            }
        }
    }

    /** Whether {@code text} is a whole sentence (tests, the compiler's checks). */
    boolean matches(CharSequence text) {
        Budget b = new Budget(MAX_WORK * (text.length() + 1L));
        List<ItemSet> chart = start(b);
        for (int i = 0; i < text.length(); i++) {
            if (!read(chart, text.charAt(i), b)) return false;
        }
        return complete(chart);
    }

    /** Dotted positions (items' first field). */
    int positions() {
        return next.length;
    }

    /**
     * Whether an item at {@code dp} may be in a chart's last set with an origin before it (or be the start's first item):
     * the items a {@link GrammarMaskCache} precomputes for (the dot past the first symbol and before the end, or the start's
     * first item). The others are predicted in the last set, or complete: what they accept their parents there do too.
     */
    boolean kernelPosition(int dp) {
        return next[dp] != END && (dp != dpStart[prodOf[dp]] || dp == dpStart[g.startProduction]);
    }

    /** Whether {@code dp} is at the end of its production (an item there is complete: its completion is done in its set). */
    boolean atEnd(int dp) {
        return next[dp] == END;
    }

    /** Whether item ({@code dp}, {@code origin}) of the set at {@code at} is one of the items the mask is the union over. */
    boolean kernel(int dp, int origin, int at) {
        return next[dp] != END && (origin < at || dp == dpStart[g.startProduction]);
    }

    /**
     * Marks in {@code ok} the tokens below {@code node} whose text (the path to them) the chart's language goes on with:
     * one walk of the token texts' trie, each character read once for all the tokens that share the prefix before it,
     * a subtree skipped once its prefix leaves the language.
     */
    void viable(OutputConstraint.Trie node, List<ItemSet> chart, boolean[] ok, Budget b) {
        for (int i = 0; i < node.keys.length; i++) {
            if (!read(chart, node.keys[i], b)) continue;
            OutputConstraint.Trie kid = node.kids[i];
            for (int t : kid.tokens) ok[t] = true;
            if (kid.keys.length > 0) viable(kid, chart, ok, b);
            chart.removeLast();
        }
    }

    /**
     * {@link #viable(OutputConstraint.Trie, List, boolean[], Budget)} restricted to the tokens set in {@code only} (by
     * their index in the trie's order, {@link OutputConstraint.Trie#order}): a subtree with none of them is never read.
     * The tokens of the nodes it reads into are marked, the others' left as they are.
     */
    void viable(OutputConstraint.Trie node, List<ItemSet> chart, boolean[] ok, Budget b, long[] only) {
        OutputConstraint.Trie[] kids = node.kids;
        if (kids.length == 0) return;
        int p = GrammarMaskCache.nextSet(only, kids[0].lo);
        while (p >= 0 && p < node.hi) {
            int i = GrammarMaskCache.kid(kids, p);
            OutputConstraint.Trie kid = kids[i];
            if (read(chart, node.keys[i], b)) {
                for (int t : kid.tokens) ok[t] = true;
                if (kid.keys.length > 0) viable(kid, chart, ok, b, only);
                chart.removeLast();
            }
            p = GrammarMaskCache.nextSet(only, kid.hi);
        }
    }
}
