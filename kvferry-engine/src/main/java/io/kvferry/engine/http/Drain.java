package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;

import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A server's graceful shutdown ({@code serve --drain-timeout-s}): the requests it admitted, and whether it still admits.
 * Once {@link #begin} is called the server takes no new work (a 503 whose error {@code code} is {@code draining},
 * {@link #refuse}) and its {@code /health} answers 503 {@code "status": "draining"}, so routers take it out of rotation;
 * the requests admitted before run to their end, which {@link #await} waits for. A request is admitted by {@link #enter}
 * and leaves by {@link #exit}: a decode's whole stream, a prefill's forward and KV transfer (its answer comes once the
 * KV reached the decode), a router's whole request.
 *
 * <p>On its server's {@code /metrics} ({@link #register}): {@link #DRAINING} 1 once draining, and {@link #REQUESTS} the
 * requests under way when it began, by how they ended: {@code end="completed"} ran to their end, {@code end="cut"} were
 * still running when {@link #await} gave up (closing the server cuts them). Tagged {@code role}, the server's.
 */
public final class Drain {
    /** The error {@code code} of a draining server's 503, which a router reads as "nothing started here: run it elsewhere". */
    public static final String CODE = "draining";
    /** The gauge: 1 while the server drains (from {@link #begin} to its close), else 0. */
    public static final String DRAINING = "kvferry_draining";
    /** The counter of the requests a drain met, tagged {@code end}: {@link #COMPLETED} or {@link #CUT}. */
    public static final String REQUESTS = "kvferry_drain_requests";
    public static final String COMPLETED = "completed";
    public static final String CUT = "cut";

    private final String what;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition idle = lock.newCondition();
    private int running;
    private volatile boolean draining;
    /** Requests admitted before the drain that ended during it, before any cut; those cut at its timeout. Under the lock. */
    private long completed;
    private long cut;
    /** Whether {@link #await} gave up with requests running: they are cut, and one ending after is not counted completed. */
    private boolean cutDone;

    /** @param what the server, for its 503's message ("decode", "router") */
    public Drain(String what) {
        this.what = what;
    }

    /** Admits a request, or returns false once draining (the caller answers {@link #refuse}); an admitted one must {@link #exit}. */
    boolean enter() {
        lock.lock();
        try {
            if (draining) return false;
            running++;
            return true;
        } finally {
            lock.unlock();
        }
    }

    /** An admitted request ended. */
    void exit() {
        lock.lock();
        try {
            if (draining && !cutDone) completed++;
            if (--running == 0) idle.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** Takes no new work from now on (idempotent). */
    public void begin() {
        lock.lock();
        try {
            draining = true;
        } finally {
            lock.unlock();
        }
    }

    public boolean draining() {
        return draining;
    }

    /** Requests admitted and not ended yet. */
    public int running() {
        lock.lock();
        try {
            return running;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Waits, up to {@code timeout}, for the admitted requests to end ({@link #begin} first).
     *
     * @return the requests still running when it gave up (0: all ended), which closing the server cuts
     */
    public int await(Duration timeout) throws InterruptedException {
        long left = timeout.toNanos();
        lock.lock();
        try {
            while (running > 0 && left > 0) left = idle.awaitNanos(left);
            if (running > 0 && draining && !cutDone) {
                cutDone = true;
                cut += running;
            }
            return running;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Its meters in {@code registry}, tagged {@code role} as this drain's server ({@link #DRAINING}, {@link #REQUESTS}),
     * there from the start at 0.
     */
    public void register(MeterRegistry registry) {
        Gauge.builder(DRAINING, this, d -> d.draining ? 1 : 0).description("1 while the server drains (--drain-timeout-s: shutting down, "
                + "new requests get 503 draining)").tag("role", what).register(registry);
        for (boolean wasCut : new boolean[]{false, true}) {
            FunctionCounter.builder(REQUESTS, this, d -> d.count(wasCut)).description("Requests a drain met, by how they ended: completed (ran "
                    + "to their end) or cut (still running at --drain-timeout-s)").tags("role", what, "end", wasCut ? CUT : COMPLETED).register(registry);
        }
    }

    /** The requests the drain met that {@link #COMPLETED completed}, or ({@code wasCut}) were {@link #CUT cut}: its meters', its router's status. */
    double count(boolean wasCut) {
        lock.lock();
        try {
            return wasCut ? cut : completed;
        } finally {
            lock.unlock();
        }
    }

    /** {@code health} with {@code "status": "draining"} (a 503 on /health) while draining. */
    ObjectNode health(ObjectNode health) {
        if (draining) health.put("status", "draining");
        return health;
    }

    /** The 503 of new work while draining: its body read and dropped first, so the client reads the answer. */
    void refuse(HttpExchange ex) throws IOException {
        // A request with an id (RequestId: set on the answer's headers before this) is named in the engines' request log.
        String id = ex.getResponseHeaders().getFirst(RequestId.HEADER);
        if (id != null) EngineRequests.LOG.info("request refused: request_id={} role={} status=503 reason=draining", id, what);
        Http.discardBody(ex);
        ex.getResponseHeaders().set("Retry-After", "1");
        Http.sendCodedError(ex, 503, "service_unavailable", null, CODE, "this " + what + " is draining (shutting down): it "
                + "takes no new requests; send it to another instance");
    }

    /** Runs {@code route} as one admitted request, or answers {@link #refuse} while draining. */
    Http.Handler admitting(Http.Handler route) {
        return ex -> {
            if (!enter()) {
                refuse(ex);
                return;
            }
            try {
                route.handle(ex);
            } finally {
                exit();
            }
        };
    }
}
