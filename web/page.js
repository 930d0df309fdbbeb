// kvcalc's page: a thin skin over the library. Python (Pyodide) computes every number
// (kvcalc_page.answer: `kvcalc fit` and `kvcalc plan`, their --format json); this file
// reads the form, keeps it in the address's #fragment, fetches a Hub id's config.json and
// safetensors headers with range requests, and draws what comes back.
import { loadPyodide } from "./pyodide/pyodide.mjs";

const $ = (id) => document.getElementById(id);
const HUB = "https://huggingface.co";
const MAX_HEADER_BYTES = 100_000_000; // safetensors' own cap
// The #fragment's keys: the request's field each holds.
const KEYS = { src: "source", model: "model", name: "config_name", rev: "revision",
  gpu: "gpu", engine: "engine", ctx: "context", batch: "batch", kv: "kv_dtype",
  w: "weight_dtype", gpus: "gpus", in: "prompt", out: "output" };
// The form field each of fit's fixes sets (gpu_memory_utilization has none here).
const FIX_FIELDS = { tp: "gpus", max_model_len: "context", kv_dtype: "kv_dtype",
  weight_dtype: "weight_dtype", max_num_seqs: "batch" };
const KIND_TITLES = { weights: "weights", activations: "activations", "non-torch": "non-torch",
  graphs: "CUDA graphs", headroom: "headroom", kv: "KV cache" };

let page = null; // the kvcalc_page module, once Python has loaded
const timings = (window.kvcalcTimings = { start: performance.now() });

// --- the address: inputs in the #fragment (never sent to a server) ---------------------
function readAddress() {
  const h = new URLSearchParams(location.hash.slice(1));
  const q = new URLSearchParams(location.search);
  const r = {};
  for (const [k, field] of Object.entries(KEYS)) if (h.has(k)) r[field] = h.get(k);
  if (h.has("cfg")) r.config = fromBase64Url(h.get("cfg"));
  r.hub = h.get("hub") || q.get("hub") || HUB; // the Hub's address (a test points it at a mock)
  return r;
}

function writeAddress(r) {
  const h = new URLSearchParams();
  for (const [k, field] of Object.entries(KEYS)) {
    const v = r[field];
    if (v !== undefined && v !== null && String(v) !== "") h.set(k, v);
  }
  if (r.source === "config" && r.config) h.set("cfg", toBase64Url(minified(r.config)));
  if (r.hub && r.hub !== HUB) h.set("hub", r.hub);
  history.replaceState(null, "", "#" + h.toString());
}

