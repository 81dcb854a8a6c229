// The Osprey dashboard: polls /api/status and /api/history and renders
// them. Every value from the API goes in with textContent, never as HTML.
"use strict";

// osd: the OSD whose throughput the graph shows (clicked in the tree);
// null for the cluster's.
// gen counts selections: a refresh started before the last one neither
// draws nor schedules the next.
const state = { poll: 1000, timer: null, osd: null, gen: 0 };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function rate(n) { return bytes(n) + "/s"; }

function num(n) { return n >= 100 ? n.toFixed(0) : n.toFixed(1); }

function clock(t) {
  const d = new Date(t);
  return d.toLocaleTimeString([], { hour12: false });
}

function renderHealth(v) {
  const h = document.getElementById("health");
  h.textContent = v.health.status;
  h.className = "health " + v.health.status;
  document.getElementById("meta").textContent =
    "epoch " + v.epoch + " · fsid " + v.fsid + " · " + v.mons.length + " mon(s)";
  const checks = document.getElementById("checks");
  checks.replaceChildren(...v.health.checks.map(c => el("li", {}, c)));
  const used = v.used_bytes, total = v.used_bytes + v.avail_bytes;
  const rows = [
    ["OSDs", v.osd_counts.total + " total, " + v.osd_counts.up + " up, " + v.osd_counts.in + " in"],
    ["PGs", String(v.pg_total)],
    ["objects", v.objects + (v.degraded_objects ? " (" + v.degraded_objects + " degraded)" : "")],
    ["space", bytes(used) + " used of " + bytes(total)],
  ];
  document.getElementById("summary").replaceChildren(...rows.flatMap(([k, x]) => [el("dt", {}, k), el("dd", {}, x)]));
  const stale = document.getElementById("stale");
  const age = Date.now() - Date.parse(v.sampled_at);
  if (v.error) {
    stale.hidden = false;
    stale.textContent = "stale: " + v.error;
  } else if (age > 5 * v.interval_ms + 5000) {
    stale.hidden = false;
    stale.textContent = "stale: last sample " + Math.round(age / 1000) + " s ago";
  } else {
    stale.hidden = true;
  }
}

// renderRates shows the cluster's rates now, or the selected OSD's.
function renderRates(v) {
  let n = v.now;
  const o = v.osds.find(o => o.id === state.osd);
  if (o) {
    n = { ops: o.ops_per_sec, read_bps: o.client_read_bytes_per_sec, write_bps: o.client_write_bytes_per_sec, recovery_bps: o.recovery_bytes_per_sec };
  }
  const parts = [
    ["client ops", num(n.ops) + "/s"], ["read", rate(n.read_bps)],
    ["write", rate(n.write_bps)], ["recovery", rate(n.recovery_bps)],
  ];
  document.getElementById("rates").replaceChildren(...parts.map(([k, x]) => el("span", {}, k + " ", el("b", {}, x))));
}

function renderPGs(v) {
  const body = document.querySelector("#pgs tbody");
  body.replaceChildren(...v.pgs.map(p => el("tr", {}, el("td", {}, p.state), el("td", { class: "num" }, String(p.count)))));
}

function renderEvents(v) {
  const list = document.getElementById("events");
  list.replaceChildren(...v.events.map(e =>
    el("li", { class: e.level, "data-kind": e.kind }, el("time", { datetime: e.at }, clock(Date.parse(e.at))), e.text)));
}

