package io.kvferry.engine.http;

import io.kvferry.engine.model.TokenLogprobs;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.function.ToDoubleFunction;

/**
 * {@code best_of} above {@code n}: {@code bestOf} samples of each prompt run (each a PD request of its own, seeded as
 * {@link OpenAiRoutes#choices} says), and the answer shows the {@code n} with the highest cumulative log probability of their sampled
 * tokens, highest first (vLLM's rule; ties in sample order), their log probabilities only when {@code logprobs} was asked.
 */
record BestOf(int n, int bestOf, boolean showLogprobs) {
    /** The choices shown, in the answer's order: each prompt's best n of its bestOf samples ({@code all} in run order). */
    <C> List<C> chosen(List<C> all, ToDoubleFunction<C> cumulativeLogprob) {
        List<C> out = new ArrayList<>();
        for (int from = 0; from < all.size(); from += bestOf) {
            List<C> samples = new ArrayList<>(all.subList(from, from + bestOf));
            samples.sort(Comparator.comparingDouble(cumulativeLogprob).reversed()); // stable: ties keep sample order
            out.addAll(samples.subList(0, n));
        }
        return out;
    }

    /** The sum of the log probabilities of an outcome's sampled tokens (best_of's measure; 0 without tokens). */
    static double cumulativeLogprob(Outcome o) {
        double sum = 0;
        for (TokenLogprobs lp : o.logprobs()) sum += lp.logprob();
        return sum;
    }
}