function minified(text) {
  try { return JSON.stringify(JSON.parse(text)); } catch { return text; }
}
function toBase64Url(text) {
  const bytes = new TextEncoder().encode(text);
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function fromBase64Url(text) {
  const s = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return new TextDecoder().decode(Uint8Array.from(s, (c) => c.charCodeAt(0)));
}

// --- the form --------------------------------------------------------------------------
function radio(name) { return document.querySelector(`input[name=${name}]:checked`).value; }
function setRadio(name, value) {
  const el = document.querySelector(`input[name=${name}][value="${CSS.escape(value)}"]`);
  if (el) el.checked = true;
}

function readForm() {
  const source = radio("src");
  return {
    source,
    model: source === "preset" ? $("preset").value : source === "hub" ? $("hub_id").value.trim() : "",
    config: source === "config" ? $("config").value : "",
    config_name: source === "config" ? $("config_name").value.trim() : "",
    revision: source === "hub" ? $("hub_rev").value.trim() : "",
    gpu: $("gpu").value, engine: radio("engine"), context: $("context").value.trim(),
    batch: $("batch").value.trim(), kv_dtype: $("kv_dtype").value,
    weight_dtype: $("weight_dtype").value, gpus: $("gpus").value.trim() || "1",
    prompt: $("prompt").value.trim(), output: $("output").value.trim(),
    hub: current.hub,
  };
}

function fillForm(r) {
  if (r.source) setRadio("src", r.source);
  if (r.source === "hub") { $("hub_id").value = r.model || ""; $("hub_rev").value = r.revision || ""; }
  else if (r.model) $("preset").value = r.model;
  if (r.config !== undefined) $("config").value = r.config;
  if (r.config_name) $("config_name").value = r.config_name;
  if (r.gpu) $("gpu").value = r.gpu;
  if (r.engine) setRadio("engine", r.engine);
  for (const f of ["context", "batch", "kv_dtype", "weight_dtype", "gpus", "prompt", "output"]) {
    if (r[f] !== undefined) $(f).value = r[f];
  }
  showSource();
}

function showSource() {
  const src = radio("src");
  for (const el of document.querySelectorAll("[data-src]")) el.hidden = el.dataset.src !== src;
  const vllm = radio("engine") === "vllm";
  $("context").placeholder = vllm ? "auto" : "model's context";
  if (!vllm && $("context").value.trim().toLowerCase() === "auto") $("context").value = ""; // vLLM's alone
}

function options(select, items, keepFirst) {
  if (!keepFirst) select.innerHTML = "";
  for (const [value, text] of items) {
    const o = document.createElement("option");
    o.value = value; o.textContent = text;
    select.append(o);
  }
}

// --- the Hub: config.json and safetensors headers by range requests --------------------
async function fetchHub(base, id, revision) {
  const rev = revision || "main";
  const url = (f) => `${base.replace(/\/+$/, "")}/${id}/resolve/${encodeURIComponent(rev)}/${f}`;
  const cfg = await fetch(url("config.json"));
  if (!cfg.ok) {
    const why = cfg.status === 401 || cfg.status === 403
      ? " (a gated or private repository: the page sends no token)" : "";
    throw new Error(`${id}: config.json: HTTP ${cfg.status}${why}`);
  }
  const config = await cfg.text();
  const index = await fetch(url("model.safetensors.index.json"));
  let files = ["model.safetensors"];
  if (index.ok) files = [...new Set(Object.values((await index.json()).weight_map || {}))];
  const single = !index.ok;
  const headers = await inPool(files, 6, (f) => header(url(f), f, single));
  return { revision: rev, config, headers: headers.filter(Boolean) };
}

async function header(u, name, optional) {
  const first = await fetch(u, { headers: { Range: "bytes=0-7" } });
  if (!first.ok) {
    if (optional && first.status === 404) return null; // no safetensors: config.json alone
    throw new Error(`${name}: HTTP ${first.status}`);
  }
  const head = await readBytes(first, 8, 0);
  const n = Number(new DataView(head.buffer).getBigUint64(0, true));
  if (n > MAX_HEADER_BYTES) throw new Error(`${name}: header length ${n} is over safetensors' limit`);
  const total = fileLength(first);
  const rest = await fetch(u, { headers: { Range: `bytes=8-${8 + n - 1}` } });
  if (!rest.ok) throw new Error(`${name}: HTTP ${rest.status}`);
  const raw = await readBytes(rest, n, rest.status === 206 ? 0 : 8);
  return { name, header: new TextDecoder().decode(raw),
    data_bytes: total === null ? null : total - 8 - n };
}

function fileLength(response) {
  // "bytes 0-7/16060522496" (206), or the whole body's length when the range was ignored
  const range = response.headers.get("Content-Range");
  const m = range && range.match(/\/(\d+)\s*$/);
  if (m) return Number(m[1]);
  const length = response.status === 200 && response.headers.get("Content-Length");
  return length ? Number(length) : null;
}

async function readBytes(response, n, skip) {
  // n bytes after `skip`, then stop reading (a server that ignores Range sends it all)
  const out = new Uint8Array(n);
  let got = 0, seen = 0;
  const reader = response.body.getReader();
  while (got < n) {
    const { done, value } = await reader.read();
    if (done) break;
    const from = Math.max(0, skip - seen);
    seen += value.length;
    const chunk = value.subarray(from, from + (n - got));
    out.set(chunk, got);
    got += chunk.length;
  }
  reader.cancel().catch(() => {});
  if (got < n) throw new Error(`the file ended after ${got} of ${n} bytes`);
  return out;
}

async function inPool(items, width, job) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => { while (next < items.length) { const i = next++; out[i] = await job(items[i]); } };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  return out;
}

