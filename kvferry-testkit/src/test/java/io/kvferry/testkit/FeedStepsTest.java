package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class FeedStepsTest {
    static final class Req {
        final String name;
        boolean blocked, concluded, moves = true;

        Req(String name) {
            this.name = name;
        }
    }

    private final List<String> stepped = new ArrayList<>();
    private final FeedSteps<String, Req> steps = new FeedSteps<>(r -> {
        stepped.add(r.name);
        return r.moves;
    }, r -> r.blocked, r -> r.concluded);

    private static Consumer<Consumer<? super String>> feeding(String... handles) {
        return sink -> {
            for (String h : handles) sink.accept(h);
        };
    }

    @Test
    void onlyFedRequestsAreSteppedAndUnknownOrConcludedHandlesAreSkipped() {
        Req a = new Req("a"), b = new Req("b"), c = new Req("c");
        steps.add("A", a);
        steps.add("B", b);
        steps.add("C", c);
        c.concluded = true;
        assertTrue(steps.stepAll(feeding("A", "C", "gone")));
        assertEquals(List.of("a"), stepped);
        stepped.clear();
        a.moves = false;
        assertFalse(steps.stepAll(feeding("A")), "a step that moved nothing: the iteration did not move");
        assertFalse(steps.stepAll(feeding()));
        assertEquals(List.of("a"), stepped);
        steps.remove("A");
        assertEquals(2, steps.size());
    }

    @Test
    void aBlockedRequestIsSteppedOnEveryIterationUntilItIsNot() {
        Req a = new Req("a");
        a.blocked = true;
        steps.add("A", a); // blocked from the start (e.g. its DP group not resolved yet)
        steps.stepAll(feeding());
        steps.stepAll(feeding("A"));
        assertEquals(List.of("a", "a"), stepped, "retried on both iterations, once each though fed on the second");
        stepped.clear();
        a.blocked = false;
        steps.stepAll(feeding());
        steps.stepAll(feeding());
        assertEquals(List.of("a"), stepped, "unblocked: retried once more (its last step), then only when fed");
        stepped.clear();
        a.blocked = true;
        steps.stepAll(feeding("A"));
        a.concluded = true;
        steps.stepAll(feeding());
        assertEquals(List.of("a"), stepped, "blocked by its fed step: retried from the next iteration; concluded by then: never");
    }
}
