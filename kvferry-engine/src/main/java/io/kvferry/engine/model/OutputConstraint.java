package io.kvferry.engine.model;

import dk.brics.automaton.Automaton;
import dk.brics.automaton.RunAutomaton;
import dk.brics.automaton.State;
import dk.brics.automaton.Transition;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.LongAdder;

/**
 * A request's structured output (constrained decoding): the language its output must belong to, as a deterministic
 * automaton over the output's characters, and the vocabulary's token texts, so that before each sampling step the tokens
 * whose text would take the output outside the language are masked ({@link #mask}). The state is a pure function of the
 * output so far (its tokens' texts run through the automaton from the start), as {@link SamplingRules} are: the request
 * keeps it between its steps ({@link Progress}: extended by the last token's text, so a step's work does not grow with
 * the output) and rebuilds it by replay where it has none (the decode's first step), so the prefill (the first token)
 * and the decode (the rest) mask alike with no state handed over, and the answer equals a colocated run's token for
 * token. Compiled once per spec ({@link Compiler}: a bounded cache); immutable, so shared by requests.
 *
 * <p>Two languages behind the one {@link #mask}: a DFA (regex, JSON schema, tool calls: dk.brics's automaton, its state an
 * int, each token's text run from it) or a grammar's exact context-free language ({@link Kind#EBNF}: an {@link EbnfGrammar}
 * read by an {@link Earley} recognizer, its state the chart of Earley sets after the output's characters; the mask is
 * precomputed per Earley item at compile time ({@link GrammarMaskCache}), the tokens whose fate depends on the chart
 * checked against it at each step, else (a grammar past the precomputation's bounds) the tokens' texts are checked against
 * it in one walk of their trie); either state kept in the request's {@link Progress}. A
 * grammar's run-time work is bounded ({@link Earley#MAX_ITEMS}, {@link Earley#MAX_WORK} a token's new work,
 * {@link Earley#MAX_CHART_ITEMS}): a request past a bound fails with {@link Exceeded}, naming its grammar.
 *
 * <p>Travels as its {@link #kind} ({@code regex}, {@code json_schema}, {@code ebnf}: SGLang's sampling parameters;
 * {@code tool_calls}: kvferry's, the router's to the engines) and {@link #source}.
 * Token texts: a text piece counts as its characters when it decodes as whole UTF-8 characters; a byte-fallback piece
 * ({@code <0xHH>}) counts as its character when the byte is ASCII; any other byte piece, a piece that is part of a
 * character, and the special pieces (unknown, BOS, EOS) are never generated under a constraint, except the end: EOS (and
 * BOS, llama2.c's end, and a request's stop token ids, whose text is left out) only where the output so far is a whole
 * match. Where no token can continue (the language admits no further character, or none the vocabulary spells), only
 * the end tokens the request's rules allow remain, and EOS alone where they allow none ({@code ignore_eos}, before
 * {@code min_tokens}): the answer ends there (docs/SERVING.md, "Structured outputs").
 */
public final class OutputConstraint {
    /** Which SGLang sampling parameter carries it. */
    public enum Kind {
        REGEX("regex"), JSON_SCHEMA("json_schema"),
        /** Tool calls ({@link ToolCalls#language}): the router's, never a client's on {@code /generate}. */
        TOOL_CALLS("tool_calls"),
        /** A grammar (GBNF: {@link EbnfGrammar}): SGLang's {@code ebnf}, vLLM's {@code guided_grammar}. */
        EBNF("ebnf");

        public final String param;

        Kind(String param) {
            this.param = param;
        }
    }

    private final Kind kind;
    private final String source;
    private final RunAutomaton run;
    /** Whether a state can still reach an accepting one (else a token that leads there is masked). */
    private final boolean[] live;
    /** Whether a state has a next character on the way to a match. */
    private final boolean[] continues;
    private final TokenTexts texts;
    /** The grammar's recognizer ({@link Kind#EBNF}; then the DFA's fields above are null), else null. */
    private final Earley grammar;
    /** The grammar's mask precomputed per item ({@link GrammarMaskCache}); null: a DFA, or a grammar past its bounds (the full walk). */
    private final GrammarMaskCache maskCache;

    /**
     * A request whose grammar passed a run-time bound of its recognizer ({@link Earley#MAX_ITEMS} items in one Earley set,
     * {@link Earley#MAX_WORK} steps for one token's new work, {@link Earley#MAX_CHART_ITEMS} items in its chart): the request ends with this error, its grammar named,
     * as the client's error (the engines answer it as an {@code invalid_request_error} naming {@link #PARAM}, the router
     * a 400 naming the field as the client did, or that error event where its stream began); no other request is touched.
     */
    public static final class Exceeded extends RuntimeException {
        /**
         * The field at fault as the engines name it (their {@code sampling_params}): the client's error, a 400 where no
         * stream has begun (the router names the field as the client did).
         */
        public static final String PARAM = "sampling_params.ebnf";

        Exceeded(String message) {
            super(message);
        }
    }

    /** Most entries of a compiled table (states × character classes: 4 bytes each), so 64 cached constraints stay bounded. */
    static final long MAX_TABLE = 4_000_000;

    /** The tokens {@link Tokenizer#endsSequence} names (BOS, EOS): a grammar's mask decides them by the request's rules. */
    static final int[] SEQUENCE_ENDS = {Tokenizer.BOS, Tokenizer.EOS};

