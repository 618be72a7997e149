package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The change feed: a scheduler that polls only what a drain hands out sees every status change,
 * deadline and injected failure that polling every handle would (here each handle is polled only
 * when fed, so a change the feed missed hangs the test into its failure message).
 */
class ChangeFeedTest extends TransferTestBase {
    private final AtomicLong now = new AtomicLong(1_000_000_000L);

    private static List<KVSender> senders(KVManager m) {
        List<KVSender> out = new ArrayList<>();
        m.drainChangedSenders(out::add);
        return out;
    }

    private static List<KVReceiver> receivers(KVManager m) {
        List<KVReceiver> out = new ArrayList<>();
        m.drainChangedReceivers(out::add);
        return out;
    }

    /** Drains until {@code h} is handed out and then polls {@code expected}; polls nothing else. */
    private static <H> void awaitFed(Runnable drainInto, List<H> fed, H h, Supplier<KVPoll> poll, KVPoll expected) {
        long deadline = System.nanoTime() + 20_000_000_000L;
        KVPoll last = null;
        while (System.nanoTime() < deadline) {
            fed.clear();
            drainInto.run();
            if (fed.contains(h)) {
                last = poll.get();
                if (last == expected) return;
            }
            Thread.onSpinWait();
        }
        fail("the feed never handed out " + h + " in " + expected + " (last polled: " + last + ")");
    }

    @Test
    void aTransferPolledOnlyWhenFedReachesSuccessOnBothSides() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertTrue(p.enableChangeFeed());
        assertTrue(d.enableChangeFeed());
        KVSender s = p.createSender(addr, 7001);
        KVReceiver r = d.createReceiver(addr, 7001);
        assertEquals(List.of(s), senders(p), "a new sender is fed once");
        assertEquals(KVPoll.Bootstrapping, s.poll());
        assertEquals(List.of(), senders(p), "nothing moved: nothing fed");
        bootstrap(r, 0);
        assertEquals(List.of(r), receivers(d));
        assertEquals(KVPoll.WaitingForInput, r.poll());
        r.sendMetadata(new int[]{5, 9}, 1, null, 0);

        List<KVSender> fedS = new ArrayList<>();
        awaitFed(() -> p.drainChangedSenders(fedS::add), fedS, s, s::poll, KVPoll.WaitingForInput);
        pm.fillPage(2, 7001, 0);
        pm.fillPage(3, 7001, 1);
        s.init(2, 1);
        s.send(new int[]{2, 3});
        awaitFed(() -> p.drainChangedSenders(fedS::add), fedS, s, s::poll, KVPoll.Success);
        List<KVReceiver> fedR = new ArrayList<>();
        awaitFed(() -> d.drainChangedReceivers(fedR::add), fedR, r, r::poll, KVPoll.Success);
        assertTrue(dm.pageMatches(5, 7001, 0) && dm.pageMatches(9, 7001, 1), "the fed Success means the bytes landed");
        s.clear();
        r.clear();
        assertEquals(List.of(), senders(p), "a cleared sender is never fed");
        assertEquals(List.of(), receivers(d));
    }

    @Test
    void aBootstrapTimeoutFeedsTheSenderWithoutAnyPoll() {
        TestRank pm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).ticker(now::get).build());
        closeables.add(p);
        p.enableChangeFeed();
        KVSender s = p.createSender(addr, 7002);
        assertEquals(List.of(s), senders(p));
        now.addAndGet(Duration.ofSeconds(299).toNanos());
        assertEquals(List.of(), senders(p), "before the 300 s bootstrap timeout nothing is fed");
        now.addAndGet(Duration.ofSeconds(2).toNanos());
        assertEquals(List.of(s), senders(p), "the passed deadline feeds the sender: nobody polled it since");
        assertEquals(KVPoll.Failed, s.poll());
        assertEquals(FailureKind.BOOTSTRAP_TIMEOUT, failed(s::failureException).kind());
    }

    @Test
    void aWaitingTimeoutFeedsTheReceiverAndASenderPastBootstrapKeepsNoDeadline() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).ticker(now::get).waitingTimeout(Duration.ofSeconds(30)).build(), 0, PAGE_SIZE);
        p.enableChangeFeed();
        d.enableChangeFeed();
        KVSender s = p.createSender(addr, 7003);
        KVReceiver r = d.createReceiver(addr, 7003);
        bootstrap(r, 0);
        receivers(d);
        assertEquals(KVPoll.WaitingForInput, r.poll());
        r.sendMetadata(new int[]{1, 2}, 0, null, 0);
        List<KVSender> fedS = new ArrayList<>();
        awaitFed(() -> p.drainChangedSenders(fedS::add), fedS, s, s::poll, KVPoll.WaitingForInput);
        now.addAndGet(Duration.ofSeconds(29).toNanos());
        assertEquals(List.of(), receivers(d));
        now.addAndGet(Duration.ofSeconds(2).toNanos());
        List<KVReceiver> fed = receivers(d);
        assertEquals(1, fed.size(), "the waiting deadline feeds the receiver");
        assertSame(r, fed.getFirst());
        assertEquals(KVPoll.Failed, r.poll());
        assertEquals(FailureKind.WAITING_TIMEOUT, failed(r::failureException).kind());
        // The decode's ABORT reaches the prefill: its sender is fed Failed.
        awaitFed(() -> p.drainChangedSenders(fedS::add), fedS, s, s::poll, KVPoll.Failed);
    }

    @Test
    void anInjectedDecodeFailureIsFedAfterTheMetadataWentOut() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).failureInjectionProbability(1.0).build(), 0, PAGE_SIZE);
        d.enableChangeFeed();
        p.createSender(addr, 7004);
        KVReceiver r = d.createReceiver(addr, 7004);
        bootstrap(r, 0);
        receivers(d);
        r.sendMetadata(new int[]{1}, 0, null, 0);
        List<KVReceiver> fedR = new ArrayList<>();
        awaitFed(() -> d.drainChangedReceivers(fedR::add), fedR, r, r::poll, KVPoll.Failed);
        assertEquals(FailureKind.INJECTED, failed(r::failureException).kind());
    }

    @Test
    void drainingWithoutTheFeedOnIsRefusedByName() {
        TestRank pm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> senders(p));
        assertTrue(e.getMessage().contains("enableChangeFeed"), e.getMessage());
        assertThrows(UnsupportedOperationException.class, () -> receivers(p));
    }
}
