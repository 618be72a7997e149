package io.kvferry.engine.model;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

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
 * <p>Shared suffixes (session 15): a large vocabulary has thousands of context-dependent tokens such as JSON's
 * {@code word",} inside a string (a key's end or a value's: only the chart says), each read through the whole chart,
 * and they share no prefix. But each is a prefix read within the item's own rule ({@code word}) into a state that
 * decides alone how the rest reads ({@link #state}: the items not complete nor predicted there, their context levels
 * and the text their other origins were read after), then a suffix ({@code ",}) from the point just before a varying
 * context is reached. Tokens of one position with the same state and suffix share their fate through that position's
 * items whatever the chart, so the precomputation groups them ({@link SharedSuffix}, two trie nodes or more) and the
 * run time reads one text of each group through the chart's items at that position (the last set's kernel items there,
 * closed in its place: exact for that position alone, as the group is) and takes or leaves the whole group. The rest
 * of the context-dependent tokens (those whose context is reached at their first character, such as {@code ",} itself,
 * which share prefixes in the trie) are checked by the restricted walk as before. Both the position's items alone and
 * the state's text are needed (GrammarMaskCacheTest has a grammar where each one's lack gives a wrong mask): the group's
 * text read through the whole last set may go on through another item there that takes it and not the other members
 * (a literal {@code ["a",]} beside a string after {@code ["}: {@code b",} taken with {@code a",}); and items alike that
 * began after different texts complete into different items ({@code r} begun after {@code x} or after {@code y}, its end
 * going on with {@code 2} after one and not the other), so the state names the text up to their last origin. A state
 * is built once a set of the precomputation (not once a trie node below it) and keyed by its number, so the grouping's
 * memory at compile time is the trie's plus the states of the sets the steps made, not a set's items a node.
 *
 * <p>The sets are ranges of the trie's order ({@link OutputConstraint.Trie#lo}: a subtree is one range), two ints a
 * range; a group's text counts two characters an int, its record and arrays {@link #GROUP_OVERHEAD}. Bounded: at most {@code maxInts} ints in all (the compiler's: {@link OutputConstraint#MAX_TABLE}, 16 MB, less the
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
    /**
     * Each dotted position's accepted tokens, and its context-dependent ones not in a {@link SharedSuffix} group (checked
     * against the chart by one restricted walk of the trie), ranges {@code lo, hi, …} of the trie's order; null: not a
     * kernel position.
     */
    private final int[][] acc, dep;
    /** Each dotted position's context-dependent tokens grouped by the state they reach and the text left after it; null: none. */
    private final SharedSuffix[][] groups;
    private final long ints;
    /** The precomputation's recognizer steps (the figures). */
    final long work;
    /**
     * The characters of the clean states ({@link #state}) the precomputation built (tests): each set's once, however
     * many trie nodes below it their tokens' context is reached under, so at most some four a step of {@link #work}.
     */
    final long stateChars;

    /**
     * Context-dependent tokens of one dotted position {@code d} whose fate through {@code d}'s items is one: each token's
     * text is a prefix read without reaching a varying context, into the same state ({@link #state}: the
     * precomputation's items that decide what it reads on), then the same rest (its suffix). Whatever the chart, the items an item at {@code d} leads to after any of those prefixes are the
     * same (the levels stand for the same sets of the chart), so the rest reads alike: one token's text ({@link #text},
     * the representative) read through the chart's items at {@code d} decides them all. JSON's {@code word",} and
     * {@code word":} inside a string (the string's parents vary: a key or a value) are two such groups of some
     * thousand tokens at a large vocabulary, each token once read through the whole chart.
     */
    private record SharedSuffix(char[] text, int[] members) {
    }

    private GrammarMaskCache(OutputConstraint.Trie trie, int[][] acc, int[][] dep, SharedSuffix[][] groups, long ints, long work,
                             long stateChars) {
        this.trie = trie;
        this.acc = acc;
        this.dep = dep;
        this.groups = groups;
        this.ints = ints;
        this.work = work;
        this.stateChars = stateChars;
    }

    /** How many {@link SharedSuffix} groups, and the tokens in them, all positions together (tests, figures). */
    long[] groupsAndMembers() {
        long count = 0, members = 0;
        for (SharedSuffix[] gs : groups) {
            if (gs == null) continue;
            for (SharedSuffix g : gs) {
                count++;
                for (int i = 0; i < g.members.length; i += 2) members += g.members[i + 1] - g.members[i];
            }
        }
        return new long[]{count, members};
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
        SharedSuffix[][] groups = new SharedSuffix[n][];
        Earley.Budget b = new Earley.Budget(maxWork);
        long ints = 0, stateChars = 0;
        try {
            for (int d = 0; d < n; d++) {
                if (!e.kernelPosition(d)) continue;
                ClientRegex.checkDeadline();
                Walk w = new Walk(e, b);
                List<Earley.ItemSet> chart = first(e, d, false, b);
                w.walk(trie, chart, chart.getFirst().context ? 0 : NO_CONTEXT);
                stateChars += w.stateChars;
                acc[d] = w.acc.toArray();
                dep[d] = new int[0];
                if (w.dep.size > 0) { // narrowed to the tokens some chart may take: those a widened walk takes
                    long[] maybe = new long[(trie.order.length + 63) >>> 6];
                    set(maybe, w.dep.toArray());
                    w.widened(trie, first(e, d, true, b), maybe);
                    long[] left = new long[maybe.length];
                    set(left, w.dep2.toArray());
                    groups[d] = w.group(trie, left);
                    dep[d] = ranges(left);
                }
                ints += acc[d].length + dep[d].length + 8; // 8: the two arrays' headers
                if (groups[d] != null) {
                    ints += POSITION_GROUPS_OVERHEAD + groups[d].length;
                    for (SharedSuffix g : groups[d]) ints += (g.text.length + 1) / 2 + g.members.length + GROUP_OVERHEAD;
                }
                if (ints > maxInts) return null;
            }
        } catch (Earley.Over over) {
            return null;
        }
        return new GrammarMaskCache(trie, acc, dep, groups, ints, b.work(), stateChars);
    }

    /**
     * What a {@link SharedSuffix} holds beyond its text and members, in ints: the record (a header of 3 and its two
     * references, rounded up to 6) and its two arrays' headers (4 each). Counted so the compiler's bound sees a grammar of
     * many small groups as it is (8 counted about half of it).
     */
    static final int GROUP_OVERHEAD = 14;
    /** A position's array of groups: its header (4 ints); each slot one more. */
    static final int POSITION_GROUPS_OVERHEAD = 4;

    /** {@link Walk#walk}'s depth of the first set that reached a varying context on the path: none yet. */
    private static final int NO_CONTEXT = Integer.MAX_VALUE;

    /**
     * The state of a precomputation's set at {@code index} of its chart, {@code path} the text read to it: what decides
     * how it reads on, whatever the chart. Its items not complete and not predicted in it (those follow from the others;
     * the complete ones are done), sorted, each its dotted position and origin (a context level, or a set of this walk),
     * then the text that made the walk's sets those origins name (up to the last of them). Two sets of one
     * precomputation in the same state read any text alike whatever the chart: their items are the same, a context level
     * stands for the same sets of the chart in both, and a set of the walk is the same set (the same text read to it).
     */
    static String state(Earley e, Earley.ItemSet s, int index, CharSequence path) {
        long[] items = new long[s.size];
        int n = 0, sets = 0;
        for (int k = 0; k < s.size; k++) {
            int dp = s.dp[k], o = s.origin[k];
            if (e.atEnd(dp) || o == index) continue;
            if (o >= 0) sets = Math.max(sets, o);
            items[n++] = (long) dp << 32 | (o & 0xFFFF_FFFFL);
        }
        Arrays.sort(items, 0, n);
        StringBuilder key = new StringBuilder(n * 4 + 1 + sets);
        for (int k = 0; k < n; k++) {
            long item = items[k];
            key.append((char) (item >>> 48)).append((char) (item >>> 32)).append((char) (item >>> 16)).append((char) item);
        }
        return key.append('\uFFFE').append(path, 0, sets).toString();
    }

    /** The ranges of the set bits, ascending. */
    private static int[] ranges(long[] bits) {
        Ranges r = new Ranges();
        for (int p = nextSet(bits, 0); p >= 0; p = nextSet(bits, p + 1)) r.add(p, p + 1);
        return r.toArray();
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
        /**
         * The context-dependent subtrees in the trie's order (disjoint, ascending), each with the point of the path to it
         * just before a varying context was first reached: its depth (the prefix's length; 0: none past the start) and
         * {@link #state}, as its number in {@link #stateIds}.
         */
        final List<DependentSubtree> subtrees = new ArrayList<>();
        /**
         * The clean states met, each numbered once: a subtree and a group's key hold the number, not the state (a set's
         * items, up to {@link Earley#MAX_ITEMS} of them), so that their memory is the trie's, not the trie's times a set's.
         */
        private final Map<String, Integer> stateIds = new HashMap<>();
        /**
         * The set whose state was built last and its number: every trie node below the point where a varying context was
         * first reached splits at that same set (the walk's chart holds it until it leaves the subtree; a set read later
         * is a new one), so each set's state is built once, not once a node.
         */
        private Earley.ItemSet stateSet;
        private int stateId;
        /** The characters of the states built. */
        long stateChars;
        /** The text read to the node {@link #walk} is at. */
        private final StringBuilder path = new StringBuilder();
        int reads;

        record DependentSubtree(int lo, int hi, int depth, int state) {
        }

        Walk(Earley e, Earley.Budget b) {
            this.e = e;
            this.b = b;
        }

        /**
         * The tokens below {@code node}; {@code contextAt}: the depth (chart index) of the first set on the path to it
         * (itself included) that reached a varying context, {@link #NO_CONTEXT} where none did.
         */
        void walk(OutputConstraint.Trie node, List<Earley.ItemSet> chart, int contextAt) {
            DependentSubtree split = null; // the path's clean point, found at this node's first dependent subtree
            for (int i = 0; i < node.keys.length; i++) {
                if ((++reads & 1023) == 0) ClientRegex.checkDeadline();
                OutputConstraint.Trie kid = node.kids[i];
                if (e.read(chart, node.keys[i], b)) {
                    if (kid.tokens.length > 0) acc.add(kid.lo, kid.lo + kid.tokens.length);
                    int depth = chart.size() - 1;
                    path.append(node.keys[i]);
                    if (kid.keys.length > 0) walk(kid, chart, contextAt != NO_CONTEXT || !chart.getLast().context ? contextAt : depth);
                    path.setLength(depth - 1);
                    chart.removeLast();
                } else if (contextAt != NO_CONTEXT) {
                    dep.add(kid.lo, kid.hi);
                    if (split == null) { // the last set before the first that reached a varying context (0: the start's own)
                        int c = contextAt - 1;
                        split = c < 1 ? new DependentSubtree(0, 0, 0, -1) : new DependentSubtree(0, 0, c, stateId(chart.get(c), c));
                    }
                    subtrees.add(new DependentSubtree(kid.lo, kid.hi, split.depth, split.state));
                }
            }
        }

        /** The number of the state of {@code s}, the walk's set at {@code index} ({@link #state}, built once a set). */
        private int stateId(Earley.ItemSet s, int index) {
            if (s != stateSet) {
                String state = state(e, s, index, path);
                stateChars += state.length();
                Integer id = stateIds.putIfAbsent(state, stateIds.size());
                stateId = id == null ? stateIds.size() - 1 : id;
                stateSet = s;
            }
            return stateId;
        }

        /**
         * Groups the tokens set in {@code left} (the narrowed context-dependent ones) by their path's clean state and the
         * text after it ({@link SharedSuffix}), clearing from {@code left} those of a group of two trie nodes or more (the
         * others stay for the walk of the trie against the chart, which shares their prefixes). Null: no group.
         */
        SharedSuffix[] group(OutputConstraint.Trie root, long[] left) {
            Map<String, List<int[]>> byKey = new LinkedHashMap<>();
            Map<String, String> text = new HashMap<>();
            collect(root, left, new StringBuilder(), byKey, text);
            List<SharedSuffix> out = new ArrayList<>();
            for (Map.Entry<String, List<int[]>> g : byKey.entrySet()) {
                if (g.getValue().size() < 2) continue;
                Ranges members = new Ranges();
                for (int[] r : g.getValue()) {
                    members.add(r[0], r[1]);
                    for (int p = r[0]; p < r[1]; p++) left[p >>> 6] &= ~(1L << p);
                }
                out.add(new SharedSuffix(text.get(g.getKey()).toCharArray(), members.toArray()));
            }
            return out.isEmpty() ? null : out.toArray(new SharedSuffix[0]);
        }

        /** The tokens of {@code only} below {@code node} (the path to it {@code path}), keyed by clean state and suffix. */
        private void collect(OutputConstraint.Trie node, long[] only, StringBuilder path, Map<String, List<int[]>> byKey,
                             Map<String, String> text) {
            OutputConstraint.Trie[] kids = node.kids;
            if (kids.length == 0) return;
            int p = nextSet(only, kids[0].lo);
            while (p >= 0 && p < node.hi) {
                int i = kid(kids, p);
                OutputConstraint.Trie kid = kids[i];
                path.append(node.keys[i]);
                if (kid.tokens.length > 0 && nextSet(only, kid.lo) == kid.lo) {
                    DependentSubtree at = subtree(kid.lo);
                    if (at.depth > 0) {
                        String key = new StringBuilder(2 + path.length() - at.depth).append((char) (at.state >>> 16))
                                .append((char) at.state).append(path, at.depth, path.length()).toString();
                        byKey.computeIfAbsent(key, k -> new ArrayList<>()).add(new int[]{kid.lo, kid.lo + kid.tokens.length});
                        text.putIfAbsent(key, path.toString());
                    }
                }
                if (kid.keys.length > 0) collect(kid, only, path, byKey, text);
                path.setLength(path.length() - 1);
                p = nextSet(only, kid.hi);
            }
        }

        /** The dependent subtree holding the token at {@code p} of the trie's order. */
        private DependentSubtree subtree(int p) {
            int lo = 0, hi = subtrees.size() - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) >>> 1;
                if (subtrees.get(mid).lo <= p) lo = mid;
                else hi = mid - 1;
            }
            DependentSubtree s = subtrees.get(lo);
            if (p < s.lo || p >= s.hi) throw new IllegalStateException("token " + p + " is in no dependent subtree");
            return s;
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
     * tokens; each {@link SharedSuffix} group not in it decided by its one text read through the chart's items at its
     * position (the last set in their place, closed); the other context-dependent tokens outside it checked against the
     * chart ({@code b} charged for those). {@code grouped} false: every context-dependent token checked against the
     * chart, the groups' too (session 14's way, kept for the figures and the tests). Answers how many tokens and groups
     * were checked against the chart. A bound passed ({@link Earley.Over}) leaves the chart as it was (its sets, the last
     * one put back), though the caller drops a request's chart then anyway ({@link OutputConstraint.Progress#clear}).
     */
    int viable(Earley e, List<Earley.ItemSet> chart, boolean[] ok, Earley.Budget b, boolean grouped) {
        int[] order = trie.order;
        long[] yes = new long[(order.length + 63) >>> 6], maybe = new long[yes.length];
        Earley.ItemSet s = chart.getLast();
        int at = chart.size() - 1;
        boolean[] seen = new boolean[acc.length];
        int[] kernels = new int[s.size];
        int n = 0;
        for (int k = 0; k < s.size; k++) {
            int d = s.dp[k];
            if (seen[d] || !e.kernel(d, s.origin[k], at)) continue;
            seen[d] = true;
            kernels[n++] = d;
            if (acc[d] == null) throw new IllegalStateException("no precomputed mask for dotted position " + d);
            set(yes, acc[d]);
            set(maybe, dep[d]);
            if (!grouped && groups[d] != null) {
                for (SharedSuffix g : groups[d]) set(maybe, g.members);
            }
        }
        int checked = 0;
        if (grouped) {
            for (int i = 0; i < n; i++) {
                if (groups[kernels[i]] != null) checked += decideGroups(e, chart, kernels[i], yes, b);
            }
        }
        for (int w = 0; w < yes.length; w++) {
            maybe[w] &= ~yes[w];
            checked += Long.bitCount(maybe[w]);
            for (long bits = yes[w]; bits != 0; bits &= bits - 1) ok[order[w << 6 | Long.numberOfTrailingZeros(bits)]] = true;
        }
        if (checked > 0) {
            try {
                e.viable(trie, chart, ok, b, maybe);
            } finally { // a bound passed mid-walk (Earley.Over) leaves the chart as it was, as the groups' reads do
                while (chart.size() > at + 1) chart.removeLast();
            }
        }
        return checked;
    }

    /**
     * Reads each {@link SharedSuffix} group's text of position {@code d} not already all in {@code yes} through the
     * chart's items at {@code d} (the kernel ones: origins before the last set; their set closed in the last set's place,
     * the chart left as it was), and sets the members of those it reads whole in {@code yes}. Answers how many it read.
     */
    private int decideGroups(Earley e, List<Earley.ItemSet> chart, int d, long[] yes, Earley.Budget b) {
        int at = chart.size() - 1, read = 0;
        Earley.ItemSet last = chart.getLast(), threads = null;
        try {
            for (SharedSuffix g : groups[d]) {
                if (allSet(yes, g.members)) continue;
                if (threads == null) {
                    threads = new Earley.ItemSet();
                    for (int k = 0; k < last.size; k++) {
                        if (last.dp[k] == d && e.kernel(d, last.origin[k], at)) threads.add(d, last.origin[k]);
                    }
                    chart.set(at, threads);
                    e.closeLast(chart, b);
                }
                read++;
                int c = 0;
                while (c < g.text.length && e.read(chart, g.text[c], b)) c++;
                for (int k = 0; k < c; k++) chart.removeLast();
                if (c == g.text.length) set(yes, g.members);
            }
        } finally {
            while (chart.size() > at + 1) chart.removeLast();
            chart.set(at, last);
        }
        return read;
    }

    /** Whether all the ranges' bits are set. */
    private static boolean allSet(long[] bits, int[] ranges) {
        for (int i = 0; i < ranges.length; i += 2) {
            for (int p = ranges[i]; p < ranges[i + 1]; p++) {
                if ((bits[p >>> 6] & 1L << p) == 0) return false;
            }
        }
        return true;
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
