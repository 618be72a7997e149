package io.kvferry.testkit;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.function.Predicate;

/**
 * A bench driver's requests in feed mode ({@code --poll feed}): kept by their sender or receiver
 * (what a manager's change feed hands out), stepped when fed, and stepped again on every iteration
 * while their last step waited on something no status change announces (pages, the warm-up
 * snapshot, the probe, a decision due on the next step). One per driver run; driver thread only.
 *
 * @param <H> the handle type (sender or receiver)
 * @param <F> the driver's request record
 */
final class FeedSteps<H, F> {
    private final Map<H, F> byHandle = new IdentityHashMap<>();
    private final List<F> retries = new ArrayList<>();
    private final Set<F> retrying = Collections.newSetFromMap(new IdentityHashMap<>());
    private final Predicate<F> step;
    private final Predicate<F> blocked;
    private final Predicate<F> concluded;
    private final Consumer<H> sink = this::fed;
    private boolean moved;

    /**
     * @param step      steps one request; true when something moved
     * @param blocked   its last step waited on something no status change announces
     * @param concluded it concluded (and its handle was cleared)
     */
    FeedSteps(Predicate<F> step, Predicate<F> blocked, Predicate<F> concluded) {
        this.step = step;
        this.blocked = blocked;
        this.concluded = concluded;
    }

    void add(H handle, F request) {
        byHandle.put(handle, request);
        if (blocked.test(request)) retry(request);
    }

    void remove(H handle) {
        byHandle.remove(handle);
    }

    int size() {
        return byHandle.size();
    }

    Collection<F> requests() {
        return byHandle.values();
    }

    /**
     * One iteration: {@code drain} hands the fed handles to its argument (a manager's
     * {@code drainChangedSenders} or {@code drainChangedReceivers}), then the blocked requests are
     * stepped again. Each request is stepped at most once per iteration: a fed one that is retrying
     * is left to the retries, one that blocks now is retried from the next iteration on. True when
     * some step moved something.
     */
    boolean stepAll(Consumer<Consumer<? super H>> drain) {
        moved = false;
        int retryNow = retries.size();
        drain.accept(sink);
        if (!retries.isEmpty()) {
            for (int i = 0; i < retryNow; i++) {
                F f = retries.get(i);
                if (!concluded.test(f)) moved |= step.test(f);
            }
            retries.removeIf(f -> {
                boolean done = concluded.test(f) || !blocked.test(f);
                if (done) retrying.remove(f);
                return done;
            });
        }
        return moved;
    }

    private void fed(H handle) {
        F f = byHandle.get(handle);
        if (f == null || concluded.test(f)) return; // concluded and cleared since it was fed
        if (!retrying.isEmpty() && retrying.contains(f)) return; // stepped with the retries
        moved |= step.test(f);
        if (blocked.test(f)) retry(f);
    }

    private void retry(F f) {
        if (retrying.add(f)) retries.add(f);
    }
}
