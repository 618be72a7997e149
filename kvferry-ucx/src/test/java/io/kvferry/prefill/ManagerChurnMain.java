package io.kvferry.prefill;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.ucx.LinkChurnMain;

import java.lang.foreign.Arena;
import java.time.Duration;
import java.util.Arrays;

/**
 * A measurement, not a test (docs/PERFORMANCE.md, "Link churn with ucx"): one long-lived prefill
 * manager; per link a decode manager is made, one room moves, and the decode manager is torn down
 * (the prefill's link goes with it). Prints {@link LinkChurnMain}'s figures at each checkpoint.
 * Args: backend (ucx|tcp), checkpoints (e.g. 100,200,400), warm-up links (default 20).
 */
public final class ManagerChurnMain {
    private static final String TOKEN = "churn-token";

    public static void main(String[] args) throws Throwable {
        String backend = args[0];
        int[] marks = Arrays.stream(args[1].split(",")).mapToInt(Integer::parseInt).toArray();
        int warm = args.length > 2 ? Integer.parseInt(args[2]) : 20;
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN); Arena pa = Arena.ofShared();
             Arena da = Arena.ofShared()) {
            String addr = "127.0.0.1:" + registry.port();
            KVManagerConfig cfg = KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", registry.port()).authToken(TOKEN)
                    .connectTimeout(Duration.ofSeconds(5)).build();
            KVManager p = KVFerry.createManager(backend, UcxRooms.args(pa), DisaggregationMode.PREFILL, cfg);
            p.registerToBootstrap();
            KVArgs dargs = UcxRooms.args(da);
            long room = 0;
            int done = 0;
            for (int i = 0; i < warm; i++) cycle(p, dargs, cfg, addr, ++room, backend);
            System.gc();
            LinkChurnMain.report("warm" + warm);
            for (int mark : marks) {
                while (done < mark) {
                    cycle(p, dargs, cfg, addr, ++room, backend);
                    done++;
                }
                System.gc();
                Thread.sleep(200);
                LinkChurnMain.report(String.valueOf(done));
            }
            p.teardown();
            System.gc();
            LinkChurnMain.report("closed");
        }
    }

    static void cycle(KVManager p, KVArgs dargs, KVManagerConfig cfg, String addr, long room, String backend) throws Exception {
        KVManager d = KVFerry.createManager(backend, dargs, DisaggregationMode.DECODE, cfg);
        try {
            UcxRooms.Outcome o = UcxRooms.room(p, d, addr, room);
            if (o.decode() != KVPoll.Success || !backend.equals(o.transport())) throw new IllegalStateException("room " + room + ": " + o);
        } finally {
            d.teardown();
        }
    }
}
