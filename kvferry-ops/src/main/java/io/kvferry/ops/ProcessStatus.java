package io.kvferry.ops;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.api.KVManager;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Supplier;

/**
 * The ranks of one process, as its status page shows them: managers join when created and leave when
 * torn down (a process may run several waves of them, as the bench does), and {@link #get()} builds
 * the process document from those present. An engine process adds what its scheduler holds ({@link #engine}):
 * the document's {@code engine} object.
 */
public final class ProcessStatus implements Supplier<ObjectNode> {
    private final String role;
    private final long startedEpochMillis = System.currentTimeMillis();
    private final List<KVManager> managers = new CopyOnWriteArrayList<>();
    private volatile Supplier<ObjectNode> engine;

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

    /**
     * The engine's part of the document, read at each {@link #get()}: {@code kv_pages} ({@code used}, {@code cached},
     * {@code free}), the prompt tokens served from its prefix cache ({@code cached_tokens}), the requests that waited for
     * another's pages of a shared prefix ({@code prefix_deferrals}, each engine) and the prefill's {@code prompt_tokens},
     * as the page and {@code kvferry status} show them.
     */
    public ProcessStatus engine(Supplier<ObjectNode> part) {
        engine = part;
        return this;
    }

    public String role() {
        return role;
    }

    @Override
    public ObjectNode get() {
        ObjectNode doc = StatusJson.process(role, List.copyOf(managers), startedEpochMillis);
        Supplier<ObjectNode> e = engine;
        if (e != null) doc.set("engine", e.get());
        return doc;
    }
}