    private OutputConstraint(Kind kind, String source, Automaton a, TokenTexts texts) {
        this.kind = kind;
        this.source = source;
        TreeSet<Integer> bounds = new TreeSet<>();
        for (State st : a.getStates()) {
            for (Transition t : st.getTransitions()) {
                bounds.add((int) t.getMin());
                bounds.add(t.getMax() + 1);
            }
        }
        if ((long) a.getNumberOfStates() * (bounds.size() + 1) > MAX_TABLE) {
            throw new ClientRegex.TooComplex("is too complex: " + a.getNumberOfStates() + " states × " + (bounds.size() + 1)
                    + " character classes is over " + MAX_TABLE + " table entries");
        }
        ClientRegex.checkDeadline();
        this.run = new RunAutomaton(a);
        this.texts = texts;
        this.grammar = null;
        this.maskCache = null;
        int n = run.getSize();
        char[] points = run.getCharIntervals();
        live = new boolean[n];
        // Co-reachability by a backward search over the transitions (states x intervals once; a fixed point over the
        // states took a round per state of the longest path to an accept: x{19968} took seconds).
        int[] predCount = new int[n + 1];
        int[] dest = new int[n * points.length];
        for (int s = 0; s < n; s++) {
            for (int k = 0; k < points.length; k++) {
                int t = run.step(s, points[k]);
                dest[s * points.length + k] = t;
                if (t >= 0) predCount[t + 1]++;
            }
        }
        for (int s = 0; s < n; s++) predCount[s + 1] += predCount[s];
        int[] preds = new int[predCount[n]];
        int[] fill = predCount.clone();
        for (int i = 0; i < dest.length; i++) {
            if (dest[i] >= 0) preds[fill[dest[i]]++] = i / points.length;
        }
        int[] queue = new int[n];
        int head = 0, tail = 0;
        for (int s = 0; s < n; s++) {
            if (run.isAccept(s)) {
                live[s] = true;
                queue[tail++] = s;
            }
        }
        while (head < tail) {
            int t = queue[head++];
            for (int i = predCount[t]; i < predCount[t + 1]; i++) {
                if (!live[preds[i]]) {
                    live[preds[i]] = true;
                    queue[tail++] = preds[i];
                }
            }
        }
        continues = new boolean[n];
        for (int s = 0; s < n; s++) {
            for (char c : points) {
                int t = run.step(s, c);
                if (t >= 0 && live[t]) {
                    continues[s] = true;
                    break;
                }
            }
        }
        if (!live[run.getInitialState()]) throw new IllegalArgumentException("matches no text at all");
    }

    /**
     * A grammar's constraint ({@link Kind#EBNF}, or a recursive schema's {@link Kind#JSON_SCHEMA}:
     * {@link JsonSchemaAutomaton#language}); its first Earley set within the bounds, else refused as too complex.
     */
    private OutputConstraint(Kind kind, String source, EbnfGrammar g, TokenTexts texts) {
        this.kind = kind;
        this.source = source;
        this.texts = texts;
        this.grammar = new Earley(g);
        this.run = null;
        this.live = null;
        this.continues = null;
        try {
            grammar.start(new Earley.Budget());
        } catch (Earley.Over e) {
            throw new ClientRegex.TooComplex("is too complex: its first Earley set has " + e.getMessage());
        }
        this.maskCache = GrammarMaskCache.build(grammar, texts.trie(), MAX_TABLE - g.symbols(), GrammarMaskCache.MAX_WORK);
    }

    /** Whether the grammar's mask is precomputed ({@link GrammarMaskCache}), not a walk of the whole trie at each step (tests, figures). */
    public boolean maskCached() {
        return maskCache != null;
    }

    /** The recognizer's steps its {@link GrammarMaskCache} took to precompute, and its size in ints (figures); -1 each without one. */
    public long[] maskCacheCost() {
        return maskCache == null ? new long[]{-1, -1} : new long[]{maskCache.work, maskCache.ints()};
    }

    public Kind kind() {
        return kind;
    }

    /** The spec as the client (regex) or the router (the schema, compact JSON) wrote it. */
    public String source() {
        return source;
    }

    /**
     * The automaton's state after the output so far: {@code seq} holds the prompt ({@code promptLength} tokens) and then
     * {@code step} output tokens. -1: outside the language (never, for an output sampled under this constraint). A DFA's
     * (a grammar's state is its Earley chart, not an int: {@link #wholeMatch} asks it whether the output is whole).
     * Replayed from the start, O(output) steps: a request's mask keeps it instead ({@link Progress}), equal to this.
     */
    public int state(int[] seq, int promptLength, int step) {
        if (grammar != null) throw new IllegalStateException("a grammar's state is its Earley chart: see wholeMatch");
        int s = run.getInitialState();
        for (int i = 0; i < step && s >= 0; i++) {
            char[] text = texts.text(seq[promptLength + i - 1], seq[promptLength + i]);
            if (text == null) return -1;
            for (int k = 0; k < text.length && s >= 0; k++) s = run.step(s, text[k]);
        }
        return s >= 0 && live[s] ? s : -1;
    }

    /** Whether the output so far (as {@link #state}'s arguments say) is a whole match, whatever the language. */
    public boolean wholeMatch(int[] seq, int promptLength, int step) {
        if (grammar == null) return complete(state(seq, promptLength, step));
        List<Earley.ItemSet> chart = chart(seq, promptLength, step, new Earley.Budget(Earley.MAX_WORK * (step + 1L)));
        return chart != null && grammar.complete(chart);
    }

    /** The grammar's chart after the output so far; null where it left the language (never, for an output sampled under it). */
    private List<Earley.ItemSet> chart(int[] seq, int promptLength, int step, Earley.Budget b) {
        List<Earley.ItemSet> chart = grammar.start(b);
        for (int i = 0; i < step; i++) {
            char[] text = texts.text(seq[promptLength + i - 1], seq[promptLength + i]);
            if (text == null) return null;
            for (char c : text) {
                if (!grammar.read(chart, c, b)) return null;
            }
        }
        return chart;
    }

