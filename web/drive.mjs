// Drives the page in headless Chromium for tests/test_page.py: `node web/drive.mjs PLAN.json`
// prints one JSON object. PLAN: {chromium, url, form, third, screenshots: [first, second],
// timeout_ms}. Question 1 comes from the address (url's #fragment); question 2 (form) is
// typed into the form; then the address question 2 left is opened, as a shared link would
// be; question 3 (third, if given) is typed into the first page's form.
import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const timeout = plan.timeout_ms || 180000;
const browser = await chromium.launch({
  executablePath: plan.chromium, headless: true, timeout,
  // Chromium as root in a container: no sandbox, no GPU, and none of its own network
  // traffic (without these it hangs on refused connections).
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = { console: [] };

async function answered(page) {
  await page.waitForFunction(() => ["done", "error"].includes(document.getElementById("result").dataset.state)
    || document.getElementById("status").dataset.state === "failed", null, { timeout });
  return page.evaluate(() => {
    const r = document.getElementById("result");
    return {
      state: r.dataset.state, answer: JSON.parse(r.dataset.answer || "null"), ms: Number(r.dataset.ms),
      headline: document.getElementById("headline").textContent,
      launch: document.getElementById("launch").textContent,
      segments: [...document.querySelectorAll("#bar .seg")].map((s) => ({ key: s.dataset.key, bytes: Number(s.dataset.bytes) })),
      fixes: [...document.querySelectorAll("#fixes li")].map((li) => li.textContent),
      points: document.querySelectorAll("#plot circle").length,
      status: document.getElementById("status").textContent,
      hash: location.hash, timings: window.kvcalcTimings,
    };
  });
}

async function ask(page, f) {
  // a question typed into the form, then Calculate
  await page.evaluate(() => { document.getElementById("result").dataset.state = "idle"; });
  await page.click(`#source label:has(input[value="${f.source}"])`);
  if (f.source === "hub") await page.fill("#hub_id", f.model);
  if (f.source === "config") { await page.fill("#config", f.config); await page.fill("#config_name", f.config_name || ""); }
  if (f.source === "preset") await page.selectOption("#preset", f.model);
  await page.selectOption("#gpu", f.gpu);
  await page.click(`#engine label:has(input[value="${f.engine}"])`);
  await page.fill("#context", f.context || "");
  await page.fill("#batch", f.batch || "");
  if (f.kv_dtype !== undefined) await page.selectOption("#kv_dtype", f.kv_dtype);
  const t = Date.now();
  await page.click("#go");
  const got = await answered(page);
  got.wall_ms = Date.now() - t;
  return got;
}

try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 1000 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") out.console.push(`${m.text()} (${m.location().url})`); });
  page.on("pageerror", (e) => out.console.push(String(e)));
  const t0 = Date.now();
  await page.goto(plan.url, { waitUntil: "load", timeout });
  out.first = await answered(page);
  out.first.wall_ms = Date.now() - t0;
  await page.screenshot({ path: plan.screenshots[0], fullPage: true });

  out.second = await ask(page, plan.form);
  await page.screenshot({ path: plan.screenshots[1], fullPage: true });

  const shared = await context.newPage();
  await shared.goto(new URL(out.second.hash, plan.url).href, { waitUntil: "load", timeout });
  out.shared = await answered(shared);
  if (plan.third) out.third = await ask(page, plan.third);
} catch (e) {
  out.failure = String(e && e.stack || e);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out));
