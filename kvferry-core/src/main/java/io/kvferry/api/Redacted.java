package io.kvferry.api;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.RecordComponent;
import java.util.Arrays;
import java.util.Set;

/**
 * {@code toString} for a record that holds a secret (the cluster token): every component as the
 * record's own {@code toString} shows it, except the named ones, shown only as {@code <set>} or
 * {@code <none>}. Records print every component by default, so a config that is logged, put in an
 * exception or shown by a debugger would carry the token with it.
 */
public final class Redacted {
    private Redacted() {
    }

    /** @throws IllegalArgumentException when a secret names no component (a renamed one would print in full) */
    public static String toString(Record record, Set<String> secrets) {
        StringBuilder b = new StringBuilder(record.getClass().getSimpleName()).append('[');
        RecordComponent[] components = record.getClass().getRecordComponents();
        for (String secret : secrets) {
            if (Arrays.stream(components).noneMatch(c -> c.getName().equals(secret))) {
                throw new IllegalArgumentException(record.getClass().getSimpleName() + " has no component " + secret + " to hide");
            }
        }
        for (int i = 0; i < components.length; i++) {
            String name = components[i].getName();
            Object value = value(record, components[i].getAccessor());
            if (i > 0) b.append(", ");
            b.append(name).append('=');
            if (secrets.contains(name)) {
                b.append(value == null || value.toString().isBlank() ? "<none>" : "<set>");
            } else {
                b.append(value);
            }
        }
        return b.append(']').toString();
    }

    private static Object value(Record record, Method accessor) {
        try {
            accessor.setAccessible(true); // a nested or package-private record's accessor
            return accessor.invoke(record);
        } catch (IllegalAccessException | InvocationTargetException e) {
            return "<" + e.getClass().getSimpleName() + ">";
        }
    }
}
