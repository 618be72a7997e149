package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.BasicAutomata;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongUnaryOperator;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@link DfaMinimizer}: dk.brics's minimal automaton (the minimal DFA is unique), and a minimization that stops when told. */
class DfaMinimizerTest {
    /** Range ends the random automata share (so states and classes coincide often), Unicode's last ones among them. */
    private static final char[] PALETTE = {'\u0000', '0', '9', 'a', 'b', 'c', 'z', '\u007f', '\u0100', '\ud7ff', '\ue000', '\ufffe', '\uffff'};

    /** Random deterministic automata (unreachable, dead and equivalent states among them): dk.brics's minimal one. */
    @Property(seed = "20261207", tries = 400)
    void aRandomDfaMinimizesAsDkBricsDoes(@ForAll long seed) {
        Random r = new Random(seed);
        assertSameAsDkBrics(randomDfa(r, 1 + r.nextInt(40)));
    }

    /**
     * Character classes whose signatures collide (a hash of 0, 1 or 2 bits for every (state, destination) pair, so that
     * different classes share one) are split by the exact check: still dk.brics's minimal automaton, never a merge of
     * characters some state tells apart.
     */
    @Property(seed = "20261207", tries = 200)
    void collidingSignaturesStillMinimizeExactly(@ForAll long seed) {
        Random r = new Random(seed);
        int bits = r.nextInt(3);
        LongUnaryOperator poor = z -> z * 0x9E3779B97F4A7C15L >>> 64 - bits & (1L << bits) - 1;
        assertSameAsDkBrics(randomDfa(r, 1 + r.nextInt(40)), poor);
        Automaton a = randomExpression(r, 4);
        a.determinize();
        a.expandSingleton();
        assertSameAsDkBrics(a, poor);
    }

    /** Two letters that only one state tells apart, with signatures that say they are the same: kept apart. */
    @Test
    void lettersOneStateTellsApartStayApartWhateverTheirSignatures() {
        Automaton ab = ClientRegex.compile("(a|b)*ac");
        Automaton ours = ab.clone();
        DfaMinimizer.minimize(ours, () -> { }, Long.MAX_VALUE, z -> 0L); // every class's signature the same
        assertTrue(ours.run("bac") && ours.run("ac") && !ours.run("bc") && !ours.run("abc"));
        assertSameAsDkBrics(ab, z -> 0L);
    }

    /** Random expressions (dk.brics's operations over ranges up to U+FFFF), made deterministic: dk.brics's minimal one. */
    @Property(seed = "20261207", tries = 400)
    void aRandomExpressionMinimizesAsDkBricsDoes(@ForAll long seed) {
        Random r = new Random(seed);
        Automaton a = randomExpression(r, 4);
        a.determinize();
        a.expandSingleton();
        assertSameAsDkBrics(a);
    }

    @Test
    void edgeCases() {
        Automaton empty = BasicAutomata.makeEmpty();
        assertSameAsDkBrics(empty);
        Automaton emptyString = BasicAutomata.makeEmptyString();
        emptyString.expandSingleton();
        assertSameAsDkBrics(emptyString);
        assertSameAsDkBrics(BasicAutomata.makeAnyString()); // total: one accepting state, [\u0000-\uffff] to itself
        assertSameAsDkBrics(BasicAutomata.makeAnyString().complement()); // total, the empty language
        assertSameAsDkBrics(BasicAutomata.makeAnyChar().concatenate(BasicAutomata.makeAnyChar()).complement()); // total, not empty
        Automaton top = BasicAutomata.makeCharRange('\ufff0', '\uffff').concatenate(BasicAutomata.makeChar('\uffff')).repeat(1);
        top.determinize();
        assertSameAsDkBrics(top);
        Automaton low = BasicAutomata.makeChar('\u0000').union(BasicAutomata.makeCharRange('\u0001', '\uffff')); // two ranges, one state
        low.determinize();
        assertSameAsDkBrics(low);

        Automaton none = BasicAutomata.makeEmpty();
        DfaMinimizer.minimize(none, () -> { }, Long.MAX_VALUE);
        assertEquals(1, none.getNumberOfStates());
        assertEquals(0, none.getNumberOfTransitions());
        Automaton word = BasicAutomata.makeString("abc"); // a string's automaton (dk.brics's singleton): left as it is
        DfaMinimizer.minimize(word, () -> { }, Long.MAX_VALUE);
        assertEquals("abc", word.getSingleton());
        Automaton nfa = BasicAutomata.makeChar('a').union(BasicAutomata.makeString("ab"));
        assertFalse(nfa.isDeterministic());
        assertThrows(IllegalArgumentException.class, () -> DfaMinimizer.minimize(nfa, () -> { }, Long.MAX_VALUE));
    }

