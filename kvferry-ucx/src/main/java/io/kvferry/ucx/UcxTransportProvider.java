package io.kvferry.ucx;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knob;
import java.util.List;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.WriteSink;

import java.io.IOException;
import java.util.function.Consumer;

/**
 * The {@code ucx} transport: one-sided UCX puts (JUCX) from the prefill's registered memory straight
 * into the decode's, each write ending with a flush, so the STATUS that follows on the control
 * connection never overtakes its bytes. Registered through
 * {@code META-INF/services/io.kvferry.transport.TransportProvider}.
 *
 * <p>Settings: UCX's own environment variables ({@code UCX_TLS}, {@code UCX_NET_DEVICES}, …) pass
 * through untouched; kvferry's are in {@link UcxSettings} ({@code KVFERRY_UCX_ERR_MODE=peer|none},
 * batch, window and timeouts).
 */
public final class UcxTransportProvider implements TransportProvider {
    @Override
    public String name() {
        return "ucx";
    }

    /**
     * Whether endpoints use UCX's peer error-handling mode ({@code KVFERRY_UCX_ERR_MODE} /
     * {@code kvferry.ucx.errMode}, default peer): benchmarks configure their baseline the same way.
     */
    public static boolean peerErrorHandling() {
        return peerErrorHandling(KVFerrySettings.fromEnvironment());
    }

    public static boolean peerErrorHandling(KVFerrySettings settings) {
        return new UcxSettings(settings).errMode == UcxSettings.ErrMode.PEER;
    }

    @Override
    public List<Knob> knobs() {
        return UcxSettings.ALL;
    }

    /**
     * Null when libucp and JUCX load, a UCP context opens and kvferry-ucx's settings parse; otherwise
     * why not (and how to install UCX, or which setting is wrong).
     */
    @Override
    public String unavailableReason(KVFerrySettings settings) {
        String reason = UcxRuntime.unavailableReason();
        return reason != null ? reason : UcxSettings.problem(settings);
    }

    @Override
    public DestinationTransport openDestination(RegisteredMemory memory, int engineRank, KVFerrySettings settings, WriteSink gate,
                                                Consumer<String> why) throws IOException {
        String reason = unavailableReason(settings);
        if (reason != null) {
            why.accept(reason);
            return null;
        }
        return UcxDestination.open(memory, engineRank, new UcxSettings(settings), why);
    }

    @Override
    public SourceTransport openSource(RegisteredMemory memory, int engineRank, KVFerrySettings settings) throws IOException {
        String reason = unavailableReason(settings);
        if (reason != null) throw new IOException(reason);
        return UcxSource.open(memory, engineRank, new UcxSettings(settings));
    }
}