    /** Whether the output that led to {@code state} is a whole match (a DFA's state). */
    public boolean complete(int state) {
        return state >= 0 && run.isAccept(state);
    }

    /**
     * Masks (-inf) the tokens that would take the output outside the language at output position {@code step}, in place;
     * {@code eosAllowed} and {@code stopAllowed}: whether the request's own rules let EOS / BOS and its stop token ids end it
     * here ({@code ignore_eos}, {@code min_tokens}); where nothing is left, EOS alone stays (finite).
     */
    public void mask(float[] logits, int[] seq, int promptLength, int step, boolean eosAllowed, boolean stopAllowed, int[] stopTokenIds) {
        mask(logits, seq, promptLength, step, eosAllowed, stopAllowed, stopTokenIds, null);
    }

    /**
     * {@link #mask(float[], int[], int, int, boolean, boolean, int[])} with the request's {@link Progress} ({@code null}:
     * none kept, a grammar's chart or a DFA's state ({@link #state}) replayed from the start): the mask is the same either
     * way.
     */
    public void mask(float[] logits, int[] seq, int promptLength, int step, boolean eosAllowed, boolean stopAllowed, int[] stopTokenIds,
                     Progress progress) {
        if (grammar != null) {
            maskGrammar(logits, seq, promptLength, step, eosAllowed, stopAllowed, stopTokenIds, progress == null ? new Progress() : progress, Mask.CACHED,
                    Earley.MAX_WORK);
            return;
        }
        int s = progress == null ? state(seq, promptLength, step) : progress.advanceDfa(this, seq, promptLength, step);
        int prev = seq[promptLength + step - 1];
        boolean whole = complete(s);
        boolean any = false;
        long work = 0; // the automaton's steps through the token texts (the vocabulary check)
        boolean goesOn = s >= 0 && continues[s];
        int nextStop = 0; // stopTokenIds are ascending: a cursor, not a search a token
        for (int t = 0; t < logits.length; t++) {
            while (nextStop < stopTokenIds.length && stopTokenIds[nextStop] < t) nextStop++;
            if (logits[t] == Float.NEGATIVE_INFINITY) continue;
            boolean ok;
            if (nextStop < stopTokenIds.length && stopTokenIds[nextStop] == t) {
                ok = whole && stopAllowed;
            } else if (Tokenizer.endsSequence(t)) {
                ok = whole && eosAllowed;
            } else if (goesOn) {
                char[] text = texts.text(prev, t);
                ok = false;
                if (text != null) {
                    int q = s, k = 0;
                    while (k < text.length && q >= 0) q = run.step(q, text[k++]);
                    work += k;
                    ok = q >= 0 && live[q];
                }
            } else {
                ok = false;
            }
            if (ok) any = true;
            else logits[t] = Float.NEGATIVE_INFINITY;
        }
        if (progress != null) progress.lastStep = progress.lastExtension + work;
        if (!any) logits[Tokenizer.EOS] = 0f;
    }

    /**
     * {@link #mask} for a grammar: the request's chart after the output so far ({@link Progress}: the last step's, extended
     * by the last token's text), then the tokens whose text leaves a non-empty Earley set: the precomputed mask's
     * ({@link GrammarMaskCache}: the union over the last set's items of the tokens they accept whatever the chart, and the
     * context-dependent ones decided against the chart, a group sharing a suffix at a time), or, where it has none
     * ({@code how} {@link Mask#FULL_WALK}, a grammar past its bounds, the texts after BOS), one walk of the whole token texts' trie: the same tokens. The end as for a DFA. The
     * bound on steps ({@code maxWork}: a request's {@link Earley#MAX_WORK}) is charged for this step's new work alone (the
     * extension, and the check or the walk), the same whether the chart was kept or rebuilt, so the prefill and the decode
     * decide it alike (whether a grammar has its precomputed mask is the same on every engine: its bounds are counts); the
     * chart's size is bounded too ({@link Earley#MAX_CHART_ITEMS}).
     */
    private void maskGrammar(float[] logits, int[] seq, int promptLength, int step, boolean eosAllowed, boolean stopAllowed, int[] stopTokenIds,
                             Progress progress, Mask how, long maxWork) {
        int prev = seq[promptLength + step - 1];
        boolean[] ok = new boolean[logits.length];
        boolean whole;
        try {
            Earley.Budget b = new Earley.Budget(maxWork);
            List<Earley.ItemSet> chart = progress.advance(this, seq, promptLength, step, b);
            whole = chart != null && grammar.complete(chart);
            Trie trie = texts.trie(prev);
            progress.lastChecked = -1;
            if (chart != null && how != Mask.FULL_WALK && maskCache != null && maskCache.trie == trie) {
                progress.lastChecked = maskCache.viable(grammar, chart, ok, b, how == Mask.CACHED);
            } else if (chart != null) {
                grammar.viable(trie, chart, ok, b);
            }
            progress.lastStep = b.work();
        } catch (Earley.Over e) {
            progress.clear();
            throw new Exceeded("the grammar (" + toString().replace("\n", "\\n") + ") passed a bound of its recognizer at output token " + step + ": " + e.getMessage()
                    + " (a grammar this ambiguous is not served: docs/SERVING.md, \"Structured outputs\")");
        }
        // The tokens the request's own rules decide, set in ok before the one pass over the vocabulary (a stop token id's
        // rule over EOS's, as it was): that pass then reads ok alone, with no search a token (at 128,000 tokens the search
        // and the branches were a good part of a mask's floor).
        for (int t : SEQUENCE_ENDS) {
            if (t < ok.length) ok[t] = whole && eosAllowed;
        }
        for (int t : stopTokenIds) {
            if (t < ok.length) ok[t] = whole && stopAllowed;
        }
        boolean any = false;
        for (int t = 0; t < logits.length; t++) {
            if (!ok[t]) logits[t] = Float.NEGATIVE_INFINITY;
            else if (logits[t] != Float.NEGATIVE_INFINITY) any = true;
        }
        if (!any) logits[Tokenizer.EOS] = 0f;
    }

