package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.management.ThreadMXBean;
import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpContext;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpPrincipal;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A request body read as JSON ({@link Http#readJson}): strict UTF-8 checked without a copy of the body as text, a byte
 * order mark skipped, UTF-16 refused (JSON's encoding is UTF-8 alone). Heap, not time: the bytes the reading thread
 * allocates ({@code com.sun.management.ThreadMXBean}).
 */
class RequestBodyTest {
    /** An exchange whose request body is {@code body} (all {@link Http#readJson} reads of it). */
    static HttpExchange exchange(byte[] body) {
        Headers response = new Headers();
        return new HttpExchange() {
            private final InputStream in = new ByteArrayInputStream(body);

            @Override public Headers getRequestHeaders() { return new Headers(); }
            @Override public Headers getResponseHeaders() { return response; }
            @Override public URI getRequestURI() { return URI.create("/"); }
            @Override public String getRequestMethod() { return "POST"; }
            @Override public HttpContext getHttpContext() { return null; }
            @Override public void close() { }
            @Override public InputStream getRequestBody() { return in; }
            @Override public OutputStream getResponseBody() { return new ByteArrayOutputStream(); }
            @Override public void sendResponseHeaders(int rCode, long responseLength) { }
            @Override public InetSocketAddress getRemoteAddress() { return null; }
            @Override public int getResponseCode() { return -1; }
            @Override public InetSocketAddress getLocalAddress() { return null; }
            @Override public String getProtocol() { return "HTTP/1.1"; }
            @Override public Object getAttribute(String name) { return null; }
            @Override public void setAttribute(String name, Object value) { }
            @Override public void setStreams(InputStream i, OutputStream o) { }
            @Override public HttpPrincipal getPrincipal() { return null; }
        };
    }

    static JsonNode read(byte[] body) throws Exception {
        return Http.readJson(exchange(body), Http.MAX_BODY_BYTES);
    }

    static long allocated() {
        return ((ThreadMXBean) ManagementFactory.getThreadMXBean()).getCurrentThreadAllocatedBytes();
    }

    /**
     * A body near the limit is checked and parsed without a copy of it as text: its bytes (read once) and small buffers.
     * Decoding it whole into a CharBuffer of its length and a String took three times its bytes more.
     */
    @Test
    void aBigBodyIsCheckedWithoutACopyAsText() throws Exception {
        byte[] body = ("{\"a\":1}" + " ".repeat(Http.MAX_BODY_BYTES - 7)).getBytes(StandardCharsets.UTF_8);
        for (int i = 0; i < 3; i++) read("{\"a\":1}".getBytes(StandardCharsets.UTF_8)); // classes loaded, buffers recycled
        long before = allocated();
        JsonNode n = read(body);
        long took = allocated() - before;
        assertEquals(1, n.path("a").asInt());
        // The body's bytes as read (readNBytes may hold them twice while it reads), not three times more.
        assertTrue(took < 2L * body.length + (256 << 10), "allocated " + took + " bytes reading a body of " + body.length);
    }

    @Test
    void aByteOrderMarkIsSkippedAndMalformedBytesNamedAtTheirOffset() throws Exception {
        byte[] bom = {(byte) 0xEF, (byte) 0xBB, (byte) 0xBF, '{', '"', 'a', '"', ':', '2', '}'};
        assertEquals(2, read(bom).path("a").asInt());
        byte[] overlong = {'{', '"', 'a', '"', ':', '"', (byte) 0xC0, (byte) 0xAF, '"', '}'};
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> read(overlong));
        assertEquals("the request body is not valid UTF-8: malformed bytes C0 at byte 6", e.getMessage());
    }

    /** UTF-16 is valid UTF-8 where it is ASCII (NULs between), but not JSON's encoding: malformed JSON, as JSON text. */
    @Test
    void utf16IsNotReadAsJson() {
        byte[] utf16 = "{\"a\":3}".getBytes(StandardCharsets.UTF_16BE);
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> read(utf16));
        assertTrue(e.getMessage().startsWith("malformed JSON"), e.getMessage());
    }
}
