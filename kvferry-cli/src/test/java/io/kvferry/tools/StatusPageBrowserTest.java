package io.kvferry.tools;

import io.kvferry.bench.BenchResult;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.serve.Roles;
import io.kvferry.bench.BenchRunner;
import io.kvferry.ops.ClusterStatus;
import io.kvferry.ops.Ops;
import io.kvferry.ops.OpsHandlers;
import io.kvferry.ops.OpsServer;
import io.kvferry.ops.RegistryOps;
import io.kvferry.ops.StatusJson;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;
import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.openqa.selenium.By;
import org.openqa.selenium.JavascriptExecutor;
import org.openqa.selenium.OutputType;
import org.openqa.selenium.StaleElementReferenceException;
import org.openqa.selenium.TakesScreenshot;
import org.openqa.selenium.WebDriver;
import org.openqa.selenium.chrome.ChromeDriver;
import org.openqa.selenium.chrome.ChromeDriverService;
import org.openqa.selenium.chrome.ChromeOptions;
import org.openqa.selenium.logging.LogType;
import org.openqa.selenium.support.ui.WebDriverWait;

import java.io.File;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The bootstrap registry's status page (and the router's) in a real headless browser (Debian's chromium and chromium-driver,
 * driven by Selenium) while a bench runs: the page loads, lists the registered prefill ranks, and its
 * bandwidth chart and room counts change. A screenshot is saved under target/ and named in the output.
 * Without chromium the test is skipped saying how to install it, unless KVFERRY_REQUIRE_BROWSER=1 (CI).
 */
@Timeout(300)
class StatusPageBrowserTest {
    private static final File CHROMIUM = new File("/usr/bin/chromium");
    private static final File DRIVER = new File("/usr/bin/chromedriver");

    /** Skips (or, with KVFERRY_REQUIRE_BROWSER=1, fails) without chromium and its driver. */
    private static void requireBrowser() {
        if (!CHROMIUM.canExecute() || !DRIVER.canExecute()) {
            String why = "no headless browser: apt-get install -y chromium chromium-driver (.ci/run installs them)";
            if ("1".equals(System.getenv("KVFERRY_REQUIRE_BROWSER"))) fail(why);
            Assumptions.abort(why);
        }
    }

    private static ChromeOptions headless() {
        ChromeOptions options = new ChromeOptions();
        options.setBinary(CHROMIUM);
        options.addArguments("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1900");
        return options;
    }

