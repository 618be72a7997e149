package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.TestModels;
import io.kvferry.engine.model.HostileGrammars;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.Tokenizer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Structured outputs across PD: the prefill samples the first token under the constraint and the decode the rest, each
 * deriving the automaton's state from the tokens alone; the answer is a colocated run's token for token (greedy and
 * seeded, with other rules beside it), over tcp at TP1, with a TP change and with PP; and a finished answer (stop) matches
 * the regex whole (java.util.regex), a cut one (length) is a prefix of a match.
 */
class ConstrainedDisaggregatedTest {
    static Tokenizer tokenizer;
    static OutputConstraint.Compiler compiler;
    static EngineSpec base;

    @BeforeAll
    static void load() throws Exception {
        TestModels.requireStories();
        ModelFiles.Loaded m = ModelFiles.load(null, null);
        tokenizer = m.tokenizer();
        compiler = new OutputConstraint.Compiler(tokenizer);
        base = new EngineSpec(m.weights(), 1, 1, 16, 128, 8, 11);
    }

    record Layout(String name, int ptp, int ppp, int dtp, int dpp) {
        @Override
        public String toString() {
            return name;
        }
    }

    static List<Layout> layouts() {
        return List.of(new Layout("TP1->TP1", 1, 1, 1, 1), new Layout("P2->D1", 2, 1, 1, 1), new Layout("PP2->D2", 1, 2, 2, 1));
    }

    static final String[] REGEXES = {
            "(Once|Tom|Lily) (was|had) [a-z]+( [a-z]+){2,5}\\.",
            "[0-9]{3}-[0-9]{4}",
            "(yes|no|maybe)",
            "\\{\"name\": ?\"[A-Za-z ]{1,12}\", ?\"age\": ?[0-9]{1,2}\\}",
    };

