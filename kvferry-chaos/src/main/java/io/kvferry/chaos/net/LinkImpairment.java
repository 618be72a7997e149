package io.kvferry.chaos.net;

import java.util.Locale;

/**
 * What a chaos link does to packets, in {@code tc netem}'s words: {@code delay TIME} (each
 * direction, so the round trip is twice that), {@code loss PERCENT%} (each packet, each direction),
 * {@code rate RATE} (each direction). {@code none} (or empty) leaves the link as it is. The same
 * text is handed to netem where the kernel has it and played by {@link LinkEmulator} where it does not.
 *
 * @param delayNanos     one-way delay added to every packet
 * @param lossFraction   chance each packet is dropped, in [0, 1)
 * @param bytesPerSecond 0 = unlimited
 * @param spec           the text it was parsed from, normalised
 */
public record LinkImpairment(long delayNanos, double lossFraction, long bytesPerSecond, String spec) {
    /** The link: 1 ms round trip, 0.1 % loss each way. */
    public static final String DEFAULT_SPEC = "delay 0.5ms loss 0.1%";
    public static final LinkImpairment NONE = new LinkImpairment(0, 0, 0, "none");

    public LinkImpairment {
        if (delayNanos < 0 || delayNanos > 10_000_000_000L) throw new IllegalArgumentException("delay must be in [0, 10s]");
        if (!(lossFraction >= 0 && lossFraction < 1)) throw new IllegalArgumentException("loss must be in [0%, 100%)");
        if (bytesPerSecond < 0) throw new IllegalArgumentException("rate must be >= 0");
    }

    public boolean isNone() {
        return delayNanos == 0 && lossFraction == 0 && bytesPerSecond == 0;
    }

    /** Parses a netem-style spec; anything it does not know fails naming the word and what is supported. */
    public static LinkImpairment parse(String text) {
        String t = text == null ? "" : text.trim().toLowerCase(Locale.ROOT);
        if (t.isEmpty() || t.equals("none")) return NONE;
        String[] w = t.split("\\s+");
        long delay = 0, rate = 0;
        double loss = 0;
        for (int i = 0; i < w.length; i++) {
            String key = w[i];
            if (i + 1 >= w.length) throw bad(text, "'" + key + "' needs a value");
            String v = w[++i];
            switch (key) {
                case "delay" -> delay = parseTime(text, v);
                case "loss" -> loss = parsePercent(text, v);
                case "rate" -> rate = parseRate(text, v);
                default -> throw bad(text, "unknown '" + key + "'");
            }
        }
        try {
            return new LinkImpairment(delay, loss, rate, t);
        } catch (IllegalArgumentException e) {
            throw bad(text, e.getMessage());
        }
    }

    private static IllegalArgumentException bad(String text, String why) {
        return new IllegalArgumentException("--netem '" + text + "': " + why
                + " (supported: delay TIME[us|ms|s], loss PERCENT%, rate RATE[bit|kbit|mbit|gbit|bps|kbps|mbps|gbps], or none)");
    }

    private static long parseTime(String text, String v) {
        String[][] units = {{"us", "1000"}, {"ms", "1000000"}, {"s", "1000000000"}};
        for (String[] u : units) {
            if (v.endsWith(u[0])) return Math.round(number(text, v.substring(0, v.length() - u[0].length())) * Long.parseLong(u[1]));
        }
        throw bad(text, "delay '" + v + "' needs a unit");
    }

    private static double parsePercent(String text, String v) {
        if (!v.endsWith("%")) throw bad(text, "loss '" + v + "' must be a percentage like 0.1%");
        return number(text, v.substring(0, v.length() - 1)) / 100.0;
    }

    private static long parseRate(String text, String v) {
        // netem: "bit" units are bits per second, "bps" units bytes per second.
        String[][] units = {{"kbit", "125"}, {"mbit", "125000"}, {"gbit", "125000000"}, {"bit", "0.125"},
                {"kbps", "1000"}, {"mbps", "1000000"}, {"gbps", "1000000000"}, {"bps", "1"}};
        for (String[] u : units) {
            if (v.endsWith(u[0])) {
                return Math.round(number(text, v.substring(0, v.length() - u[0].length())) * Double.parseDouble(u[1]));
            }
        }
        throw bad(text, "rate '" + v + "' needs a unit");
    }

    private static double number(String text, String v) {
        try {
            double d = Double.parseDouble(v);
            if (!Double.isFinite(d) || d < 0) throw new NumberFormatException();
            return d;
        } catch (NumberFormatException e) {
            throw bad(text, "'" + v + "' is not a non-negative number");
        }
    }
}