    /**
     * The mask as {@link #mask(float[], int[], int, int, boolean, boolean, int[], Progress)} makes it, a grammar's by the
     * walk of the whole trie at every step, never its {@link GrammarMaskCache}: the reference the cache is held equal to
     * (tests, figures), at most {@code maxWork} steps a token (a request's: {@link Earley#MAX_WORK}; the figures at a large
     * vocabulary: the walk passes it).
     */
    public void maskFullWalk(float[] logits, int[] seq, int promptLength, int step, boolean eosAllowed, boolean stopAllowed, int[] stopTokenIds,
                             Progress progress, long maxWork) {
        if (grammar == null) throw new IllegalStateException("a DFA's mask has no cache");
        maskGrammar(logits, seq, promptLength, step, eosAllowed, stopAllowed, stopTokenIds, progress == null ? new Progress() : progress,
                Mask.FULL_WALK, maxWork);
    }

    /**
     * The mask as {@link #mask(float[], int[], int, int, boolean, boolean, int[], Progress)} makes it, a grammar's by its
     * {@link GrammarMaskCache} without the shared-suffix groups (every context-dependent token checked against the
     * chart: session 14's way), the same tokens: for the figures (scripts/GrammarMaskCost.java) and the tests.
     */
    public void maskUngrouped(float[] logits, int[] seq, int promptLength, int step, boolean eosAllowed, boolean stopAllowed, int[] stopTokenIds,
                              Progress progress) {
        if (grammar == null) throw new IllegalStateException("a DFA's mask has no cache");
        maskGrammar(logits, seq, promptLength, step, eosAllowed, stopAllowed, stopTokenIds, progress == null ? new Progress() : progress,
                Mask.UNGROUPED, Earley.MAX_WORK);
    }

    /** How a grammar's mask is made: all three give the same tokens. */
    private enum Mask {
        /** The walk of the whole trie against the chart (the reference). */
        FULL_WALK,
        /** The precomputed mask, every context-dependent token checked against the chart (session 14). */
        UNGROUPED,
        /** The precomputed mask, the context-dependent tokens with a shared suffix decided a group at a time. */
        CACHED
    }

    /**
     * A request's progress through its constraint: a grammar's Earley chart, or a DFA's state, after its output so far,
     * kept between its steps so a step extends it by the last token's text instead of replaying the whole output (a
     * step's work no longer grows with the output). Owned by whoever owns the request's generation state (the decode's
     * flight, the colocated engine's loop: one thread, one request; never shared), dropped when the request ends
     * ({@link #clear}). Only an optimisation: the chart and the state are functions of the output alone, and where the one
     * kept is not the previous step's (the decode's first step, after the prefill's first token; a progress of another
     * constraint) it is rebuilt by replay; a grammar's rebuild is not charged to the step's bound but bounded itself by
     * {@link Earley#MAX_WORK} for each output token it reads (a DFA has no run-time bound: a step is at most the last
     * token's characters and a vocabulary's).
     */
    public static final class Progress {
        private final long maxItems;
        private OutputConstraint of;
        /** The chart after {@link #tokens} output tokens; null: none kept, or the output left the language. */
        private List<Earley.ItemSet> chart;
        /** A DFA's state after {@link #tokens} output tokens; -1: outside the language (or none kept). */
        private int state = -1;
        private int tokens = -1;
        /** Its sets closed so far (compacted), and their items. */
        private int compacted;
        private long items;
        /**
         * The work of the last extension (to {@link #tokens}), and of the last step in all (tests: constant per step), and
         * of the last rebuild: a grammar's recognizer steps, a DFA's automaton steps (one a character read).
         */
        private long lastExtension, lastStep, lastRebuild;
        /** How many tokens the last grammar mask checked against the chart past its cache ({@link GrammarMaskCache}); -1: the full walk. */
        private int lastChecked = -1;

        public Progress() {
            this(Earley.MAX_CHART_ITEMS);
        }

        /** With at most {@code maxItems} in the chart, as {@link #size} counts (tests: a bound a short output reaches). */
        Progress(long maxItems) {
            this.maxItems = maxItems;
        }

        /** Drops the chart (the request ended, or failed). */
        public void clear() {
            of = null;
            chart = null;
            state = -1;
            tokens = -1;
            compacted = 0;
            items = 0;
        }

        /**
         * The steps of the last mask's own work: a grammar's recognizer steps charged against the bound (its extension of
         * the chart and its walk of the token texts), a DFA's automaton steps (the last token's characters, and those of the
         * token texts checked from the state); a rebuild's apart ({@link #lastRebuildWork}).
         */
        public long lastStepWork() {
            return lastStep;
        }

        /**
         * How many tokens the last grammar mask checked against the chart, the context-dependent ones its
         * {@link GrammarMaskCache} left (-1: it walked the whole trie).
         */
        public int lastCheckedTokens() {
            return lastChecked;
        }

        /** The steps of the last rebuild by replay (a grammar's: not charged to its step), 0 where the chart or state was kept. */
        public long lastRebuildWork() {
            return lastRebuild;
        }

        /** Items the chart holds. */
        long items() {
            return chart == null ? 0 : items + chart.getLast().size;
        }

