package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class InFlightTest {
    static final class Req {
        final String name;
        boolean concluded, moves = true, blocked;
        /** Concludes when stepped (as a request whose poll returned Success). */
        boolean concludesNow;

        Req(String name) {
            this.name = name;
        }
    }

    private final List<String> stepped = new ArrayList<>();

    private boolean step(Req r) {
        stepped.add(r.name);
        if (r.concludesNow) r.concluded = true;
        return r.moves;
    }

    @Test
    void aSweepStepsEveryRequestOnceInAdmissionOrderAndDropsTheConcludedAfterIt() {
        InFlight<String, Req> in = InFlight.sweeping(this::step, r -> r.concluded, new IdleBackoff());
        Req a = new Req("a"), b = new Req("b"), c = new Req("c");
        in.add("A", a);
        in.add("B", b);
        in.add("C", c);
        assertFalse(in.feed());
        b.concludesNow = true;
        assertTrue(in.stepAll());
        assertEquals(List.of("a", "b", "c"), stepped, "every request, once, in admission order");
        in.concluded("B"); // a sweep drops it itself
        assertEquals(2, in.size());
        assertEquals(List.of(a, c), List.copyOf(in.requests()));
        stepped.clear();
        a.moves = false;
        c.moves = false;
        assertFalse(in.stepAll(), "nothing moved");
        assertEquals(List.of("a", "c"), stepped);
    }

    @Test
    void fedModeStepsOnlyWhatTheDrainHandsOutAndForgetsAConcludedHandle() {
        List<String> toFeed = new ArrayList<>();
        InFlight<String, Req> in = InFlight.fed(sink -> {
            for (String h : toFeed) sink.accept(h);
            toFeed.clear();
        }, this::step, r -> r.blocked, r -> r.concluded);
        Req a = new Req("a"), b = new Req("b");
        in.add("A", a);
        in.add("B", b);
        assertTrue(in.feed());
        assertFalse(in.stepAll(), "nothing fed, nothing stepped");
        assertEquals(List.of(), stepped);
        toFeed.add("B");
        assertTrue(in.stepAll());
        assertEquals(List.of("b"), stepped);
        b.concluded = true;
        in.concluded("B");
        assertEquals(1, in.size());
        assertEquals(List.of(a), List.copyOf(in.requests()));
    }
}