    /**
     * What the compiler makes of realistic schemas and expressions (Unicode classes, string formats, nested objects:
     * minimized by {@link DfaMinimizer} at each level) is minimal by dk.brics's measure too: its own minimize keeps the
     * states and transitions as they are, and the language.
     */
    @Test
    void compiledSchemasAndExpressionsAreMinimalByDkBricsToo() {
        List<Automaton> compiled = new ArrayList<>();
        for (String[] schema : HostileSchemaTimes.realistic(0)) compiled.add(JsonSchemaAutomaton.compile(schema[1]));
        for (String regex : List.of("[^\"\\\\]*@[a-z]+\\.(com|org)", "\\w+\\s\\d{1,3}", "(\\S|\\u00e9)+\\.?", "[\\s\\S]{2,5}x")) {
            compiled.add(ClientRegex.compile(regex));
        }
        for (Automaton a : compiled) {
            Automaton theirs = a.clone();
            theirs.minimize();
            assertEquals(theirs.getNumberOfStates(), a.getNumberOfStates());
            assertEquals(theirs.getNumberOfTransitions(), a.getNumberOfTransitions());
            assertTrue(theirs.subsetOf(a) && a.subsetOf(theirs));
        }
    }

    /**
     * A 40,001-state chain (a*, every state accepting, the last looping): 1.6e9 states × transitions, which the budget
     * dk.brics's uninterruptible minimizer needed (1.5e9) refused before it started; now minimized to its one state.
     */
    @Test
    void aMinimizationOnceOverTheOldBudgetRuns() {
        Automaton chain = chain(40_001, true);
        ClientRegex.minimize(chain);
        assertEquals(1, chain.getNumberOfStates());
        assertEquals(1, chain.getNumberOfTransitions());
        assertTrue(chain.run("a".repeat(50_000)) && chain.run(""));
    }

    /**
     * Past the compilation's deadline the minimizer stops from inside its steps (not wall-clock: the deadline is
     * already past when it starts), leaving the automaton as it was; the minimizer's own frame throws.
     */
    @Test
    void aDeadlineStopsTheMinimizationFromInside() {
        Automaton chain = chain(40_001, true);
        State init = chain.getInitialState();
        ClientRegex.TooComplex e = ClientRegex.withDeadline(-1_000_000_000L,
                () -> assertThrows(ClientRegex.TooComplex.class, () -> DfaMinimizer.minimize(chain)));
        assertTrue(e.deadline(), e.getMessage());
        assertTrue(Arrays.stream(e.getStackTrace()).anyMatch(f -> f.getClassName().equals(DfaMinimizer.class.getName())
                && f.getMethodName().equals("tick")), "thrown from the minimizer's step check");
        assertSame(init, chain.getInitialState(), "the automaton is left as it was");
        assertEquals(40_001, chain.getNumberOfStates());
    }

    /** The check runs every {@link DfaMinimizer#CHECK_EVERY} steps, all through the minimization, and its throw stops it. */
    @Test
    void theMinimizerChecksEveryFewThousandSteps() {
        AtomicInteger checks = new AtomicInteger();
        Automaton whole = chain(40_001, false);
        DfaMinimizer.minimize(whole, checks::incrementAndGet, Long.MAX_VALUE);
        assertEquals(40_001, whole.getNumberOfStates(), "a string's chain is minimal");
        int all = checks.get();
        assertTrue(all >= 40_000 * 5 / DfaMinimizer.CHECK_EVERY, "checks: " + all); // each state's transition is visited several times

        AtomicInteger counted = new AtomicInteger();
        Automaton stopped = chain(40_001, false);
        int stopAt = all - 1; // the last check but one: deep inside the refinement
        ClientRegex.TooComplex e = assertThrows(ClientRegex.TooComplex.class, () -> DfaMinimizer.minimize(stopped, () -> {
            if (counted.incrementAndGet() == stopAt) throw new ClientRegex.TooComplex("stop");
        }, Long.MAX_VALUE));
        assertEquals("stop", e.getMessage());
        assertEquals(stopAt, counted.get());
    }

    /** Past its bound of transitions by character class (its memory) the minimization is refused before it allocates. */
    @Test
    void aMinimizationOverItsMemoryBoundIsRefused() {
        Automaton chain = chain(1_001, true);
        AtomicInteger checks = new AtomicInteger();
        ClientRegex.TooComplex e = assertThrows(ClientRegex.TooComplex.class, () -> DfaMinimizer.minimize(chain, checks::incrementAndGet, 1_000));
        assertEquals("is too complex: minimizing its automaton of 1001 states and 1001 transitions takes 1001 transitions by character class,"
                + " over the bound of 1000", e.getMessage());
        assertFalse(e.deadline());
        DfaMinimizer.minimize(chain, checks::incrementAndGet, 1_001);
        assertEquals(1, chain.getNumberOfStates());
    }