// --- drawing ---------------------------------------------------------------------------
const fmt = (x, digits = 0) => Number(x).toLocaleString("en-US", { maximumFractionDigits: digits });

function render(ans) {
  const fit = ans.fit;
  const badge = $("badge");
  badge.textContent = fit.fits ? "Starts" : "Does not start";
  badge.className = "badge " + (fit.fits ? "ok" : "no");
  $("headline").textContent = ans.headline;
  const facts = [
    ["model", fit.model], ["GPU", `${fit.gpus || fit.tp || 1} × ${fit.gpu}`],
    ["context", fit.max_model_len ?? fit.context_len], ["KV cache tokens", fit.kv_cache_tokens],
    ["requests at once", fit.max_concurrency], ["batch limit", fit.max_num_seqs ?? fit.max_running_requests ?? fit.flags?.max_batch_size],
    ["weights", fit.weight_dtype ?? fit.weight_quantization ?? "as stored"], ["KV dtype", fit.kv_dtype],
  ].filter(([, v]) => v !== undefined && v !== null);
  $("facts").innerHTML = "";
  for (const [k, v] of facts) {
    const d = document.createElement("div");
    d.className = "fact";
    d.innerHTML = `<span class="k"></span><span class="v"></span>`;
    d.querySelector(".k").textContent = k;
    d.querySelector(".v").textContent = typeof v === "number" ? fmt(v, 2) : v;
    $("facts").append(d);
  }
  drawBar(ans.bar);
  $("fixes").innerHTML = "";
  $("fixes-card").hidden = !ans.fixes.length && !(fit.refusal);
  if (fit.refusal) addItem($("fixes"), fit.refusal, "refusal");
  ans.fixes.forEach((text, i) => {
    const li = addItem($("fixes"), text, "fix");
    const fix = (fit.fixes || [])[i];
    const field = fix && FIX_FIELDS[fix.setting];
    if (!field) return;
    const b = document.createElement("button");
    b.type = "button"; b.className = "apply"; b.textContent = "Apply";
    b.addEventListener("click", () => { $(field).value = String(fix.value); run(); });
    li.append(" ", b);
  });
  $("launch").textContent = ans.launch || "no layout serves: see below";
  $("copy").disabled = !ans.launch;
  $("plan-error").hidden = !ans.plan_error;
  $("plan-error").textContent = ans.plan_error || "";
  drawPlot(ans.plan);
  $("cli-fit").textContent = "kvcalc " + ans.commands.fit.map(shellQuote).join(" ");
  $("cli-plan").textContent = "kvcalc " + ans.commands.plan.map(shellQuote).join(" ");
  $("json").textContent = JSON.stringify(fit, null, 2);
}

function addItem(list, text, cls) {
  const li = document.createElement("li");
  li.className = cls;
  li.textContent = text;
  list.append(li);
  return li;
}

function shellQuote(s) {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
}

function drawBar(bar) {
  const el = $("bar"), legend = $("legend");
  el.innerHTML = ""; legend.innerHTML = "";
  const used = bar.parts.reduce((s, p) => s + p.bytes, 0);
  const scale = Math.max(bar.whole || 0, used) || 1;
  $("bar-caption").textContent = bar.whole ? `of ${bar.whole_text}: ${bar.whole_label}` : "";
  for (const p of bar.parts) {
    if (p.bytes <= 0) continue;
    const seg = document.createElement("div");
    seg.className = `seg k-${p.kind}`;
    seg.style.width = `${(100 * p.bytes) / scale}%`;
    seg.title = `${p.label}: ${p.text}`;
    seg.dataset.key = p.key; seg.dataset.bytes = p.bytes;
    if (p.bytes / scale > 0.09) seg.textContent = KIND_TITLES[p.kind] || p.kind;
    el.append(seg);
  }
  if (bar.whole && used > bar.whole) {
    const mark = document.createElement("div");
    mark.className = "limit";
    mark.style.left = `${(100 * bar.whole) / scale}%`;
    mark.title = bar.whole_label;
    el.append(mark);
  }
  for (const p of bar.parts) {
    const li = document.createElement("li");
    li.innerHTML = `<span class="sw k-${p.kind}"></span><span class="l"></span><span class="b"></span>`;
    li.querySelector(".l").textContent = p.label;
    li.querySelector(".b").textContent = p.text;
    legend.append(li);
  }
  if (bar.whole && used > bar.whole) {
    const li = document.createElement("li");
    li.className = "over";
    li.textContent = `over the ${bar.whole_label} by ${bar.over_text}`;
    legend.append(li);
  }
}

