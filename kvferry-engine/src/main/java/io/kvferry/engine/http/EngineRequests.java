package io.kvferry.engine.http;

import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.WarnLimiter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.slf4j.event.Level;

import java.util.concurrent.ConcurrentHashMap;
import java.util.function.LongSupplier;

/**
 * An engine server's requests by id ({@link RequestId}): each {@code /generate} and {@code /abort} exchange's id (the
 * router's {@code X-Request-Id}, a malformed one a 400; a new one for a caller that sends none), echoed in the answer,
 * and the lines it logs about one request on {@link #LOG}, each naming {@code request_id=ID room=N role=R}: a failure
 * (a transfer's, a timeout, an internal error: WARN), a refusal (admission, a grammar past its bound, a room in flight,
 * a drain: INFO), an unexpected exception's 500 (a bug: ERROR, {@link #unexpected}) and an abort (its client gone, {@code /abort}: INFO; an {@code /abort} of a room not in flight here:
 * DEBUG, {@link #aborted}). The id is in the message, not in a thread's context: the lines come from the exchange's own
 * thread, and the id's rule keeps each one line.
 *
 * <p>A refusal of the request's fields, before its room is taken ({@link Http.BadRequest} of a {@code /generate} or
 * {@code /abort}: a malformed field, {@code X-Request-Id} itself), is a {@code request refused} line too, at INFO at most
 * once a second ({@link WarnLimiter}: the others at DEBUG, the next INFO line counting them): a client sends those as
 * fast as it likes, and each costs the engine nothing else.
 *
 * <p>State: the rooms of the requests in flight here and their ids, so an {@code /abort} (which names a room) is logged
 * with the request it ends; an entry lives from the request's start to its answer.
 */
final class EngineRequests {
    /** The engines' log of their requests' failures, refusals and aborts. */
    static final Logger LOG = LoggerFactory.getLogger("io.kvferry.engine.requests");

    private final String role;
    private final ConcurrentHashMap<Long, String> rooms = new ConcurrentHashMap<>();
    /** The refusals of requests' fields: one INFO line a second at most ({@link #refusedField}). */
    private final WarnLimiter fieldRefusals;
    /** The 500s of unexpected exceptions (bugs): one ERROR line with its stack trace a second at most ({@link #unexpected}). */
    private final WarnLimiter unexpectedErrors;

    EngineRequests(String role) {
        this(role, System::nanoTime);
    }

    /** @param clock nanoseconds, as {@link System#nanoTime}, for the bound on {@link #refusedField}'s lines (tests hold it still) */
    EngineRequests(String role, LongSupplier clock) {
        this.role = role;
        this.fieldRefusals = new WarnLimiter(clock, "requests refused for their fields", true);
        this.unexpectedErrors = new WarnLimiter(clock, "unexpected exceptions' 500s", Level.ERROR);
    }

    /**
     * {@code route} with its exchange's id read first ({@link RequestId#ofEngine}: echoed, a malformed one a 400) and bound;
     * a 400 of its fields ({@link Http.BadRequest}, the malformed id's too) is logged ({@link #refusedField}) on its way to
     * {@link Http#handle}, which answers it.
     */
    Http.Handler identified(Http.Handler route) {
        return ex -> {
            String id;
            try {
                id = RequestId.ofEngine(ex);
            } catch (Http.BadRequest malformed) {
                refusedField("-", malformed); // the request has no id: its header is the fault
                throw malformed;
            }
            ScopedValue.where(RequestId.CURRENT, id).call(() -> {
                try {
                    route.handle(ex);
                } catch (Http.BadRequest refused) {
                    refusedField(id, refused);
                    throw refused;
                } catch (Http.Unavailable busy) {
                    throw busy;
                } catch (RuntimeException bug) { // an IllegalArgumentException too: the client's faults are BadRequests
                    unexpected(id, bug);
                    throw bug; // Http.handle answers it 500
                }
                return null;
            });
        };
    }

    /**
     * The request {@code id} ({@code -}: none) was refused for a field ({@code refused}'s param, or {@code -}) before its
     * room was taken: {@code request refused: request_id=… role=… status=400 param=… reason=…}, the client's text in its
     * reason escaped ({@link LogSafe}); at INFO once a second at most, the others at DEBUG ({@link WarnLimiter}).
     */
    void refusedField(String id, Http.BadRequest refused) {
        fieldRefusals.log(LOG, "request refused: request_id={} role={} status=400 param={} reason={}", id, role,
                LogSafe.value(refused.param), LogSafe.text(refused.getMessage()));
    }

    /**
     * The request {@code id} is answered 500 for an exception nothing expected (a bug, {@link Http#handle}): {@code request
     * failed: request_id=… role=… status=500 kind=internal_error reason=…} at ERROR with its stack trace, as the router's
     * ({@link Router#unexpected}): its text escaped, the trace only when clean ({@link Router#clean}, else at DEBUG), at
     * ERROR once a second at most, the others at DEBUG.
     */
    void unexpected(String id, Exception bug) {
        String format = "request failed: request_id={} role={} status=500 kind=internal_error reason={}";
        if (Router.clean(bug)) {
            unexpectedErrors.log(LOG, format, id, role, LogSafe.text(bug.toString()), bug);
        } else {
            unexpectedErrors.log(LOG, format + " (its stack trace at DEBUG: its text holds control characters)", id, role, LogSafe.text(bug.toString()));
            LOG.debug("the stack trace of request {}'s 500", id, bug);
        }
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
     * by the request in flight here on that room (INFO), else by the running exchange's id (an abort's own header), else
     * {@code -}, with {@code (not in flight here)} at DEBUG: that is routine, not news (the router aborts both halves when a
     * stop string ends a request or its client leaves, one of them often done already; a client races its own end).
     */
    void aborted(long room, String by) {
        String inFlight = rooms.get(room); // read once: the line's id and its level agree
        if (inFlight != null) {
            LOG.info("request aborted: request_id={} room={} role={} by={}", inFlight, room, role, by);
        } else if (LOG.isDebugEnabled()) {
            LOG.debug("request aborted: request_id={} room={} role={} by={} (not in flight here)", RequestId.CURRENT.orElse("-"), room, role, by);
        }
    }
}