    /**
     * A link whose faster offer was passed over (or whose path is slower than tcp) shows why next to its
     * data path; a link without a note shows the path alone. The page renders a process document served
     * as a rank process serves its own.
     */
    @Test
    void aLinksDataPathNoteShowsNextToItsPath() throws Exception {
        requireBrowser();
        JsonNode doc = StatusJson.MAPPER.readTree("""
                {"kind":"process","role":"prefill","pid":7,"now_ms":1,"uptime_ms":1,
                 "ranks":[{"role":"prefill","tp_rank":0,"pp_rank":0,"dp_rank":0,"cp_rank":0,"backend":"auto","endpoint":"h:1",
                   "rooms_by_state":{},"oldest_rooms":[],"recent_failures":[],"failures_by_kind":{},
                   "peers":[{"name":"session-a","address":"h:2","data_path":"tcp",
                     "data_path_note":"ucx not used: slower than tcp here (UCX reaches this decode over tcp with no RMA lane)",
                     "rooms":0,"stripes":0,"silent_millis":3},
                     {"name":"session-b","address":"h:3","data_path":"shm","data_path_note":"","rooms":0,"stripes":0,"silent_millis":3}],
                   "bytes_moved":0,"rooms_concluded":0}],
                 "totals":{"bytes":0,"rooms_concluded":0,"peers":2,"rooms_by_state":{},"failures_by_kind":{}}}""");
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, headless());
        try (OpsServer ops = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> doc)) {
            browser.get(ops.baseUrl() + "/status");
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(60), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            By rows = By.xpath("//table[@id='peers']/tbody/tr[not(contains(@class,'empty'))]");
            wait.until(b -> b.findElements(rows).size() == 2);
            List<String> peers = rowTexts(browser, "#peers tbody tr:not(.empty)", "|");
            String noted = peers.get(0).split("\\|")[3];
            assertEquals("tcp — ucx not used: slower than tcp here (UCX reaches this decode over tcp with no RMA lane)", noted);
            assertEquals("shm", peers.get(1).split("\\|")[3]);
            assertTrue(browser.findElement(By.id("engines-section")).getAttribute("hidden") != null, "no engine: no engines table");
        } finally {
            browser.quit();
            service.close();
        }
    }

    /**
     * A server that stops answering (its status.json hangs) leaves the page marked stale, not showing its last figures as
     * current: each fetch is aborted after 3 s (common.js poll), #error says "not updated for N s: status.json did not answer
     * within 3 s" and the figures are dimmed; once the server answers again the marker goes, and nothing reached the console
     * (no script error, no aborted fetch). An engine's page and the router's alike. The page waits on its own state
     * (WebDriverWait), the server's hang on a latch: no sleep.
     */
    @Test
    void aHungStatusJsonMarksThePageStaleUntilItAnswersAgain() throws Exception {
        requireBrowser();
        String process = """
                {"kind":"process","role":"prefill","pid":7,"now_ms":1,"uptime_ms":1,
                 "ranks":[{"role":"prefill","tp_rank":0,"pp_rank":0,"dp_rank":0,"cp_rank":0,"backend":"tcp","endpoint":"h:1",
                   "rooms_by_state":{},"oldest_rooms":[],"recent_failures":[],"failures_by_kind":{},
                   "peers":[{"name":"session-a","address":"h:2","data_path":"tcp","data_path_note":"","rooms":0,"stripes":0,"silent_millis":3}],
                   "bytes_moved":0,"rooms_concluded":42}],
                 "totals":{"bytes":0,"rooms_concluded":42,"peers":1,"rooms_by_state":{},"failures_by_kind":{}}}""";
        staleUntilItAnswersAgain("status.html", "status.js", process, By.id("rooms-concluded"), "42");
        String router = """
                {"kind":"router","pid":9,"model":"m","now_ms":1,"uptime_ms":1,"status":"ok",
                 "config":{"max_concurrent_requests":0,"queue_timeout_ms":0,"tenants":false,"max_backends":64,"replace_after_ms":30000},
                 "backends":[{"url":"http://p:1","role":"prefill","healthy":true,"in_flight":0,"out_of_rotation_ms":null,"bootstrap":"p:2",
                   "last_check":"ok","last_check_age_ms":5}],
                 "requests":{"running":0,"waiting":0,"total":0,"by_status":{},"by_class":{"2xx":0,"4xx":0,"5xx":0}},
                 "tokens":{"prompt":0,"generated":0},"rates":{"window_s":0},"latency":{"window_s":60}}""";
        staleUntilItAnswersAgain("router.html", "router.js", router, By.id("title"), "kvferry router · m · pid 9");
    }

    /** {@link #aHungStatusJsonMarksThePageStaleUntilItAnswersAgain} on one page ({@code html} and its {@code js}), rendered once {@code figure} reads {@code shown}. */
    private static void staleUntilItAnswersAgain(String html, String js, String document, By figure, String shown) throws Exception {
        byte[] doc = document.getBytes(StandardCharsets.UTF_8);
        AtomicReference<CountDownLatch> hang = new AtomicReference<>(); // set: status.json waits on it, answering nothing
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 8);
        server.setExecutor(Executors.newVirtualThreadPerTaskExecutor()); // a hung exchange holds no other
        String[][] routes = {{"/status", "text/html; charset=utf-8", html}, {"/common.js", "text/javascript; charset=utf-8", "common.js"},
                {"/status.js", "text/javascript; charset=utf-8", js}, {"/status.css", "text/css; charset=utf-8", "status.css"}};
        for (String[] route : routes) {
            byte[] body = OpsHandlers.page(route[2]);
            server.createContext(route[0], ex -> {
                ex.getResponseHeaders().set("Content-Type", route[1]);
                ex.sendResponseHeaders(200, body.length);
                try (ex) {
                    ex.getResponseBody().write(body);
                }
            });
        }
        server.createContext("/status.json", ex -> {
            try (ex) {
                CountDownLatch held = hang.get();
                if (held != null) held.await();
                ex.getResponseHeaders().set("Content-Type", "application/json");
                ex.sendResponseHeaders(200, doc.length);
                ex.getResponseBody().write(doc);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        server.start();
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        ChromeOptions options = headless();
        options.setCapability("goog:loggingPrefs", Map.of("browser", "ALL")); // the console, read at the end
        WebDriver browser = new ChromeDriver(service, options);
        try {
            browser.get("http://127.0.0.1:" + server.getAddress().getPort() + "/status");
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(60), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            wait.withMessage(() -> html + " says: " + browser.findElement(By.id("error")).getText());
            wait.until(b -> b.findElement(figure).getText().equals(shown));
            assertTrue(browser.findElement(By.id("error")).getAttribute("hidden") != null, html + " fresh: no marker");

            CountDownLatch held = new CountDownLatch(1);
            hang.set(held);
            wait.until(b -> b.findElement(By.id("error")).getAttribute("hidden") == null);
            String marker = browser.findElement(By.id("error")).getText();
            assertTrue(marker.matches("not updated for [0-9]+ s: status\\.json did not answer within 3 s"), html + ": " + marker);
            assertTrue(bodyIsStale(browser), html + ": the figures are dimmed");
            assertEquals(shown, browser.findElement(figure).getText(), html + ": the last figures stay, marked as old");

            hang.set(null);
            held.countDown();
            wait.until(b -> b.findElement(By.id("error")).getAttribute("hidden") != null);
            assertTrue(!bodyIsStale(browser), html + " fresh again: not dimmed");
            List<String> console = browser.manage().logs().get(LogType.BROWSER).getAll().stream()
                    .map(e -> e.getLevel() + " " + e.getMessage()).toList();
            // The aborted fetches log nothing; the browser's own favicon.ico, which this test's server has not, is no page error.
            assertTrue(console.stream().noneMatch(m -> m.startsWith("SEVERE") && !m.contains("/favicon.ico ")), html + ": no error in the console: " + console);
        } finally {
            browser.quit();
            service.close();
            CountDownLatch held = hang.getAndSet(null);
            if (held != null) held.countDown();
            server.stop(0);
        }
    }

    private static boolean bodyIsStale(WebDriver browser) {
        return (Boolean) ((JavascriptExecutor) browser).executeScript("return document.body.classList.contains('stale')");
    }

    /**
     * The engines' processes show their KV pages (used, cached by the prefix cache, free) and the prompt tokens their
     * prefix caches served, the prefill's prompt tokens and requests that waited for a shared prefix too, their drains and
     * structured-output compilers: a cluster view of an engine-prefill and an engine-decode
     * document shaped as the engine roles serve theirs (StatusCommandTest checks those against real engines).
     */
    @Test
    void eachEnginesCachedPagesAndTokensShowOnTheClusterPage() throws Exception {
        requireBrowser();
        String rank = """
                {"role":"%s","tp_rank":0,"pp_rank":0,"dp_rank":0,"cp_rank":0,"backend":"tcp","endpoint":"h:1",
                 "rooms_by_state":{},"oldest_rooms":[],"recent_failures":[],"failures_by_kind":{},"peers":[],
                 "bytes_moved":0,"rooms_concluded":0}""";
        String totals = """
                "totals":{"bytes":0,"rooms_concluded":0,"peers":0,"rooms_by_state":{},"failures_by_kind":{}}""";
        JsonNode prefill = StatusJson.MAPPER.readTree("{\"kind\":\"process\",\"role\":\"engine-prefill\",\"pid\":7,\"now_ms\":1,"
                + "\"uptime_ms\":1,\"ranks\":[" + rank.formatted("prefill") + "]," + totals + ","
                + "\"engine\":{\"kv_pages\":{\"used\":3,\"cached\":5,\"free\":56},\"cached_tokens\":1600,\"prompt_tokens\":4096,"
                + "\"prefix_deferrals\":12,\"draining\":true,\"drain\":{\"completed\":4,\"cut\":1},"
                + "\"structured_outputs\":{\"outcomes\":{\"compiled\":2,\"cached\":5,\"refused\":0,\"deadline\":1,\"busy\":0},"
                + "\"waiting\":1,\"compiles\":3,\"compile_seconds\":0.0375,\"mean_compile_ms\":12.5}}}");
        JsonNode decode = StatusJson.MAPPER.readTree("{\"kind\":\"process\",\"role\":\"engine-decode\",\"pid\":8,\"now_ms\":1,"
                + "\"uptime_ms\":1,\"ranks\":[" + rank.formatted("decode") + "]," + totals + ","
                + "\"engine\":{\"kv_pages\":{\"used\":0,\"cached\":2,\"free\":62},\"cached_tokens\":32}}");
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, headless());
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("t0ken"));
             OpsServer p = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> prefill);
             OpsServer d = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> decode)) {
            ClusterStatus cluster = RegistryOps.mount(registry, Ops.newRegistry(), List.of());
            cluster.watch(p.statusJsonUrl());
            cluster.watch(d.statusJsonUrl());
            browser.get("http://127.0.0.1:" + registry.port() + "/status");
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(60), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            wait.withMessage(() -> "the page says: " + browser.findElement(By.id("error")).getText());
            By engines = By.xpath("//table[@id='engines']/tbody/tr[not(contains(@class,'empty'))]");
            wait.until(b -> b.findElements(engines).size() == 2);
            List<String> rows = rowTexts(browser, "#engines tbody tr:not(.empty)", "|").stream().sorted().toList();
            assertEquals(List.of("engine-decode 8|0|2|62|32|–|–|–", "engine-prefill 7|3|5|56|1,600|4,096|12|draining: 4 completed, 1 cut"), rows,
                    "the decode's document has no drain state (an older engine's): –");
            assertTrue(browser.findElement(By.id("engines-section")).getAttribute("hidden") == null, "the engines table shows");
            // The prefill's structured-output compiler; the decode's document has none, so no row of it.
            By outputs = By.xpath("//table[@id='outputs']/tbody/tr[not(contains(@class,'empty'))]");
            wait.until(b -> b.findElements(outputs).size() == 1);
            assertEquals(List.of("engine-prefill 7|2|5|0|1|0|1|12.50 ms"), rowTexts(browser, "#outputs tbody tr:not(.empty)", "|"));
            assertTrue(browser.findElement(By.id("outputs-section")).getAttribute("hidden") == null, "the structured outputs table shows");
        } finally {
            browser.quit();
            service.close();
        }
    }

    /**
     * The registry's page gathers documents from every process that published a status URL; one whose document
     * is not shaped as kvferry's (another program at that URL, a hostile process, a broken build) is listed down
     * with why, and the others are still shown: the page does not fail as a whole for it.
     */
    @Test
    void oneMalformedProcessDocumentDoesNotBlankTheClusterPage() throws Exception {
        requireBrowser();
        JsonNode good = StatusJson.MAPPER.readTree("""
                {"kind":"process","role":"prefill","pid":7,"now_ms":1,"uptime_ms":1,
                 "ranks":[{"role":"prefill","tp_rank":0,"pp_rank":0,"dp_rank":0,"cp_rank":0,"backend":"tcp","endpoint":"h:1",
                   "rooms_by_state":{},"oldest_rooms":[],"recent_failures":[],"failures_by_kind":{},
                   "peers":[{"name":"session-a","address":"h:2","data_path":"tcp","data_path_note":"","rooms":0,"stripes":0,
                     "silent_millis":3}],"bytes_moved":0,"rooms_concluded":0}],
                 "totals":{"bytes":0,"rooms_concluded":0,"peers":1,"rooms_by_state":{},"failures_by_kind":{}}}""");
        JsonNode malformed = StatusJson.MAPPER.readTree("""
                {"kind":"process","role":"decode","pid":8,"ranks":[{"role":"decode","tp_rank":0,"peers":"none"}]}""");
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, headless());
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("t0ken"));
             OpsServer goodProcess = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> good);
             OpsServer badProcess = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> malformed)) {
            ClusterStatus cluster = RegistryOps.mount(registry, Ops.newRegistry(), List.of());
            cluster.watch(goodProcess.statusJsonUrl());
            cluster.watch(badProcess.statusJsonUrl());
            browser.get("http://127.0.0.1:" + registry.port() + "/status");
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(60), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            wait.withMessage(() -> "the page says: " + browser.findElement(By.id("error")).getText());
            By processes = By.xpath("//table[@id='processes']/tbody/tr[not(contains(@class,'empty'))]");
            wait.until(b -> b.findElements(processes).size() == 2);
            List<String> rows = rowTexts(browser, "#processes tbody tr:not(.empty)", " ");
            assertTrue(rows.get(0).contains(" up"), rows.get(0));
            String down = rows.get(1);
            assertTrue(down.contains("down: not a kvferry process status document: ranks[0]"), "the malformed one is down, saying why: " + down);
            By peers = By.xpath("//table[@id='peers']/tbody/tr[not(contains(@class,'empty'))]");
            wait.until(b -> b.findElements(peers).size() == 1);
            assertTrue(rowTexts(browser, "#peers tbody tr:not(.empty)", " ").getFirst().contains("session-a"));
            assertTrue(browser.findElement(By.id("error")).getAttribute("hidden") != null, browser.findElement(By.id("error")).getText());
        } finally {
            browser.quit();
            service.close();
        }
    }

    /**
     * The router's own page ({@code GET /status} of a router over real engines): its backends in rotation with their last
     * check, and the requests answered, by status, their tokens and TTFT / end-to-end percentiles as requests are served,
     * read live from its status.json. A screenshot is saved under target/.
     */
    @Test
    void theRoutersPageShowsItsBackendsAndRequestsLive() throws Exception {
        requireBrowser();
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 8, 32, "tcp", "127.0.0.1", 0, 0,
                "router-page-test");
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, headless());
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        try (Roles.Role prefill = Roles.prefill(o); Roles.Role decode = Roles.decode(o);
             Roles.Role router = Roles.router(o, List.of("http://127.0.0.1:" + prefill.port()), List.of("http://127.0.0.1:" + decode.port()))) {
            String base = "http://127.0.0.1:" + router.port();
            browser.get(base + "/status");
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(60), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            wait.withMessage(() -> "the page says: " + browser.findElement(By.id("error")).getText());
            By backends = By.cssSelector("#backends tbody tr.backend-row");
            wait.until(b -> b.findElements(backends).size() == 2);
            List<String> rows = rowTexts(browser, "#backends tbody tr.backend-row", "|");
            assertTrue(rows.get(0).startsWith("prefill|http://127.0.0.1:" + prefill.port() + "|in rotation|0|ok|"), rows.toString());
            assertTrue(rows.get(0).endsWith("|127.0.0.1:" + prefill.bootstrapPort()), rows.toString());
            assertTrue(rows.get(1).startsWith("decode|http://127.0.0.1:" + decode.port() + "|in rotation|0|ok|"), rows.toString());
            assertEquals("0", browser.findElement(By.id("total")).getText());
            assertEquals("–", browser.findElement(By.id("ttft")).getText(), "no request yet");

            for (String body : List.of("{\"prompt\":\"Once upon a time\",\"max_tokens\":4}", "{\"prompt\":\"Once\",\"max_tokens\":4}",
                    "{\"prompt\":\"There was\",\"max_tokens\":4}", "{\"prompt\":\"Once\",\"max_tokens\":-1}")) {
                http.send(HttpRequest.newBuilder(URI.create(base + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                        HttpResponse.BodyHandlers.ofString());
            }
            wait.until(b -> b.findElement(By.id("total")).getText().equals("4"));
            List<String> byStatus = rowTexts(browser, "#by-status tbody tr.status-row", "|");
            assertEquals(List.of("200|3", "400|1"), byStatus);
            assertTrue(browser.findElement(By.id("ttft")).getText().matches("[0-9.]+ ms / [0-9.]+ ms"), browser.findElement(By.id("ttft")).getText());
            assertTrue(browser.findElement(By.id("e2e")).getText().matches("[0-9.]+ ms / [0-9.]+ ms"), browser.findElement(By.id("e2e")).getText());
            assertTrue(browser.findElement(By.id("tokens")).getText().endsWith(" / 12"), browser.findElement(By.id("tokens")).getText());
            assertEquals("0", browser.findElement(By.id("running")).getText());
            assertTrue(browser.findElement(By.id("tenants-section")).getAttribute("hidden") != null, "no tenants: no tenants table");
            assertTrue(browser.findElement(By.id("title")).getText().startsWith("kvferry router · "), browser.findElement(By.id("title")).getText());
            Path shot = Path.of("target", "router-status-page.png").toAbsolutePath();
            Files.createDirectories(shot.getParent());
            Files.copy(((TakesScreenshot) browser).getScreenshotAs(OutputType.FILE).toPath(), shot, StandardCopyOption.REPLACE_EXISTING);
            System.out.println("[router status page] screenshot: " + shot);
        } finally {
            browser.quit();
            service.close();
        }
    }

    /**
     * The rows' cells' rendered text (trimmed), joined by {@code separator}, read in one script: the page rebuilds its
     * tables on every poll (once a second), so rows read element by element could go stale between two calls (a CI run
     * met a StaleElementReferenceException reading the backends table).
     */
    @SuppressWarnings("unchecked")
    private static List<String> rowTexts(WebDriver browser, String rowsSelector, String separator) {
        return (List<String>) ((JavascriptExecutor) browser).executeScript("return Array.from(document.querySelectorAll(arguments[0]))"
                + ".map(r => Array.from(r.cells).map(c => c.innerText.trim()).join(arguments[1]))", rowsSelector, separator);
    }

    /**
     * The cells of each row of the table {@code id}'s body, joined by |: read in one script, as the page re-renders its tables
     * each second (elements found one call earlier may be gone).
     */
    @SuppressWarnings("unchecked")
    private static List<String> rowsOf(WebDriver browser, String id) {
        return (List<String>) ((JavascriptExecutor) browser).executeScript("return Array.from(document.querySelectorAll('#' + arguments[0]"
                + " + ' tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent).join('|'))", id);
    }

    /**
     * The router's page over a document of the test's own (served as a router serves it): each tenant's per-minute limits,
     * what its buckets hold and the requests each limit turned away ("–" for a document without them); its backend cap, drain counts and
     * structured-output compiler; every string from the document (a backend's URL, a check's failure, a tenant's name, the model, an outcome's name) set as text: markup in them shows as written and runs nothing.
     */
    @Test
    void theRoutersPageShowsTenantsRatesAndEveryStringAsText() throws Exception {
        requireBrowser();
        String hostile = "<img src=x onerror=\\\"document.title='pwned'\\\">";
        String doc = """
                {"kind":"router","pid":9,"model":"m<b>1</b>","now_ms":1,"uptime_ms":1,"status":"degraded",
                 "config":{"max_concurrent_requests":0,"queue_timeout_ms":0,"tenants":true,"max_backends":64,"replace_after_ms":30000},
                 "drain":{"completed":5,"cut":2},
                 "structured_outputs":{"outcomes":{"compiled":3,"cached":1200,"HOSTILE":1},"waiting":2,"compiles":4,
                   "compile_seconds":0.006,"mean_compile_ms":1.5},
                 "backends":[{"url":"http://p:1/HOSTILE","role":"prefill","healthy":true,"in_flight":0,"bootstrap":"HOSTILE",
                   "last_check":"ok","last_check_age_ms":5},
                  {"url":"http://d:2","role":"decode","healthy":false,"in_flight":0,"last_check":"HTTP 503 HOSTILE","last_check_age_ms":7},
                  {"url":"http://d:3","role":"decode","healthy":false,"origin":"added","in_flight":0,"out_of_rotation_ms":31000,"last_check":"HTTP 503",
                   "last_check_age_ms":9}],
                 "requests":{"running":0,"waiting":0,"total":0,"by_status":{},"by_class":{"2xx":0,"4xx":0,"5xx":0}},
                 "tokens":{"prompt":0,"generated":0},"rates":{"window_s":0},"latency":{"window_s":60},
                 "tenants":[{"name":"team-a","running":1,"waiting":0,"max_concurrent_requests":2,"requests_per_minute":600,
                   "tokens_per_minute":20000,"remaining_requests":598,"remaining_tokens":1234,"rate_limited_requests":3,"rate_limited_tokens":4},
                  {"name":"HOSTILE","running":0,"waiting":0,"max_concurrent_requests":0,"requests_per_minute":0,"tokens_per_minute":0,
                   "remaining_requests":null,"remaining_tokens":null,"rate_limited_requests":0,"rate_limited_tokens":0},
                  {"name":"old","running":0,"waiting":0,"max_concurrent_requests":0}]}"""
                .replace("HOSTILE", hostile);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 8);
        String[][] routes = {{"/status", "text/html; charset=utf-8"}, {"/common.js", "text/javascript; charset=utf-8"},
                {"/status.js", "text/javascript; charset=utf-8"}, {"/status.css", "text/css; charset=utf-8"}, {"/status.json", "application/json"}};
        byte[][] bodies = {OpsHandlers.page("router.html"), OpsHandlers.page("common.js"), OpsHandlers.page("router.js"),
                OpsHandlers.page("status.css"), doc.getBytes(StandardCharsets.UTF_8)};
        for (int i = 0; i < routes.length; i++) {
            String type = routes[i][1];
            byte[] body = bodies[i];
            server.createContext(routes[i][0], ex -> {
                ex.getResponseHeaders().set("Content-Type", type);
                ex.sendResponseHeaders(200, body.length);
                try (ex) {
                    ex.getResponseBody().write(body);
                }
            });
        }
        server.start();
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, headless());
        try {
            browser.get("http://127.0.0.1:" + server.getAddress().getPort() + "/status");
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(60), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            wait.withMessage(() -> "the page says: " + browser.findElement(By.id("error")).getText());
            By tenants = By.cssSelector("#tenants tbody tr.tenant-row");
            wait.until(b -> b.findElements(tenants).size() == 3);
            List<String> rows = rowTexts(browser, "#tenants tbody tr.tenant-row", "|");
            assertEquals("team-a|1|0|2|598 of 600|1,234 of 20,000|3|4", rows.get(0));
            assertEquals(hostile.replace("\\", "") + "|0|0|no limit|no limit|no limit|0|0", rows.get(1));
            assertEquals("old|0|0|no limit|–|–|–|–", rows.get(2), "a router's document without the rates' fields");
            List<String> backends = rowTexts(browser, "#backends tbody tr.backend-row", "|");
            assertTrue(backends.get(0).startsWith("prefill|http://p:1/" + hostile.replace("\\", "") + "|in rotation|"), backends.toString());
            assertTrue(backends.get(0).endsWith("|" + hostile.replace("\\", "")), backends.toString());
            assertTrue(backends.get(1).contains("|HTTP 503 " + hostile.replace("\\", "") + "|"), backends.toString());
            assertTrue(backends.get(1).contains("|out of rotation|"), "a document without out_of_rotation_ms: " + backends);
            assertTrue(backends.get(2).startsWith("decode (added)|http://d:3|out of rotation for 31.0 s|0|HTTP 503|"),
                    "how long it is out; added at run time (the others given at start say nothing): " + backends);
            assertTrue(rowsOf(browser, "config").contains("full: replaces one out of rotation for|30.0 s"), rowsOf(browser, "config").toString());
            // The backend cap, the drain's counts and the compiler's figures (an outcome's name from the document set as text too).
            assertTrue(rowsOf(browser, "config").contains("max backends|64"), rowsOf(browser, "config").toString());
            assertEquals(List.of("completed|5", "cut|2"), rowsOf(browser, "drain"));
            assertTrue(browser.findElement(By.id("drain-section")).getAttribute("hidden") == null, "a drain began: its section shows");
            assertEquals(List.of("compiled|3", "cached|1,200", hostile.replace("\\", "") + "|1", "waiting now|2", "compilations run|4",
                    "mean compile time|1.5 ms"), rowsOf(browser, "outputs"));
            assertTrue(browser.findElement(By.id("title")).getText().startsWith("kvferry router · m<b>1</b> · pid 9"),
                    browser.findElement(By.id("title")).getText());
            assertTrue(browser.findElements(By.tagName("img")).isEmpty(), "no markup of the document became an element");
            assertEquals("kvferry router", browser.getTitle(), "no handler of the document's ran");
        } finally {
            browser.quit();
            service.close();
            server.stop(0);
        }
    }

    @Test
    void thePageListsTheRanksAndItsChartAndRoomCountsMoveWhileABenchRuns() throws Exception {
        requireBrowser();
        // The browser first (it takes a while to start), then an embedded bench with a slow decode, so the run
        // lasts while the page is watched.
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, headless());
        Workload w = new Workload(600, 200, 16, 64, 2, 4, 13, 0);
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny"), w, "tcp", 1, 1, 1, 1, 1, false, 1, "t0ken", 1, 0, 0)
                .withFaults(new BenchConfig.Faults(0, 60, 0.05));
        ProgressLines progress = new ProgressLines();
        // Its own thread: the common pool (one thread on two cores) is left to the HTTP clients.
        ExecutorService runner = Executors.newSingleThreadExecutor();
        Future<BenchResult> run = runner.submit(() -> {
            try {
                return new BenchRunner(config, progress.stream()).runWithoutBaselines(false);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        String line = progress.await(l -> l.startsWith("[bench] status page: "), 120);
        assertNotNull(line, "the bench printed its status page: " + progress.all());
        String url = ProgressLines.after(line, "[bench] status page: ");
        try {
            browser.get(url);
            WebDriverWait wait = new WebDriverWait(browser, Duration.ofSeconds(90), Duration.ofMillis(200));
            wait.ignoring(StaleElementReferenceException.class); // rows are rebuilt once a second
            // The registered prefill rank is listed with its endpoint.
            wait.until(b -> !b.findElements(By.cssSelector("#topology tbody tr.rank-row")).isEmpty());
            List<String> ranks = rowTexts(browser, "#topology tbody tr.rank-row", " ");
            assertEquals(1, ranks.size());
            assertTrue(ranks.getFirst().startsWith("0 0 0 0 127.0.0.1:"), ranks.getFirst());
            assertTrue(browser.findElement(By.id("title")).getText().startsWith("kvferry cluster"));
            // Room counts change and the chart draws a non-zero bandwidth while the bench runs.
            String first = wait.until(b -> {
                String t = b.findElement(By.id("rooms-concluded")).getText();
                return t.equals("–") ? null : t;
            });
            wait.until(b -> !b.findElement(By.id("rooms-concluded")).getText().equals(first));
            // A bandwidth sample is the difference of two documents' bytes: a non-zero one means the chart moved.
            wait.until(b -> Integer.parseInt(b.findElement(By.id("bandwidth")).getAttribute("data-non-zero")) > 0);
            // Decode peers, rooms by state and failures with their kind.
            wait.until(b -> !b.findElements(By.xpath("//table[@id='peers']/tbody/tr[not(contains(@class,'empty'))]")).isEmpty());
            wait.until(b -> b.findElement(By.id("failures")).getText().contains("injected"));
            Path shot = Path.of("target", "status-page.png").toAbsolutePath();
            Files.createDirectories(shot.getParent());
            Files.copy(((TakesScreenshot) browser).getScreenshotAs(OutputType.FILE).toPath(), shot, StandardCopyOption.REPLACE_EXISTING);
            System.out.println("[status page] screenshot: " + shot);
        } finally {
            browser.quit();
            service.close();
        }
        BenchResult r = run.get();
        runner.shutdown();
        assertEquals(0, r.corrupted());
    }
}
