package io.kvferry.api;

/** Which side of the disaggregated pair a manager serves. */
public enum DisaggregationMode {
    PREFILL,
    DECODE
}
