package io.kvferry.testkit;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.JsonProperty;


/**
 * The benchmark suite's per-request and per-window figures of one rank driver (measured requests
 * only; warm-up and probe requests are left out), the per-request ones as histograms. Phases, from what the public API shows:
 *
 * @param requestMicros  decode: arrival → Success seen by the scheduler's poll. Arrival is the Poisson
 *                       arrival time with {@code --rate} (waiting for a free slot counts), else when the
 *                       scheduler created the receiver
 * @param prepareMicros  decode: {@code KVReceiver.init} called → {@code sendMetadata} returned (prefill
 *                       lookup, handshake to WaitingForInput, the metadata message)
 * @param postMicros     prefill: time inside {@code KVSender.init} and every {@code KVSender.send} of the request
 * @param transferMicros prefill: the last {@code send} returned → Success seen by the scheduler's poll
 * @param cpu            CPU time over the driver's measured window ({@link CpuMeter}); null if none was measured
 * @param roomMemory     the room-memory probe's result on the driver that reports it; null otherwise
 */
@JsonInclude(JsonInclude.Include.NON_NULL)
public record RoleFigures(@JsonProperty("request_us") MicrosHistogram requestMicros,
                          @JsonProperty("prepare_us") MicrosHistogram prepareMicros,
                          @JsonProperty("post_us") MicrosHistogram postMicros,
                          @JsonProperty("transfer_us") MicrosHistogram transferMicros,
                          CpuMeter.Window cpu,
                          @JsonProperty("room_memory") RoomMemoryProbe.Result roomMemory) {
    /** No figures: empty histograms of its own (a histogram is recorded into by one driver, never shared). */
    public static RoleFigures none() {
        return new RoleFigures(null, null, null, null, null, null);
    }

    public RoleFigures {
        requestMicros = requestMicros == null ? new MicrosHistogram() : requestMicros;
        prepareMicros = prepareMicros == null ? new MicrosHistogram() : prepareMicros;
        postMicros = postMicros == null ? new MicrosHistogram() : postMicros;
        transferMicros = transferMicros == null ? new MicrosHistogram() : transferMicros;
    }

    public RoleFigures withRoomMemory(RoomMemoryProbe.Result r) {
        return new RoleFigures(requestMicros, prepareMicros, postMicros, transferMicros, cpu, r);
    }
}
