package io.kvferry.http;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A response body of {@link java.net.http.HttpClient} collected up to a cap, for replies from peers that
 * may send anything (a bootstrap registry, a process's status endpoint): one buffer list is requested at
 * a time, and a declared or actual length over the cap cancels the subscription (closing the connection)
 * at once and fails the body with {@link TooLargeException}. {@code BodyHandlers.ofString()} would
 * collect whatever the peer sends.
 *
 * <p>{@link java.net.http.HttpRequest#timeout} bounds only the wait for the response headers, so a
 * caller with a deadline {@linkplain #send sends} an {@link Exchange} and waits on the whole of it
 * ({@link Exchange#await}), or {@linkplain Exchange#abort() aborts} it when its own deadline passes.
 */
public final class BoundedBody implements HttpResponse.BodySubscriber<byte[]> {
    private final int status;
    private final long declared;
    private final long maxBytes;
    private final String subject;
    private final CompletableFuture<byte[]> result = new CompletableFuture<>();
    private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    private volatile Flow.Subscription subscription;

    /**
     * @param declared its Content-Length, -1 when none
     * @param subject  what the body is, for the message ("a registry reply")
     */
    BoundedBody(int status, long declared, long maxBytes, String subject) {
        this.status = status;
        this.declared = declared;
        this.maxBytes = maxBytes;
        this.subject = subject;
    }

    /**
     * A handler for one exchange whose body may be at most {@code maxBytes}.
     *
     * @param subject what the body is, for the message of a {@link TooLargeException} ("a registry reply")
     */
    public static Handler handler(long maxBytes, String subject) {
        if (maxBytes < 0) throw new IllegalArgumentException("maxBytes must be >= 0, got " + maxBytes);
        return new Handler(maxBytes, subject);
    }

    /**
     * Sends {@code request} with a body of at most {@code maxBytes}.
     *
     * @param subject what the body is, for the message of a {@link TooLargeException} ("a registry reply")
     * @throws IllegalArgumentException when no request can be made to its URI (the client's own check)
     */
    public static Exchange send(HttpClient http, HttpRequest request, long maxBytes, String subject) {
        Handler body = handler(maxBytes, subject);
        return new Exchange(http.sendAsync(request, body), body);
    }

    /** One exchange under way: its response (headers and the bounded body), and how to give up on it. */
    public static final class Exchange {
        private final CompletableFuture<HttpResponse<byte[]>> response;
        private final Handler body;

        private Exchange(CompletableFuture<HttpResponse<byte[]>> response, Handler body) {
            this.response = response;
            this.body = body;
        }

        public CompletableFuture<HttpResponse<byte[]>> response() {
            return response;
        }

        /** Cancels the exchange (which closes its connection) and fails its body; a no-op once it completed. */
        public void abort() {
            response.cancel(true);
            body.abort();
        }

        /**
         * Waits for the whole exchange, headers and body; when {@code timeout} passes first (or the caller is
         * interrupted) it is aborted.
         *
         * @throws HttpTimeoutException when the timeout passed
         * @throws IOException          what the exchange failed with ({@link TooLargeException} among them)
         */
        public HttpResponse<byte[]> await(Duration timeout) throws IOException, InterruptedException {
            try {
                return response.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                abort();
                throw new HttpTimeoutException("no complete reply (headers and body) within the request timeout of "
                        + timeout.toMillis() + " ms");
            } catch (InterruptedException e) {
                abort();
                throw e;
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                while (cause instanceof CompletionException && cause.getCause() != null) cause = cause.getCause();
                if (cause instanceof IOException io) throw io;
                if (cause instanceof RuntimeException re) throw re;
                throw new IOException(cause);
            }
        }
    }

    /** Makes one {@link BoundedBody} per exchange and keeps it, so the caller can abort it. Not reusable. */
    public static final class Handler implements HttpResponse.BodyHandler<byte[]> {
        private final long maxBytes;
        private final String subject;
        private final AtomicReference<BoundedBody> body = new AtomicReference<>();

        private Handler(long maxBytes, String subject) {
            this.maxBytes = maxBytes;
            this.subject = subject;
        }

        @Override
        public HttpResponse.BodySubscriber<byte[]> apply(HttpResponse.ResponseInfo info) {
            BoundedBody b = new BoundedBody(info.statusCode(), info.headers().firstValueAsLong("content-length").orElse(-1),
                    maxBytes, subject);
            body.set(b);
            return b;
        }

        /** Cancels the body's subscription (which closes the connection) and fails it; a no-op before the headers came. */
        public void abort() {
            BoundedBody b = body.get();
            if (b != null) b.abort();
        }
    }

    /** A body over the cap, declared or sent. */
    public static final class TooLargeException extends IOException {
        private final int status;

        TooLargeException(int status, String message) {
            super(message);
            this.status = status;
        }

        /** The status code of the response whose body it was. */
        public int status() {
            return status;
        }
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
        subscription = s;
        if (declared > maxBytes) {
            tooLarge("declares a body of " + declared + " bytes");
            return;
        }
        s.request(1);
    }

    @Override
    public void onNext(List<ByteBuffer> items) {
        if (result.isDone()) return;
        for (ByteBuffer b : items) {
            if (bytes.size() + (long) b.remaining() > maxBytes) {
                tooLarge("sent a body of more than " + maxBytes + " bytes");
                return;
            }
            byte[] chunk = new byte[b.remaining()];
            b.get(chunk);
            bytes.writeBytes(chunk);
        }
        subscription.request(1);
    }

    private void tooLarge(String what) {
        subscription.cancel();
        result.completeExceptionally(new TooLargeException(status, "HTTP " + status + " reply " + what
                + ", over the limit of " + maxBytes + " bytes for " + subject));
    }

    void abort() {
        Flow.Subscription s = subscription;
        if (s != null) s.cancel();
        result.completeExceptionally(new HttpTimeoutException("reply aborted at the request timeout"));
    }

    @Override
    public void onError(Throwable t) {
        result.completeExceptionally(t);
    }

    @Override
    public void onComplete() {
        result.complete(bytes.toByteArray());
    }

    @Override
    public CompletionStage<byte[]> getBody() {
        return result;
    }
}
