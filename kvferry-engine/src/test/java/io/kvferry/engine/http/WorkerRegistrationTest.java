package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serve.WorkerRegistration;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.ServerSocket;
import java.net.URI;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An engine role's registration with a router ({@code serve --register-with}): it is added once the router
 * takes it, even a router that starts after it, and removed when it stops; a refusal ends the attempts at
 * once, a router that never comes ends them when the retry time has passed.
 */
class WorkerRegistrationTest {
    private static final String TOKEN = "worker-registration-test-cluster-token";
    private static final ObjectMapper JSON = new ObjectMapper();

    private static ModelFiles.Loaded model;
    private static EngineStack first;
    private static EngineStack second;

    @BeforeAll
    static void engines() throws Exception {
        model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        first = EngineStack.open(spec, spec, TOKEN, TOKEN);
        second = EngineStack.open(spec, spec, TOKEN, TOKEN);
    }

    @AfterAll
    static void stop() {
        if (second != null) second.close();
        if (first != null) first.close();
    }

    private static Router router(int port) throws Exception {
        return new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(), "m",
                "127.0.0.1", port, new Router.Access(TOKEN, null), null);
    }

    private static URI url(Router r) {
        return URI.create("http://127.0.0.1:" + r.port());
    }

    private static JsonNode workers(Router r) throws Exception {
        return JSON.readTree(EngineAuthTest.send(r.port(), "GET", Router.WORKERS_ROUTE, null, null).body());
    }

    private static String message(ExecutionException e) {
        return e.getCause().getMessage();
    }

    @Test
    @Timeout(60)
    void anEngineIsAddedOnceTheRouterTakesItAndRemovedWhenItStops() throws Exception {
        try (Router router = router(0)) {
            try (WorkerRegistration reg = new WorkerRegistration(url(router), second.prefillUrl(), "prefill", TOKEN, Duration.ofSeconds(30))) {
                reg.registered().get(30, TimeUnit.SECONDS);
                JsonNode w = workers(router);
                assertEquals(2, w.path("prefills").size(), w.toString());
                assertEquals(second.prefillUrl(), w.path("prefills").get(1).path("url").asText());
                assertEquals(second.addr, w.path("prefills").get(1).path("bootstrap").asText());
            }
            JsonNode w = workers(router);
            assertEquals(1, w.path("prefills").size(), "removed when it stopped: " + w);
            assertEquals(first.prefillUrl(), w.path("prefills").get(0).path("url").asText());
        }
    }

    @Test
    @Timeout(60)
    void aRouterThatStartsLaterIsTriedUntilItTakesTheEngine() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort(); // nothing listens there until the router starts
        }
        try (WorkerRegistration reg = new WorkerRegistration(URI.create("http://127.0.0.1:" + port), second.decodeUrl(), "decode", TOKEN,
                Duration.ofSeconds(40))) {
            assertTrue(!reg.registered().isDone(), "registered with no router");
            try (Router router = router(port)) {
                reg.registered().get(30, TimeUnit.SECONDS);
                JsonNode w = workers(router);
                assertEquals(2, w.path("decodes").size(), w.toString());
                assertEquals(second.decodeUrl(), w.path("decodes").get(1).path("url").asText());
            }
        }
    }

    @Test
    @Timeout(60)
    void aRefusalEndsTheAttemptsAtOnce() throws Exception {
        try (Router router = router(0)) {
            // A wrong token: asked again, the answer would be the same. An hour of retries would outlast the test's timeout.
            try (WorkerRegistration reg = new WorkerRegistration(url(router), second.decodeUrl(), "decode", "not-" + TOKEN, Duration.ofHours(1))) {
                String why = message(assertThrows(ExecutionException.class, () -> reg.registered().get(30, TimeUnit.SECONDS)));
                assertTrue(why.contains("HTTP 401"), why);
            }
            // A bad URL: the router refuses it as such.
            try (WorkerRegistration reg = new WorkerRegistration(url(router), "ftp://127.0.0.1:1", "decode", TOKEN, Duration.ofHours(1))) {
                String why = message(assertThrows(ExecutionException.class, () -> reg.registered().get(30, TimeUnit.SECONDS)));
                assertTrue(why.contains("HTTP 400"), why);
            }
            assertEquals(1, workers(router).path("decodes").size(), "nothing was added");
        }
    }

    /** A router that has the engine already (its flags name it, or the engine restarted): registered, and removed at its stop. */
    @Test
    @Timeout(60)
    void aRouterThatHasTheEngineAlreadyCountsAsTakingIt() throws Exception {
        try (Router router = router(0)) {
            try (WorkerRegistration reg = new WorkerRegistration(url(router), first.decodeUrl(), "decode", TOKEN, Duration.ofHours(1))) {
                reg.registered().get(30, TimeUnit.SECONDS);
                assertEquals(1, workers(router).path("decodes").size());
            }
            assertEquals(0, workers(router).path("decodes").size(), "removed when it stopped");
        }
    }

    @Test
    @Timeout(60)
    void aRouterThatNeverComesEndsTheAttemptsWhenTheRetryTimeHasPassed() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        try (WorkerRegistration reg = new WorkerRegistration(URI.create("http://127.0.0.1:" + port), second.decodeUrl(), "decode", TOKEN,
                Duration.ofSeconds(2))) {
            String why = message(assertThrows(ExecutionException.class, () -> reg.registered().get(30, TimeUnit.SECONDS)));
            assertTrue(why.contains("still failing after 2 s") && why.contains("ConnectException"), why);
        }
    }
}
