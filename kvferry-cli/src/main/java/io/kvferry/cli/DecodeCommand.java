package io.kvferry.cli;

import io.kvferry.api.DisaggregationMode;
import picocli.CommandLine.Command;

/** A decode instance (all its TP ranks in this process) receiving and verifying the synthetic request stream. */
@Command(name = "decode", mixinStandardHelpOptions = true,
        description = "Bench role (synthetic pools, byte-verified; not a serving engine). Run the decode ranks of one instance: pre-allocate pages, request KV from the prefill found "
                + "through --bootstrap, and verify every byte that lands.")
final class DecodeCommand extends RoleCommand {
    @Override
    DisaggregationMode mode() {
        return DisaggregationMode.DECODE;
    }
}
