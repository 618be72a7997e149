package io.kvferry.session;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RoomFeedTest {
    private final RoomFeed<String> feed = new RoomFeed<>();

    private List<String> drain(long now) {
        List<String> out = new ArrayList<>();
        feed.drain(now, out::add);
        return out;
    }

    @Test
    void aJoinedHandleIsFedOnceThenOnlyWhenSignalled() {
        RoomFeed.Entry<String> a = feed.join("a");
        feed.join("b");
        assertEquals(List.of("a", "b"), drain(0), "a new member is fed once: its status may have moved before it was watched");
        assertEquals(List.of(), drain(0));
        a.signal();
        a.signal();
        assertEquals(List.of("a"), drain(0), "signalled twice before a drain, fed once");
        assertEquals(List.of(), drain(0));
    }

    @Test
    void deadlinesFeedTheirHandleOnceTheyPassInDeadlineOrder() {
        RoomFeed.Entry<String> a = feed.join("a"), b = feed.join("b"), c = feed.join("c");
        drain(0);
        a.arm(100);
        b.arm(300);
        c.arm(200); // out of order: inserted before b
        assertEquals(3, feed.armedDeadlines());
        assertEquals(List.of(), drain(100), "a deadline feeds once it has passed, not at it");
        assertEquals(List.of("a", "c"), drain(250));
        b.disarm();
        assertEquals(List.of(), drain(1_000), "a disarmed deadline never feeds");
        assertEquals(0, feed.armedDeadlines());
    }

    @Test
    void aHandleThatLeftIsNeverFedAgainAndKeepsNoDeadline() {
        RoomFeed.Entry<String> a = feed.join("a");
        a.arm(10);
        a.retryEveryDrain();
        a.leave();
        assertEquals(List.of(), drain(100), "queued, armed and retrying before it left: none of them feeds it");
        a.signal();
        a.arm(200);
        assertEquals(List.of(), drain(300));
        assertEquals(0, feed.armedDeadlines(), "a cleared room's deadline does not keep its handle reachable");
    }

    @Test
    void retriesFeedOnEveryDrainUntilStopped() {
        RoomFeed.Entry<String> a = feed.join("a");
        drain(0);
        a.retryEveryDrain();
        a.retryEveryDrain();
        assertEquals(List.of("a"), drain(0));
        assertEquals(List.of("a"), drain(0));
        a.stopRetrying();
        assertEquals(List.of(), drain(0));
    }

    @Test
    void aSinkThatChangesWhatItPollsDoesNotKeepTheDrainGoing() {
        RoomFeed.Entry<String> a = feed.join("a");
        int[] calls = {0};
        int n = feed.drain(0, h -> {
            calls[0]++;
            a.signal(); // its poll changed its own room (a timeout, an injected failure)
        });
        assertEquals(1, n);
        assertEquals(1, calls[0]);
        assertEquals(List.of("a"), drain(0), "the change the sink made feeds the handle on the next drain");
    }

    @Test
    void signalsFromOtherThreadsAreAllDelivered() throws InterruptedException {
        int threads = 4, perThread = 2_000;
        List<RoomFeed.Entry<String>> entries = new ArrayList<>();
        for (int i = 0; i < threads * perThread; i++) entries.add(feed.join("h" + i));
        drain(0);
        CountDownLatch done = new CountDownLatch(threads);
        for (int t = 0; t < threads; t++) {
            int from = t * perThread;
            Thread.ofPlatform().start(() -> {
                for (int i = from; i < from + perThread; i++) entries.get(i).signal();
                done.countDown();
            });
        }
        Set<String> seen = new HashSet<>();
        while (!done.await(1, TimeUnit.MILLISECONDS)) feed.drain(0, seen::add);
        feed.drain(0, seen::add);
        assertEquals(threads * perThread, seen.size(), "every signalled handle is fed");
        assertEquals(0, feed.queued());
        assertTrue(drain(0).isEmpty());
    }
}
