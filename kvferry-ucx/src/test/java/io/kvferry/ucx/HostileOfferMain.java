package io.kvferry.ucx;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Region;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportUnavailableException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * A hostile decode's offers against a real prefill rank, in a child JVM of {@link UcxHostileOfferTest}
 * so that libucp aborting the process is seen as a crash (the exit status) and not as a failed test.
 *
 * <ul>
 *   <li>{@code random SEED N}: N offers whose worker address is random bytes (a valid offer, valid CRC)
 *       go through the prefill's connect; each must be refused with an IOException. Prints the first
 *       refusal ({@code REFUSED …}), then proves UCX still works here with a real link and write
 *       ({@code ALIVE}).
 *   <li>{@code mutants SEED N}: N copies of the decode's real address with 1-4 random bytes changed go
 *       through connect; those the structural check lets through reach libucp (and connect or fail).
 *       Prints the counts, then {@code ALIVE}.
 *   <li>{@code unchecked SEED}: one random address given to libucp directly, without kvferry's check:
 *       what the check prevents (the process is expected to die; prints {@code SURVIVED} if not).
 * </ul>
 */
public final class HostileOfferMain {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        long seed = Long.parseLong(args[1]);
        int n = args.length > 2 ? Integer.parseInt(args[2]) : 1;
        Random r = new Random(seed);
        String reason = UcxRuntime.unavailableReason();
        if (reason != null) {
            System.out.println("UNAVAILABLE " + reason);
            return;
        }
        System.out.println("UCX_VERSION " + UcxRuntime.version());
        if (mode.equals("unchecked")) {
            unchecked(r);
            return;
        }
        System.setProperty("kvferry.ucx.connectTimeoutMs", "300");
        KVFerrySettings settings = KVFerrySettings.fromEnvironment();
        UcxTransportProvider provider = new UcxTransportProvider();
        try (Arena arena = Arena.ofShared()) {
            RegisteredMemory dst = memory(arena, 1), src = memory(arena, 2);
            DestinationTransport d = provider.openDestination(dst, 0, settings, null, why -> System.out.println("NOT OFFERED " + why));
            SourceTransport s = provider.openSource(src, 0, settings);
            LinkOffer real = d.offer("real");
            UcxOffer offer = UcxOffer.decode(real.blob());
            int refused = 0, unusable = 0, connected = 0;
            for (int i = 0; i < n; i++) {
                byte[] address;
                if (mode.equals("random")) {
                    address = new byte[1 + r.nextInt(300)];
                    r.nextBytes(address);
                } else {
                    address = offer.workerAddress().clone();
                    for (int f = 1 + r.nextInt(4); f > 0; f--) address[r.nextInt(address.length)] = (byte) r.nextInt(256);
                }
                if (Boolean.getBoolean("trace")) {
                    StringBuilder diff = new StringBuilder("TRY " + i + ":");
                    byte[] o = offer.workerAddress();
                    for (int k = 0; k < Math.min(o.length, address.length); k++) {
                        if (o[k] != address[k]) diff.append(String.format(" @%d %02x->%02x", k, o[k], address[k]));
                    }
                    System.out.println(diff);
                    System.out.flush();
                }
                byte[] hostile = new UcxOffer(offer.ucxMajor(), offer.ucxMinor(), address, offer.entries()).encode();
                try {
                    DataPath p = s.connect(hostile, dst.describe(), PeerLink.named("hostile-" + i));
                    connected++;
                    p.close();
                } catch (IOException e) {
                    if (refused++ == 0) System.out.println("REFUSED " + e.getMessage());
                } catch (TransportUnavailableException e) {
                    if (unusable++ == 0) System.out.println("UNUSABLE " + e.getMessage());
                }
            }
            System.out.println("COUNTS refused=" + refused + " unusable=" + unusable + " connected=" + connected);
            // Still a working UCX: the real offer connects and a write lands.
            DataPath p = s.connect(real.blob(), dst.describe(), PeerLink.named("real"));
            CopyPlan plan = TransferPlanner.planKv(new int[] {1}, new int[] {2}, new long[] {4096});
            p.write(1, plan, src, () -> false);
            MemorySegment from = src.slice(Region.KV, 0, 0, 4096, 4096), to = dst.slice(Region.KV, 0, 0, 8192, 4096);
            System.out.println(from.mismatch(to) == -1 ? "ALIVE" : "WRITE DID NOT LAND");
            p.close();
            real.close();
            s.close();
            d.close();
        }
    }

    static RegisteredMemory memory(Arena arena, int seed) {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        MemorySegment kv = arena.allocate(4096 * 4, 4096);
        for (long i = 0; i < kv.byteSize(); i += 8) kv.set(ValueLayout.JAVA_LONG, i, i * 31 + seed);
        a.addKvBuffer(kv, 4096);
        return RegisteredMemory.from(a);
    }

    private static void unchecked(Random r) {
        UcpContext ctx = new UcpContext(new UcpParams().requestRmaFeature());
        UcpWorker w = ctx.newWorker(new UcpWorkerParams());
        byte[] address = new byte[64];
        r.nextBytes(address);
        address[0] = (byte) 0x25; // a version nibble libucp does not know
        ByteBuffer b = ByteBuffer.allocateDirect(address.length).put(address).flip();
        List<UcpEndpoint> eps = new ArrayList<>();
        try {
            eps.add(w.newEndpoint(new UcpEndpointParams().setUcpAddress(b)));
        } catch (RuntimeException e) {
            System.out.println("ERROR " + e.getMessage());
        }
        System.out.println("SURVIVED");
    }
}
