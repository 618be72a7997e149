package io.kvferry.engine.model;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * A grammar's token mask precomputed per Earley item kind (xgrammar's "adaptive token mask cache", arXiv 2411.15100,
 * redone for an Earley recognizer), so that a step's mask costs the recognizer's steps of the few tokens whose fate
 * depends on the chart, not a walk of the whole vocabulary's trie.
 *
 * <p>At compile time, for each dotted position {@code d} an item of a chart's last set may have with an origin before it
 * ({@link Earley#kernelPosition}: the dot past the first symbol), the trie of the token texts is walked from the set
 * holding that item alone, its origin a context: where a completion reaches that context, it goes on into the item's
 * static context ({@link Earley}'s {@code soleParent}: a nonterminal with one occurrence, its left-recursive alternatives,
 * up to {@link Earley#MAX_LEVELS} levels; the repetitions, groups and single-use rules a grammar's flattening makes),
 * else it marks the set as reaching a context that varies. Each token is then
 * <ul>
 * <li><b>accepted</b> ({@link #acc}): its whole text read leaves the set non-empty: the item's own rule (and its static
 * context) goes on with it, so the output goes on with it whatever the chart;</li>
 * <li><b>context-dependent</b> ({@link #dep}): not accepted, but a prefix of its text (the empty one included) reached
 * a varying context: the rest depends on the chart; narrowed to those a widened walk takes (one that follows a varying
 * context into every occurrence of its nonterminal, origin {@link Earley#ANY}: a language that holds every chart's);</li>
 * <li>else <b>rejected</b> through that item, whatever the chart.</li>
 * </ul>
 * At run time ({@link #viable}) the mask is the union of the accepted sets of the last set's items of those positions (the
 * others, predicted in the last set or complete, take nothing their parents there do not), and the context-dependent
 * tokens outside it are checked against the whole chart ({@link Earley#viable(OutputConstraint.Trie, List, boolean[],
 * Earley.Budget, long[])}: the trie walk restricted to them); every token viable from the chart is viable through one of
 * those items, so the rest is rejected. Exactly the full walk's mask (GrammarMaskCacheTest holds them equal).
 *
 * <p>The sets are ranges of the trie's order ({@link OutputConstraint.Trie#lo}: a subtree is one range), two ints a
 * range. Bounded: at most {@code maxInts} ints in all (the compiler's: {@link OutputConstraint#MAX_TABLE}, 16 MB, less the
 * grammar's symbols, counted in the compiler's cache as table entries) and the recognizer's bounds ({@link Earley#MAX_ITEMS} a set, {@link #MAX_WORK}
 * steps); past any, {@link #build} answers null and the grammar is served by the full walk (the same mask, the old cost),
 * never refused for it. These bounds are counts, so a grammar has its cache on every engine or on none: the step's bound
 * ({@link Earley#MAX_WORK}), charged for the walk it does, is passed at the same token by the prefill and the decode. The
 * compile's deadline is checked as it goes: past it the grammar is refused as any spec is (a time, unlike the counts).
 */
final class GrammarMaskCache {
    /**
     * Most recognizer steps of one precomputation: a count, not a time, so that whether a grammar has its cache is the
     * same on every engine (the prefill's and the decode's charge a step's bound alike). Sized to the compile's deadline
     * ({@link OutputConstraint.Compiler#DEADLINE_MS}, 5 s), which refuses a grammar past it (and remembers the refusal): at
     * some 10 ns a step (94 million in 0.9 s, docs/PERFORMANCE.md) 100 million take about 1 s, a fifth of the deadline, so a
     * machine several times slower or busier still compiles within it; past the bound the grammar is served by the full
     * walk, never refused (400 million, about 4 s, could pass the deadline on a loaded machine: a grammar served before the
     * cache refused).
     */
    static final long MAX_WORK = 100_000_000L;

    /** The trie whose order the sets are in (the texts after any token but BOS). */
    final OutputConstraint.Trie trie;
    /** Each dotted position's accepted and context-dependent tokens, ranges {@code lo, hi, …} of the trie's order; null: not a kernel position. */
    private final int[][] acc, dep;
    private final long ints;
    /** The precomputation's recognizer steps (the figures). */
    final long work;

    private GrammarMaskCache(OutputConstraint.Trie trie, int[][] acc, int[][] dep, long ints, long work) {
        this.trie = trie;
        this.acc = acc;
        this.dep = dep;
        this.ints = ints;
        this.work = work;
    }

    /** Its size in ints (4 bytes each): what the compiler's cache counts. */
    long ints() {
        return ints;
    }

    /**
     * The cache of {@code e}'s grammar over {@code trie}, or null past a bound: more than {@code maxInts} ints,
     * {@code maxWork} steps, or a set of more than {@link Earley#MAX_ITEMS} items. Past the compile's deadline
     * ({@link ClientRegex#checkDeadline}, checked every 1,024 characters read) it throws as any compilation does.
     */
    static GrammarMaskCache build(Earley e, OutputConstraint.Trie trie, long maxInts, long maxWork) {
        int n = e.positions();
        int[][] acc = new int[n][], dep = new int[n][];
        Earley.Budget b = new Earley.Budget(maxWork);
        long ints = 0;
        try {
            for (int d = 0; d < n; d++) {
                if (!e.kernelPosition(d)) continue;
                ClientRegex.checkDeadline();
                Walk w = new Walk(e, b);
                List<Earley.ItemSet> chart = first(e, d, false, b);
                w.walk(trie, chart, chart.getFirst().context);
                acc[d] = w.acc.toArray();
                if (w.dep.size > 0) { // narrowed to the tokens some chart may take: those a widened walk takes
                    long[] maybe = new long[(trie.order.length + 63) >>> 6];
                    set(maybe, w.dep.toArray());
                    w.widened(trie, first(e, d, true, b), maybe);
                }
                dep[d] = w.dep2.toArray();
                ints += acc[d].length + dep[d].length + 8; // 8: the two arrays' headers
                if (ints > maxInts) return null;
            }
        } catch (Earley.Over over) {
            return null;
        }
        return new GrammarMaskCache(trie, acc, dep, ints, b.work());
    }

    /** The precomputation's first set: the item at {@code d} alone, its origin context level 0, closed; {@code widen}: {@link Earley.ItemSet#widen}. */
    private static List<Earley.ItemSet> first(Earley e, int d, boolean widen, Earley.Budget b) {
        List<Earley.ItemSet> chart = new ArrayList<>();
        Earley.ItemSet s = new Earley.ItemSet();
        s.widen = widen;
        s.add(d, -1);
        chart.add(s);
        e.closeLast(chart, b);
        return chart;
    }

    /** One position's walk of the trie. */
    private static final class Walk {
        final Earley e;
        final Earley.Budget b;
        /** The accepted tokens, the context-dependent ones, and those of them a widened walk takes. */
        final Ranges acc = new Ranges(), dep = new Ranges(), dep2 = new Ranges();
        int reads;

        Walk(Earley e, Earley.Budget b) {
            this.e = e;
            this.b = b;
        }

        /** The tokens below {@code node}; {@code context}: a prefix of the path to it (itself included) reached a varying context. */
        void walk(OutputConstraint.Trie node, List<Earley.ItemSet> chart, boolean context) {
            for (int i = 0; i < node.keys.length; i++) {
                if ((++reads & 1023) == 0) ClientRegex.checkDeadline();
                OutputConstraint.Trie kid = node.kids[i];
                if (e.read(chart, node.keys[i], b)) {
                    if (kid.tokens.length > 0) acc.add(kid.lo, kid.lo + kid.tokens.length);
                    if (kid.keys.length > 0) walk(kid, chart, context || chart.getLast().context);
                    chart.removeLast();
                } else if (context) {
                    dep.add(kid.lo, kid.hi);
                }
            }
        }

        /**
         * The tokens of {@code only} below {@code node} (whole subtrees) that a widened chart takes (a language that holds
         * every context's: those it does not take no chart does), into {@link #dep2}.
         */
        void widened(OutputConstraint.Trie node, List<Earley.ItemSet> chart, long[] only) {
            OutputConstraint.Trie[] kids = node.kids;
            if (kids.length == 0) return;
            int p = nextSet(only, kids[0].lo);
            while (p >= 0 && p < node.hi) {
                if ((++reads & 1023) == 0) ClientRegex.checkDeadline();
                int i = kid(kids, p);
                OutputConstraint.Trie kid = kids[i];
                if (e.read(chart, node.keys[i], b)) {
                    if (kid.tokens.length > 0 && nextSet(only, kid.lo) == kid.lo) dep2.add(kid.lo, kid.lo + kid.tokens.length);
                    if (kid.keys.length > 0) widened(kid, chart, only);
                    chart.removeLast();
                }
                p = nextSet(only, kid.hi);
            }
        }
    }

    /** The index of the last of {@code kids} whose range starts at or before {@code p}. */
    static int kid(OutputConstraint.Trie[] kids, int p) {
        int lo = 0, hi = kids.length - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) >>> 1;
            if (kids[mid].lo <= p) lo = mid;
            else hi = mid - 1;
        }
        return lo;
    }

    /** Ascending ranges, the adjacent merged. */
    private static final class Ranges {
        int[] r = new int[8];
        int size;

        void add(int lo, int hi) {
            if (size > 0 && r[size - 1] == lo) {
                r[size - 1] = hi;
                return;
            }
            if (size + 2 > r.length) r = Arrays.copyOf(r, r.length * 2);
            r[size++] = lo;
            r[size++] = hi;
        }

        int[] toArray() {
            return Arrays.copyOf(r, size);
        }
    }

    /**
     * Marks in {@code ok} the tokens the chart's language goes on with, as {@link Earley#viable(OutputConstraint.Trie,
     * List, boolean[], Earley.Budget)} does from {@link #trie}'s root: the union of the last set's items' accepted
     * tokens, and the context-dependent ones outside it checked against the chart ({@code b} charged for those).
     * Answers how many tokens were checked against the chart.
     */
    int viable(Earley e, List<Earley.ItemSet> chart, boolean[] ok, Earley.Budget b) {
        int[] order = trie.order;
        long[] yes = new long[(order.length + 63) >>> 6], maybe = new long[yes.length];
        Earley.ItemSet s = chart.getLast();
        int at = chart.size() - 1;
        boolean[] seen = new boolean[acc.length];
        for (int k = 0; k < s.size; k++) {
            int d = s.dp[k];
            if (seen[d] || !e.kernel(d, s.origin[k], at)) continue;
            seen[d] = true;
            if (acc[d] == null) throw new IllegalStateException("no precomputed mask for dotted position " + d);
            set(yes, acc[d]);
            set(maybe, dep[d]);
        }
        int checked = 0;
        for (int w = 0; w < yes.length; w++) {
            maybe[w] &= ~yes[w];
            checked += Long.bitCount(maybe[w]);
            for (long bits = yes[w]; bits != 0; bits &= bits - 1) ok[order[w << 6 | Long.numberOfTrailingZeros(bits)]] = true;
        }
        if (checked > 0) e.viable(trie, chart, ok, b, maybe);
        return checked;
    }

    /** Sets the ranges' bits. */
    private static void set(long[] bits, int[] ranges) {
        for (int i = 0; i < ranges.length; i += 2) {
            int lo = ranges[i], hi = ranges[i + 1]; // [lo, hi), hi > lo
            int wl = lo >>> 6, wh = (hi - 1) >>> 6;
            long first = -1L << lo, last = -1L >>> -hi; // the shifts are mod 64
            if (wl == wh) {
                bits[wl] |= first & last;
            } else {
                bits[wl] |= first;
                for (int w = wl + 1; w < wh; w++) bits[w] = -1L;
                bits[wh] |= last;
            }
        }
    }

    /** The first set bit at or after {@code from}, -1 where none. */
    static int nextSet(long[] bits, int from) {
        int w = from >>> 6;
        if (w >= bits.length) return -1;
        long word = bits[w] & (-1L << from);
        while (true) {
            if (word != 0) return w << 6 | Long.numberOfTrailingZeros(word);
            if (++w == bits.length) return -1;
            word = bits[w];
        }
    }
}
