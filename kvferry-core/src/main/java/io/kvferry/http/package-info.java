/**
 * HTTP plumbing shared by kvferry's own servers and clients, knowing nothing else of kvferry:
 * {@link io.kvferry.http.RequestGate} (the executor of an {@code HttpServer}: a deadline per request and
 * a cap on requests under way; the bootstrap registry's and kvferry-ops' {@code OpsServer}),
 * {@link io.kvferry.http.BoundedBody} (a capped response body for {@code HttpClient}),
 * {@link io.kvferry.http.HttpUrls} (whether {@code HttpClient} can fetch a URL at all) and
 * {@link io.kvferry.http.SecretFiles} (the warning about a secret file others can read).
 */
package io.kvferry.http;