    /**
     * More transitions by class than an array holds (32,768 states each over every character, after a state that tells
     * all 65,536 characters apart: 2^31 + 65,536): refused by what an array holds even with no bound given, never cast
     * to a negative length.
     */
    @Test
    void transitionsByClassPastAnArraysLengthAreRefusedWhateverTheBound() {
        State fan = new State();
        for (int c = 0; c <= Character.MAX_VALUE; c++) {
            State leaf = new State();
            leaf.setAccept(true);
            fan.addTransition(new Transition((char) c, leaf));
        }
        State next = fan;
        for (int i = 0; i < 32_768; i++) {
            State s = new State();
            s.addTransition(new Transition(Character.MIN_VALUE, Character.MAX_VALUE, next));
            next = s;
        }
        Automaton a = new Automaton();
        a.setInitialState(next);
        a.setDeterministic(true);
        ClientRegex.TooComplex e = assertThrows(ClientRegex.TooComplex.class, () -> DfaMinimizer.minimize(a, () -> { }, Long.MAX_VALUE));
        assertTrue(e.getMessage().endsWith("takes 2147549184 transitions by character class, over the bound of " + (Integer.MAX_VALUE - 8)),
                e.getMessage());
    }

    /** {@code n} states in a chain over 'a'; {@code loop}: every state accepting and the last looping (a*), else only the last accepts. */
    private static Automaton chain(int n, boolean loop) {
        State[] s = new State[n];
        for (int i = 0; i < n; i++) s[i] = new State();
        for (int i = 0; i + 1 < n; i++) s[i].addTransition(new Transition('a', s[i + 1]));
        for (int i = 0; i < n; i++) s[i].setAccept(loop || i == n - 1);
        if (loop) s[n - 1].addTransition(new Transition('a', s[n - 1]));
        Automaton a = new Automaton();
        a.setInitialState(s[0]);
        a.setDeterministic(true);
        return a;
    }

    private static void assertSameAsDkBrics(Automaton a) {
        assertSameAsDkBrics(a, null);
    }

    /** {@code hash}: the pair hash the minimizer's class signatures use; null: its own. */
    private static void assertSameAsDkBrics(Automaton a, LongUnaryOperator hash) {
        Automaton theirs = a.clone();
        theirs.minimize();
        theirs.removeDeadTransitions(); // dk.brics leaves a total one-state automaton's loop to a dead state as it is
        Automaton ours = a.clone();
        if (hash == null) DfaMinimizer.minimize(ours, () -> { }, Long.MAX_VALUE);
        else DfaMinimizer.minimize(ours, () -> { }, Long.MAX_VALUE, hash);
        assertTrue(ours.subsetOf(theirs) && theirs.subsetOf(ours), "the same language");
        assertEquals(theirs.getNumberOfStates(), ours.getNumberOfStates(), "the same number of states");
        assertEquals(theirs.getNumberOfTransitions(), ours.getNumberOfTransitions(), "the same transitions, adjacent ranges merged");
        assertTrue(ours.isDeterministic());
        for (State s : ours.getStates()) {
            List<Transition> ts = s.getSortedTransitions(false);
            for (int i = 1; i < ts.size(); i++) {
                assertTrue(ts.get(i).getMin() > ts.get(i - 1).getMax(), "deterministic: disjoint ranges");
                assertFalse(ts.get(i).getMin() == ts.get(i - 1).getMax() + 1 && ts.get(i).getDest() == ts.get(i - 1).getDest(), "merged");
            }
        }
        if (ours.getNumberOfStates() > 1 || ours.getInitialState().isAccept()) {
            assertEquals(ours.getNumberOfStates(), ours.getLiveStates().size(), "no dead state");
        }
    }

    private static char paletteOrRandom(Random r) {
        return r.nextInt(4) == 0 ? (char) r.nextInt(0x10000) : PALETTE[r.nextInt(PALETTE.length)];
    }

    private static Automaton randomDfa(Random r, int n) {
        State[] s = new State[n];
        for (int i = 0; i < n; i++) {
            s[i] = new State();
            s[i].setAccept(r.nextInt(3) == 0);
        }
        for (int i = 0; i < n; i++) {
            int cuts = r.nextInt(6);
            char[] ends = new char[cuts * 2];
            for (int k = 0; k < ends.length; k++) ends[k] = paletteOrRandom(r);
            Arrays.sort(ends);
            int last = -1;
            for (int k = 0; k + 1 < ends.length; k += 2) {
                char lo = ends[k], hi = ends[k + 1];
                if (lo <= last) continue; // overlapping the previous range: left out (deterministic)
                s[i].addTransition(new Transition(lo, hi, s[r.nextInt(n)]));
                last = hi;
            }
        }
        Automaton a = new Automaton();
        a.setInitialState(s[0]);
        a.setDeterministic(true);
        return a;
    }

    private static Automaton randomExpression(Random r, int depth) {
        int kind = depth == 0 ? 0 : r.nextInt(7);
        return switch (kind) {
            case 0 -> {
                char a = paletteOrRandom(r), b = paletteOrRandom(r);
                yield BasicAutomata.makeCharRange((char) Math.min(a, b), (char) Math.max(a, b));
            }
            case 1, 2 -> randomExpression(r, depth - 1).union(randomExpression(r, depth - 1));
            case 3, 4 -> randomExpression(r, depth - 1).concatenate(randomExpression(r, depth - 1));
            case 5 -> randomExpression(r, depth - 1).repeat();
            default -> randomExpression(r, depth - 1).optional();
        };
    }
}
