package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongUnaryOperator;

/**
 * Minimization of a deterministic dk.brics {@link Automaton} that stops at the compilation's deadline: Valmari and
 * Lehtinen's partition refinement for partial DFAs ("Fast brief practical DFA minimization", Valmari 2012), O(m log n)
 * over flat int arrays, calling a check ({@link ClientRegex#checkDeadline}) every {@link #CHECK_EVERY} steps, so a
 * deadline stops it within milliseconds (dk.brics's own Hopcroft cannot be interrupted and costs up to states ×
 * transitions steps).
 *
 * <p>The alphabet is the automaton's characters grouped into classes: two characters are in one class when every state
 * sends both to the same state (or neither anywhere). A sweep over the transitions' range ends groups them by a
 * signature (a sum of 64-bit hashes of the (state, destination) pairs covering them, two of them: 128 bits), then an
 * exact check visits each state's ranges and splits the classes state by state should two different sets of pairs have
 * shared a signature (a chance of about 2^-128; the tests force it with a poor hash), so the classes are exact, never a
 * merge of characters some state tells apart. The check costs one step per elementary interval a state's ranges cover
 * (on the harness's schemas 1.0–1.14 times the transitions by class, under 5 ms for the largest). A state's transition
 * over a range is one labelled transition per class inside it; the refinement runs over those. The minimal automaton is
 * built from each block's first state's own transitions (their ranges as they were, those into dead states left out,
 * adjacent ranges to one state merged): the automaton dk.brics's {@link Automaton#minimize} makes, up to the states'
 * identity (the tests compare the two's languages and sizes). Every state, transition and interval visited counts toward
 * the next check (a state's {@code getSortedTransitions}, a sort, an allocation, a loop over the states alone and the
 * refinement's single passes over its labelled transitions, at most the bound's 2M simple steps, do not: each is short).
 *
 * <p>Memory: 44 bytes per labelled transition (eleven int arrays of that length), so their count is bounded
 * ({@link ClientRegex#MAX_MINIMIZE_TRANSITIONS}, and never past an array's length) and counted before those arrays are
 * allocated, by the grouped classes (the exact ones are as many or more: counted again if the check split any); the
 * arrays per transition of the automaton (its ends, states and range ends: about 28 bytes each, with the sorted lists'
 * references) are less than dk.brics's own objects for it, and those per elementary interval (signatures, classes:
 * 24 bytes) at most 65,537 long.
 */
final class DfaMinimizer {
    /** Steps (a transition or a state visited) between two deadline checks: a few tens of microseconds. */
    static final int CHECK_EVERY = 4096;

    /** The most labelled transitions the arrays can hold (a Java array's length, less the VM's header slack). */
    private static final long MAX_ARRAY = Integer.MAX_VALUE - 8;

    private final Runnable check;
    private final LongUnaryOperator hash;
    private long steps;

    // The refinement's arrays (Valmari's names): transitions' tails, labels and heads; adjacency; the marks and worklist.
    private int[] tails, labels, heads, adj, adjStart, marked, work;
    private int mm, rr, w;
    private Partition blocks, cords;

    private DfaMinimizer(Runnable check, LongUnaryOperator hash) {
        this.check = check;
        this.hash = hash;
    }

    /** {@code a} (deterministic) minimized in place, checking the running compilation's deadline as it goes. */
    static void minimize(Automaton a) {
        minimize(a, ClientRegex::checkDeadline, ClientRegex.MAX_MINIMIZE_TRANSITIONS);
    }

    /**
     * {@code a} minimized in place; {@code check} run every {@link #CHECK_EVERY} steps (it throws to stop), and a
     * refusal ({@link ClientRegex.TooComplex}) past {@code maxTransitions} labelled transitions, before they are made.
     */
    static void minimize(Automaton a, Runnable check, long maxTransitions) {
        minimize(a, check, maxTransitions, DfaMinimizer::mix);
    }

    /**
     * As {@link #minimize(Automaton, Runnable, long)}, the character classes' signatures made from {@code hash} of each
     * (state, destination) pair (tests give a poor one, so that different classes share a signature and the exact check
     * that follows the grouping must split them).
     */
    static void minimize(Automaton a, Runnable check, long maxTransitions, LongUnaryOperator hash) {
        if (a.getSingleton() != null) return; // a string's automaton is minimal (dk.brics leaves it as it is too)
        if (!a.isDeterministic()) throw new IllegalArgumentException("the automaton to minimize is not deterministic");
        new DfaMinimizer(check, hash).run(a, maxTransitions);
    }

