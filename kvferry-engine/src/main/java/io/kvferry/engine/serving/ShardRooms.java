package io.kvferry.engine.serving;

import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * One request's kvferry handles on every shard of an engine (a {@link KVSender} or {@link KVReceiver}
 * per PP stage × TP rank, as SGLang has one per rank), polled, failed, aborted and cleared together.
 * Used by the owning engine's scheduler thread only.
 */
final class ShardRooms<T> {
    /** How to poll and end one handle (senders and receivers share these methods but no interface). */
    record Ops<T>(Function<T, KVPoll> poll, Consumer<T> throwFailure, Consumer<T> clear, Consumer<T> abort) {
    }

    static final Ops<KVSender> SENDERS = new Ops<>(KVSender::poll, KVSender::failureException, KVSender::clear, KVSender::abort);
    static final Ops<KVReceiver> RECEIVERS = new Ops<>(KVReceiver::poll, KVReceiver::failureException, KVReceiver::clear,
            KVReceiver::abort);

    interface Factory<T> {
        T create(int stage, int rank);
    }

    private final Ops<T> ops;
    private final List<T> handles; // stage-major
    private final int tp;

    private ShardRooms(Ops<T> ops, List<T> handles, int tp) {
        this.ops = ops;
        this.handles = handles;
        this.tp = tp;
    }

    /** Creates a handle per shard; if one cannot be created, those already created are cleared and the error is rethrown. */
    static <T> ShardRooms<T> open(int pp, int tp, Ops<T> ops, Factory<T> factory) {
        List<T> made = new ArrayList<>(pp * tp);
        try {
            for (int s = 0; s < pp; s++) for (int r = 0; r < tp; r++) made.add(factory.create(s, r));
        } catch (RuntimeException e) {
            for (T h : made) ops.clear().accept(h);
            throw e;
        }
        return new ShardRooms<>(ops, made, tp);
    }

    T get(int stage, int rank) {
        return handles.get(stage * tp + rank);
    }

    List<T> all() {
        return handles;
    }

    /** The least advanced state of all shards; Failed as soon as one failed. */
    KVPoll poll() {
        KVPoll worst = KVPoll.Success;
        for (T h : handles) {
            KVPoll p = ops.poll().apply(h);
            if (p == KVPoll.Failed) return KVPoll.Failed;
            if (p.compareTo(worst) < 0) worst = p;
        }
        return worst;
    }

    /** Why the room failed: the first failed shard's exception, or null when none says. */
    KVTransferException failure() {
        for (T h : handles) {
            if (ops.poll().apply(h) != KVPoll.Failed) continue;
            try {
                ops.throwFailure().accept(h);
            } catch (KVTransferException e) {
                return e;
            }
        }
        return null;
    }

    void abort() {
        for (T h : handles) ops.abort().accept(h);
    }

    /** Drops every shard's bookkeeping (a decode's clear returns once no write of the room can land). */
    void clear() {
        for (T h : handles) ops.clear().accept(h);
    }
}
