package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.BasicAutomata;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The scalar parts of {@link JsonSchemaAutomaton} that take more than a regex: numbers in a range (decimal digit-range
 * automata, exact for any bound, integer or decimal, as long as it has at most {@link #MAX_BOUND_DIGITS} digits), numbers
 * that are a multiple of a decimal (a residue automaton over the digits), and the string formats. A bounded number is
 * written without an exponent: {@code -?(0|[1-9][0-9]*)(\.[0-9]{1,16})?}, its integer part as long as the bounds need
 * (16 digits where a side is unbounded and its bound is shorter). Pure; callers serialize (as {@link ClientRegex}).
 */
final class SchemaScalars {
    /** Most digits of a bound or of a multipleOf written out ({@code 1e400} is 401). */
    static final int MAX_BOUND_DIGITS = 100;
    /** Largest residue automaton of multipleOf (its integer times the fraction digits it reads, plus 3). */
    static final int MAX_MODULUS_STATES = 10_000;
    /** Most digits of a generated number's integer part where the range leaves it unbounded (as an unbounded integer's). */
    static final int FREE_DIGITS = 16;
    /** Most digits of a generated number's fraction. */
    static final int FRACTION_DIGITS = 16;

    private SchemaScalars() {
    }

    /** A range's side: {@code value} null for none. */
    record Bound(BigDecimal value, boolean exclusive) {
        static final Bound NONE = new Bound(null, false);
    }

    /**
     * The numbers (integers only, or decimals too) in the range and a multiple of {@code multipleOf} (null: any), as JSON
     * texts without an exponent; {@code null} for neither a bound nor a multipleOf.
     */
    static Automaton number(boolean integer, Bound lo, Bound hi, BigDecimal multipleOf) {
        Automaton a = range(integer, lo, hi);
        if (multipleOf != null) a = ClientRegex.product(a, multiple(multipleOf));
        return a;
    }

    private static Automaton range(boolean integer, Bound lo, Bound hi) {
        List<Automaton> parts = new ArrayList<>();
        BigDecimal l = lo.value(), h = hi.value();
        // The non-negative numbers: from the lower bound, or from 0 where it is below.
        if (h == null || h.signum() > 0 || (h.signum() == 0 && !hi.exclusive())) {
            Bound from = l != null && l.signum() >= 0 ? lo : new Bound(BigDecimal.ZERO, false);
            parts.add(magnitude(integer, from, hi));
        }
        // The negative ones, as "-" and their magnitude: -0 is left out (0 is written once).
        if (l == null || l.signum() < 0) {
            Bound from = h != null && h.signum() < 0 ? new Bound(h.negate(), hi.exclusive()) : new Bound(BigDecimal.ZERO, true);
            Bound to = l == null ? Bound.NONE : new Bound(l.negate(), lo.exclusive());
            parts.add(lit("-").concatenate(magnitude(integer, from, to)));
        }
        return ClientRegex.minimal(parts.isEmpty() ? BasicAutomata.makeEmpty() : Automaton.union(parts));
    }

    /** The unsigned numbers m with from ≤ m (or <) ≤ to (or <), from ≥ 0; to's value null: unbounded. */
    private static Automaton magnitude(boolean integer, Bound from, Bound to) {
        BigDecimal a = from.value(), b = to.value();
        if (integer) {
            BigInteger lo = from.exclusive() ? a.setScale(0, RoundingMode.FLOOR).toBigIntegerExact().add(BigInteger.ONE)
                    : a.setScale(0, RoundingMode.CEILING).toBigIntegerExact();
            BigInteger hi = b == null ? null : to.exclusive() ? b.setScale(0, RoundingMode.CEILING).toBigIntegerExact().subtract(BigInteger.ONE)
                    : b.setScale(0, RoundingMode.FLOOR).toBigIntegerExact();
            return integers(lo, hi);
        }
        BigInteger ia = a.setScale(0, RoundingMode.FLOOR).toBigIntegerExact();
        String fa = fraction(a);
        if (b == null) {
            return Automaton.union(List.of(lit(ia.toString()).concatenate(fractionPart(atLeast(fa, from.exclusive()))),
                    integers(ia.add(BigInteger.ONE), null).concatenate(fractionPart(null))));
        }
        BigInteger ib = b.setScale(0, RoundingMode.FLOOR).toBigIntegerExact();
        String fb = fraction(b);
        if (ia.equals(ib)) {
            return lit(ia.toString()).concatenate(fractionPart(ClientRegex.product(atLeast(fa, from.exclusive()), atMost(fb, to.exclusive()))));
        }
        return Automaton.union(List.of(lit(ia.toString()).concatenate(fractionPart(atLeast(fa, from.exclusive()))),
                integers(ia.add(BigInteger.ONE), ib.subtract(BigInteger.ONE)).concatenate(fractionPart(null)),
                lit(ib.toString()).concatenate(fractionPart(atMost(fb, to.exclusive())))));
    }

    /** A non-negative decimal's fraction digits, trailing zeros left out ("" for an integer). */
    private static String fraction(BigDecimal v) {
        BigDecimal f = v.subtract(new BigDecimal(v.toBigInteger())).stripTrailingZeros();
        return f.signum() == 0 ? "" : f.toPlainString().substring(2);
    }

    /**
     * What follows an integer part whose fraction digits {@code digits} accepts (null: any): nothing where it accepts the
     * empty string (the integer itself), else a point and 1 to {@link #FRACTION_DIGITS} digits it accepts.
     */
    private static Automaton fractionPart(Automaton digits) {
        Automaton some = ClientRegex.compile("[0-9]{1," + FRACTION_DIGITS + "}");
        Automaton after = lit(".").concatenate(digits == null ? some : ClientRegex.product(digits, some));
        return digits == null || digits.run("") ? after.optional() : after;
    }

    /** Fraction digit strings whose value (0.digits) is at least (above, if {@code exclusive}) 0.f. */
    private static Automaton atLeast(String f, boolean exclusive) {
        return fractionCompare(f, exclusive, true);
    }

    /** Fraction digit strings whose value is at most (below, if {@code exclusive}) 0.f. */
    private static Automaton atMost(String f, boolean exclusive) {
        return fractionCompare(f, exclusive, false);
    }

    private static Automaton fractionCompare(String f, boolean exclusive, boolean above) {
        // tight[i]: the first i digits equal f's; past: already above (or below) it, any digits follow.
        int n = f.length();
        State[] tight = new State[n + 1];
        for (int i = 0; i <= n; i++) tight[i] = new State();
        State past = new State();
        past.setAccept(true);
        past.addTransition(new Transition('0', '9', past));
        for (int i = 0; i < n; i++) {
            char c = f.charAt(i);
            tight[i].addTransition(new Transition(c, c, tight[i + 1]));
            if (above && c < '9') tight[i].addTransition(new Transition((char) (c + 1), '9', past));
            if (!above && c > '0') tight[i].addTransition(new Transition('0', (char) (c - 1), past));
            // A proper prefix of f (its last digit is not 0) is below it.
            tight[i].setAccept(!above);
        }
        // Equal so far after all of f's digits: zeros keep it equal, another digit puts it above.
        tight[n].setAccept(!exclusive);
        tight[n].addTransition(new Transition('0', '0', tight[n]));
        if (above) tight[n].addTransition(new Transition('1', '9', past));
        Automaton a = new Automaton();
        a.setInitialState(tight[0]);
        a.setDeterministic(true);
        a.reduce();
        return a;
    }

    /** Canonical integers ({@code 0}, {@code [1-9][0-9]*}) from lo to hi (null: {@link #FREE_DIGITS} digits, or lo's). */
    private static Automaton integers(BigInteger lo, BigInteger hi) {
        if (hi != null && hi.compareTo(lo) < 0) return BasicAutomata.makeEmpty();
        String l = lo.toString();
        int la = l.length(), lb = hi == null ? Math.max(FREE_DIGITS, la) : hi.toString().length();
        List<Automaton> parts = new ArrayList<>();
        for (int len = la; len <= lb; len++) {
            parts.add(ofLength(len, len == la ? l : null, hi != null && len == lb ? hi.toString() : null));
        }
        return Automaton.union(parts);
    }

    /** The canonical integers of {@code len} digits from lo to hi (their digits, of that length; null: no bound). */
    private static Automaton ofLength(int len, String lo, String hi) {
        // States by (position, still equal to lo's digits, still equal to hi's).
        Map<Integer, State> states = new HashMap<>();
        State start = state(states, 0, lo != null, hi != null);
        for (int i = 0; i < len; i++) {
            for (int k = 0; k < 4; k++) {
                boolean lt = (k & 2) != 0, ht = (k & 1) != 0;
                State from = states.get(key(i, lt, ht));
                if (from == null) continue;
                char first = i == 0 && len > 1 ? '1' : '0';
                for (char d = first; d <= '9'; d++) {
                    if (lt && d < lo.charAt(i) || ht && d > hi.charAt(i)) continue;
                    from.addTransition(new Transition(d, state(states, i + 1, lt && d == lo.charAt(i), ht && d == hi.charAt(i))));
                }
            }
        }
        for (Map.Entry<Integer, State> e : states.entrySet()) if (e.getKey() / 4 == len) e.getValue().setAccept(true);
        Automaton a = new Automaton();
        a.setInitialState(start);
        a.setDeterministic(true);
        a.reduce();
        return a;
    }

    private static int key(int i, boolean lt, boolean ht) {
        return i * 4 + (lt ? 2 : 0) + (ht ? 1 : 0);
    }

    private static State state(Map<Integer, State> states, int i, boolean lt, boolean ht) {
        return states.computeIfAbsent(key(i, lt, ht), k -> new State());
    }

    /**
     * The numbers {@code -?I(.F)?} that are a multiple of {@code m} (positive): with m = M / 10^k (M an integer), x is one
     * where x·10^k is an integer divisible by M: the residue mod M over the integer digits and the first k fraction digits,
     * any further fraction digit 0 (the sign changes nothing).
     */
    static Automaton multiple(BigDecimal m) {
        BigDecimal s = m.stripTrailingZeros();
        int k = Math.max(0, s.scale());
        BigInteger big = s.movePointRight(k).toBigIntegerExact();
        if (residueStates(m) > MAX_MODULUS_STATES) throw new IllegalArgumentException("multipleOf " + m.toPlainString() + " is too large");
        int mod = big.intValue(), last = Math.max(k, 1);
        // ip[r]: in the integer part, residue r; fp[j][r]: j fraction digits read (at the last, only zeros may follow).
        State start = new State(), sign = new State(), lead0 = new State();
        State[] ip = new State[mod], dot = new State[mod];
        State[][] fp = new State[last + 1][mod];
        for (int r = 0; r < mod; r++) {
            ip[r] = new State();
            dot[r] = new State();
            for (int j = 1; j <= last; j++) fp[j][r] = new State();
        }
        start.addTransition(new Transition('-', sign));
        for (State from : new State[]{start, sign}) {
            from.addTransition(new Transition('0', lead0)); // the integer part 0, no digit after it
            for (int d = 1; d <= 9; d++) from.addTransition(new Transition((char) ('0' + d), ip[d % mod]));
        }
        lead0.setAccept(true);
        lead0.addTransition(new Transition('.', dot[0]));
        for (int r = 0; r < mod; r++) {
            for (int d = 0; d <= 9; d++) ip[r].addTransition(new Transition((char) ('0' + d), ip[(r * 10 + d) % mod]));
            ip[r].setAccept(accepts(r, k, 0, mod));
            ip[r].addTransition(new Transition('.', dot[r]));
            for (int j = 0; j <= last; j++) {
                State from = j == 0 ? dot[r] : fp[j][r];
                if (j < k) {
                    for (int d = 0; d <= 9; d++) from.addTransition(new Transition((char) ('0' + d), fp[j + 1][(r * 10 + d) % mod]));
                } else {
                    from.addTransition(new Transition('0', fp[Math.min(j + 1, last)][r]));
                }
                if (j > 0) fp[j][r].setAccept(accepts(r, k, Math.min(j, k), mod));
            }
        }
        Automaton a = new Automaton();
        a.setInitialState(start);
        a.setDeterministic(true);
        a.reduce();
        return a;
    }

    /** The states of {@link #multiple}'s automaton: M × (k + 3) for m = M / 10^k (saturating). */
    static long residueStates(BigDecimal m) {
        BigDecimal s = m.stripTrailingZeros();
        int k = Math.max(0, s.scale());
        BigInteger big = s.movePointRight(k).toBigIntegerExact();
        return big.bitLength() > 40 ? Long.MAX_VALUE : big.longValue() * (k + 3);
    }

    /** Whether residue r after j of the k fraction digits is a multiple: r·10^(k-j) ≡ 0 (mod M). */
    private static boolean accepts(int r, int k, int j, int mod) {
        return BigInteger.valueOf(r).multiply(BigInteger.TEN.pow(k - j)).mod(BigInteger.valueOf(mod)).signum() == 0;
    }

    private static final String DIGITS9 = "[0-9]{1,9}";
    /** Years 0001-9999 (0000, RFC 3339's, is no year of Python's datetime, which some validators use). */
    private static final String YEAR = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
    private static final String DATE = YEAR + "-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
            // 29 February of a leap year: divisible by 4 but not by 100, or by 400 (not 0000)
            + "|([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29";
    private static final String TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+\\-]([01][0-9]|2[0-3]):[0-5][0-9])";
    private static final String OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    private static final String HEX = "[0-9a-fA-F]";
    /** A local part's characters: letters, digits and _ % + - (RFC 5322's rarer punctuation left out: each splits the alphabet). */
    private static final String ATOM = "[A-Za-z0-9_%+\\-]+";
    /** A host label of at most 24 characters (DNS allows 63: longer ones cost automaton states, a counter each). */
    private static final String LABEL = "[A-Za-z0-9]([A-Za-z0-9\\-]{0,22}[A-Za-z0-9])?";
    private static final String DUR_TIME = "T(" + DIGITS9 + "H(" + DIGITS9 + "M(" + DIGITS9 + "S)?)?|" + DIGITS9 + "M(" + DIGITS9 + "S)?|" + DIGITS9 + "S)";
    private static final String DUR_DATE = "(" + DIGITS9 + "D|" + DIGITS9 + "M(" + DIGITS9 + "D)?|" + DIGITS9 + "Y(" + DIGITS9 + "M(" + DIGITS9 + "D)?)?)";

    /** The string formats supported, by name. */
    static final List<String> FORMATS = List.of("date", "time", "date-time", "duration", "uuid", "ipv4", "email");

    /**
     * A string format's values (the string's characters, none of which JSON escapes), or null for a format not supported:
     * {@code date} RFC 3339's full-date of a year 0001-9999, each month's length and 29 February of leap years only; {@code time} its
     * full-time, the offset required ({@code Z} or {@code ±hh:mm}), no leap second, at most 9 fraction digits;
     * {@code date-time} the two joined by {@code T}; {@code duration} RFC 3339's (ISO 8601) duration, at most 9 digits a
     * component; {@code uuid} 8-4-4-4-12 hex digits; {@code ipv4} a dotted quad of 0-255 without leading zeros;
     * {@code email} a practical subset: a local part of letters, digits and {@code _ % + -} in dot-separated runs, 32
     * characters at most, {@code @}, two or more dot-separated host labels (letters, digits, inner hyphens; 24 characters at
     * most each), the last of 2 to 12 letters: no quoted local part, no other punctuation in it, no address
     * literal, no non-ASCII (internationalized) address. Upper-case {@code T} and {@code Z} only.
     */
    static Automaton format(String name) {
        return switch (name) {
            case "date" -> ClientRegex.compile(DATE);
            case "time" -> ClientRegex.compile(TIME);
            case "date-time" -> ClientRegex.compile("(" + DATE + ")T" + TIME);
            case "duration" -> ClientRegex.compile("P(" + DUR_DATE + "(" + DUR_TIME + ")?|" + DUR_TIME + "|" + DIGITS9 + "W)");
            case "uuid" -> ClientRegex.compile(HEX + "{8}-" + HEX + "{4}-" + HEX + "{4}-" + HEX + "{4}-" + HEX + "{12}");
            case "ipv4" -> ClientRegex.compile(OCTET + "(\\." + OCTET + "){3}");
            case "email" -> ClientRegex.product(ClientRegex.compile(ATOM + "(\\." + ATOM + ")*@(" + LABEL + "\\.)+[A-Za-z]{2,12}"),
                    ClientRegex.compile("[^@]{1,32}@[\\s\\S]*"));
            default -> null;
        };
    }

    private static Automaton lit(String s) {
        return BasicAutomata.makeString(s);
    }
}