    private void tick() {
        if (++steps % CHECK_EVERY == 0) check.run();
    }

    private void run(Automaton a, long maxTransitions) {
        // The states, numbered breadth-first from the initial one (0), and their transitions sorted, as flat arrays.
        State init = a.getInitialState();
        List<State> states = new ArrayList<>();
        Map<State, Integer> index = new HashMap<>();
        states.add(init);
        index.put(init, 0);
        List<List<Transition>> sorted = new ArrayList<>();
        int m = 0;
        for (int i = 0; i < states.size(); i++) {
            List<Transition> ts = states.get(i).getSortedTransitions(false);
            sorted.add(ts);
            for (Transition t : ts) {
                tick();
                m++;
                if (index.putIfAbsent(t.getDest(), states.size()) == null) states.add(t.getDest());
            }
        }
        int n = states.size();
        int[] from = new int[m], lo = new int[m], hi = new int[m], to = new int[m], first = new int[n + 1];
        int k = 0;
        for (int s = 0; s < n; s++) {
            first[s] = k;
            for (Transition t : sorted.get(s)) {
                tick();
                if (k > first[s] && t.getMin() <= hi[k - 1]) {
                    throw new IllegalArgumentException("the automaton to minimize is not deterministic");
                }
                from[k] = s;
                lo[k] = t.getMin();
                hi[k] = t.getMax();
                to[k] = index.get(t.getDest());
                k++;
            }
        }
        first[n] = m;
        sorted = null;
        index = null;

        // The classes as their signatures group them, then checked exactly (split where two classes share a signature).
        // The count of labelled transitions by the grouped classes is refused first: exact classes are as many or more.
        Classes grouped = classes(from, lo, hi, to, m);
        long count = bound(count(grouped.reps, lo, hi, m), n, m, maxTransitions);
        int[] reps = exact(grouped, lo, hi, to, first, n);
        if (reps != grouped.reps) count = bound(count(reps, lo, hi, m), n, m, maxTransitions);
        mm = (int) count;
        tails = new int[mm];
        labels = new int[mm];
        heads = new int[mm];
        int j = 0;
        for (int t = 0; t < m; t++) {
            for (int c = lowerBound(reps, lo[t]), end = lowerBound(reps, hi[t] + 1); c < end; c++) {
                tick();
                tails[j] = from[t];
                labels[j] = c;
                heads[j] = to[t];
                j++;
            }
        }

        boolean[] accept = new boolean[n];
        for (int s = 0; s < n; s++) accept[s] = states.get(s).isAccept();
        int live = refine(n, reps.length, accept);

        // The minimal automaton: a state per block, each with its first state's transitions into live states, adjacent
        // ranges to one state merged (as dk.brics's reduce would, which costs a search and a sort per state more).
        State[] made = new State[blocks.z];
        for (int b = 0; b < blocks.z; b++) made[b] = new State();
        State initial;
        if (blocks.location[0] >= live) { // the initial state is dead: the empty language
            initial = new State();
        } else {
            for (int b = 0; b < blocks.z; b++) {
                int rep = blocks.elements[blocks.first[b]];
                made[b].setAccept(accept[rep]);
                int pendingLo = -1, pendingHi = -1;
                State pendingTo = null;
                for (int t = first[rep]; t < first[rep + 1]; t++) {
                    tick();
                    if (blocks.location[to[t]] >= live) continue; // into a dead state: left out
                    State dest = made[blocks.set[to[t]]];
                    if (dest == pendingTo && lo[t] == pendingHi + 1) {
                        pendingHi = hi[t];
                        continue;
                    }
                    if (pendingTo != null) made[b].addTransition(new Transition((char) pendingLo, (char) pendingHi, pendingTo));
                    pendingLo = lo[t];
                    pendingHi = hi[t];
                    pendingTo = dest;
                }
                if (pendingTo != null) made[b].addTransition(new Transition((char) pendingLo, (char) pendingHi, pendingTo));
            }
            initial = made[blocks.set[0]];
        }
        // dk.brics caches a language's hash (set by its minimize, cleared by its operations): cleared here by reducing a
        // one-state automaton (its only public way, and O(1) so), before the minimal states go in.
        a.setInitialState(new State());
        a.reduce();
        a.setInitialState(initial);
        a.setDeterministic(true);
    }

