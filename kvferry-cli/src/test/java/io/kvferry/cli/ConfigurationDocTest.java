package io.kvferry.cli;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import picocli.CommandLine.Model.OptionSpec;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * docs/CONFIGURATION.md and the command line agree: every option of every command (hidden ones included) is named
 * in the document, and every flag its tables' first column names is an option of some command.
 */
class ConfigurationDocTest {
    private static final Pattern FLAG = Pattern.compile("--[a-z][a-z0-9-]*");

    /** Every option name of every command, without picocli's own --help and --version. */
    private static Set<String> options() {
        Set<String> names = new TreeSet<>();
        CommandLine main = new CommandLine(new Main());
        for (CommandLine sub : main.getSubcommands().values()) {
            for (OptionSpec o : sub.getCommandSpec().options()) {
                for (String n : o.names()) {
                    if (n.startsWith("--") && !n.equals("--help") && !n.equals("--version")) names.add(n);
                }
            }
        }
        return names;
    }

    private static String doc() throws Exception {
        return Files.readString(Path.of("..", "docs", "CONFIGURATION.md"));
    }

    @Test
    void everyOptionOfEveryCommandIsDocumented() throws Exception {
        String doc = doc();
        Set<String> missing = new TreeSet<>();
        for (String o : options()) {
            if (!Pattern.compile(Pattern.quote(o) + "(?![a-z0-9-])").matcher(doc).find()) missing.add(o);
        }
        assertEquals(Set.of(), missing, "options that docs/CONFIGURATION.md does not name");
    }

    @Test
    void everyFlagTheTablesNameIsAnOption() throws Exception {
        Set<String> options = options(), unknown = new TreeSet<>();
        for (String line : doc().lines().toList()) {
            if (!line.startsWith("| ") || line.startsWith("|---")) continue;
            String first = line.substring(2, line.indexOf(" |", 1) > 0 ? line.indexOf(" |", 1) : line.length());
            Matcher m = FLAG.matcher(first);
            while (m.find()) {
                if (!options.contains(m.group())) unknown.add(m.group());
            }
        }
        assertEquals(Set.of(), unknown, "flags in docs/CONFIGURATION.md's tables that no command has");
    }
}
