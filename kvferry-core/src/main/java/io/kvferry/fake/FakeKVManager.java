package io.kvferry.fake;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerStats;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.KVTransferMetric;

import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * SGLang's fake backend: no bootstrap, no network, no bytes moved; every request succeeds once
 * its side has done its part (the sender after the last chunk, the receiver after send_metadata).
 * Used for warm-up requests and scheduler tests, so it holds an engine to the real managers' call
 * order: what they refuse (a manager of the other mode, a second sender of a room in flight, a
 * chunk before init or after the last one, metadata before init or twice, calls after teardown)
 * it refuses the same way, and what fails a real room (bad counts, null chunks, failure_exception()
 * on a room in flight) fails the fake one with the same kind, so an engine tested on it meets no
 * surprise on a transport.
 */
public final class FakeKVManager implements KVManager {
    private final DisaggregationMode mode;
    /** Rooms with a live sender or receiver: added at create, removed by clear() or failure_exception(). */
    private final Set<Long> inFlight = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    public FakeKVManager(DisaggregationMode mode) {
        this.mode = Objects.requireNonNull(mode, "mode");
    }

    @Override public DisaggregationMode mode() { return mode; }
    @Override public String backend() { return "fake"; }
    @Override public KVManagerStats stats() { return KVManagerStats.EMPTY; }
    @Override public boolean enableDeferredDecodeKvRelease() { return false; }

    @Override
    public void registerToBootstrap() {
        if (closed) throw new IllegalStateException("the fake KV manager was torn down");
    }

    @Override
    public void teardown() {
        closed = true;
    }

    @Override
    public KVSender createSender(String bootstrapAddr, long room, List<Integer> destTpRanks, int ppRank, boolean hint) {
        if (mode != DisaggregationMode.PREFILL) throw new UnsupportedOperationException("a decode manager creates receivers, not senders");
        admit(room, "prefill");
        return new FakeSender(room);
    }

    @Override
    public KVReceiver createReceiver(String bootstrapAddr, long room) {
        if (mode != DisaggregationMode.DECODE) throw new UnsupportedOperationException("a prefill manager creates senders, not receivers");
        admit(room, "decode");
        return new FakeReceiver(room);
    }

    private void admit(long room, String side) {
        if (closed) throw new IllegalStateException("the fake KV manager was torn down");
        if (!inFlight.add(room)) throw new IllegalArgumentException("bootstrap_room " + room + " is already in flight on this " + side + " rank");
    }

    /** A room's status and, once failed, why; shared by both sides (one thread calls, abort() may come from another). */
    private abstract class FakeRoom {
        final long room;
        private KVPoll state;
        private FailureKind kind;
        private String reason;

        FakeRoom(long room, KVPoll initial) {
            this.room = room;
            state = initial;
        }

        public final long bootstrapRoom() { return room; }
        public final synchronized KVPoll poll() { return state; }
        public final KVTransferMetric getTransferMetric() { return KVTransferMetric.EMPTY; }

        final synchronized void advance(KVPoll next) {
            if (state != KVPoll.Failed && state != KVPoll.Success) state = next;
        }

        final synchronized void fail(FailureKind k, String why) {
            state = KVPoll.Failed;
            kind = k;
            reason = why;
        }

        final synchronized void failIfUnfinished(FailureKind k, String why) {
            if (state != KVPoll.Failed && state != KVPoll.Success) fail(k, why);
        }

        public final void failureException() {
            failIfUnfinished(FailureKind.ABORTED, "failure_exception() was called for room " + room + " before its transfer concluded");
            inFlight.remove(room);
            synchronized (this) {
                throw KVTransferException.forRoom(room, kind, reason);
            }
        }

        public final void abort() {
            fail(FailureKind.ABORTED, "Aborted by AbortReq.");
        }
    }

    private final class FakeSender extends FakeRoom implements KVSender {
        private int numPages = -1;
        private int sent;
        private boolean lastChunkSent;

        FakeSender(long room) {
            super(room, KVPoll.WaitingForInput); // no decode to wait for
        }

        @Override
        public void init(int numKvIndices, int auxIndex) {
            if (numKvIndices < 0) {
                fail(FailureKind.BAD_REQUEST, "init: negative page count " + numKvIndices);
                return;
            }
            if (auxIndex < -1) {
                fail(FailureKind.BAD_REQUEST, "init: aux index " + auxIndex + " is negative");
                return;
            }
            numPages = numKvIndices;
        }

        @Override
        public void send(int[] kvIndices, int[][] stateIndices, Integer numKvTokens) {
            if (poll() == KVPoll.Failed) return; // chunks of a failed room are dropped, as after an abort
            if (numPages < 0) throw new IllegalStateException("send() before init() for room " + room);
            if (lastChunkSent) {
                throw new IllegalStateException("send() for room " + room + " after its last chunk (all " + numPages
                        + " pages declared in init were sent)");
            }
            if (kvIndices == null) {
                fail(FailureKind.BAD_REQUEST, "send: kv indices are null (an empty array for a chunk without pages)");
                return;
            }
            int end = sent + kvIndices.length;
            if (end > numPages) {
                fail(FailureKind.BAD_REQUEST, "send: pages [" + sent + ", " + end + ") exceed the " + numPages + " pages declared in init");
                return;
            }
            for (int p : kvIndices) {
                if (p < 0) {
                    fail(FailureKind.BAD_REQUEST, "send: page id " + p + " is negative");
                    return;
                }
            }
            sent = end;
            lastChunkSent = end == numPages;
            if (lastChunkSent) advance(KVPoll.Success);
        }

        @Override public int popDecodePrefixLen() { return 0; }

        @Override
        public void clear() {
            failIfUnfinished(FailureKind.ABORTED, "Request " + room + " was cleared on the prefill before its transfer concluded");
            inFlight.remove(room);
        }
    }

    private final class FakeReceiver extends FakeRoom implements KVReceiver {
        private boolean initCalled;
        private boolean metadataSent;

        FakeReceiver(long room) {
            super(room, KVPoll.Bootstrapping);
        }

        @Override
        public void init(int prefillDpRank) {
            if (initCalled) return;
            initCalled = true;
            advance(KVPoll.WaitingForInput);
        }

        @Override
        public void sendMetadata(int[] kvIndices, int auxIndex, int[][] stateIndices, int decodePrefixLen) {
            KVPoll st = poll();
            if (st == KVPoll.Failed) return;
            if (st != KVPoll.WaitingForInput || metadataSent) {
                throw new IllegalStateException("send_metadata for room " + room + " in state " + st
                        + (metadataSent ? " (already sent)" : " (call init first)"));
            }
            metadataSent = true;
            String problem = problem(kvIndices, decodePrefixLen);
            if (problem != null) fail(FailureKind.BAD_REQUEST, problem);
            else advance(KVPoll.Success);
        }

        /** The real receiver's checks that need no pool: null, negative or repeated page ids, a negative prefix. */
        private static String problem(int[] kvIndices, int decodePrefixLen) {
            if (kvIndices == null) return "send_metadata: kv indices are null";
            if (decodePrefixLen < 0) return "send_metadata: negative decode_prefix_len " + decodePrefixLen;
            int[] sorted = kvIndices.clone();
            Arrays.sort(sorted);
            for (int i = 0; i < sorted.length; i++) {
                if (sorted[i] < 0) return "send_metadata: page id " + sorted[i] + " is negative";
                if (i > 0 && sorted[i] == sorted[i - 1]) return "send_metadata: page id " + sorted[i] + " appears twice";
            }
            return null;
        }

        @Override
        public void clear() {
            inFlight.remove(room);
        }
    }
}
