package io.kvferry.testkit;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Predicate;

/**
 * A bench driver's requests in flight, and how one scheduler iteration steps them: every one in
 * admission order ({@code --poll sweep}: one poll per request per step, as SGLang's scheduler), or
 * only those the manager's change feed hands out ({@code --poll feed}, {@link FeedSteps}). One per
 * driver run; driver thread only.
 *
 * @param <H> the handle type (sender or receiver)
 * @param <F> the driver's request record
 */
final class InFlight<H, F> {
    /** Sweep mode: the requests in admission order (null in feed mode). */
    private final List<F> all;
    /** Feed mode (null in sweep mode). */
    private final FeedSteps<H, F> fed;
    private final Consumer<Consumer<? super H>> drain;
    private final Predicate<F> step;
    private final Predicate<F> concluded;
    private final IdleBackoff idle;

    private InFlight(List<F> all, FeedSteps<H, F> fed, Consumer<Consumer<? super H>> drain, Predicate<F> step,
                     Predicate<F> concluded, IdleBackoff idle) {
        this.all = all;
        this.fed = fed;
        this.drain = drain;
        this.step = step;
        this.concluded = concluded;
        this.idle = idle;
    }

    /**
     * Every request stepped once per iteration, its polling timed for {@code idle}'s pacing.
     *
     * @param step      steps one request; true when something moved
     * @param concluded it concluded (dropped after the sweep that concluded it)
     */
    static <H, F> InFlight<H, F> sweeping(Predicate<F> step, Predicate<F> concluded, IdleBackoff idle) {
        return new InFlight<>(new ArrayList<>(), null, null, step, concluded, idle);
    }

    /**
     * The fed requests stepped, and those whose last step was {@code blocked} ({@link FeedSteps}).
     *
     * @param drain a manager's {@code drainChangedSenders} or {@code drainChangedReceivers}
     */
    static <H, F> InFlight<H, F> fed(Consumer<Consumer<? super H>> drain, Predicate<F> step, Predicate<F> blocked,
                                     Predicate<F> concluded) {
        return new InFlight<>(null, new FeedSteps<>(step, blocked, concluded), drain, step, concluded, null);
    }

    boolean feed() {
        return fed != null;
    }

    void add(H handle, F request) {
        if (fed != null) fed.add(handle, request);
        else all.add(request);
    }

    /** The request of {@code handle} concluded (feed mode forgets it now; a sweep drops it when it ends). */
    void concluded(H handle) {
        if (fed != null) fed.remove(handle);
    }

    int size() {
        return fed != null ? fed.size() : all.size();
    }

    Collection<F> requests() {
        return fed != null ? fed.requests() : all;
    }

    /** One scheduler iteration's steps; true when one moved something. */
    boolean stepAll() {
        if (fed != null) return fed.stepAll(drain);
        idle.sweepStarted();
        boolean moved = false, anyConcluded = false;
        for (int i = 0, n = all.size(); i < n; i++) {
            F f = all.get(i);
            moved |= step.test(f);
            anyConcluded |= concluded.test(f);
        }
        if (anyConcluded) all.removeIf(concluded); // one pass, not one shift per removal
        idle.sweepDone();
        return moved;
    }
}
