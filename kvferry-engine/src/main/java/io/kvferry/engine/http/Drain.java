package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;

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
 */
public final class Drain {
    /** The error {@code code} of a draining server's 503, which a router reads as "nothing started here: run it elsewhere". */
    public static final String CODE = "draining";

    private final String what;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition idle = lock.newCondition();
    private int running;
    private volatile boolean draining;

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
            return running;
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
