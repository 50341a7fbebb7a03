// browser-test.mjs — the in-browser half of scripts/browser-test.sh.
//
//   node --experimental-websocket scripts/browser-test.mjs URL SCREENSHOT PROFILE_DIR
//
// Starts headless chromium with a fresh profile, drives it over the
// DevTools protocol (Node's own WebSocket: no npm packages), opens the
// status page at URL in a 1280 px wide viewport and checks, in the page,
// that the charts are drawn with data, that an opened explanation is
// still open after the page has refreshed itself, and that nothing
// scrolls sideways. Then writes a PNG of the page (its top 1800 px, the
// explanation open) to SCREENSHOT and prints "PASS ..." or "FAIL ..."
// (exit 1).
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const [url, shot, profile] = process.argv.slice(2);
// shotMaxHeight cuts the screenshot below the first rows of a long
// request table.
const shotMaxHeight = 1800;
if (!url || !shot || !profile) {
  console.error("usage: browser-test.mjs URL SCREENSHOT PROFILE_DIR");
  process.exit(2);
}
const chromium = spawn("chromium", ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
  "--hide-scrollbars", "--user-data-dir=" + profile, "--remote-debugging-port=0", "about:blank"],
  { stdio: ["ignore", "ignore", "ignore"] });

async function devtoolsURL() {
  for (let i = 0; i < 200; i++) {
    try {
      const [port, path] = readFileSync(join(profile, "DevToolsActivePort"), "utf8").split("\n");
      if (port && path) return "ws://127.0.0.1:" + port + path;
    } catch { /* not written yet */ }
    await sleep(50);
  }
  throw new Error("chromium did not open its DevTools port");
}

// cdp: one WebSocket to the browser; send(method, params, session).
async function connect(ws) {
  const sock = new WebSocket(ws);
  await new Promise((ok, bad) => { sock.onopen = ok; sock.onerror = () => bad(new Error("DevTools connection failed")); });
  let id = 0;
  const pending = new Map(), waiters = [];
  sock.onmessage = ev => {
    const m = JSON.parse(ev.data);
    if (m.id && pending.has(m.id)) {
      const { ok, bad } = pending.get(m.id);
      pending.delete(m.id);
      m.error ? bad(new Error(m.error.message)) : ok(m.result);
    } else if (m.method) {
      for (const w of waiters.splice(0)) if (!w(m)) waiters.push(w);
    }
  };
  return {
    send(method, params = {}, sessionId) {
      const msg = { id: ++id, method, params };
      if (sessionId) msg.sessionId = sessionId;
      sock.send(JSON.stringify(msg));
      return new Promise((ok, bad) => pending.set(msg.id, { ok, bad }));
    },
    once(method) { return new Promise(ok => waiters.push(m => m.method === method && (ok(m.params), true))); },
    close() { sock.close(); },
  };
}

// check runs in the page: it throws on the first failed check and returns
// the list of what it saw.
async function check() {
  const notes = [];
  const ok = (cond, what) => { if (!cond) throw new Error(what + " (after: " + notes.join("; ") + ")"); notes.push(what); };
  const waitFor = async (cond, ms, what) => {
    for (const t0 = Date.now(); Date.now() - t0 < ms; await new Promise(r => setTimeout(r, 50))) if (cond()) return;
    throw new Error("timed out waiting for " + what);
  };
  const points = svg => Number(svg.getAttribute("data-points") || 0);
  await waitFor(() => document.querySelector("#recent tr.rec"), 10000, "the recent requests");

  const fleet = document.querySelectorAll("#fleet svg");
  ok(fleet.length === 3, "3 fleet charts");
  ok(points(fleet[0]) > 0 && points(fleet[1]) > 0, "requests/s and TTFT drawn with data");
  const per = document.querySelectorAll("#perworker svg");
  const workers = document.querySelectorAll("#perworker .name").length;
  ok(workers >= 4 && per.length === 4 * workers, "4 charts for each of " + workers + " workers");
  let inflight = 0, hit = 0;
  per.forEach((svg, i) => {
    if (i % 4 === 0 && points(svg) > 0) inflight++;
    if (i % 4 === 3 && points(svg) > 0) hit++;
  });
  ok(inflight === workers, "in-flight drawn for every worker");
  ok(hit >= 1, "hit ratios drawn for " + hit + " worker(s)");

  const row = document.querySelector("#recent tr.rec");
  const key = row.dataset.key;
  row.querySelector("button.why").click();
  ok(!row.nextElementSibling.hidden, "an explanation opens");
  const before = Number(document.body.dataset.updates);
  await waitFor(() => Number(document.body.dataset.updates) > before, 15000, "the page to refresh");
  const again = [...document.querySelectorAll("#recent tr.rec")].find(r => r.dataset.key === key);
  ok(again && !again.nextElementSibling.hidden && again.querySelector("button.why").getAttribute("aria-expanded") === "true",
    "still open after refresh " + document.body.dataset.updates);
  ok(again.nextElementSibling.querySelectorAll("tr.chosen").length === 1, "the chosen worker marked");

  const el = document.documentElement;
  ok(el.scrollWidth <= el.clientWidth, "no horizontal scroll at " + el.clientWidth + " px (content " + el.scrollWidth + " px)");
  const id = document.createRange();
  id.selectNodeContents(row.querySelector("td.mono"));
  ok(id.getClientRects().length === 1, "request ids on one line");
  return notes.join("; ");
}

let code = 1;
try {
  const cdp = await connect(await devtoolsURL());
  const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: true });
  const send = (m, p) => cdp.send(m, p, sessionId);
  await send("Emulation.setDeviceMetricsOverride", { width: 1280, height: 1000, deviceScaleFactor: 1, mobile: false });
  await send("Page.enable");
  const loaded = cdp.once("Page.loadEventFired");
  await send("Page.navigate", { url });
  await loaded;
  const r = await send("Runtime.evaluate", { expression: "(" + check.toString() + ")()", awaitPromise: true, returnByValue: true });
  if (r.exceptionDetails) throw new Error((r.exceptionDetails.exception && r.exceptionDetails.exception.description || r.exceptionDetails.text).split("\n")[0]);
  const { cssContentSize } = await send("Page.getLayoutMetrics");
  const png = await send("Page.captureScreenshot", { format: "png", captureBeyondViewport: true,
    clip: { x: 0, y: 0, width: 1280, height: Math.min(Math.ceil(cssContentSize.height), shotMaxHeight), scale: 1 } });
  writeFileSync(shot, Buffer.from(png.data, "base64"));
  await cdp.send("Browser.close").catch(() => {});
  cdp.close();
  console.log("PASS " + r.result.value);
  code = 0;
} catch (e) {
  console.log("FAIL " + e.message);
} finally {
  chromium.kill();
}
process.exit(code);
