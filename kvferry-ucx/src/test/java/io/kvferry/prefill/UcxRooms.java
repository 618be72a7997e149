package io.kvferry.prefill;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;

import java.lang.foreign.Arena;
import java.util.function.Supplier;

/** One small room end to end between a prefill and a decode manager, for the ucx link tests. */
final class UcxRooms {
    static final long PAGE_BYTES = 1024;

    /** What one room came to: the decode's outcome (its failure kind when it failed) and the prefill's data path. */
    record Outcome(Object decode, String transport) {}

    private UcxRooms() {}

    /** Two KV buffers of 32 pages and one aux buffer from {@code a}. */
    static KVArgs args(Arena a) {
        KVArgs k = new KVArgs();
        k.pageSize = 16;
        k.kvCacheDtypeStr = "bf16";
        for (int b = 0; b < 2; b++) k.addKvBuffer(a.allocate(PAGE_BYTES * 32, 4096), PAGE_BYTES);
        k.addAuxBuffer(a.allocate(64 * 8, 64), 64);
        return k;
    }

    static KVPoll awaitTerminal(Supplier<KVPoll> poll) throws InterruptedException {
        long end = System.nanoTime() + 20_000_000_000L;
        KVPoll st;
        while ((st = poll.get()) != KVPoll.Success && st != KVPoll.Failed && System.nanoTime() < end) Thread.sleep(5);
        return st;
    }

    /** Room {@code id} from {@code p} to {@code d} through the registry at {@code addr}. */
    static Outcome room(KVManager p, KVManager d, String addr, long id) throws Exception {
        KVReceiver r = d.createReceiver(addr, id);
        r.init(0);
        long ready = System.nanoTime() + 20_000_000_000L; // the route (lookups, link set-up) resolves off this thread
        while (r.poll() == KVPoll.Bootstrapping && System.nanoTime() < ready) Thread.sleep(1);
        KVSender s = p.createSender(addr, id);
        r.sendMetadata(new int[]{1, 2}, 1, null, 0);
        long end = System.nanoTime() + 10_000_000_000L;
        while (s.poll() == KVPoll.Bootstrapping && System.nanoTime() < end) Thread.sleep(2);
        s.init(2, 1);
        s.send(new int[]{3, 4}, null);
        KVPoll st = awaitTerminal(r::poll);
        Object outcome = st;
        if (st == KVPoll.Failed) {
            try {
                r.failureException();
            } catch (KVTransferException e) {
                outcome = e.kind();
            }
        } else {
            r.clear();
        }
        awaitTerminal(s::poll);
        String transport = s.getTransferMetric().transport();
        s.clear();
        return new Outcome(outcome, transport);
    }
}
