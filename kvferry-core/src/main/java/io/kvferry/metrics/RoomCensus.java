package io.kvferry.metrics;

import io.kvferry.api.KVPoll;

/** What a rank's gauges read when scraped: its rooms by state and its peer links. */
public interface RoomCensus {
    int rooms(KVPoll state);

    int peers();
}
