package io.kvferry.chaos.net;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Network namespaces for kvferry chaos: created and deleted with iproute2 ({@code ip netns}), entered
 * by single threads with {@code setns} so that the harness (registry, fault proxy, link emulator)
 * can put a socket or a device on either side of a link while it stays in the root namespace itself.
 *
 * <p>Every namespace this harness creates is named {@code kvferry-chaos-<pid>-<n>-<side>}, the pid
 * being the harness's: {@link #sweepStale()} deletes those whose harness is gone (killed before its
 * shutdown hook ran), and nothing else.
 */
public final class Netns {
    private Netns() {}

    /** The prefix of every namespace this harness creates. */
    public static final String PREFIX = "kvferry-chaos-";
    private static final Pattern OWNED = Pattern.compile(Pattern.quote(PREFIX) + "(\\d+)-\\d+-[a-z]+");
    private static final Path NETNS_DIR = Path.of("/run/netns");
    private static final long COMMAND_TIMEOUT_SECONDS = 20;

    /** The answer of {@link #unavailableReason()}, found once per process ("" = available). */
    private static volatile String unavailable;

    /**
     * Why this process cannot run chaos in network namespaces, or null when it can: it must be root,
     * have iproute2, and be allowed to create a namespace (a probe is created and deleted; a
     * container without CAP_SYS_ADMIN fails here, not halfway through a run).
     */
    public static String unavailableReason() {
        String u = unavailable;
        if (u == null) {
            u = probe();
            unavailable = u;
        }
        return u.isEmpty() ? null : u;
    }

    private static String probe() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("Uid:")) {
                    String uid = line.substring(4).trim().split("\\s+")[1]; // effective uid
                    if (!uid.equals("0")) return "network namespaces need root (effective uid " + uid + ")";
                }
            }
            String name = PREFIX + ProcessHandle.current().pid() + "-0-probe";
            add(name);
            delete(name);
            return "";
        } catch (IOException e) {
            return "network namespaces unavailable: " + e.getMessage();
        }
    }

    /** Runs a command (iproute2), returning its output; a failure is an IOException with the command and what it said. */
    static String run(List<String> command) throws IOException {
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
        Process p;
        try {
            p = pb.start();
        } catch (IOException e) {
            throw new IOException(String.join(" ", command) + ": cannot start (" + e.getMessage() + ")", e);
        }
        try {
            byte[] out = p.getInputStream().readAllBytes();
            if (!p.waitFor(COMMAND_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new IOException(String.join(" ", command) + ": no answer in " + COMMAND_TIMEOUT_SECONDS + " s");
            }
            String text = new String(out, StandardCharsets.UTF_8).trim();
            if (p.exitValue() != 0) throw new IOException(String.join(" ", command) + " failed (" + p.exitValue() + "): " + text);
            return text;
        } catch (InterruptedException e) {
            p.destroyForcibly();
            Thread.currentThread().interrupt();
            throw new IOException(String.join(" ", command) + ": interrupted", e);
        }
    }

    static void add(String name) throws IOException {
        run(List.of("ip", "netns", "add", name));
    }

    /** Deletes a namespace; a missing one is not an error. Processes still inside keep it alive until they exit. */
    static void delete(String name) {
        if (!Files.exists(NETNS_DIR.resolve(name))) return;
        try {
            run(List.of("ip", "netns", "delete", name));
        } catch (IOException e) {
            System.err.println("[chaos] could not delete network namespace " + name + ": " + e.getMessage());
        }
    }

    /**
     * Runs {@code body} on a new platform thread that first entered namespace {@code ns}: sockets and
     * devices it creates live there, and so do the threads it starts (a new thread inherits its
     * creator's namespace) — a fault proxy's acceptor and connectors, a registry's dispatcher.
     * Virtual threads must not be started there: they run on the JVM's shared carriers, and a carrier
     * the scheduler creates for them may be created here and stay in the namespace, so any virtual
     * thread of the JVM mounted on it later connects from inside. So the registry started here serves
     * its requests on platform threads ({@code RegistryOptions#platformRequestThreads}), and the fault
     * proxy and link emulator start only platform threads; {@code NetnsCarrierTest} checks it.
     */
    public static <T> T call(String ns, Callable<T> body) throws IOException {
        FutureTask<T> task = new FutureTask<>(() -> {
            enter(ns);
            return body.call();
        });
        Thread t = Thread.ofPlatform().daemon().name("chaos-netns-" + ns).start(task);
        try {
            T result = task.get();
            t.join();
            return result;
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof IOException io) throw io;
            if (c instanceof RuntimeException re) throw re;
            throw new IOException("in network namespace " + ns + ": " + c, c);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while working in network namespace " + ns, e);
        }
    }

    /** Moves the calling thread into namespace {@code ns} for good. */
    private static void enter(String ns) throws IOException {
        int fd = Posix.open(NETNS_DIR.resolve(ns).toString(), Posix.O_RDONLY | Posix.O_CLOEXEC);
        try {
            Posix.setns(fd);
        } finally {
            Posix.close(fd);
        }
    }

    /**
     * Deletes the namespaces a harness that is no longer running left behind (killed before its
     * shutdown hook ran). Returns their names.
     */
    public static List<String> sweepStale() {
        List<String> swept = new ArrayList<>();
        if (!Files.isDirectory(NETNS_DIR)) return swept;
        try (Stream<Path> names = Files.list(NETNS_DIR)) {
            for (Path p : names.toList()) {
                String name = p.getFileName().toString();
                Matcher m = OWNED.matcher(name);
                if (!m.matches()) continue;
                long pid = Long.parseLong(m.group(1));
                if (pid == ProcessHandle.current().pid() || ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) continue;
                delete(name);
                swept.add(name);
            }
        } catch (IOException e) {
            System.err.println("[chaos] could not list " + NETNS_DIR + ": " + e.getMessage());
        }
        return swept;
    }
}
