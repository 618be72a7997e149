package io.kvferry.cli;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

class MainLogLevelTest {
    String saved;

    @BeforeEach
    void save() {
        saved = System.getProperty(Main.LOG_LEVEL_PROPERTY);
        System.clearProperty(Main.LOG_LEVEL_PROPERTY);
    }

    @AfterEach
    void restore() {
        if (saved == null) System.clearProperty(Main.LOG_LEVEL_PROPERTY);
        else System.setProperty(Main.LOG_LEVEL_PROPERTY, saved);
    }

    @Test
    void libraryInfoLinesAreHiddenUnlessVerbose() {
        assertArrayEquals(new String[]{"bench", "--json"}, Main.withLogLevel(new String[]{"bench", "--json"}));
        assertEquals("warn", System.getProperty(Main.LOG_LEVEL_PROPERTY));
    }

    @Test
    void verboseShowsThemAndIsTakenOffTheLine() {
        assertArrayEquals(new String[]{"bench", "--json"}, Main.withLogLevel(new String[]{"bench", "--verbose", "--json"}));
        assertEquals("info", System.getProperty(Main.LOG_LEVEL_PROPERTY));
    }

    @Test
    void anExplicitLevelWins() {
        System.setProperty(Main.LOG_LEVEL_PROPERTY, "debug");
        Main.withLogLevel(new String[]{"bench"});
        assertEquals("debug", System.getProperty(Main.LOG_LEVEL_PROPERTY));
    }
}
