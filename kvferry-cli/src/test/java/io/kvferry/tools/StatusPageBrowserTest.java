package io.kvferry.tools;

import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.openqa.selenium.By;
import org.openqa.selenium.OutputType;
import org.openqa.selenium.TakesScreenshot;
import org.openqa.selenium.WebDriver;
import org.openqa.selenium.WebElement;
import org.openqa.selenium.chrome.ChromeDriver;
import org.openqa.selenium.chrome.ChromeDriverService;
import org.openqa.selenium.chrome.ChromeOptions;
import org.openqa.selenium.support.ui.WebDriverWait;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The bootstrap registry's status page in a real headless browser (Debian's chromium and chromium-driver,
 * driven by Selenium) while a bench runs: the page loads, lists the registered prefill ranks, and its
 * bandwidth chart and room counts change. A screenshot is saved under target/ and named in the output.
 * Without chromium the test is skipped saying how to install it, unless KVFERRY_REQUIRE_BROWSER=1 (CI).
 */
@Timeout(300)
class StatusPageBrowserTest {
    private static final File CHROMIUM = new File("/usr/bin/chromium");
    private static final File DRIVER = new File("/usr/bin/chromedriver");

    @Test
    void thePageListsTheRanksAndItsChartAndRoomCountsMoveWhileABenchRuns() throws Exception {
        if (!CHROMIUM.canExecute() || !DRIVER.canExecute()) {
            String why = "no headless browser: apt-get install -y chromium chromium-driver (.ci/run installs them)";
            if ("1".equals(System.getenv("KVFERRY_REQUIRE_BROWSER"))) fail(why);
            Assumptions.abort(why);
        }
        // The browser first (it takes a while to start), then an embedded bench with a slow decode, so the run
        // lasts while the page is watched.
        ChromeOptions options = new ChromeOptions();
        options.setBinary(CHROMIUM);
        options.addArguments("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1900");
        ChromeDriverService service = new ChromeDriverService.Builder().usingDriverExecutable(DRIVER).usingAnyFreePort().build();
        WebDriver browser = new ChromeDriver(service, options);
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
            // The registered prefill rank is listed with its endpoint.
            wait.until(b -> !b.findElements(By.cssSelector("#topology tbody tr.rank-row")).isEmpty());
            List<WebElement> ranks = browser.findElements(By.cssSelector("#topology tbody tr.rank-row"));
            assertEquals(1, ranks.size());
            assertTrue(ranks.getFirst().getText().startsWith("0 0 0 0 127.0.0.1:"), ranks.getFirst().getText());
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
