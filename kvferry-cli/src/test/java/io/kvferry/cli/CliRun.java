package io.kvferry.cli;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/** One in-process CLI run with its standard error captured: the exit code and what the user would read. */
record CliRun(int code, String err) {
    static CliRun of(String... args) {
        PrintStream old = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        try {
            return new CliRun(Main.run(args), buf.toString(StandardCharsets.UTF_8));
        } finally {
            System.setErr(old);
        }
    }
}