function drawPlot(plan) {
  const el = $("plot");
  el.innerHTML = "";
  if (!plan) { el.textContent = "No layout to plot."; return; }
  const best = plan.best || plan.engines?.[0]?.best;
  const layouts = plan.layouts || [best];
  const W = 900, H = 320, L = 64, R = 16, T = 14, B = 44;
  const xs = layouts.map((x) => x.tokens_per_s_per_user), ys = layouts.map((x) => x.tokens_per_s_per_gpu);
  const xmax = nice(Math.max(...xs) * 1.08), ymax = nice(Math.max(...ys) * 1.1);
  const X = (v) => L + ((W - L - R) * v) / xmax, Y = (v) => H - B - ((H - T - B) * v) / ymax;
  const svg = [`<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="plan front">`];
  for (const t of ticks(xmax)) svg.push(`<line class="grid" x1="${X(t)}" x2="${X(t)}" y1="${T}" y2="${H - B}"/><text class="tick" x="${X(t)}" y="${H - B + 16}" text-anchor="middle">${fmt(t, 1)}</text>`);
  for (const t of ticks(ymax)) svg.push(`<line class="grid" x1="${L}" x2="${W - R}" y1="${Y(t)}" y2="${Y(t)}"/><text class="tick" x="${L - 8}" y="${Y(t) + 4}" text-anchor="end">${fmt(t, 1)}</text>`);
  svg.push(`<text class="axis" x="${(L + W - R) / 2}" y="${H - 6}" text-anchor="middle">output tokens/s per user</text>`);
  svg.push(`<text class="axis" transform="translate(14 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle">output tokens/s per GPU</text>`);
  const pts = layouts.map((x) => [X(x.tokens_per_s_per_user), Y(x.tokens_per_s_per_gpu)]).sort((a, b) => a[0] - b[0]);
  if (pts.length > 1) svg.push(`<polyline class="front" points="${pts.map((p) => p.join(",")).join(" ")}"/>`);
  for (const x of layouts) {
    const isBest = best && x.tokens_per_s_per_gpu === best.tokens_per_s_per_gpu && x.tokens_per_s_per_user === best.tokens_per_s_per_user;
    const label = `tp ${x.tp}${x.pp > 1 ? ` pp ${x.pp}` : ""}${x.replicas > 1 ? ` × ${x.replicas}` : ""}, batch ${x.max_num_seqs ?? x.batch}, KV ${x.kv_cache_dtype}`;
    svg.push(`<circle class="${isBest ? "pt best" : "pt"}" cx="${X(x.tokens_per_s_per_user)}" cy="${Y(x.tokens_per_s_per_gpu)}" r="${isBest ? 6 : 4}"><title>${label}: ${fmt(x.tokens_per_s_per_gpu, 1)} tok/s per GPU, ${fmt(x.tokens_per_s_per_user, 1)} per user</title></circle>`);
    if (isBest) {
      const right = X(x.tokens_per_s_per_user) > W * 0.6; // keep the label inside the plot
      svg.push(`<text class="bestlabel" x="${X(x.tokens_per_s_per_user) + (right ? -9 : 9)}" y="${Y(x.tokens_per_s_per_gpu) - 10}" text-anchor="${right ? "end" : "start"}">best: ${label}</text>`);
    }
  }
  svg.push("</svg>");
  el.innerHTML = svg.join("");
}

