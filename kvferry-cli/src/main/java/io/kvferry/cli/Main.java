package io.kvferry.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code kvferry} command. */
@Command(name = "kvferry", mixinStandardHelpOptions = true, version = "kvferry 0.1.0",
        description = "KV-cache transfer engine for prefill/decode disaggregated LLM serving.",
        subcommands = {BenchCommand.class, ChaosCommand.class, BootstrapCommand.class, PrefillCommand.class, DecodeCommand.class})
public final class Main implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    public static void main(String[] args) {
        System.exit(run(args));
    }

    /** Runs the command line and returns its exit code (tests call this without exiting the JVM). */
    public static int run(String... args) {
        return new CommandLine(new Main()).execute(args);
    }
}
