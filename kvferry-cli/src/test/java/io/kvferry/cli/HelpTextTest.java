package io.kvferry.cli;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Every command's --help formats cleanly: no picocli warning, defaults shown as they are. */
class HelpTextTest {
    @Test
    void everyCommandsHelpFormatsWithoutWarnings() {
        PrintStream old = System.err;
        ByteArrayOutputStream warnings = new ByteArrayOutputStream();
        System.setErr(new PrintStream(warnings, true, StandardCharsets.UTF_8));
        StringBuilder all = new StringBuilder();
        try {
            CommandLine main = new CommandLine(new Main());
            all.append(main.getUsageMessage(CommandLine.Help.Ansi.OFF));
            for (Map.Entry<String, CommandLine> sub : main.getSubcommands().entrySet()) {
                all.append(sub.getValue().getUsageMessage(CommandLine.Help.Ansi.OFF));
            }
        } finally {
            System.setErr(old);
        }
        String err = warnings.toString(StandardCharsets.UTF_8);
        assertFalse(err.contains("picocli WARN"), err);
        String help = all.toString().replaceAll("\\s+", ""); // picocli wraps lines where it likes ("0.5\nms")
        // The chaos link's default has a '%' of its own (it once broke the formatting and showed '%%').
        assertTrue(help.contains("Default:'delay0.5msloss0.1%'(1msroundtrip,0.1%loss)"), excerpt(help, "Default:'delay"));
        assertFalse(help.contains("%%"), excerpt(help, "%%"));
        // One sentence per description: the demo's line in the command list is not cut off.
        assertTrue(help.contains("sendahandfulofprompts"), excerpt(help, "sendahandful"));
    }

    /** --set and --verbose work on every command line (README, CONFIGURATION) but no --help named them. */
    @Test
    void theTopLevelHelpNamesTheFlagsOfEveryCommandLine() {
        String help = new CommandLine(new Main()).getUsageMessage(CommandLine.Help.Ansi.OFF);
        assertTrue(help.contains("--set NAME=VALUE"), help);
        assertTrue(help.contains("--verbose"), help);
    }

    /** serve --help lists the router's routes: /tokenize, /detokenize and /workers were served but not named. */
    @Test
    void serveHelpNamesEveryRouteOfTheRouter() {
        String help = new CommandLine(new Main()).getSubcommands().get("serve").getUsageMessage(CommandLine.Help.Ansi.OFF)
                .replaceAll("\\s+", " ");
        for (String route : new String[]{"POST /v1/completions", "POST /v1/chat/completions", "GET /v1/models", "GET /v1/models/{model}",
            "POST /generate", "POST /tokenize", "POST /detokenize", "GET /health", "GET /metrics", "GET/POST/DELETE /workers"}) {
            assertTrue(help.contains(route), route + " in: " + help);
        }
    }

    private static String excerpt(String text, String around) {
        int i = Math.max(0, text.indexOf(around));
        return text.substring(i, Math.min(text.length(), i + 160));
    }
}
