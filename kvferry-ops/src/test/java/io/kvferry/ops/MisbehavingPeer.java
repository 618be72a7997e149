package io.kvferry.ops;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A raw HTTP/1.1 peer on 127.0.0.1 that answers every request with a fixed response head and then
 * either stalls (holds the connection, sends nothing more) or streams a body of spaces of a given
 * length and closes (or answers a whole fixed response and closes). Closing it closes every connection it holds.
 */
final class MisbehavingPeer implements AutoCloseable {
    private final ServerSocket server;
    private final List<Socket> held = new CopyOnWriteArrayList<>();
    private final Thread acceptor;

    private MisbehavingPeer(String head, long bodyBytes) throws IOException {
        server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        acceptor = Thread.ofVirtual().name("misbehaving-peer").start(() -> {
            while (!server.isClosed()) {
                Socket s;
                try {
                    s = server.accept();
                } catch (IOException closed) {
                    return;
                }
                held.add(s);
                Thread.ofVirtual().start(() -> answer(s, head, bodyBytes));
            }
        });
    }

    /** Answers 200 with {@code Content-Length: 100000} and the first bytes of a JSON body, then nothing more. */
    static MisbehavingPeer stallingMidBody() throws IOException {
        return new MisbehavingPeer("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"kind\":", -1);
    }

    /** Answers 200 and declares a body of {@code contentLength} bytes (it sends nothing of it). */
    static MisbehavingPeer declaring(long contentLength) throws IOException {
        return new MisbehavingPeer("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + contentLength + "\r\n\r\n", -1);
    }

    /** Answers 200 with no Content-Length and sends {@code bytes} bytes of body before closing. */
    static MisbehavingPeer streaming(long bytes) throws IOException {
        return new MisbehavingPeer("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n", bytes);
    }

    /** Answers 200 with {@code body} (ASCII) and closes. */
    static MisbehavingPeer answering(String body) throws IOException {
        return new MisbehavingPeer("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + body.length()
                + "\r\nConnection: close\r\n\r\n" + body, 0);
    }

    String statusJsonUrl() {
        return "http://127.0.0.1:" + server.getLocalPort() + "/status.json";
    }

    /** Connections it accepted so far (one per request: it never answers two on one connection). */
    int connections() {
        return held.size();
    }

    String address() {
        return "127.0.0.1:" + server.getLocalPort();
    }

    private static void answer(Socket s, String head, long bodyBytes) {
        try {
            InputStream in = s.getInputStream();
            // the request head, up to its blank line (a GET has no body)
            int matched = 0;
            for (int b; matched < 4 && (b = in.read()) >= 0; ) matched = b == "\r\n\r\n".charAt(matched) ? matched + 1 : (b == '\r' ? 1 : 0);
            OutputStream out = s.getOutputStream();
            out.write(head.getBytes(StandardCharsets.US_ASCII));
            out.flush();
            if (bodyBytes < 0) return; // stall: the connection stays open until the client or close() ends it
            byte[] spaces = new byte[64 * 1024];
            Arrays.fill(spaces, (byte) ' ');
            for (long left = bodyBytes; left > 0; left -= spaces.length) out.write(spaces, 0, (int) Math.min(left, spaces.length));
            s.close();
        } catch (IOException e) {
            // the client gave up on it: what the tests expect of it
        }
    }

    @Override
    public void close() throws IOException {
        server.close();
        for (Socket s : held) s.close();
        try {
            acceptor.join(2_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
