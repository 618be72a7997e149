package io.kvferry.testkit;

import com.fasterxml.jackson.annotation.JsonSubTypes;
import com.fasterxml.jackson.annotation.JsonTypeInfo;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;

/**
 * What a role process tells its parent while it runs, one JSON object per stdout line with a
 * {@code type} discriminator ({@code {"type":"endpoint","rank":0,"host":"127.0.0.1","port":4242}}),
 * read back with Jackson. Its final {@link RoleReport}s follow as their own JSON lines.
 */
@JsonTypeInfo(use = JsonTypeInfo.Id.NAME, property = "type")
@JsonSubTypes({@JsonSubTypes.Type(value = RoleEvent.Endpoint.class, name = "endpoint"),
        @JsonSubTypes.Type(value = RoleEvent.Progress.class, name = "progress"),
        @JsonSubTypes.Type(value = RoleEvent.Status.class, name = "status"),
        @JsonSubTypes.Type(value = RoleEvent.Metrics.class, name = "metrics")})
public sealed interface RoleEvent permits RoleEvent.Endpoint, RoleEvent.Progress, RoleEvent.Status, RoleEvent.Metrics {
    ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
    /** How an event line starts; anything else is a report or log output. */
    String PREFIX = "{\"type\":";

    /** A prefill rank's control endpoint (the chaos harness puts a fault proxy in front of it). */
    record Endpoint(int rank, String host, int port) implements RoleEvent {}

    /** A decode's running count of concluded and succeeded requests (faults are timed by it). */
    record Progress(int concluded, int succeeded) implements RoleEvent {}

    /** The role process's status endpoint ({@code http://host:port}: {@code /status}, {@code /status.json}, {@code /metrics}). */
    record Status(String url) implements RoleEvent {}

    /** The role process's final scrape (Prometheus text), taken when its requests concluded, before teardown. */
    record Metrics(String prometheus) implements RoleEvent {}

    /** The event as one line of JSON. */
    static String line(RoleEvent e) {
        try {
            return JSON.writeValueAsString(e);
        } catch (JsonProcessingException x) {
            throw new IllegalStateException("cannot encode " + e, x);
        }
    }

    /** Parses an event line; a malformed one fails naming the line. */
    static RoleEvent parse(String line) throws IOException {
        try {
            return JSON.readValue(line, RoleEvent.class);
        } catch (JsonProcessingException e) {
            throw new IOException("malformed role event line '" + line + "': " + e.getOriginalMessage(), e);
        }
    }
}