        /** The chart's size as its bound counts it: its items, and {@link Earley#SET_ITEMS} for each of its sets. */
        long size() {
            return chart == null ? 0 : items() + (long) Earley.SET_ITEMS * chart.size();
        }

        /**
         * The chart after the {@code step} output tokens of {@code seq}, this step's new work charged to {@code b}: the first
         * set at step 0, else the extension by token {@code step - 1}'s text (where the chart kept is that of {@code step - 1}
         * tokens; rebuilt by replay, uncharged, otherwise). Null where the output left the language.
         */
        List<Earley.ItemSet> advance(OutputConstraint c, int[] seq, int promptLength, int step, Earley.Budget b) {
            lastRebuild = 0;
            if (of != c || tokens > step || tokens < step - 1) {
                clear();
                of = c;
                if (step > 0) { // a rebuild: the steps that sampled those tokens each passed the bound, so it is within this one
                    Earley.Budget rebuild = new Earley.Budget(Earley.MAX_WORK * step);
                    begin(c, rebuild);
                    for (int i = 0; i < step - 1 && chart != null; i++) extend(c, seq, promptLength, i, rebuild);
                    lastRebuild = rebuild.work();
                }
            }
            if (tokens == step) { // this step's chart kept (the mask asked again): its extension's work charged again
                b.spend(lastExtension);
                return chart;
            }
            long before = b.work();
            if (step == 0) begin(c, b);
            else if (chart != null) extend(c, seq, promptLength, step - 1, b);
            else tokens = step; // the output left the language: it stays out
            lastExtension = b.work() - before;
            return chart;
        }

        /**
         * A DFA's state after the {@code step} output tokens of {@code seq} (-1: outside the language), as
         * {@link OutputConstraint#state} replays it: the state kept, extended by token {@code step - 1}'s text where the
         * one kept is that of {@code step - 1} tokens, else rebuilt by replay ({@link #lastRebuildWork}).
         */
        int advanceDfa(OutputConstraint c, int[] seq, int promptLength, int step) {
            lastRebuild = 0;
            if (of != c || tokens > step || tokens < step - 1) {
                clear();
                of = c;
                state = c.run.getInitialState();
                tokens = 0;
                lastExtension = 0;
                long rebuild = 0;
                for (int i = 0; i < step - 1; i++) rebuild += extendDfa(c, seq, promptLength, i);
                lastRebuild = rebuild;
            }
            if (tokens < step) lastExtension = extendDfa(c, seq, promptLength, step - 1); // else this step's, asked again
            return state;
        }

        /** Reads output token {@code i}'s text into the DFA's state (that of {@code i} tokens); its automaton steps. */
        private int extendDfa(OutputConstraint c, int[] seq, int promptLength, int i) {
            tokens = i + 1;
            if (state < 0) return 0; // out of the language: it stays out
            char[] text = c.texts.text(seq[promptLength + i - 1], seq[promptLength + i]);
            if (text == null) {
                state = -1;
                return 0;
            }
            int s = state, k = 0;
            while (k < text.length && s >= 0) s = c.run.step(s, text[k++]);
            state = s >= 0 && c.live[s] ? s : -1; // a dead state leads only to dead ones: -1 now is -1 at the end
            return k;
        }

        private void begin(OutputConstraint c, Earley.Budget b) {
            chart = c.grammar.start(b);
            tokens = 0;
            compacted = 0;
            items = 0;
            count();
        }

        /** Reads output token {@code i}'s text into the chart (that of {@code i} tokens). */
        private void extend(OutputConstraint c, int[] seq, int promptLength, int i, Earley.Budget b) {
            tokens = i + 1;
            char[] text = c.texts.text(seq[promptLength + i - 1], seq[promptLength + i]);
            if (text == null) {
                chart = null;
                return;
            }
            for (char ch : text) {
                if (!c.grammar.read(chart, ch, b)) {
                    chart = null;
                    return;
                }
            }
            count();
        }

        /** Compacts the sets closed since the last count (all but the last) and checks the chart's size. */
        private void count() {
            int last = chart.size() - 1;
            for (; compacted < last; compacted++) {
                Earley.ItemSet s = chart.get(compacted);
                s.compact();
                items += s.size;
            }
            if (size() > maxItems) {
                throw new Earley.Over("more than " + maxItems + " items in the request's Earley chart (its sets' items and "
                        + Earley.SET_ITEMS + " for each set, one a character of the output)");
            }
        }
    }

    /** The compiled table's entries (states × character classes), what the constraint holds beside the shared texts. */
    long tableEntries() {
        if (grammar != null) return grammar.g.symbols() + (maskCache == null ? 0 : maskCache.ints());
        return (long) run.getSize() * (run.getCharIntervals().length + 1);
    }

    /** Whether {@code text} begins a whole match: a prefix of some text of the language (tests). */
    public boolean startsMatch(String text) {
        if (grammar != null) {
            Earley.Budget b = new Earley.Budget(Earley.MAX_WORK * (text.length() + 1L));
            List<Earley.ItemSet> chart = grammar.start(b);
            for (int i = 0; i < text.length(); i++) {
                if (!grammar.read(chart, text.charAt(i), b)) return false;
            }
            return true;
        }
        int s = run.getInitialState();
        for (int i = 0; i < text.length() && s >= 0; i++) s = run.step(s, text.charAt(i));
        return s >= 0 && live[s];
    }

    /** Whether {@code text} is a whole match (tests). */
    public boolean matches(String text) {
        return grammar != null ? grammar.matches(text) : run.run(text);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof OutputConstraint c && kind == c.kind && source.equals(c.source);
    }

