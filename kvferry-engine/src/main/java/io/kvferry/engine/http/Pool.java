package io.kvferry.engine.http;

import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/** The router's backends at one moment: immutable (a change makes a new pool). */
record Pool(List<Backend> prefills, List<Backend> decodes) {
    Pool {
        prefills = List.copyOf(prefills);
        decodes = List.copyOf(decodes);
    }

    List<Backend> all() {
        return Stream.concat(prefills.stream(), decodes.stream()).toList();
    }

    /** The backend at {@code url} in that role, or null (one server may answer as both: a test's stub does). */
    Backend find(URI url, boolean prefill) {
        for (Backend b : prefill ? prefills : decodes) if (b.url.equals(url)) return b;
        return null;
    }

    Pool with(Backend b) {
        if (find(b.url, b.prefill) != null) throw new IllegalArgumentException(b + " is given twice");
        List<Backend> to = new ArrayList<>(b.prefill ? prefills : decodes);
        to.add(b);
        return b.prefill ? new Pool(to, decodes) : new Pool(prefills, to);
    }

    Pool without(Backend b) {
        return new Pool(prefills.stream().filter(x -> x != b).toList(), decodes.stream().filter(x -> x != b).toList());
    }
}