    /**
     * The labelled transitions by classes {@code reps}: a transition over [lo, hi] is one per class whose representative
     * is inside it (a deterministic state's ranges are disjoint, so each (state, class) comes once).
     */
    private long count(int[] reps, int[] lo, int[] hi, int m) {
        long count = 0;
        for (int t = 0; t < m; t++) {
            tick();
            count += lowerBound(reps, hi[t] + 1) - lowerBound(reps, lo[t]);
        }
        return count;
    }

    /** {@code count} labelled transitions, or a refusal past {@code maxTransitions} (or past what an array holds). */
    private static long bound(long count, int n, int m, long maxTransitions) {
        long max = Math.min(maxTransitions, MAX_ARRAY);
        if (count > max) {
            throw new ClientRegex.TooComplex("is too complex: minimizing its automaton of " + n + " states and " + m
                    + " transitions takes " + count + " transitions by character class, over the bound of " + max);
        }
        return count;
    }

    /**
     * Classes of the alphabet's elementary intervals (between consecutive range ends {@code points[0 .. p)}, the last
     * U+FFFF + 1): {@code of[e]} the class of interval {@code e}, {@code k} classes numbered in order of their first
     * interval; {@code reps} each class's representative character (its lowest), ascending.
     */
    private record Classes(int[] points, int p, int[] of, int k, int[] reps) {
    }

    /**
     * The alphabet's classes as grouped by signature: the characters (as the elementary intervals between the
     * transitions' range ends) grouped by the sums of hashes of the (state, destination) pairs whose transitions cover
     * them. Characters with the same pairs share a signature, so a class is a union of the exact classes; two different
     * sets of pairs share one only by chance (about 2^-128 with the default hash), which {@link #exact} catches.
     */
    private Classes classes(int[] from, int[] lo, int[] hi, int[] to, int m) {
        int[] points = new int[2 * m + 2];
        for (int t = 0; t < m; t++) {
            points[2 * t] = lo[t];
            points[2 * t + 1] = hi[t] + 1;
        }
        points[2 * m] = 0;
        points[2 * m + 1] = Character.MAX_VALUE + 1;
        Arrays.sort(points);
        int p = 0;
        for (int i = 0; i < points.length; i++) {
            if (i == 0 || points[i] != points[i - 1]) points[p++] = points[i];
        }
        long[] sig1 = new long[p], sig2 = new long[p];
        for (int t = 0; t < m; t++) {
            tick();
            int i = Arrays.binarySearch(points, 0, p, lo[t]), e = Arrays.binarySearch(points, 0, p, hi[t] + 1);
            long pair = (long) from[t] << 32 | to[t];
            long h1 = hash.applyAsLong(pair ^ 0x9E3779B97F4A7C15L), h2 = hash.applyAsLong(pair ^ 0xC2B2AE3D27D4EB4FL);
            sig1[i] += h1;
            sig1[e] -= h1;
            sig2[i] += h2;
            sig2[e] -= h2;
        }
        record Sig(long a, long b) {
        }
        Map<Sig, Integer> ids = new HashMap<>();
        int[] reps = new int[p];
        int[] of = new int[p - 1];
        int k = 0;
        long s1 = 0, s2 = 0;
        for (int e = 0; e + 1 < p; e++) {
            tick();
            s1 += sig1[e];
            s2 += sig2[e];
            Integer c = ids.putIfAbsent(new Sig(s1, s2), k);
            if (c == null) {
                of[e] = k;
                reps[k++] = points[e];
            } else {
                of[e] = c;
            }
        }
        return new Classes(points, p, of, k, Arrays.copyOf(reps, k));
    }