function renderOSDs(v) {
  document.getElementById("osd-count").textContent =
    "(" + v.osd_counts.up + "/" + v.osd_counts.total + " up, " + v.osd_counts.in + " in)";
  const body = document.querySelector("#osds tbody");
  body.replaceChildren(...v.osds.map(o => {
    const total = o.used_bytes + o.avail_bytes;
    const pct = total > 0 ? 100 * o.used_bytes / total : 0;
    const bar = el("div", { class: "bar " + o.fullness }, el("div", {}));
    bar.firstChild.style.width = pct.toFixed(1) + "%";
    const usage = el("td", { class: "usage", title: bytes(o.used_bytes) + " of " + bytes(total) },
      total > 0 ? pct.toFixed(1) + "% of " + bytes(total) : "–", bar);
    const status = (o.up ? "up" : "down") + ", " + (o.in ? "in" : "out") +
      (o.fullness && o.fullness !== "ok" ? ", " + o.fullness : "");
    const cls = (o.up ? "up" : "down") + (o.in ? "" : " out") + (o.id === state.osd ? " selected" : "");
    const tr = el("tr", { id: "osd-" + o.id, class: cls, "data-up": String(o.up), "data-id": String(o.id), title: "show osd." + o.id + "'s throughput" },
      el("td", { class: "num" }, "osd." + o.id),
      el("td", {}, o.host || "–"),
      el("td", { class: "status" }, status),
      el("td", { class: "num" }, o.weight.toFixed(2)),
      el("td", { class: "num", title: o.primary_pgs + " as primary" }, String(o.pgs)),
      usage,
      el("td", { class: "num" }, num(o.ops_per_sec)),
      el("td", { class: "num" }, rate(o.client_read_bytes_per_sec)),
      el("td", { class: "num" }, rate(o.client_write_bytes_per_sec)),
      el("td", { class: "addr" }, o.never_booted ? "never booted" : o.public_addr));
    return tr;
  }));
}

function renderChart(h) {
  const svg = document.getElementById("chart");
  const pts = h.points;
  const series = [["read", "read_bps"], ["write", "write_bps"], ["recovery", "recovery_bps"]];
  let top = 1;
  for (const p of pts) for (const [, k] of series) top = Math.max(top, p[k]);
  const W = 600, H = 160;
  const t0 = pts.length ? pts[0].t : 0, t1 = pts.length ? pts[pts.length - 1].t : 1;
  const x = t => t1 > t0 ? (t - t0) / (t1 - t0) * W : 0;
  const y = n => H - 4 - n / top * (H - 8);
  const ns = "http://www.w3.org/2000/svg";
  const lines = series.map(([cls, k]) => {
    const pl = document.createElementNS(ns, "polyline");
    pl.setAttribute("class", cls);
    pl.setAttribute("points", pts.map(p => x(p.t).toFixed(1) + "," + y(p[k]).toFixed(1)).join(" "));
    return pl;
  });
  svg.replaceChildren(...lines);
  const span = pts.length > 1 ? Math.round((t1 - t0) / 1000) : 0;
  document.getElementById("chart-span").textContent =
    "last " + span + " s, peak " + rate(top === 1 ? 0 : top);
  document.getElementById("chart-title").textContent = h.osd >= 0 ? "osd." + h.osd : "cluster";
  document.getElementById("chart-cluster").hidden = h.osd < 0;
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

async function refresh() {
  const gen = state.gen;
  try {
    const hist = state.osd === null ? "/api/history" : "/api/history?osd=" + state.osd;
    const [v, h] = await Promise.all([getJSON("/api/status"), getJSON(hist).catch(() => {
      state.osd = null; // it left the map: back to the cluster's
      return getJSON("/api/history");
    })]);
    if (gen !== state.gen) return;
    state.poll = Math.max(100, v.poll_ms || 1000);
    renderHealth(v);
    renderRates(v);
    renderPGs(v);
    renderEvents(v);
    renderOSDs(v);
    renderChart(h);
    document.body.dataset.sampledAt = v.sampled_at;
  } catch (err) {
    const stale = document.getElementById("stale");
    stale.hidden = false;
    stale.textContent = "cannot reach the mon's dashboard: " + err.message;
  }
  if (gen === state.gen) state.timer = setTimeout(refresh, state.poll);
}

// select shows id's throughput in the graph (null: the cluster's), now.
function select(id) {
  state.osd = id;
  state.gen++;
  clearTimeout(state.timer);
  refresh();
}

document.querySelector("#osds tbody").addEventListener("click", ev => {
  const tr = ev.target.closest("tr");
  if (tr) select(Number(tr.dataset.id));
});
document.getElementById("chart-cluster").addEventListener("click", () => select(null));

refresh();
