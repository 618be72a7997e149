package io.kvferry.testkit;


import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * Per-process link settings of a role process that the fault harness changes (hidden options of
 * {@code kvferry prefill|decode}).
 *
 * @param advertisePorts  prefill: the port each rank publishes in the registry instead of its bound
 *                        one, in launch order (DP group, CP rank, PP stage, TP rank); empty = bound ports.
 *                        {@code kvferry chaos --scenario partition} puts its fault proxy there.
 * @param heartbeatMillis heartbeat interval of the control connections; 0 = library default
 * @param heartbeatMisses heartbeats missed before a connection is declared dead; 0 = library default
 * @param prefillInfoTimeoutMillis decode: how long a room keeps retrying a prefill that is registered but
 *                        refuses connections (gone); 0 = library default (15 s)
 * @param advertiseHost   prefill: the host every rank publishes instead of its bound one (null = the bound host);
 *                        chaos in network namespaces publishes a fault proxy on the decode's side of the link
 */
public record RoleOptions(List<Integer> advertisePorts, long heartbeatMillis, int heartbeatMisses,
                          long prefillInfoTimeoutMillis, String advertiseHost) {
    public static final RoleOptions NONE = new RoleOptions(List.of(), 0, 0, 0);

    public RoleOptions(List<Integer> advertisePorts, long heartbeatMillis, int heartbeatMisses, long prefillInfoTimeoutMillis) {
        this(advertisePorts, heartbeatMillis, heartbeatMisses, prefillInfoTimeoutMillis, null);
    }

    /** The same options with the host every prefill rank publishes. */
    public RoleOptions withAdvertiseHost(String host) {
        return new RoleOptions(advertisePorts, heartbeatMillis, heartbeatMisses, prefillInfoTimeoutMillis, host);
    }

    public RoleOptions {
        if (advertiseHost != null && advertiseHost.isBlank()) advertiseHost = null;
        advertisePorts = advertisePorts == null ? List.of() : List.copyOf(advertisePorts);
        for (int p : advertisePorts) {
            if (p < 0 || p > 65535) throw new IllegalArgumentException("advertise port " + p + " is outside [0, 65535]");
        }
        if (heartbeatMillis < 0 || heartbeatMisses < 0) throw new IllegalArgumentException("heartbeat settings must be >= 0");
        if (prefillInfoTimeoutMillis < 0) throw new IllegalArgumentException("prefill info timeout must be >= 0");
    }

    /** The port the manager launched {@code index}-th publishes; 0 = its bound port. */
    public int advertisePort(int index) {
        return index < advertisePorts.size() ? advertisePorts.get(index) : 0;
    }

    /** The heartbeat to configure, or null for the library default. */
    public Duration heartbeatInterval() {
        return heartbeatMillis > 0 ? Duration.ofMillis(heartbeatMillis) : null;
    }

    /** The command-line form understood by {@code kvferry prefill|decode}. */
    public List<String> args() {
        List<String> a = new ArrayList<>();
        if (!advertisePorts.isEmpty()) {
            a.add("--advertise-port");
            a.add(String.join(",", advertisePorts.stream().map(String::valueOf).toList()));
        }
        if (heartbeatMillis > 0) a.addAll(List.of("--heartbeat-ms", Long.toString(heartbeatMillis)));
        if (heartbeatMisses > 0) a.addAll(List.of("--heartbeat-misses", Integer.toString(heartbeatMisses)));
        if (prefillInfoTimeoutMillis > 0) a.addAll(List.of("--prefill-info-timeout-ms", Long.toString(prefillInfoTimeoutMillis)));
        if (advertiseHost != null) a.addAll(List.of("--advertise-host", advertiseHost));
        return a;
    }
}
