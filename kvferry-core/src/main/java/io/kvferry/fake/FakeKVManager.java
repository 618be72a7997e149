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

import java.util.List;

/**
 * SGLang's fake backend: no bootstrap, no network, no bytes moved; every request succeeds once
 * its side has done its part (the sender after the last chunk, the receiver after send_metadata).
 * Used for warm-up requests and scheduler tests.
 */
public final class FakeKVManager implements KVManager {
    private final DisaggregationMode mode;

    public FakeKVManager(DisaggregationMode mode) {
        this.mode = mode;
    }

    @Override public DisaggregationMode mode() { return mode; }
    @Override public String backend() { return "fake"; }
    @Override public KVManagerStats stats() { return KVManagerStats.EMPTY; }
    @Override public void registerToBootstrap() {}
    @Override public void teardown() {}
    @Override public boolean enableDeferredDecodeKvRelease() { return false; }

    @Override
    public KVSender createSender(String bootstrapAddr, long room, List<Integer> destTpRanks, int ppRank, boolean hint) {
        return new FakeSender(room);
    }

    @Override
    public KVReceiver createReceiver(String bootstrapAddr, long room) {
        return new FakeReceiver(room);
    }

    private static final class FakeSender implements KVSender {
        private final long room;
        private int numPages = -1;
        private int sent;
        private KVPoll state = KVPoll.WaitingForInput;

        FakeSender(long room) { this.room = room; }

        @Override public long bootstrapRoom() { return room; }
        @Override public void init(int numKvIndices, int auxIndex) { numPages = numKvIndices; }

        @Override
        public void send(int[] kvIndices, int[][] stateIndices, Integer numKvTokens) {
            if (state == KVPoll.Failed) return;
            sent += kvIndices.length;
            if (numPages >= 0 && sent >= numPages) state = KVPoll.Success;
        }

        @Override public int popDecodePrefixLen() { return 0; }
        @Override public KVTransferMetric getTransferMetric() { return KVTransferMetric.EMPTY; }
        @Override public KVPoll poll() { return state; }
        @Override public void failureException() { throw new KVTransferException(room, FailureKind.ABORTED, "Aborted by AbortReq.", false); }
        @Override public void clear() {}
        @Override public void abort() { state = KVPoll.Failed; }
    }

    private static final class FakeReceiver implements KVReceiver {
        private final long room;
        private KVPoll state = KVPoll.Bootstrapping;

        FakeReceiver(long room) { this.room = room; }

        @Override public long bootstrapRoom() { return room; }
        @Override public void init(int prefillDpRank) { if (state != KVPoll.Failed) state = KVPoll.WaitingForInput; }

        @Override
        public void sendMetadata(int[] kvIndices, int auxIndex, int[][] stateIndices, int decodePrefixLen) {
            if (state != KVPoll.Failed) state = KVPoll.Success;
        }

        @Override public KVPoll poll() { return state; }
        @Override public void failureException() { throw new KVTransferException(room, FailureKind.ABORTED, "Aborted by AbortReq.", false); }
        @Override public void clear() {}
        @Override public void abort() { state = KVPoll.Failed; }
        @Override public KVTransferMetric getTransferMetric() { return KVTransferMetric.EMPTY; }
    }
}
