package io.kvferry.chaos;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.chaos.net.LinkImpairment;
import io.kvferry.chaos.net.Netns;
import io.kvferry.chaos.net.NetnsLink;
import io.kvferry.registry.RegistryOptions;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

/**
 * The child JVM of {@link NetnsCarrierTest}: starts a registry inside a chaos namespace, either as the
 * harness does ({@code harness}) or with the library's default virtual request threads ({@code virtual}),
 * has it answer a few requests from the other side of the link, then prints how many of the JVM's
 * shared pool threads (virtual-thread carriers, the common pool) exist and how many of them live in another
 * network namespace than the JVM's main thread. It must be a fresh JVM: carriers are created once, by
 * whichever thread first needs one, which here is the registry's dispatcher inside the namespace.
 */
public final class NetnsCarrierProbe {
    private NetnsCarrierProbe() {}

    public static void main(String[] args) throws Exception {
        boolean asHarness = args[0].equals("harness");
        try (ChaosNetwork net = ChaosNetwork.netns(LinkImpairment.NONE, NetnsLink.Kind.VETH)) {
            KVBootstrapServer registry = asHarness ? net.startRegistry("probe-token", null)
                    : Netns.call(net.link().prefillNamespace(),
                            () -> KVFerry.startBootstrapServer(NetnsLink.PREFILL_ADDR, 0, RegistryOptions.defaults("probe-token")));
            try (registry) {
                int port = registry.port();
                int ok = 0;
                for (int i = 0; i < 4; i++) {
                    String status = Netns.call(net.link().decodeNamespace(), () -> health(port));
                    if (status.startsWith("HTTP/1.1 200")) ok++;
                }
                System.out.println("health-ok=" + ok);
                System.out.println(carriers());
            }
        }
    }

    private static String health(int port) throws Exception {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(NetnsLink.PREFILL_ADDR, port), 5000);
            s.setSoTimeout(5000);
            OutputStream out = s.getOutputStream();
            out.write("GET /health HTTP/1.1\r\nHost: registry\r\nConnection: close\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            String answer = new String(in.readAllBytes(), StandardCharsets.US_ASCII);
            int eol = answer.indexOf('\r');
            return eol < 0 ? answer : answer.substring(0, eol);
        }
    }

    /**
     * "carriers=N foreign=M", from /proc: each thread's name (its first 15 characters) and network
     * namespace. Carriers are the JVM's shared pool threads, {@code ForkJoinPool-N-worker-M} (virtual
     * threads) and {@code ForkJoinPool.commonPool-worker-M}: any task of the JVM may run on them.
     */
    private static String carriers() throws Exception {
        Path own = Files.readSymbolicLink(Path.of("/proc/self/ns/net"));
        int carriers = 0, foreign = 0;
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path task : tasks.toList()) {
                String name;
                Path ns;
                try {
                    name = Files.readString(task.resolve("comm")).trim();
                    ns = Files.readSymbolicLink(task.resolve("ns/net"));
                } catch (IOException gone) {
                    continue; // the thread ended while we looked
                }
                if (!name.startsWith("ForkJoinPool")) continue; // virtual-thread carriers and the common pool's workers
                carriers++;
                if (!ns.equals(own)) foreign++;
            }
        }
        return "carriers=" + carriers + " foreign=" + foreign;
    }
}
