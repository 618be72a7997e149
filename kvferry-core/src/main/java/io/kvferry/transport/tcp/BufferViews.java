package io.kvferry.transport.tcp;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.IdentityHashMap;

/**
 * Direct {@link ByteBuffer} views of native segments for one gathering or scattering call, reused
 * from call to call: the k-th range of a segment within one call gets the segment's k-th view, made
 * once. So building the vector of a piece list allocates nothing once each segment has as many views
 * as it ever needed in one call (at most {@code WriteList.MAX_PIECES} in all per call). Owned by one
 * thread (a frame writer under its lock, or a reader thread's lander).
 */
final class BufferViews {
    private static final class Pool {
        ByteBuffer[] views = new ByteBuffer[2];
        int used;
        long call;
    }

    private final IdentityHashMap<MemorySegment, Pool> pools = new IdentityHashMap<>();
    private long call;
    /** The last segment asked for and its pool: a list's pieces come buffer after buffer. */
    private MemorySegment lastSegment;
    private Pool lastPool;

    /** Starts a new call: every view may be handed out again. */
    void reset() {
        call++;
    }

    /**
     * A view of {@code [offset, offset + length)} of {@code segment}, positioned there, distinct from
     * every other view handed out since {@link #reset}. A segment beyond a ByteBuffer's 2 GiB reach
     * gets a fresh slice instead (one object per range).
     */
    ByteBuffer view(MemorySegment segment, long offset, long length) {
        if (segment.byteSize() > Integer.MAX_VALUE) return segment.asSlice(offset, length).asByteBuffer();
        Pool p = segment == lastSegment ? lastPool : pools.get(segment);
        if (p == null) {
            p = new Pool();
            pools.put(segment, p);
        }
        lastSegment = segment;
        lastPool = p;
        if (p.call != call) {
            p.call = call;
            p.used = 0;
        }
        if (p.used == p.views.length) p.views = Arrays.copyOf(p.views, 2 * p.used);
        ByteBuffer v = p.views[p.used];
        if (v == null) p.views[p.used] = v = segment.asByteBuffer();
        p.used++;
        v.clear().position((int) offset).limit((int) (offset + length));
        return v;
    }
}
