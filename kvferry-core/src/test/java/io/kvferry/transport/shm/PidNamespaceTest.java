package io.kvferry.transport.shm;

import io.kvferry.api.KVArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedArena;
import io.kvferry.memory.SharedMemory;
import io.kvferry.transport.LinkOffer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.locks.LockSupport;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Pids from another pid namespace (issue 13, hostile input 7): a container sharing the host's boot
 * id and /dev/shm numbers its processes independently, so a pid this process cannot find there is
 * not a dead process. Neither the stale-file sweep nor the fence's writer-liveness test may take it
 * for one. When run as root with {@code unshare}, the foreign namespace is a real one made for the
 * test (and removed after it); otherwise its id is made up (the code compares ids only).
 */
@Timeout(60)
class PidNamespaceTest {
    final List<Path> files = new ArrayList<>();
    final List<AutoCloseable> closeables = new ArrayList<>();
    Process unshare;

    @AfterEach
    void cleanUp() throws Exception {
        for (Path f : files) Files.deleteIfExists(f);
        for (int i = closeables.size() - 1; i >= 0; i--) closeables.get(i).close();
        if (unshare != null) {
            unshare.descendants().forEach(ProcessHandle::destroyForcibly);
            unshare.destroyForcibly();
            unshare.waitFor();
        }
    }

    /** The id of a pid namespace other than this process's. */
    long foreignNamespace() throws Exception {
        long own = SharedMemory.pidNamespace();
        assertNotEquals(0, own, "this process's pid namespace is readable (/proc/self/ns/pid)");
        boolean root = (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid") == 0;
        if (root && Files.isExecutable(Path.of("/usr/bin/unshare"))) {
            unshare = new ProcessBuilder("/usr/bin/unshare", "--pid", "--fork", "--kill-child", "sleep", "60").start();
            long deadline = System.nanoTime() + 10_000_000_000L;
            Optional<ProcessHandle> child = Optional.empty();
            while (child.isEmpty() && unshare.isAlive() && System.nanoTime() < deadline) {
                child = unshare.children().findFirst();
                if (child.isEmpty()) LockSupport.parkNanos(1_000_000); // polls a condition, bounded by the deadline
            }
            if (child.isPresent()) {
                String link = Files.readSymbolicLink(Path.of("/proc/" + child.get().pid() + "/ns/pid")).toString();
                long ns = Long.parseLong(link.substring(link.indexOf('[') + 1, link.indexOf(']')));
                assertNotEquals(own, ns, "unshare made a new pid namespace");
                return ns;
            }
        }
        return own + 1;
    }

    Path file(String name) throws IOException {
        Path p = SharedMemory.DIR.resolve(SharedMemory.PREFIX + name);
        files.add(p);
        Files.write(p, new byte[16]);
        return p;
    }

    static long exitedPid() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        return gone.pid();
    }

    @Test
    void filesOfAnotherPidNamespaceOrOfNoKnownOneAreNeverSwept() throws Exception {
        long foreign = foreignNamespace(), own = SharedMemory.pidNamespace(), pid = exitedPid();
        Path foreignFile = file(pid + "-1-ns" + foreign + "-abcdef-foreign");
        Path unknown = file(pid + "-1-ns0-abcdef-unknown");
        Path legacy = file(pid + "-1-012345678901-legacy"); // an older kvferry's name: no namespace recorded
        Path sameNamespace = file(pid + "-1-ns" + own + "-abcdef-same");
        SharedMemory.sweepStale();
        assertTrue(Files.exists(foreignFile), "pid " + pid + " of namespace " + foreign + " may be alive there");
        assertTrue(Files.exists(unknown), "no namespace known: not provably dead");
        assertTrue(Files.exists(legacy), "no namespace recorded: not provably dead");
        assertFalse(Files.exists(sameNamespace), "the same dead pid in this namespace is swept");
    }

    @Test
    void anotherUsersFileIsNeverSwept() throws Exception {
        assumeTrue((Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid") == 0, "needs root to give a file away");
        Path theirs = file(exitedPid() + "-1-ns" + SharedMemory.pidNamespace() + "-abcdef-theirs");
        Files.setAttribute(theirs, "unix:uid", 65534);
        SharedMemory.sweepStale();
        assertTrue(Files.exists(theirs), "only the owner's own stale files are removed");
    }

    @Test
    void aWriterInAnotherPidNamespaceIsWaitedForNotTakenForDead() throws Exception {
        long foreign = foreignNamespace(), pid = exitedPid();
        SharedArena pool = SharedArena.open("pidns", 1 << 16);
        closeables.add(pool);
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(pool.allocate(4096 * 4, 64), 4096);
        ShmDestination d = ShmDestination.open(RegisteredMemory.from(a), 0, why -> { });
        assertNotNull(d);
        closeables.add(d);
        MemorySegment fence = d.fenceForTest();

        // A writer of another namespace, mid-copy: its pid means nothing here, so revoke must not
        // report the link drained; it waits out its timeout and says "not confirmed".
        LinkOffer foreignWriter = d.offer("foreign");
        long slot = Fence.slotOffset(ShmOffer.decode(foreignWriter.blob()).slot());
        Fence.claim(fence, slot, pid, 1, foreign);
        assertTrue(Fence.enter(fence, slot));
        assertFalse(foreignWriter.revoke(Duration.ofMillis(300)), "a writer in another pid namespace is never taken for dead");

        // The same exited pid in this namespace is provably gone: revoke confirms at once.
        LinkOffer localWriter = d.offer("local");
        long localSlot = Fence.slotOffset(ShmOffer.decode(localWriter.blob()).slot());
        Fence.claim(fence, localSlot, pid, 0, SharedMemory.pidNamespace());
        assertTrue(Fence.enter(fence, localSlot));
        assertTrue(localWriter.revoke(Duration.ofSeconds(20)), "a dead writer of this namespace does not hold revoke");
    }
}
