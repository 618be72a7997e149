package io.kvferry.engine.model;

import java.util.concurrent.CountDownLatch;

/** Tests' hold on a compiler's slot: another thread takes it (as a long compilation would) until closed (its wait as it was then). */
public final class CompilerSlot implements AutoCloseable {
    /** The client the slot is held for. */
    public static final String HOLDER = "compiler-slot-holder";
    private final CountDownLatch release = new CountDownLatch(1);
    private final Thread holder;
    private final OutputConstraint.Compiler compiler;
    /** The compiler's wait before {@link #hold(OutputConstraint.Compiler, long)} set it: back on {@link #close}. */
    private final long waitBefore;

    private CompilerSlot(OutputConstraint.Compiler c, long waitBefore) throws InterruptedException {
        compiler = c;
        this.waitBefore = waitBefore;
        CountDownLatch held = new CountDownLatch(1);
        holder = Thread.ofPlatform().name("compiler-slot-holder").start(() -> {
            try {
                if (!c.compiling.acquire(HOLDER, Long.MAX_VALUE)) throw new IllegalStateException("the slot was not taken");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            try {
                held.countDown();
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                c.compiling.release();
            }
        });
        held.await();
    }

    /** {@code c}'s slot held by another thread from now until {@link #close}; a compilation waits at most {@code maxWaitNanos} for it. */
    public static CompilerSlot hold(OutputConstraint.Compiler c, long maxWaitNanos) throws InterruptedException {
        long before = c.maxWait();
        c.maxWait(maxWaitNanos);
        return new CompilerSlot(c, before);
    }

    /** {@code c}'s slot held as {@link #hold(OutputConstraint.Compiler, long)}, its wait as it is. */
    static CompilerSlot hold(OutputConstraint.Compiler c) throws InterruptedException {
        return new CompilerSlot(c, c.maxWait());
    }

    @Override
    public void close() throws InterruptedException {
        release.countDown();
        holder.join();
        compiler.maxWait(waitBefore);
    }
}
