package io.kvferry.cli;

import io.kvferry.testkit.MemoryBudget;
import picocli.CommandLine;
import picocli.CommandLine.Command;

import java.io.UncheckedIOException;
import java.util.Arrays;

/** The {@code kvferry} command. */
@Command(name = "kvferry", mixinStandardHelpOptions = true, version = "kvferry 0.1.0",
        description = "KV-cache transfer engine for prefill/decode disaggregated LLM serving.",
        subcommands = {DemoCommand.class, ServeCommand.class, BenchCommand.class, ChaosCommand.class, BootstrapCommand.class, PrefillCommand.class, DecodeCommand.class})
public final class Main implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    public static void main(String[] args) {
        System.exit(run(withLogLevel(args)));
    }

    static final String LOG_LEVEL_PROPERTY = "org.slf4j.simpleLogger.defaultLogLevel";

    /**
     * A user sees the command's own progress and summary: the library's INFO lines (links, registrations)
     * only with {@code --verbose} (anywhere on the line), warnings and errors always. Must run before the
     * first logger is made; an explicit {@code -Dorg.slf4j.simpleLogger.defaultLogLevel} wins.
     *
     * @return the arguments without {@code --verbose}
     */
    static String[] withLogLevel(String[] args) {
        boolean verbose = Arrays.asList(args).contains("--verbose");
        if (System.getProperty(LOG_LEVEL_PROPERTY) == null) System.setProperty(LOG_LEVEL_PROPERTY, verbose ? "info" : "warn");
        return Arrays.stream(args).filter(a -> !a.equals("--verbose")).toArray(String[]::new);
    }

    /** Runs the command line and returns its exit code (tests call this without exiting the JVM). */
    public static int run(String... args) {
        return new CommandLine(new Main()).setExecutionExceptionHandler((e, cmd, parsed) -> {
            // Bad input (a flag's value, a token on the command line, a missing file) is one clear line, not a stack trace.
            if (!(e instanceof MemoryBudget.PoolsDoNotFit || e instanceof IllegalArgumentException || e instanceof UncheckedIOException)) {
                throw e;
            }
            cmd.getErr().println("kvferry " + cmd.getCommandName() + ": " + e.getMessage());
            return 2;
        }).execute(args);
    }
}