    @Override
    public int hashCode() {
        return Objects.hash(kind, source);
    }

    @Override
    public String toString() {
        return kind.param + "=" + (source.length() > 80 ? source.substring(0, 80) + "…" : source);
    }

    /**
     * The vocabulary's token texts as a constraint reads them (see the class comment): null where a token is never
     * generated under a constraint. A token right after BOS loses one leading space, as {@link Tokenizer#decode} does.
     */
    static final class TokenTexts {
        private final char[][] texts, afterBos;
        /** The texts as tries (a grammar's mask walks them), built when a grammar first needs them. */
        private volatile Trie trie, trieAfterBos;

        TokenTexts(Tokenizer tok) {
            int n = tok.vocabSize();
            texts = new char[n][];
            afterBos = new char[n][];
            for (int t = 0; t < n; t++) {
                if (t <= Tokenizer.EOS) continue; // unknown, BOS, EOS: no text a constraint may take
                boolean bytePiece = tok.tokenText(t).matches("<0x[0-9A-Fa-f]{2}>");
                texts[t] = chars(tok.pieceBytes(-1, t), bytePiece);
                afterBos[t] = chars(tok.pieceBytes(Tokenizer.BOS, t), bytePiece);
            }
        }

        private static char[] chars(byte[] bytes, boolean bytePiece) {
            if (bytes.length == 0) return null; // no progress: a loop, never a step
            if (bytePiece) return (bytes[0] & 0xFF) < 0x80 ? new char[]{(char) bytes[0]} : null;
            try {
                return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(bytes)).toString().toCharArray();
            } catch (CharacterCodingException e) {
                return null;
            }
        }

        char[] text(int prev, int token) {
            return prev == Tokenizer.BOS ? afterBos[token] : texts[token];
        }

        /** The trie of the token texts after any token but BOS. */
        Trie trie() {
            return trie(-1);
        }

