/**
 * The bootstrap registry of a prefill instance and its client, route-compatible with SGLang's
 * {@code CommonKVBootstrapServer}: prefill ranks announce their control endpoints with
 * {@code PUT /route}; decode ranks read the topology and rank endpoints with {@code GET /route} and
 * resolve attention-DP groups through {@code /register_dp_rank} and {@code /query_dp_ranks}.
 * Keeping SGLang's routes, field names and messages lets SGLang tooling and kvferry talk to each other.
 */
package io.kvferry.registry;