    /**
     * The exact classes: {@code grouped}'s representatives when every state sends all of each class's intervals to one
     * place (or none of them anywhere), checked interval by interval over each state's ranges; else the classes split
     * exactly ({@link #split}). The check visits each interval a state's transitions cover once: at most states ×
     * intervals, each a step toward the deadline check.
     */
    private int[] exact(Classes grouped, int[] lo, int[] hi, int[] to, int[] first, int n) {
        int k = grouped.k;
        int[] of = grouped.of, size = new int[k], seenBy = new int[k], dest = new int[k], covered = new int[k], touched = new int[k];
        for (int c : of) size[c]++;
        Arrays.fill(seenBy, -1);
        for (int s = 0; s < n; s++) {
            int touches = 0;
            for (int t = first[s]; t < first[s + 1]; t++) {
                for (int e = interval(grouped, lo[t]), end = interval(grouped, hi[t] + 1); e < end; e++) {
                    tick();
                    int c = of[e];
                    if (seenBy[c] != s) {
                        seenBy[c] = s;
                        dest[c] = to[t];
                        covered[c] = 1;
                        touched[touches++] = c;
                    } else if (dest[c] != to[t]) {
                        return split(grouped, lo, hi, to, first, n);
                    } else {
                        covered[c]++;
                    }
                }
            }
            for (int i = 0; i < touches; i++) {
                if (covered[touched[i]] != size[touched[i]]) return split(grouped, lo, hi, to, first, n);
            }
        }
        return grouped.reps;
    }

    /** The index of the elementary interval starting at {@code point} (a range end). */
    private static int interval(Classes c, int point) {
        return Arrays.binarySearch(c.points, 0, c.p, point);
    }

    /**
     * The exact classes, by refining the intervals state by state on where each state sends them (none anywhere its own
     * destination): O(states × intervals), only when signatures grouped two different classes (chance about 2^-128).
     */
    private int[] split(Classes grouped, int[] lo, int[] hi, int[] to, int[] first, int n) {
        int intervals = grouped.p - 1;
        int[] of = new int[intervals], dest = new int[intervals];
        int k = 1;
        for (int s = 0; s < n; s++) {
            Arrays.fill(dest, -1);
            for (int t = first[s]; t < first[s + 1]; t++) {
                for (int e = interval(grouped, lo[t]), end = interval(grouped, hi[t] + 1); e < end; e++) {
                    tick();
                    dest[e] = to[t];
                }
            }
            Map<Long, Integer> ids = new HashMap<>();
            for (int e = 0; e < intervals; e++) {
                tick();
                Integer c = ids.putIfAbsent((long) of[e] << 32 | dest[e] + 1, ids.size());
                of[e] = c == null ? ids.size() - 1 : c;
            }
            k = ids.size();
        }
        int[] reps = new int[k];
        for (int e = intervals; e-- > 0;) reps[of[e]] = grouped.points[e]; // each class's lowest interval last
        return reps;
    }

    /** SplitMix64's finalizer: a 64-bit hash of {@code z}. */
    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** The first index of {@code a} (ascending) whose value is at least {@code v}. */
    private static int lowerBound(int[] a, int v) {
        int l = 0, h = a.length;
        while (l < h) {
            int mid = (l + h) >>> 1;
            if (a[mid] < v) l = mid + 1;
            else h = mid;
        }
        return l;
    }

    /**
     * Valmari's refinement of the states into blocks of equivalent ones, over the labelled transitions; returns how many
     * states are live (reachable and co-reachable: they lie first in {@link #blocks}' order, the rest are dead).
     */
    private int refine(int n, int k, boolean[] accept) {
        blocks = new Partition(n, n);
        adj = new int[mm];
        adjStart = new int[n + 1];
        work = new int[Math.max(n, mm) + 1];
        marked = new int[Math.max(n, mm) + 1];
        // Unreachable states and transitions out (none, as the states were found from the initial one), then the states
        // no accepting state is reachable from, and their transitions.
        reach(0);
        removeUnreached(tails, heads);
        for (int q = 0; q < n; q++) if (accept[q] && blocks.location[q] < blocks.past[0]) reach(q);
        int ff = rr;
        removeUnreached(heads, tails);
        int live = blocks.past[0];

        // The first split: accepting states (they lie first) from the rest.
        marked[0] = ff;
        if (ff > 0) {
            work[w++] = 0;
            blocks.split();
        }
        // The transitions into cords by label (a counting sort: stable).
        cords = new Partition(mm, mm);
        if (mm > 0) {
            int[] start = new int[k + 1];
            for (int t = 0; t < mm; t++) start[labels[t] + 1]++;
            for (int c = 0; c < k; c++) start[c + 1] += start[c];
            for (int t = 0; t < mm; t++) {
                tick();
                int at = start[labels[t]]++;
                cords.elements[at] = t;
                cords.location[t] = at;
            }
            cords.z = 0;
            for (int i = 0; i < mm; i++) {
                int t = cords.elements[i];
                if (i == 0 || labels[t] != labels[cords.elements[i - 1]]) {
                    if (i > 0) cords.past[cords.z++] = i;
                    cords.first[cords.z] = i;
                    marked[cords.z] = 0;
                }
                cords.set[t] = cords.z;
            }
            cords.past[cords.z++] = mm;
        }
        // Split blocks by cords and cords by blocks until neither splits.
        adjacent(heads);
        int b = 1, c = 0;
        while (c < cords.z) {
            for (int i = cords.first[c]; i < cords.past[c]; i++) {
                tick();
                blocks.mark(tails[cords.elements[i]]);
            }
            blocks.split();
            c++;
            while (b < blocks.z) {
                for (int i = blocks.first[b]; i < blocks.past[b]; i++) {
                    int q = blocks.elements[i];
                    for (int j = adjStart[q]; j < adjStart[q + 1]; j++) {
                        tick();
                        cords.mark(adj[j]);
                    }
                }
                cords.split();
                b++;
            }
        }
        return live;
    }

