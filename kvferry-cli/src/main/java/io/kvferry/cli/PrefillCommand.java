package io.kvferry.cli;

import io.kvferry.api.DisaggregationMode;
import picocli.CommandLine.Command;

/** A prefill instance (all its TP ranks in this process) serving the synthetic request stream. */
@Command(name = "prefill", mixinStandardHelpOptions = true,
        description = "Bench role (synthetic pools, byte-verified; not a serving engine). Run the prefill ranks of one instance: register with the bootstrap registry, then produce and "
                + "send KV for the request stream given by the workload options (which must match the decode's).")
final class PrefillCommand extends RoleCommand {
    @Override
    DisaggregationMode mode() {
        return DisaggregationMode.PREFILL;
    }
}
