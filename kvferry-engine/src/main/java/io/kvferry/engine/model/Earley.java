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

    final EbnfGrammar g;
    /** Each production's first dotted position; each dotted position's symbol after the dot ({@link #END}: none) and production. */
    private final int[] dpStart, next, prodOf;
    private final int accept;

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
    }

    /** An Earley set: its items (dotted position, origin), each once. */
    static final class ItemSet {
        int[] dp = new int[16], origin = new int[16];
        int size;
        private long[] keys = new long[32];
        private int used;

        boolean add(int d, int o) {
            long key = ((long) d << 32 | o) + 1; // 0: an empty slot
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
                if (t == null) t = new ItemSet();
                t.add(s.dp[k] + 1, s.origin[k]);
            }
        }
        if (t == null) return false;
        chart.add(t);
        close(chart, b);
        return true;
    }

    /** Whether the chart's text so far is a whole sentence (the root complete from the start). */
    boolean complete(List<ItemSet> chart) {
        ItemSet s = chart.getLast();
        for (int k = 0; k < s.size; k++) {
            if (s.dp[k] == accept && s.origin[k] == 0) return true;
        }
        return false;
    }

    /** Predicts and completes the last set of the chart to its closure. */
    private void close(List<ItemSet> chart, Budget b) {
        int i = chart.size() - 1;
        ItemSet cur = chart.get(i);
        for (int k = 0; k < cur.size; k++) {
            int d = cur.dp[k], o = cur.origin[k];
            int x = next[d];
            if (x == END) {
                int lhs = g.lhs[prodOf[d]];
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
}
