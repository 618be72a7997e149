package io.kvferry.http;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.util.Set;

/**
 * The one check of a file that holds a secret (the cluster token, the router's API key, the tenants' keys):
 * group or other read permission lets local users read it, and with it act as whoever holds the secret.
 * Every secret-file flag warns through it, in the same words.
 */
public final class SecretFiles {
    private SecretFiles() {}

    /**
     * Why {@code file}, given as {@code flag}, should not be left as it is, or null: it is readable by its
     * group or by every local user, and it holds {@code holds} (said in the warning). Null where the file
     * system has no POSIX permissions or they cannot be read.
     */
    public static String permissionWarning(String flag, Path file, String holds) {
        try {
            Set<PosixFilePermission> p = Files.getPosixFilePermissions(file);
            if (p.contains(PosixFilePermission.GROUP_READ) || p.contains(PosixFilePermission.OTHERS_READ)) {
                return flag + " " + file + " is readable by " + (p.contains(PosixFilePermission.OTHERS_READ) ? "every local user" : "its group")
                        + " and holds " + holds + ": chmod 600 it";
            }
            return null;
        } catch (UnsupportedOperationException | IOException e) {
            return null;
        }
    }
}