    @ParameterizedTest(name = "{0} over tcp")
    @MethodSource("layouts")
    @Timeout(180)
    void constrainedAnswersMatchTheRegexAndEqualColocated(Layout l) throws Exception {
        int[] prompt = tokenizer.encode("Once upon a time", true, false);
        SamplingRules penalties = SamplingRules.of(0.5f, 0f, 1.1f, 0f, Map.of(), 2, false, new int[0]);
        List<Sampling> samplings = new ArrayList<>();
        List<String> regexes = new ArrayList<>();
        for (String r : REGEXES) {
            OutputConstraint c = compiler.regex(r);
            regexes.add(r);
            samplings.add(new Sampling(0f, 1f, 0, -1, SamplingRules.NONE.withConstraint(c)));
            regexes.add(r);
            samplings.add(new Sampling(0.9f, 0.95f, 21, -1, SamplingRules.NONE.withConstraint(c)));
            regexes.add(r);
            samplings.add(new Sampling(1.2f, 1f, 5, -1, penalties.withConstraint(c)));
        }
        int max = 40;
        List<Generation> expected = new ArrayList<>();
        try (ColocatedEngine c = new ColocatedEngine(base.withMaxRequests(1))) {
            for (Sampling s : samplings) expected.add(c.generate(prompt, max, s));
        }
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "constrained-test")) {
            TransferSpec t = new TransferSpec("tcp", "127.0.0.1:" + registry.port(), "constrained-test", "127.0.0.1");
            try (PrefillEngine p = new PrefillEngine(base.withParallelism(l.ptp(), l.ppp()), t);
                 DecodeEngine d = new DecodeEngine(base.withParallelism(l.dtp(), l.dpp()), t)) {
                List<CompletableFuture<Generation>> gens = new ArrayList<>();
                List<CompletableFuture<PrefillEngine.Result>> pres = new ArrayList<>();
                for (int i = 0; i < samplings.size(); i++) {
                    long room = 9_000 + i;
                    pres.add(p.submit(new PrefillEngine.Request(room, prompt, samplings.get(i))));
                    gens.add(DisaggregatedTest.decode(d, room, prompt, max, samplings.get(i)));
                }
                int stops = 0;
                for (int i = 0; i < samplings.size(); i++) {
                    Generation g = gens.get(i).get(60, TimeUnit.SECONDS);
                    pres.get(i).get(30, TimeUnit.SECONDS);
                    String what = l + ", " + regexes.get(i) + ", " + samplings.get(i);
                    assertArrayEquals(expected.get(i).tokens(), g.tokens(), what);
                    assertEquals(expected.get(i).finishReason(), g.finishReason(), what);
                    String text = tokenizer.decode(g.tokens());
                    if (g.finishReason().equals("stop")) {
                        stops++;
                        // The model's end (EOS, or BOS: llama2.c's), allowed only where the output is a whole match.
                        assertTrue(Tokenizer.endsSequence(g.tokens()[g.tokens().length - 1]), what + ": " + Arrays.toString(g.tokens()));
                        assertTrue(Pattern.compile(regexes.get(i)).matcher(text).matches(), what + ": '" + text + "'");
                    } else {
                        assertEquals(max, g.tokens().length, what);
                        Matcher m = Pattern.compile(regexes.get(i)).matcher(text);
                        assertTrue(m.matches() || m.hitEnd(), what + ": '" + text + "' is a prefix of a match");
                    }
                }
                assertTrue(stops >= samplings.size() / 2, "most constrained answers finish whole: " + stops + " of " + samplings.size());
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS), "prefill pages not returned");
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS), "decode pages not returned");
            }
        }
    }

    /** Recursive grammars (GBNF): a left-recursive list with nested groups, balanced parentheses, a small JSON object. */
    static final String[] GRAMMARS = {
            "root ::= name \" \" verb \" \" things \".\"\nname ::= \"Lily\" | \"Tom\"\nverb ::= \"saw\" | \"had\"\n"
                    + "things ::= things \" and \" thing | thing\nthing ::= (\"a \" | \"the \") [a-z]+ | \"(\" things \")\"",
            "root ::= \"(\" root \")\" root | \"x\"",
            "root ::= obj\nobj ::= \"{\" (pair (\", \" pair)*)? \"}\"\npair ::= \"\\\"\" [a-z]{1,8} \"\\\": \" (obj | [0-9]{1,3})",
    };

    /**
     * Grammars across PD: each answer a colocated run's token for token, a whole sentence of its grammar when it stops and
     * a prefix of one when cut; in the same batch, a grammar that passes the recogniser's bound at the first token (the
     * prefill's mask) and one that passes it later (the decode's) fail their own requests alone, naming the grammar,
     * and every page comes back.
     */
    @ParameterizedTest(name = "{0} over tcp")
    @MethodSource("layouts")
    @Timeout(180)
    void grammarAnswersAreSentencesAndEqualColocatedAndABoundFailsOnlyItsRequest(Layout l) throws Exception {
        int[] prompt = tokenizer.encode("Once upon a time", true, false);
        List<Sampling> samplings = new ArrayList<>();
        List<OutputConstraint> constraints = new ArrayList<>();
        for (String g : GRAMMARS) {
            OutputConstraint c = compiler.ebnf(g);
            constraints.add(c);
            samplings.add(new Sampling(0f, 1f, 0, -1, SamplingRules.NONE.withConstraint(c)));
            constraints.add(c);
            samplings.add(new Sampling(0.9f, 0.95f, 21, -1, SamplingRules.NONE.withConstraint(c)));
        }
        int max = 40;
        List<Generation> expected = new ArrayList<>();
        try (ColocatedEngine c = new ColocatedEngine(base.withMaxRequests(1))) {
            for (Sampling s : samplings) expected.add(c.generate(prompt, max, s));
        }
        SamplingRules ignoreEos = SamplingRules.of(0, 0, 1, 0, Map.of(), 0, true, new int[0]);
        Sampling later = new Sampling(0f, 1f, 0, -1, ignoreEos.withConstraint(compiler.ebnf(HostileGrammars.ambiguous())));
        Sampling atOnce = new Sampling(0f, 1f, 0, -1, ignoreEos.withConstraint(compiler.ebnf(HostileGrammars.ambiguousAtOnce())));
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "constrained-grammar-test")) {
            TransferSpec t = new TransferSpec("tcp", "127.0.0.1:" + registry.port(), "constrained-grammar-test", "127.0.0.1");
            try (PrefillEngine p = new PrefillEngine(base.withParallelism(l.ptp(), l.ppp()), t);
                 DecodeEngine d = new DecodeEngine(base.withParallelism(l.dtp(), l.dpp()), t)) {
                List<CompletableFuture<Generation>> gens = new ArrayList<>();
                List<CompletableFuture<PrefillEngine.Result>> pres = new ArrayList<>();
                for (int i = 0; i < samplings.size(); i++) {
                    pres.add(p.submit(new PrefillEngine.Request(9_500 + i, prompt, samplings.get(i))));
                    gens.add(DisaggregatedTest.decode(d, 9_500 + i, prompt, max, samplings.get(i)));
                }
                CompletableFuture<PrefillEngine.Result> laterPre = p.submit(new PrefillEngine.Request(9_600, prompt, later));
                CompletableFuture<Generation> laterGen = DisaggregatedTest.decode(d, 9_600, prompt, 150, later);
                CompletableFuture<PrefillEngine.Result> atOncePre = p.submit(new PrefillEngine.Request(9_601, prompt, atOnce));
                CompletableFuture<Generation> atOnceGen = DisaggregatedTest.decode(d, 9_601, prompt, 150, atOnce);
                int stops = 0;
                for (int i = 0; i < samplings.size(); i++) {
                    Generation g = gens.get(i).get(60, TimeUnit.SECONDS);
                    pres.get(i).get(30, TimeUnit.SECONDS);
                    String what = l + ", " + constraints.get(i) + ", " + samplings.get(i);
                    assertArrayEquals(expected.get(i).tokens(), g.tokens(), what);
                    assertEquals(expected.get(i).finishReason(), g.finishReason(), what);
                    String text = tokenizer.decode(g.tokens());
                    if (g.finishReason().equals("stop")) {
                        stops++;
                        assertTrue(constraints.get(i).matches(text), what + ": '" + text + "' is a whole sentence");
                    } else {
                        assertTrue(constraints.get(i).startsMatch(text), what + ": '" + text + "' is a prefix of a sentence");
                    }
                }
                assertTrue(stops >= 2, "some grammar answers finish whole: " + stops);
                // The decode's bound: the prefill's part went through, the decode ends the request with the error.
                laterPre.get(30, TimeUnit.SECONDS);
                ExecutionException e = assertThrows(ExecutionException.class, () -> laterGen.get(60, TimeUnit.SECONDS));
                assertTrue(e.getCause().getMessage().contains("the grammar (ebnf=root ::= s") && e.getCause().getMessage().contains("passed a bound"),
                        e.getCause().getMessage());
                // The client's error, its field named (the decode server answers it as invalid_request_error, the router a 400).
                assertInstanceOf(IllegalArgumentException.class, e.getCause());
                assertTrue(e.getCause().getMessage().startsWith(OutputConstraint.Exceeded.PARAM + ": "), e.getCause().getMessage());
                // The prefill's bound (its first token's mask): the prefill fails it with the error, the decode hears the abort.
                ExecutionException pe = assertThrows(ExecutionException.class, () -> atOncePre.get(30, TimeUnit.SECONDS));
                assertInstanceOf(OutputConstraint.Exceeded.class, pe.getCause());
                assertTrue(pe.getCause().getMessage().contains("at output token 0"), pe.getCause().getMessage());
                assertThrows(ExecutionException.class, () -> atOnceGen.get(60, TimeUnit.SECONDS));
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS), "prefill pages not returned");
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS), "decode pages not returned");
                assertEquals(null, p.failure(), "the prefill's scheduler goes on");
                assertEquals(null, d.failure(), "the decode's scheduler goes on");
            }
        }
    }
}
