package io.kvferry.engine.http;

import io.kvferry.metrics.LogSafe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.ConcurrentHashMap;

/**
 * An engine server's requests by id ({@link RequestId}): each {@code /generate} and {@code /abort} exchange's id (the
 * router's {@code X-Request-Id}, a malformed one a 400; a new one for a caller that sends none), echoed in the answer,
 * and the lines it logs about one request on {@link #LOG}, each naming {@code request_id=ID room=N role=R}: a failure
 * (a transfer's, a timeout, an internal error: WARN), a refusal (admission, a grammar past its bound, a room in flight,
 * a drain: INFO) and an abort (its client gone, {@code /abort}: INFO). The id is in the message, not in a thread's
 * context: the lines come from the exchange's own thread, and the id's rule keeps each one line.
 *
 * <p>State: the rooms of the requests in flight here and their ids, so an {@code /abort} (which names a room) is logged
 * with the request it ends; an entry lives from the request's start to its answer.
 */
final class EngineRequests {
    /** The engines' log of their requests' failures, refusals and aborts. */
    static final Logger LOG = LoggerFactory.getLogger("io.kvferry.engine.requests");

    private final String role;
    private final ConcurrentHashMap<Long, String> rooms = new ConcurrentHashMap<>();

    EngineRequests(String role) {
        this.role = role;
    }

    /** {@code route} with its exchange's id read first ({@link RequestId#ofEngine}: echoed, a malformed one a 400) and bound. */
    Http.Handler identified(Http.Handler route) {
        return ex -> {
            String id = RequestId.ofEngine(ex);
            ScopedValue.where(RequestId.CURRENT, id).call(() -> {
                route.handle(ex);
                return null;
            });
        };
    }

    /** The running exchange's request has {@code room} here, until {@link #ended}; false: another request has it already. */
    boolean started(long room) {
        return rooms.putIfAbsent(room, RequestId.CURRENT.get()) == null;
    }

    /** The running exchange's request on {@code room} ended (answered, failed or gone). */
    void ended(long room) {
        rooms.remove(room, RequestId.CURRENT.get());
    }

    /** The request on {@code room} was answered {@code status} with {@code reason}: a failure (5xx, WARN) or a refusal (INFO). */
    void answered(long room, int status, String kind, String reason) {
        String id = RequestId.CURRENT.orElse("-");
        if (status >= 500) {
            LOG.warn("request failed: request_id={} room={} role={} status={} kind={} reason={}", id, room, role, status,
                    kind == null ? "-" : LogSafe.value(kind), LogSafe.text(reason));
        } else {
            LOG.info("request refused: request_id={} room={} role={} status={} reason={}", id, room, role, status, LogSafe.text(reason));
        }
    }

    /**
     * The request on {@code room} is aborted {@code by} ({@code client_gone}, {@code abort}: the {@code /abort} route): named
     * by the request in flight here on that room, else by the running exchange's id (an abort's own header), else {@code -}.
     */
    void aborted(long room, String by) {
        String inFlight = rooms.get(room); // read once: the line's id and its "not in flight" agree
        String id = inFlight != null ? inFlight : RequestId.CURRENT.orElse("-");
        LOG.info("request aborted: request_id={} room={} role={} by={}{}", id, room, role, by, inFlight != null ? "" : " (not in flight here)");
    }
}