        /** The trie of the token texts after {@code prev} (after BOS: without the one leading space). */
        Trie trie(int prev) {
            if (prev == Tokenizer.BOS) {
                Trie t = trieAfterBos;
                if (t == null) trieAfterBos = t = Trie.of(afterBos);
                return t;
            }
            Trie t = trie;
            if (t == null) trie = t = Trie.of(texts);
            return t;
        }
    }

    /**
     * A trie of token texts: each node's next characters (ascending) and children, and the tokens whose text ends there.
     * The trie's order numbers its tokens depth first (a node's own tokens, then its children's in order), so a subtree's
     * tokens are one range of it, {@code [lo, hi)}, the node's own first; the root's {@link #order} maps it back to the ids
     * (a {@link GrammarMaskCache}'s sets are ranges of it).
     */
    static final class Trie {
        final char[] keys;
        final Trie[] kids;
        final int[] tokens;
        /** The subtree's tokens in the trie's order: {@code [lo, hi)}; set once, before the trie is shared. */
        int lo, hi;
        /** The root's: each index of the trie's order, its token (else null). */
        int[] order;

        private Trie(char[] keys, Trie[] kids, int[] tokens) {
            this.keys = keys;
            this.kids = kids;
            this.tokens = tokens;
        }

        static Trie of(char[][] texts) {
            Builder root = new Builder();
            for (int t = 0; t < texts.length; t++) {
                if (texts[t] == null) continue;
                Builder n = root;
                for (char c : texts[t]) n = n.kids.computeIfAbsent(c, k -> new Builder());
                n.tokens.add(t);
            }
            Trie trie = root.build();
            int[] count = new int[1];
            trie.number(null, count);
            trie.order = new int[count[0]];
            trie.number(trie.order, new int[1]);
            return trie;
        }

        /** Numbers the subtree from {@code at[0]} on (its lo, hi), its tokens written to {@code order} where given. */
        private void number(int[] order, int[] at) {
            lo = at[0];
            for (int t : tokens) {
                if (order != null) order[at[0]] = t;
                at[0]++;
            }
            for (Trie kid : kids) kid.number(order, at);
            hi = at[0];
        }

        private static final class Builder {
            final TreeMap<Character, Builder> kids = new TreeMap<>();
            final List<Integer> tokens = new ArrayList<>();

            Trie build() {
                char[] keys = new char[kids.size()];
                Trie[] built = new Trie[kids.size()];
                int i = 0;
                for (Map.Entry<Character, Builder> e : kids.entrySet()) {
                    keys[i] = e.getKey();
                    built[i++] = e.getValue().build();
                }
                return new Trie(keys, built, tokens.stream().mapToInt(Integer::intValue).toArray());
            }
        }
    }

    /**
     * A spec not compiled because the compiler stayed busy ({@link Compiler#MAX_WAIT_MS}: other compilations, one at a
     * time, held it): the server's state, not the spec's fault, so not an {@link IllegalArgumentException}. Its message
     * reads after the field's name, as a refusal's does; the request may be sent again after {@link #retryAfterSeconds}.
     */
    public static final class Busy extends RuntimeException {
        /** When to try again: one compilation's deadline, in whole seconds. */
        public static final long RETRY_AFTER_SECONDS = (Compiler.DEADLINE_MS + 999) / 1_000;

        Busy(long waitedNanos) {
            super("was not compiled: the structured-output compiler is busy (it compiles one spec at a time, each for up to "
                    + Compiler.DEADLINE_MS + " ms, and this one waited " + waitedNanos / 1_000_000 + " ms for it); send the request again later");
        }

        /** When to try again: one compilation's deadline, in whole seconds. */
        public long retryAfterSeconds() {
            return RETRY_AFTER_SECONDS;
        }
    }

    /**
     * Compiles constraints against one tokenizer's vocabulary and keeps the last {@link #CACHED} of them by spec, so a
     * spec sent again (every sample of a request, the prefill and the decode of it) is compiled once; the cache also keeps
     * at most {@link #CACHED_TABLE} table entries in all (one near {@link #MAX_TABLE} is 16 MB). Thread-safe: one
     * compilation at a time (dk.brics's state numbering is a static counter; and it bounds the CPU a client can take), each
     * refused past {@link #DEADLINE_MS}; a cached spec is answered without waiting for one. Those waiting for the compiler
     * queue by client ({@link #compile(Kind, String, String)}: the tenant, else the caller's address) and the compiler is
     * handed round-robin between the clients ({@link FairSlot}), so a client with many slow specs queued delays another
     * client by one compilation at most; each waits at most {@link #MAX_WAIT_MS}: past that it is refused as {@link Busy}
     * (the server's state, not the spec's: not remembered).
     * A spec refused for its complexity (the deadline, the bounds on its automaton and table: {@link ClientRegex.TooComplex})
     * is remembered too, the last {@link #REFUSED} of them by their SHA-256 with the refusal's message, so a client sending
     * it again is refused at once with the same message instead of holding the compiler up to the deadline again; other
     * refusals (how a spec is written) are quick to find again and are not kept.
     */
    public static final class Compiler {
        public static final int CACHED = 64;
        /** How many refused specs (by digest, with their messages) are remembered. */
        public static final int REFUSED = 256;
        /** Most table entries (states × character classes, 4 bytes each) the cache keeps in all: 64 MiB. */
        static final long CACHED_TABLE = 16_000_000;
        /** How long one compilation may take before it is refused ("too complex"). */
        public static final long DEADLINE_MS = 5_000;
        /**
         * How long a compilation waits for the compiler (the one running and those queued before it) before it is refused as
         * {@link Busy}: two deadlines, so a spec behind the running compilation and one more waiting is compiled, and one
         * behind a longer queue of slow specs (a client sending many) is answered within this, not after all of them.
         */
        public static final long MAX_WAIT_MS = 2 * DEADLINE_MS;
        /**
         * What became of a spec sent for compiling ({@code kvferry_structured_output_compiles_total{role,outcome}}): compiled now,
         * answered from the cache, refused (a 400: how it is written, a bound on its size, or a refusal remembered), stopped
         * at the deadline (a 400 too), or not compiled because the compiler stayed busy (a 503).
         */
        public enum Outcome {
            COMPILED, CACHED, REFUSED, DEADLINE, BUSY;

            /** Its name as a metric's tag. */
            public String label() {
                return name().toLowerCase(Locale.ROOT);
            }
        }

        /** The client of a compilation whose caller names none. */
        public static final String ANYONE = "-";
        private final TokenTexts texts;
        private final long deadlineNanos, cachedTable;
        private volatile long maxWaitNanos;
        /**
         * Held while compiling (one at a time), handed round-robin between the clients waiting (a fair lock let one client's
         * queued specs hold every other client up for all of them); the cache has its own lock, so a cached spec never
         * waits for a compilation.
         */
        final FairSlot compiling = new FairSlot();
        private long tableEntries;
        private final LinkedHashMap<String, OutputConstraint> cache = new LinkedHashMap<>(16, 0.75f, true);
        /** Refused specs' messages by the SHA-256 of their key (a schema may be a megabyte), least recently used first; under {@link #cache}'s lock. */
        private final LinkedHashMap<ByteBuffer, String> refused = new LinkedHashMap<>(16, 0.75f, true);
        private final LongAdder[] outcomes = new LongAdder[Outcome.values().length];
        private final LongAdder compiled = new LongAdder(), compileNanos = new LongAdder();

        public Compiler(Tokenizer tokenizer) {
            this(tokenizer, DEADLINE_MS * 1_000_000, CACHED_TABLE);
        }

        Compiler(Tokenizer tokenizer, long deadlineNanos, long cachedTable) {
            this(tokenizer, deadlineNanos, cachedTable, MAX_WAIT_MS * 1_000_000);
        }

        Compiler(Tokenizer tokenizer, long deadlineNanos, long cachedTable, long maxWaitNanos) {
            for (int i = 0; i < outcomes.length; i++) outcomes[i] = new LongAdder();
            this.texts = new TokenTexts(tokenizer);
            this.deadlineNanos = deadlineNanos;
            this.cachedTable = cachedTable;
            this.maxWaitNanos = maxWaitNanos;
        }

        /** A regex's constraint; a refusal's message says what is wrong (it reads after the field's name: "regex is …"). */
        public OutputConstraint regex(String regex) {
            return compile(Kind.REGEX, regex);
        }

        /** A JSON schema's constraint (the schema as JSON text); a refusal's message says what is wrong. */
        public OutputConstraint jsonSchema(String schema) {
            return compile(Kind.JSON_SCHEMA, schema);
        }

        /** A grammar's constraint (GBNF); a refusal's message says what is wrong and where (line, column). */
        public OutputConstraint ebnf(String grammar) {
            return compile(Kind.EBNF, grammar);
        }

        /** As {@link #compile(Kind, String, String)} for one client that stands for all (tests, a caller that knows none). */
        public OutputConstraint compile(Kind kind, String source) {
            return compile(kind, source, ANYONE);
        }

        /**
         * The spec's constraint, compiled for {@code client} (the tenant, or the caller's address: whom the compiler's
         * turns are shared between) where it is not cached; a refusal's message says what is wrong, {@link Busy} where the
         * compiler was not free within {@link #MAX_WAIT_MS}.
         */
        public OutputConstraint compile(Kind kind, String source, String client) {
            String key = kind.param + '\0' + source;
            ByteBuffer digest = digest(key);
            OutputConstraint c = cachedCounted(key, digest);
            if (c != null) return c;
            boolean held;
            try {
                held = compiling.acquire(client, maxWaitNanos); // each client's in arrival order, the clients in turn
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                held = false;
            }
            if (!held) {
                c = cachedCounted(key, digest); // compiled (or refused) by another meanwhile
                if (c != null) return c;
                count(Outcome.BUSY);
                throw new Busy(maxWaitNanos);
            }
            try {
                c = cachedCounted(key, digest);
                if (c != null) return c;
                long started = System.nanoTime();
                Outcome outcome = Outcome.REFUSED; // unless it compiles: how it is written, or a bound on its size
                try {
                    c = ClientRegex.withDeadline(deadlineNanos, () -> {
                        if (kind == Kind.EBNF) return new OutputConstraint(kind, source, EbnfGrammar.parse(source), texts);
                        // A schema whose $refs recurse (or tool calls with such parameters) is served by its grammar (the DFA
                        // path's layout), under this kind.
                        JsonSchemaAutomaton.Language schema = kind == Kind.JSON_SCHEMA ? JsonSchemaAutomaton.language(source)
                                : kind == Kind.TOOL_CALLS ? ToolCalls.language(source) : null;
                        if (schema != null && schema.grammar() != null) return new OutputConstraint(kind, source, schema.grammar(), texts);
                        return new OutputConstraint(kind, source,
                            switch (kind) {
                                case REGEX -> ClientRegex.compile(source);
                                case JSON_SCHEMA, TOOL_CALLS -> schema.automaton();
                                case EBNF -> throw new IllegalStateException("a grammar has no automaton");
                            }, texts);
                    });
                    outcome = Outcome.COMPILED;
                } catch (ClientRegex.TooComplex e) {
                    if (e.deadline()) outcome = Outcome.DEADLINE;
                    synchronized (cache) {
                        refused.put(digest, e.getMessage());
                        if (refused.size() > REFUSED) refused.pollFirstEntry();
                    }
                    throw e;
                } finally {
                    compiled(started, outcome);
                }
                synchronized (cache) {
                    cache.put(key, c);
                    tableEntries += c.tableEntries();
                    for (var it = cache.entrySet().iterator(); it.hasNext() && (cache.size() > CACHED || tableEntries > cachedTable); ) {
                        var eldest = it.next();
                        if (eldest.getValue() == c) break; // the newest stays (one table is at most MAX_TABLE)
                        tableEntries -= eldest.getValue().tableEntries();
                        it.remove();
                    }
                }
                return c;
            } finally {
                compiling.release();
            }
        }

        /** {@link #cached}, counted: a cached spec as {@link Outcome#CACHED}, a refusal remembered as {@link Outcome#REFUSED}. */
        private OutputConstraint cachedCounted(String key, ByteBuffer digest) {
            OutputConstraint c;
            try {
                c = cached(key, digest);
            } catch (ClientRegex.TooComplex e) {
                count(Outcome.REFUSED);
                throw e;
            }
            if (c != null) count(Outcome.CACHED);
            return c;
        }

        private void count(Outcome o) {
            outcomes[o.ordinal()].increment();
        }

        /** A compilation that ran (the slot held): its outcome and its time. */
        private void compiled(long started, Outcome o) {
            compileNanos.add(System.nanoTime() - started);
            compiled.increment();
            count(o);
        }

        /** How many specs had {@code o} as their outcome. */
        public long outcomes(Outcome o) {
            return outcomes[o.ordinal()].sum();
        }

        /** How many compilations ran (the slot held: compiled, refused after compiling, or stopped at the deadline). */
        public long compileCount() {
            return compiled.sum();
        }

        /** Their time in all, in seconds. */
        public double compileSeconds() {
            return compileNanos.sum() / 1e9;
        }

        /** How many specs wait for the compiler. */
        public int waiting() {
            return compiling.waiting();
        }

        /** Sets how long a compilation waits for the compiler (tests: a short wait for a compiler built elsewhere). */
        void maxWait(long nanos) {
            maxWaitNanos = nanos;
        }

        /** How long a compilation waits for the compiler, in nanoseconds. */
        long maxWait() {
            return maxWaitNanos;
        }

        /** The clients waiting for the compiler, in the order of their turns, with how many specs each. */
        public Map<String, Integer> queued() {
            return compiling.queued();
        }

        /** How many compilations were refused as {@link Busy}. */
        public long busyRefusals() {
            return outcomes(Outcome.BUSY);
        }

        /** The spec's constraint if cached, null if it is neither cached nor refused before; a refusal remembered is thrown again. */
        private OutputConstraint cached(String key, ByteBuffer digest) {
            String refusal;
            synchronized (cache) {
                OutputConstraint c = cache.get(key);
                if (c != null) return c;
                refusal = refused.get(digest);
            }
            if (refusal != null) throw new ClientRegex.TooComplex(refusal);
            return null;
        }

        private static ByteBuffer digest(String key) {
            try {
                ByteBuffer chars = ByteBuffer.allocate(key.length() * 2);
                chars.asCharBuffer().put(key); // the chars themselves: an encoding would map every lone surrogate alike
                return ByteBuffer.wrap(MessageDigest.getInstance("SHA-256").digest(chars.array()));
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException(e); // every JDK has SHA-256
            }
        }

        /** How many refused specs the compiler remembers (tests). */
        int refusedCount() {
            synchronized (cache) {
                return refused.size();
            }
        }

        /** How many constraints the cache holds (tests). */
        int cachedCount() {
            synchronized (cache) {
                return cache.size();
            }
        }
    }
}
