package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.registry.RegistryNotReadyException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Function;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/** Attention-DP on prefill (DP rank from the room, the registry or a hint) and dummy CP ranks. */
@Timeout(60)
class DataAndContextParallelTest extends TransferTestBase {

    KVManager prefillRank(TestRank mem, KVManagerConfig config) {
        KVManager m = KVFerry.createManager("tcp", mem.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, config);
        closeables.add(m);
        m.registerToBootstrap();
        return m;
    }

    @Test
    void followBootstrapRoomPicksTheDpGroupFromTheRoom() {
        TestRank p0 = rank(), p1 = rank(), dm = rank();
        KVManager dp0 = prefillRank(p0, cfg(1, 0).dp(2, 0).build());
        KVManager dp1 = prefillRank(p1, cfg(1, 0).dp(2, 1).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        long room = 1001; // odd: DP group 1
        assertEquals(1, dpRank(d, addr, room));
        assertEquals(1, d.resolvePrefillDpRank(addr, 3, null), "from the topology, at once, once it is known");
        assertEquals(0, d.resolvePrefillDpRank(addr, 2, null));
        assertEquals(0, d.resolvePrefillDpRank(addr, room, 0), "a router hint wins");
        KVReceiver recv = d.createReceiver(addr, room);
        bootstrap(recv, 1);
        recv.sendMetadata(new int[]{4, 5}, 0, null, 0);
        KVSender s = dp1.createSender(addr, room);
        await(s::poll, KVPoll.WaitingForInput);
        p1.fillPage(9, room, 0);
        p1.fillPage(10, room, 1);
        s.init(2, 0);
        s.send(new int[]{9, 10});
        await(recv::poll, KVPoll.Success);
        assertTrue(dm.pageMatches(4, room, 0) && dm.pageMatches(5, room, 1));
        // The scheduler put the room on the wrong group: a clear routing error, not a hang.
        KVSender wrong = dp0.createSender(addr, 2003);
        assertEquals(KVPoll.Failed, wrong.poll());
        assertTrue(failure(wrong::failureException).contains("follow_bootstrap_room conflict: dispatched to dp_rank 0 but bootstrap_room 2003 implies dp_rank 1"));
    }

    @Test
    void otherBalancersPublishTheDpRankThroughTheRegistry() {
        TestRank p0 = rank(), p1 = rank(), dm = rank();
        prefillRank(p0, cfg(1, 0).dp(2, 0).loadBalanceMethod("round_robin").build());
        KVManager dp1 = prefillRank(p1, cfg(1, 0).dp(2, 1).loadBalanceMethod("round_robin").build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        long room = 4000; // even, but placed on group 1
        assertEquals(-1, d.resolvePrefillDpRank(addr, room, null), "not known before the prefill took the request");
        long deadline = System.nanoTime() + 1_000_000_000L; // the lookup thread asks meanwhile: still not published
        while (System.nanoTime() < deadline) assertEquals(-1, d.resolvePrefillDpRank(addr, room, null));
        KVSender s = dp1.createSender(addr, room);
        assertEquals(1, dpRank(d, addr, room));
        KVReceiver recv = d.createReceiver(addr, room);
        bootstrap(recv, 1);
        recv.sendMetadata(new int[]{6}, 0, null, 0);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1, 0);
        s.send(new int[]{3});
        await(recv::poll, KVPoll.Success);
    }

    @Test
    void aSilentRegistryHoldsUpNeitherTheSchedulerNorTheRoomsOfAnotherInstance() throws Exception {
        TestRank p0 = rank(), p1 = rank(), dm = rank();
        prefillRank(p0, cfg(1, 0).dp(2, 0).loadBalanceMethod("round_robin").build());
        KVManager dp1 = prefillRank(p1, cfg(1, 0).dp(2, 1).loadBalanceMethod("round_robin").build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        try (ServerSocketChannel silent = ServerSocketChannel.open()) { // accepts, reads nothing, answers nothing
            silent.bind(new InetSocketAddress("127.0.0.1", 0));
            String silentAddr = "127.0.0.1:" + ((InetSocketAddress) silent.getLocalAddress()).getPort();
            // Before the lookups ran on a thread of their own, this call held the scheduler thread for the
            // registry's 3 s request timeout and then threw.
            assertEquals(-1, d.resolvePrefillDpRank(silentAddr, 7, null));
            try (SocketChannel lookup = silent.accept()) { // the lookup is under way, and will hear nothing
                assertEquals(-1, d.resolvePrefillDpRank(silentAddr, 7, null), "asked again while the registry is silent");
                dp1.createSender(addr, 4002);
                assertEquals(1, dpRank(d, addr, 4002), "another instance's rooms are answered meanwhile");
                long deadline = System.nanoTime() + 20_000_000_000L;
                RuntimeException failure = null;
                while (failure == null) { // the lookup's failure, once its request timed out, is thrown once
                    try {
                        assertEquals(-1, d.resolvePrefillDpRank(silentAddr, 7, null));
                    } catch (RuntimeException e) {
                        failure = e;
                    }
                    if (System.nanoTime() > deadline) fail("the silent registry's lookup never failed");
                    Thread.onSpinWait();
                }
                assertTrue(String.valueOf(failure.getMessage()).contains(silentAddr), failure.toString());
                assertEquals(-1, d.resolvePrefillDpRank(silentAddr, 7, null), "thrown once; then asked again");
            }
        }
    }

    @Test
    void aRoomItsPrefillNeverPublishesFailsAfterThePrefillInfoTimeout() {
        TestRank p0 = rank(), p1 = rank();
        prefillRank(p0, cfg(1, 0).dp(2, 0).loadBalanceMethod("round_robin").build());
        prefillRank(p1, cfg(1, 0).dp(2, 1).loadBalanceMethod("round_robin").build());
        KVManager d = decode(rank(), "tcp", cfg(1, 0).prefillInfoTimeout(Duration.ofMillis(600)).build(), 0, PAGE_SIZE);
        // No prefill ever takes room 7007 (or the one that did died before publishing it): not a wait without end.
        RuntimeException gaveUp = null;
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (gaveUp == null && System.nanoTime() < deadline) {
            try {
                assertEquals(-1, d.resolvePrefillDpRank(addr, 7007, null));
            } catch (RuntimeException e) {
                gaveUp = e;
            }
            LockSupport.parkNanos(1_000_000); // a scheduler iteration
        }
        assertTrue(gaveUp != null && gaveUp.getMessage().contains("did not publish the DP group of room 7007 within")
                && gaveUp.getMessage().contains("(the prefill info timeout 600 ms, publishing no other room meanwhile)"),
                String.valueOf(gaveUp));
        assertEquals(FailureKind.ROUTING, assertInstanceOf(KVTransferException.class, gaveUp).kind(), "the room has failed");
    }

    @Test
    void aRoomOfAPrefillThatKeepsPublishingOthersWaitsPastOneTimeout() throws Exception {
        KVManager d = decode(rank(), "tcp", cfg(1, 0).prefillInfoTimeout(Duration.ofMillis(500)).build(), 0, PAGE_SIZE);
        long start = System.nanoTime();
        // Alive but behind: every room is published at once except room 1, which comes 1.2 s late.
        HttpServer stub = stubRegistry(new CountDownLatch(0), new CopyOnWriteArrayList<>(), asked -> {
            StringBuilder answer = new StringBuilder("{");
            boolean late = System.nanoTime() - start < 1_200_000_000L;
            for (String room : asked) {
                if (room.equals("1") && late) continue;
                answer.append(answer.length() > 1 ? "," : "").append('"').append(room).append("\":2");
            }
            return answer.append('}').toString();
        });
        try {
            String stubAddr = "127.0.0.1:" + stub.getAddress().getPort();
            int dp = -1;
            long next = 2;
            while (dp < 0) { // the scheduler's iterations: room 1 and one new room each
                dp = d.resolvePrefillDpRank(stubAddr, 1, null);
                d.resolvePrefillDpRank(stubAddr, next++, null);
                assertTrue(System.nanoTime() - start < 20_000_000_000L, "room 1 never resolved");
                LockSupport.parkNanos(5_000_000);
            }
            assertEquals(2, dp, "answered after more than twice the timeout, not failed: the prefill kept publishing");
        } finally {
            stub.stop(0);
        }
    }

    @Test
    void createSenderDoesNotWaitForTheRegistryToTakeTheRoomsGroup() throws Exception {
        try (ServerSocketChannel silent = ServerSocketChannel.open()) { // a registry that accepts and never answers
            silent.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = ((InetSocketAddress) silent.getLocalAddress()).getPort();
            KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                    cfg(1, 0).bootstrap("127.0.0.1", port).dp(2, 1).loadBalanceMethod("round_robin").build());
            closeables.add(p);
            // Before, createSender posted /register_dp_rank itself: this thread waited for the silent registry's
            // timeouts and retries, and the sender came back Failed.
            KVSender s = p.createSender(addr, 6001);
            try (SocketChannel publish = silent.accept()) { // the publisher's POST is under way meanwhile
                assertTrue(publish.isConnected());
                assertEquals(KVPoll.Bootstrapping, s.poll(), "the room waits for its decode, not for the registry");
            }
        }
    }

    /**
     * The rooms a prefill takes while its publisher's POST is under way go out together in the next ones
     * (kvferry's batch form of /register_dp_rank, at most 1,024 a POST): three POSTs for 1,101 rooms
     * here, where one per room capped round_robin DP at one registry round trip per room.
     */
    @Test
    void roomsTakenWhileAPublishIsUnderWayArePublishedTogether() throws Exception {
        CountDownLatch firstArrived = new CountDownLatch(1), release = new CountDownLatch(1);
        List<String> posts = new CopyOnWriteArrayList<>();
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        stub.createContext("/register_dp_rank", ex -> {
            posts.add(new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8));
            firstArrived.countDown();
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            reply(ex, "\"OK\"");
        });
        stub.start();
        try {
            KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                    cfg(1, 0).bootstrap("127.0.0.1", stub.getAddress().getPort()).dp(2, 1).loadBalanceMethod("round_robin").build());
            closeables.add(p);
            p.createSender(addr, 7000);
            assertTrue(firstArrived.await(10, TimeUnit.SECONDS), "the first room's POST");
            for (long room = 7001; room <= 8100; room++) p.createSender(addr, room);
            release.countDown();
            Set<Long> published = new TreeSet<>();
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (published.size() < 1101 && System.nanoTime() < deadline) {
                published.clear();
                for (String body : posts) published.addAll(roomsIn(body));
                Thread.sleep(5);
            }
            assertEquals(LongStream.rangeClosed(7000, 8100).boxed().collect(Collectors.toCollection(TreeSet::new)), published);
            // 1,100 rooms waited: one full batch of 1,024 and the 76 after it
            assertEquals(List.of(1, 1024, 76), posts.stream().map(b -> roomsIn(b).size()).toList());
            assertTrue(posts.get(0).contains("\"bootstrap_room\"") && posts.get(1).contains("\"bootstrap_rooms\""), posts.get(0));
        } finally {
            stub.stop(0);
        }
    }

    /** A publish the registry refuses fails every room of its batch, as routing, naming why. */
    @Test
    void aRefusedPublishFailsTheRoomsOfItsBatchAsRouting() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        stub.createContext("/register_dp_rank", ex -> {
            ex.getRequestBody().readAllBytes();
            byte[] no = "Unauthorized".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(401, no.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(no);
            }
        });
        stub.start();
        try {
            KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                    cfg(1, 0).bootstrap("127.0.0.1", stub.getAddress().getPort()).dp(2, 1).loadBalanceMethod("round_robin").build());
            closeables.add(p);
            List<KVSender> senders = new ArrayList<>();
            for (long room = 7100; room < 7104; room++) senders.add(p.createSender(addr, room));
            KVSender negative = p.createSender(addr, -5);
            for (KVSender s : senders) {
                await(s::poll, KVPoll.Failed);
                KVTransferException e = assertThrows(KVTransferException.class, s::failureException);
                assertEquals(FailureKind.ROUTING, e.kind());
                assertTrue(e.getMessage().contains("could not register dp_rank 1") && e.getMessage().contains("401"), e.getMessage());
            }
            await(negative::poll, KVPoll.Failed);
            KVTransferException e = assertThrows(KVTransferException.class, negative::failureException);
            assertTrue(e.getMessage().contains("negative"), e.getMessage());
        } finally {
            stub.stop(0);
        }
    }

    /** The rooms of one /register_dp_rank body, in either form. */
    private static List<Long> roomsIn(String body) {
        JsonNode n;
        try {
            n = new ObjectMapper().readTree(body);
        } catch (IOException e) {
            throw new AssertionError("not JSON: " + body, e);
        }
        if (n.has("bootstrap_room")) return List.of(n.get("bootstrap_room").longValue());
        List<Long> out = new ArrayList<>();
        for (JsonNode r : n.get("bootstrap_rooms")) out.add(r.longValue());
        return out;
    }

    @Test
    void aPrefillStillRegisteringItsGroupsIsNotKnownYetRatherThanAFailure() {
        TestRank p0 = rank(), p1 = rank(), dm = rank();
        KVManager dp1 = prefillRank(p1, cfg(1, 0).dp(2, 1).loadBalanceMethod("round_robin").build()); // group 0 not yet
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        // The registry answers 503 meanwhile; across more than the 1 s a failed lookup is remembered.
        long until = System.nanoTime() + 1_500_000_000L;
        while (System.nanoTime() < until) assertEquals(-1, d.resolvePrefillDpRank(addr, 5000, null));
        // For up to the prefill info timeout: then it is a failure naming it, thrown once.
        KVManager impatient = decode(rank(), "tcp", cfg(1, 0).prefillInfoTimeout(Duration.ofMillis(800)).build(), 0, PAGE_SIZE);
        RuntimeException gaveUp = null;
        long failedRoom = -1;
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (gaveUp == null && System.nanoTime() < deadline) {
            for (long room = 5000; room <= 5002 && gaveUp == null; room++) {
                try {
                    assertEquals(-1, impatient.resolvePrefillDpRank(addr, room, null));
                } catch (RuntimeException e) {
                    gaveUp = e;
                    failedRoom = room;
                }
            }
            LockSupport.parkNanos(1_000_000); // a scheduler iteration
        }
        assertTrue(gaveUp instanceof RegistryNotReadyException, String.valueOf(gaveUp));
        assertTrue(gaveUp.getMessage().contains("not fully registered yet") && gaveUp.getMessage().contains("still so after 800 ms"),
                gaveUp.getMessage());
        // Every room that waited fails with it on its next ask, not one room per timeout.
        for (long room = 5000; room <= 5002; room++) {
            if (room == failedRoom) continue;
            long r = room;
            RuntimeException each = assertThrows(RegistryNotReadyException.class, () -> impatient.resolvePrefillDpRank(addr, r, null));
            assertEquals(gaveUp.getMessage(), each.getMessage());
        }
        prefillRank(p0, cfg(1, 0).dp(2, 0).loadBalanceMethod("round_robin").build());
        dp1.createSender(addr, 5000);
        assertEquals(1, dpRank(d, addr, 5000));
    }

    @Test
    void roomsWaitingTogetherAreLookedUpInOneQuery() throws Exception {
        KVManager d = decode(rank(), "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        CountDownLatch allAsked = new CountDownLatch(1);
        List<String> queries = new CopyOnWriteArrayList<>();
        HttpServer stub = stubRegistry(allAsked, queries, asked -> { // every room asked for is in group 3
            StringBuilder answer = new StringBuilder("{");
            for (String room : asked) answer.append(answer.length() > 1 ? "," : "").append('"').append(room).append("\":3");
            return answer.append('}').toString();
        });
        try {
            String stubAddr = "127.0.0.1:" + stub.getAddress().getPort();
            for (long room = 1; room <= 50; room++) assertEquals(-1, d.resolvePrefillDpRank(stubAddr, room, null));
            allAsked.countDown(); // the topology was held until every room had been asked for once
            for (long room = 1; room <= 50; room++) assertEquals(3, dpRank(d, stubAddr, room));
            assertEquals(1, queries.size(), "one query for the 50 rooms that waited together: " + queries);
            for (long room = 1; room <= 50; room++) assertTrue(queries.get(0).matches(".*\\b" + room + "\\b.*"), queries.get(0));
        } finally {
            stub.stop(0);
        }
    }

    @Test
    void aReplyNamingOtherRoomsNeitherAnswersTheAskedOneNorMakesTheLookupSpin() throws Exception {
        KVManager d = decode(rank(), "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        List<String> queries = new CopyOnWriteArrayList<>();
        // Untrusted: as many entries as rooms asked for, none of them for an asked room.
        HttpServer stub = stubRegistry(new CountDownLatch(0), queries, asked -> "{\"9001\":1,\"9002\":-3}");
        try {
            String stubAddr = "127.0.0.1:" + stub.getAddress().getPort();
            long until = System.nanoTime() + 1_000_000_000L;
            while (System.nanoTime() < until) {
                assertEquals(-1, d.resolvePrefillDpRank(stubAddr, 7, null));
                assertEquals(-1, d.resolvePrefillDpRank(stubAddr, 8, null));
                Thread.onSpinWait();
            }
            // Paced at one query per 100 ms while the rooms stay unpublished (a loop counting the reply's
            // entries as answers sent thousands in this second).
            assertTrue(queries.size() >= 2 && queries.size() <= 30, queries.size() + " queries in 1 s");
        } finally {
            stub.stop(0);
        }
    }

    /** A registry of a prefill with 4 DP groups, not following the room: topology held until {@code topologyGate} opens. */
    private static HttpServer stubRegistry(CountDownLatch topologyGate, List<String> queries,
                                           Function<List<String>, String> answer) throws IOException {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        stub.createContext("/route", ex -> {
            try {
                topologyGate.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            reply(ex, "{\"attn_tp_size\":1,\"attn_cp_size\":1,\"dp_size\":4,\"pp_size\":1,\"page_size\":" + PAGE_SIZE
                    + ",\"kv_cache_dtype\":\"auto\",\"follow_bootstrap_room\":false}");
        });
        stub.createContext("/query_dp_ranks", ex -> {
            String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            queries.add(body);
            List<String> asked = Arrays.stream(body.replaceAll("[^0-9,]", "").split(",")).filter(r -> !r.isEmpty()).toList();
            reply(ex, answer.apply(asked));
        });
        stub.start();
        return stub;
    }

    private static void reply(HttpExchange ex, String json) throws IOException {
        byte[] b = json.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(200, b.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(b);
        }
    }

    @Test
    void nonZeroContextParallelRanksAreDummiesThatStillConclude() {
        TestRank c0 = rank(), c1 = rank(), dm = rank();
        KVManager cp0 = prefillRank(c0, cfg(1, 0).attnCp(2, 0).build());
        KVManager cp1 = prefillRank(c1, cfg(1, 0).attnCp(2, 1).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        long room = 77;
        KVSender dummy = cp1.createSender(addr, room);
        assertEquals(KVPoll.WaitingForInput, dummy.poll(), "a dummy CP rank waits for no decode");
        KVReceiver recv = d.createReceiver(addr, room);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{1, 2}, 0, null, 0);
        KVSender real = cp0.createSender(addr, room);
        await(real::poll, KVPoll.WaitingForInput);
        for (KVSender s : new KVSender[]{real, dummy}) {
            s.init(2, 0);
            s.send(new int[]{11});
            s.send(new int[]{12});
        }
        await(dummy::poll, KVPoll.Success);
        await(real::poll, KVPoll.Success);
        await(recv::poll, KVPoll.Success);
        assertEquals(0L, dummy.getTransferMetric().transferTotalBytes());
    }

    /** All-CP-ranks transfer: each CP rank sends its contiguous share of the pages; decode waits for every CP rank. */
    @Test
    void allContextParallelRanksSendTheirContiguousShares() {
        TestRank c0 = rank(), c1 = rank(), c2 = rank(), dm = rank();
        TestRank[] mems = {c0, c1, c2};
        KVManager[] cps = new KVManager[3];
        for (int r = 0; r < 3; r++) cps[r] = prefillRank(mems[r], cfg(1, 0).attnCp(3, r).allCpRanksTransfer(true).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).allCpRanksTransfer(true).build(), 0, PAGE_SIZE);
        long room = 909;
        int[] dst = {10, 11, 12, 13, 14, 15, 16}; // 7 pages: shares of 3, 2, 2
        int[] src = {1, 2, 3, 4, 5, 6, 7};
        KVReceiver recv = d.createReceiver(addr, room);
        bootstrap(recv, 0);
        recv.sendMetadata(dst, 2, new int[][]{{3}}, 0);
        KVSender[] senders = new KVSender[3];
        for (int r = 0; r < 3; r++) {
            // Every CP rank holds the whole (replicated) KV here; each must send only its share.
            for (int j = 0; j < src.length; j++) mems[r].fillPage(src[j], room, j);
            mems[r].fillRow(mems[r].aux, mems[r].auxItem, 0, room);
            mems[r].fillRow(mems[r].state, mems[r].stateItem, 0, room);
            senders[r] = cps[r].createSender(addr, room);
            await(senders[r]::poll, KVPoll.WaitingForInput);
            senders[r].init(src.length, 0);
            senders[r].send(new int[]{1, 2, 3, 4});
            senders[r].send(new int[]{5, 6, 7}, new int[][]{{0}});
        }
        for (KVSender s : senders) await(s::poll, KVPoll.Success);
        await(recv::poll, KVPoll.Success);
        for (int j = 0; j < dst.length; j++) assertTrue(dm.pageMatches(dst[j], room, j), "page " + j);
        assertTrue(dm.rowMatches(dm.aux, dm.auxItem, 2, room, 0));
        assertTrue(dm.rowMatches(dm.state, dm.stateItem, 3, room, 0));
        long page = 4 * PAGE_BYTES; // 4 KV buffers
        assertEquals(3 * page + 64 + 128 + 256 + 512, senders[0].getTransferMetric().transferTotalBytes());
        assertEquals(2 * page, senders[1].getTransferMetric().transferTotalBytes());
        assertEquals(2 * page, senders[2].getTransferMetric().transferTotalBytes());
    }

    @Test
    void allCpSharesStillCheckTheDecodesPageCount() {
        TestRank c0 = rank(), c1 = rank(), dm = rank();
        KVManager cp0 = prefillRank(c0, cfg(1, 0).attnCp(2, 0).allCpRanksTransfer(true).build());
        KVManager cp1 = prefillRank(c1, cfg(1, 0).attnCp(2, 1).allCpRanksTransfer(true).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).allCpRanksTransfer(true).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 5);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{10, 11, 12}, 0, null, 0); // decode wants 3 pages
        for (KVManager cp : new KVManager[]{cp0, cp1}) {
            KVSender s = cp.createSender(addr, 5);
            await(s::poll, KVPoll.WaitingForInput);
            s.init(2, 0); // prefill declares 2
            s.send(new int[]{1, 2});
        }
        await(recv::poll, KVPoll.Failed);
        assertTrue(failure(recv::failureException).contains("expects 3 pages but the prefill CP ranks send 2"));
    }

    @Test
    void anAllCpSettingThatDiffersBetweenTheSidesIsRefused() {
        TestRank c0 = rank(), c1 = rank(), dm = rank();
        prefillRank(c0, cfg(1, 0).attnCp(2, 0).allCpRanksTransfer(true).build());
        prefillRank(c1, cfg(1, 0).attnCp(2, 1).allCpRanksTransfer(true).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 6);
        bootstrap(recv, 0);
        assertEquals(KVPoll.Failed, recv.poll());
        assertTrue(failure(recv::failureException).contains("all-CP-ranks transfer differs: prefill on, decode off"));
    }
}