    /** The transitions grouped by {@code key} (their tails or heads): {@code adj[adjStart[q] .. adjStart[q + 1])}. */
    private void adjacent(int[] key) {
        Arrays.fill(adjStart, 0);
        for (int t = 0; t < mm; t++) adjStart[key[t]]++;
        for (int q = 0; q + 1 < adjStart.length; q++) adjStart[q + 1] += adjStart[q];
        for (int t = mm; t-- > 0;) adj[--adjStart[key[t]]] = t;
    }

    /** State {@code q} reached: moved into the first {@link #rr} of block 0's order. */
    private void reach(int q) {
        int i = blocks.location[q];
        if (i >= rr) {
            blocks.elements[i] = blocks.elements[rr];
            blocks.location[blocks.elements[i]] = i;
            blocks.elements[rr] = q;
            blocks.location[q] = rr++;
        }
    }

    /** The states reached from those reached so far along {@code from → to}, kept; the others and their transitions dropped. */
    private void removeUnreached(int[] from, int[] to) {
        adjacent(from);
        for (int i = 0; i < rr; i++) {
            int q = blocks.elements[i];
            for (int j = adjStart[q]; j < adjStart[q + 1]; j++) {
                tick();
                reach(to[adj[j]]);
            }
        }
        int j = 0;
        for (int t = 0; t < mm; t++) {
            if (blocks.location[from[t]] < rr) {
                heads[j] = heads[t];
                labels[j] = labels[t];
                tails[j] = tails[t];
                j++;
            }
        }
        mm = j;
        blocks.past[0] = rr;
        rr = 0;
    }

    /** A refinable partition of {@code 0 .. n-1} (Valmari's): sets as ranges of one permutation, marks at each set's front. */
    private final class Partition {
        int z;
        final int[] elements, location, set, first, past;

        Partition(int n, int maxSets) {
            elements = new int[n];
            location = new int[n];
            set = new int[n];
            first = new int[Math.max(1, maxSets)];
            past = new int[Math.max(1, maxSets)];
            for (int i = 0; i < n; i++) elements[i] = location[i] = i;
            z = n > 0 ? 1 : 0;
            past[0] = n;
        }

        void mark(int e) {
            int s = set[e], i = location[e], j = first[s] + marked[s];
            if (i < j) return; // marked already
            elements[i] = elements[j];
            location[elements[i]] = i;
            elements[j] = e;
            location[e] = j;
            if (marked[s]++ == 0) work[w++] = s;
        }

        void split() {
            while (w > 0) {
                int s = work[--w], j = first[s] + marked[s];
                if (j == past[s]) {
                    marked[s] = 0;
                    continue;
                }
                if (marked[s] <= past[s] - j) {
                    first[z] = first[s];
                    past[z] = first[s] = j;
                } else {
                    past[z] = past[s];
                    first[z] = past[s] = j;
                }
                for (int i = first[z]; i < past[z]; i++) set[elements[i]] = z;
                marked[s] = 0;
                marked[z++] = 0;
            }
        }
    }
}