function nice(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].map((m) => m * p).find((c) => c >= v - 1e-9);
}
function ticks(max) {
  const p = 10 ** Math.floor(Math.log10(max / 5));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((c) => max / c <= 6);
  const out = [];
  for (let t = 0; t <= max + 1e-9; t += step) out.push(t);
  return out;
}

// --- running ---------------------------------------------------------------------------
let current = readAddress();

async function run() {
  const req = readForm();
  writeAddress(req);
  const result = $("result");
  result.dataset.state = "running";
  $("error").hidden = true;
  $("status").textContent = req.source === "hub" ? "Reading the Hub…" : "Counting…";
  const t0 = performance.now();
  try {
    let hub = null;
    if (req.source === "hub") {
      if (!req.model) throw new Error("give a Hub id (org/name)");
      hub = await fetchHub(req.hub || HUB, req.model, req.revision);
    }
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))); // paint first
    const ans = JSON.parse(page.answer(JSON.stringify(req), hub && JSON.stringify(hub)));
    if (ans.error) throw new Error(ans.error);
    render(ans);
    result.dataset.answer = JSON.stringify(ans);
    result.dataset.ms = String(Math.round(performance.now() - t0));
    timings.first_answer ??= performance.now() - timings.start;
    result.dataset.state = "done";
    $("status").textContent = `Answered in ${fmt((performance.now() - t0) / 1000, 2)} s`;
  } catch (e) {
    $("error").textContent = String(e.message || e);
    $("error").hidden = false;
    result.dataset.answer = JSON.stringify({ error: String(e.message || e) });
    result.dataset.state = "error";
    $("status").textContent = "No answer";
  }
}

async function boot() {
  const status = $("status");
  try {
    const site = await (await fetch("site.json")).json();
    const py = await loadPyodide({ indexURL: new URL("pyodide/", location.href).href });
    timings.pyodide = performance.now() - timings.start;
    const wheel = await fetch(site.wheel);
    if (!wheel.ok) throw new Error(`${site.wheel}: HTTP ${wheel.status}`);
    py.unpackArchive(await wheel.arrayBuffer(), "wheel");
    py.FS.writeFile("/home/pyodide/kvcalc_page.py", await (await fetch("kvcalc_page.py")).text());
    page = py.pyimport("kvcalc_page");
    const cat = JSON.parse(page.catalogue());
    timings.ready = performance.now() - timings.start;
    options($("preset"), cat.models.map((m) => [m, m]));
    const gib = (b) => `${fmt(b / 2 ** 30, 0)} GiB`;
    options($("gpu"), cat.gpus.map((g) => [g.name, `${g.name} (${gib(g.memory_bytes)})`]));
    const dtypes = cat.dtypes.map((d) => [d, d]);
    options($("kv_dtype"), dtypes.filter(([d]) => d !== "bf16"), true);
    options($("weight_dtype"), dtypes, true);
    $("preset").value = "llama3.1-8b";
    $("gpu").value = "h100-sxm";
    $("version").textContent = cat.version;
    $("pyver").textContent = py.version;
    fillForm(current);
    $("go").disabled = false;
    status.textContent = `Ready (Python loaded in ${fmt(timings.ready / 1000, 1)} s)`;
    status.dataset.state = "ready";
    if (current.model || current.config || !location.hash) await run(); // a bare address: the defaults
  } catch (e) {
    status.textContent = `Could not load: ${e.message || e}`;
    status.dataset.state = "failed";
    $("result").dataset.state = "error";
  }
}

$("inputs").addEventListener("submit", (e) => { e.preventDefault(); if (page) run(); });
$("inputs").addEventListener("change", showSource);
$("copy").addEventListener("click", async () => {
  const text = $("launch").textContent;
  try { await navigator.clipboard.writeText(text); }
  catch { const r = document.createRange(); r.selectNodeContents($("launch")); getSelection().removeAllRanges(); getSelection().addRange(r); document.execCommand("copy"); }
  $("copy").textContent = "Copied";
  setTimeout(() => ($("copy").textContent = "Copy"), 1500);
});
boot();
