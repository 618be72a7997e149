package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;

import java.util.Locale;
import java.util.Random;

/**
 * Minimization times (docs/PERFORMANCE.md, session 13): a random deterministic automaton of {@code states} states, each
 * with a transition per letter of {@code letters} (seeded), minimized by {@link DfaMinimizer} or, with a third argument
 * {@code brics}, by dk.brics's {@link Automaton#minimize}; a harness, not a test.
 *
 * <pre>
 * mvn -q -B -o -pl kvferry-engine -am test-compile -Dcheckstyle.skip=true
 * /usr/bin/time -f "maxrss %M KB" java -Xmx2g -cp kvferry-engine/target/test-classes:kvferry-engine/target/classes:'kvferry-cli/target/lib/*' \
 *     io.kvferry.engine.model.MinimizerTimes 40000 10 [brics]
 * </pre>
 */
public final class MinimizerTimes {
    private MinimizerTimes() {
    }

    public static void main(String[] args) {
        int n = Integer.parseInt(args[0]), letters = Integer.parseInt(args[1]);
        boolean brics = args.length > 2 && args[2].equals("brics");
        Random r = new Random(1);
        State[] s = new State[n];
        for (int i = 0; i < n; i++) {
            s[i] = new State();
            s[i].setAccept(r.nextInt(4) == 0);
        }
        for (State q : s) {
            for (int k = 0; k < letters; k++) q.addTransition(new Transition((char) ('a' + k), s[r.nextInt(n)]));
        }
        Automaton a = new Automaton();
        a.setInitialState(s[0]);
        a.setDeterministic(true);
        long t0 = System.nanoTime();
        if (brics) a.minimize();
        else DfaMinimizer.minimize(a, () -> { }, Long.MAX_VALUE);
        System.out.printf(Locale.ROOT, "%s: %d states × %d letters (%d transitions) -> %d states in %.2f s%n", brics ? "dk.brics" : "DfaMinimizer",
                n, letters, (long) n * letters, a.getNumberOfStates(), (System.nanoTime() - t0) / 1e9);
    }
}
