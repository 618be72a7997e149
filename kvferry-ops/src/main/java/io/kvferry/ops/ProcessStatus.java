package io.kvferry.ops;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.api.KVManager;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Supplier;

/**
 * The ranks of one process, as its status page shows them: managers join when created and leave when
 * torn down (a process may run several waves of them, as the bench does), and {@link #get()} builds
 * the process document from those present.
 */
public final class ProcessStatus implements Supplier<ObjectNode> {
    private final String role;
    private final long startedEpochMillis = System.currentTimeMillis();
    private final List<KVManager> managers = new CopyOnWriteArrayList<>();

    /** @param role what the process is: prefill, decode, bench, engine-prefill, … */
    public ProcessStatus(String role) {
        this.role = role;
    }

    public void add(KVManager m) {
        managers.add(m);
    }

    public void remove(KVManager m) {
        managers.remove(m);
    }

    public String role() {
        return role;
    }

    @Override
    public ObjectNode get() {
        return StatusJson.process(role, List.copyOf(managers), startedEpochMillis);
    }
}
