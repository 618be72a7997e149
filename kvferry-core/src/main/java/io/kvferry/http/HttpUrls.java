package io.kvferry.http;

import java.net.URI;
import java.net.URISyntaxException;
import java.net.http.HttpRequest;

/** Whether {@link java.net.http.HttpClient} can fetch a URL, checked where the URL comes in rather than where it is fetched. */
public final class HttpUrls {
    private HttpUrls() {}

    /**
     * Why {@code HttpClient} cannot send a request to {@code url}, or null when it can. A string may look
     * like {@code http://HOST:PORT/...} and still not be one: {@link URI} parses a host name only of
     * letters, digits, {@code '-'} and {@code '.'}, so {@code http://prefill_0:9000/} (a docker-compose
     * service name) has no host, and {@link HttpRequest#newBuilder(URI)} refuses it.
     */
    public static String whyNotFetchable(String url) {
        URI uri;
        try {
            uri = new URI(url);
        } catch (URISyntaxException e) {
            return "not a URI (" + e.getReason() + " at index " + e.getIndex() + ")";
        }
        if (uri.getHost() == null) {
            return "java.net.URI finds no host in it (a host name may hold only letters, digits, '-' and '.'; no '_'), "
                    + "so no HTTP request can be made to it";
        }
        try {
            HttpRequest.newBuilder(uri);
        } catch (IllegalArgumentException e) {
            return "no HTTP request can be made to it (" + e.getMessage() + ")";
        }
        return null;
    }
}
