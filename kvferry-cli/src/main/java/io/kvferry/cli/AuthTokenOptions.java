package io.kvferry.cli;

import io.kvferry.http.SecretFiles;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.CharacterCodingException;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Where a command finds the cluster token: {@code KVFERRY_AUTH_TOKEN} or {@code --auth-token-file}.
 * Never a flag value: anything on the command line is readable by every local user in
 * {@code /proc/PID/cmdline}, so {@code --auth-token VALUE} is refused with that reason.
 */
final class AuthTokenOptions {
    @Option(names = "--auth-token-file", description = "Read the cluster token from this file (its first line); "
            + "else the environment variable KVFERRY_AUTH_TOKEN.")
    Path authTokenFile;

    @Option(names = "--auth-token", hidden = true, description = "Refused: put the token in KVFERRY_AUTH_TOKEN or a file.")
    String onTheCommandLine;

    /** The token from --auth-token-file, else KVFERRY_AUTH_TOKEN; null when neither is given. */
    String token() {
        if (onTheCommandLine != null) {
            throw new IllegalArgumentException("--auth-token would put the cluster token on the command line, where any local user "
                    + "reads it in /proc/PID/cmdline: set KVFERRY_AUTH_TOKEN or pass --auth-token-file instead");
        }
        return secret("--auth-token-file", authTokenFile, "KVFERRY_AUTH_TOKEN", "the cluster token");
    }

    /**
     * A secret from {@code file}'s first line (named {@code flag} in errors), else from the environment
     * variable {@code env}; null when neither is given. A file that is missing, a directory, empty, not
     * UTF-8 or unreadable is refused, naming the flag and the file; one its group or every local user can
     * read is a warning on standard error ({@link SecretFiles}: {@code holds} says what it gives away).
     */
    static String secret(String flag, Path file, String env, String holds) {
        if (file != null) {
            String what = flag + " " + file;
            if (!Files.exists(file)) throw new IllegalArgumentException(what + " does not exist");
            if (Files.isDirectory(file)) throw new IllegalArgumentException(what + " is a directory, not a file");
            try {
                String t = Files.readAllLines(file).stream().findFirst().orElse("").trim();
                if (t.isEmpty()) throw new IllegalArgumentException(what + " is empty");
                String warning = SecretFiles.permissionWarning(flag, file, holds);
                if (warning != null) System.err.println("kvferry: warning: " + warning);
                return t;
            } catch (CharacterCodingException e) {
                throw new IllegalArgumentException(what + " is not UTF-8 text", e);
            } catch (AccessDeniedException e) {
                throw new IllegalArgumentException(what + " is not readable (permission denied)", e);
            } catch (IOException e) {
                throw new UncheckedIOException(what + ": cannot read it: " + e, e);
            }
        }
        String value = System.getenv(env);
        return value == null || value.isBlank() ? null : value.trim();
    }
}
