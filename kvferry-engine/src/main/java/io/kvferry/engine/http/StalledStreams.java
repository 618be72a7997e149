package io.kvferry.engine.http;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The router's streams from decodes, each cut when nothing came on it for {@code limit}: a decode sends a
 * token or a keep-alive comment at least every {@link DecodeServer#KEEP_ALIVE_MILLIS}, so silence that
 * long is a decode that hangs (a stopped process, a host gone quiet), which would otherwise hold its
 * requests for as long as it hangs: health checks take it out of rotation for new requests only. The
 * router's health thread sweeps them; a cut stream reads as ended, and {@link Watched#cut} says why.
 */
final class StalledStreams {
    private final Set<Watched> open = ConcurrentHashMap.newKeySet();
    private final Duration limit;

    StalledStreams(Duration limit) {
        this.limit = limit;
    }

    Duration limit() {
        return limit;
    }

    /** {@code in}, watched until it is closed or cut. */
    Watched watch(InputStream in) {
        Watched w = new Watched(in);
        open.add(w);
        return w;
    }

    /** Cuts every stream that has been silent for the limit. */
    void sweep() {
        long now = System.nanoTime(), limitNanos = limit.toNanos();
        for (Watched w : open) {
            if (now - w.lastNanos > limitNanos) w.cutOff();
        }
    }

    /** A stream whose reads note when bytes last came; closed by the sweep when they stop coming. */
    final class Watched extends FilterInputStream {
        private volatile long lastNanos = System.nanoTime();
        private volatile boolean cut;

        private Watched(InputStream in) {
            super(in);
        }

        /** Whether the sweep cut it (then its reads end or fail). */
        boolean cut() {
            return cut;
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            if (b >= 0) lastNanos = System.nanoTime();
            return b;
        }

        @Override
        public int read(byte[] buf, int off, int len) throws IOException {
            int n = super.read(buf, off, len);
            if (n > 0) lastNanos = System.nanoTime();
            return n;
        }

        @Override
        public void close() throws IOException {
            open.remove(this);
            super.close();
        }

        private void cutOff() {
            cut = true;
            open.remove(this);
            try {
                super.close(); // the JDK client's body stream wakes a blocked read when closed
            } catch (IOException ignored) {
                // closing is all that is wanted
            }
        }
    }
}
