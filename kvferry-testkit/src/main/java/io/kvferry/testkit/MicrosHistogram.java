package io.kvferry.testkit;

import com.fasterxml.jackson.annotation.JsonCreator;
import com.fasterxml.jackson.annotation.JsonValue;
import org.HdrHistogram.Histogram;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Base64;
import java.util.zip.DataFormatException;

/**
 * A driver's per-request durations in microseconds (HdrHistogram, 3 significant digits): recording
 * one allocates nothing, and a run's memory and report size do not grow with its requests (a list
 * per request held ~20 bytes per value per figure: GBs, and a role's JSON line as long, for a soak
 * run of 10^8 requests). In a role's JSON report it travels as HdrHistogram's compressed encoding,
 * base64.
 *
 * <p>One owner: the driver thread records into it; it is read once the driver has finished.
 */
public final class MicrosHistogram {
    private final Histogram histogram;

    public MicrosHistogram() {
        this(new Histogram(3));
    }

    private MicrosHistogram(Histogram histogram) {
        this.histogram = histogram;
    }

    /** Records one duration; a negative one (clock steps) counts as 0. */
    public void record(long micros) {
        histogram.recordValue(Math.max(0, micros));
    }

    public long count() {
        return histogram.getTotalCount();
    }

    /** Adds these values to {@code into} (how reports of several ranks are merged). */
    public void addTo(Histogram into) {
        into.add(histogram);
    }

    /** The value at this percentile (0–100), within 3 significant digits; 0 when empty. */
    public long valueAtPercentile(double percentile) {
        return histogram.getValueAtPercentile(percentile);
    }

    /** Same recorded values (what a report's JSON round trip must keep). */
    @Override
    public boolean equals(Object o) {
        return o instanceof MicrosHistogram m && histogram.equals(m.histogram);
    }

    @Override
    public int hashCode() {
        return Long.hashCode(histogram.getTotalCount()) * 31 + Long.hashCode(histogram.getMaxValue());
    }

    @JsonValue
    public String encoded() {
        ByteBuffer buf = ByteBuffer.allocate(histogram.getNeededByteBufferCapacity());
        int n = histogram.encodeIntoCompressedByteBuffer(buf);
        return Base64.getEncoder().encodeToString(Arrays.copyOf(buf.array(), n));
    }

    /** Reads a report's histogram back; a value that is not one is refused naming what is wrong. */
    @JsonCreator
    public static MicrosHistogram decode(String encoded) {
        if (encoded == null || encoded.isEmpty()) return new MicrosHistogram();
        try {
            byte[] bytes = Base64.getDecoder().decode(encoded);
            return new MicrosHistogram(Histogram.decodeFromCompressedByteBuffer(ByteBuffer.wrap(bytes), 0));
        } catch (IllegalArgumentException | DataFormatException | BufferUnderflowException e) {
            throw new IllegalArgumentException("not an encoded latency histogram (" + e + ")", e);
        }
    }
}
