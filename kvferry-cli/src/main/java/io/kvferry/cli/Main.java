package io.kvferry.cli;

import io.kvferry.KVFerry;
import io.kvferry.api.BackendUnavailableException;
import io.kvferry.api.Knob;
import io.kvferry.testkit.MemoryBudget;
import picocli.CommandLine;
import picocli.CommandLine.Command;

import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/** The {@code kvferry} command. */
@Command(name = "kvferry", mixinStandardHelpOptions = true, version = "kvferry 0.1.0",
        description = "KV-cache transfer engine for prefill/decode disaggregated LLM serving.",
        footer = {"%nAnywhere on the line, with every command:",
                "  --set NAME=VALUE  Set one of kvferry's knobs for this run (repeatable): NAME",
                "                    is its KVFERRY_* variable or kvferry.* property",
                "                    (docs/CONFIGURATION.md); it wins over the environment and",
                "                    reaches the role processes of bench and chaos.",
                "  --verbose         Show the library's INFO log lines (links, registrations,",
                "                    data paths chosen)."},
        subcommands = {DemoCommand.class, ServeCommand.class, BenchCommand.class, ChaosCommand.class, BootstrapCommand.class, StatusCommand.class, PrefillCommand.class,
                DecodeCommand.class})
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

    /**
     * {@code --set NAME=VALUE} anywhere on the line (repeatable) sets one of kvferry's knobs for this run:
     * NAME is its environment variable ({@code KVFERRY_CONNECT_TIMEOUT_MS}) or its property
     * ({@code kvferry.connectTimeoutMs}); it becomes the {@code -Dkvferry.*} property, which wins over the
     * environment and reaches the role processes the command starts. A name that is no knob is refused.
     *
     * @return the arguments without the {@code --set} pairs
     * @throws IllegalArgumentException naming what was wrong
     */
    static String[] withSettings(String[] args) {
        List<String> rest = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String pair;
            if (a.equals("--set")) {
                if (i + 1 >= args.length) throw new IllegalArgumentException("--set needs NAME=VALUE");
                pair = args[++i];
            } else if (a.startsWith("--set=")) {
                pair = a.substring("--set=".length());
            } else {
                rest.add(a);
                continue;
            }
            int eq = pair.indexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("--set needs NAME=VALUE, got '" + pair + "'");
            String name = pair.substring(0, eq), value = pair.substring(eq + 1);
            Knob knob = KVFerry.knobs().stream().filter(k -> k.env().equals(name) || k.key().equals(name)).findFirst()
                    .orElseThrow(() -> new IllegalArgumentException("--set " + name + ": no such knob; one of "
                            + KVFerry.knobs().stream().map(Knob::env).toList()));
            System.setProperty(knob.key(), value);
        }
        return rest.toArray(String[]::new);
    }

    /** Runs the command line and returns its exit code (tests call this without exiting the JVM). */
    public static int run(String... args) {
        try {
            args = withSettings(args);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry: " + e.getMessage());
            return 2;
        }
        return new CommandLine(new Main()).setExecutionExceptionHandler((e, cmd, parsed) -> {
            // Bad input (a flag's value, a token on the command line, a missing file, a port in use, a transport
            // that cannot run here) is one clear line, not a stack trace.
            if (!(e instanceof MemoryBudget.PoolsDoNotFit || e instanceof IllegalArgumentException || e instanceof UncheckedIOException
                    || e instanceof BackendUnavailableException)) {
                throw e;
            }
            // Some JDK exceptions carry no message (UnresolvedAddressException): their name says more than "null".
            cmd.getErr().println("kvferry " + cmd.getCommandName() + ": " + (e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName()));
            return 2;
        }).execute(args);
    }
}
