package io.kvferry.engine.model;

/** Grammars that compile but pass a run-time bound of the recogniser ({@link Earley#MAX_ITEMS}, {@link Earley#MAX_WORK}). */
public final class HostileGrammars {
    private HostileGrammars() {
    }

    /**
     * s ::= "a" | s s | s s s … (ten of them), that one ten times: every split of "a…a" is a parse, many times over; the
     * steps of one token's new work (its extension of the chart; the mask, precomputed ({@link GrammarMaskCache}), checks
     * no token against the chart) pass the bound at output token 103 (the decode's mask). Five times passed it at 125 when
     * the mask walked the whole trie against the chart at each step (190 with the precomputed mask), at 53 when the
     * replay counted.
     */
    public static String ambiguous() {
        StringBuilder g = new StringBuilder("root ::= s\ns ::= \"a\" | s s");
        for (int i = 0; i < 10; i++) g.append(" | s s s s s s s s s s");
        return g.toString();
    }

    /**
     * 1,000 nullable rules in a row: compiles (its first Earley set is within the bounds; its mask is not precomputed,
     * {@link GrammarMaskCache} passing its bound on steps), but the first token's mask (the prefill's) passes the bound on
     * steps (its first set alone takes 1.5M).
     */
    public static String ambiguousAtOnce() {
        StringBuilder g = new StringBuilder("root ::=");
        for (int i = 0; i < 1_000; i++) g.append(" e").append(i);
        for (int i = 0; i < 1_000; i++) g.append("\ne").append(i).append(" ::= \"a\" | \"\"");
        return g.toString();
    }
}
