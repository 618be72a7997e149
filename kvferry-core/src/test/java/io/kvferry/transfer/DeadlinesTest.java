package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Deadlines run on the config's ticker: a test moves time on instead of sleeping through 300 s timeouts. */
class DeadlinesTest extends TransferTestBase {
    private final AtomicLong now = new AtomicLong(1_000_000_000L);

    private void advance(Duration d) {
        now.addAndGet(d.toNanos());
    }

    @Test
    void aSenderNoDecodeAsksForFailsAtTheBootstrapTimeoutOfItsTicker() {
        TestRank pm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).ticker(now::get).build());
        closeables.add(p);
        KVSender s = p.createSender(addr, 5150);
        assertEquals(KVPoll.Bootstrapping, s.poll());
        advance(Duration.ofSeconds(299));
        assertEquals(KVPoll.Bootstrapping, s.poll(), "the default bootstrap timeout is 300 s");
        advance(Duration.ofSeconds(2));
        assertEquals(KVPoll.Failed, s.poll());
        KVTransferException e = failed(s::failureException);
        assertEquals(FailureKind.BOOTSTRAP_TIMEOUT, e.kind());
        assertTrue(e.getMessage().contains("Request 5150 timed out after 301.0s in KVPoll.Bootstrapping"), e.getMessage());
    }

    @Test
    void aReceiverWhosePrefillNeverSendsFailsAtTheWaitingTimeoutAndAbortsThePrefill() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).ticker(now::get).waitingTimeout(Duration.ofSeconds(30)).build(), 0, PAGE_SIZE);
        KVSender s = p.createSender(addr, 5151);
        KVReceiver r = d.createReceiver(addr, 5151);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1, 2}, 0, null, 0);
        await(s::poll, KVPoll.WaitingForInput); // the prefill has the metadata, but its scheduler never sends
        advance(Duration.ofSeconds(29));
        assertEquals(KVPoll.WaitingForInput, r.poll());
        advance(Duration.ofSeconds(2));
        assertEquals(KVPoll.Failed, r.poll());
        KVTransferException e = failed(r::failureException);
        assertEquals(FailureKind.WAITING_TIMEOUT, e.kind());
        assertTrue(e.getMessage().contains("Request 5151 timed out after 31.0s in KVPoll.WaitingForInput"), e.getMessage());
        await(s::poll, KVPoll.Failed); // the decode's ABORT reached the prefill
        assertEquals(FailureKind.ABORTED, failed(s::failureException).kind());
    }
}
