// The live page: polls the admin JSON API every POLL_MS and redraws.
// Read-only; every text from the API is set with textContent, never as HTML.
"use strict";

const POLL_MS = 2000;
const PALETTE = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39"];

let selected = decodeURIComponent(location.hash.replace(/^#/, "")) || null;
let chart = null;
let chartKey = "";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function ago(unixSeconds) {
  const s = Math.max(0, Math.round(Date.now() / 1000 - unixSeconds));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  return Math.floor(s / 3600) + " h ago";
}

function clock(unixMs) {
  return new Date(unixMs).toLocaleTimeString([], { hour12: false });
}

function verdictBadge(v) {
  if (!v) return el("span", { class: "muted" }, "none");
  return el("span", { class: "badge " + v.level },
    v.level + " · " + v.detector + " → " + v.action);
}

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function renderSessions(list) {
  list.sort((a, b) => (b.last_verdict ? 1 : 0) - (a.last_verdict ? 1 : 0) || b.last_seen_unix - a.last_seen_unix);
  if (!selected || !list.some((s) => s.key === selected)) selected = list.length ? list[0].key : null;
  const body = document.querySelector("#sessions tbody");
  body.replaceChildren(...list.map((s) => {
    const row = el("tr", { class: s.key === selected ? "selected" : "", "data-key": s.key },
      el("td", { class: "key", title: s.key }, s.key.slice(0, 24)),
      el("td", {}, s.agent || "—"),
      el("td", {}, ago(s.last_seen_unix)),
      el("td", { class: "num" }, s.tool_cycles),
      el("td", { class: "verdict" }, verdictBadge(s.last_verdict)));
    row.addEventListener("click", () => { selected = s.key; location.hash = encodeURIComponent(s.key); poll(); });
    return row;
  }));
  document.getElementById("no-sessions").hidden = list.length > 0;
}

function renderTimeline(t) {
  const list = document.getElementById("timeline");
  document.getElementById("timeline-session").textContent = t ? t.key + (t.agent ? " (" + t.agent + ")" : "") : "";
  if (!t) { list.replaceChildren(); return; }
  const items = [];
  for (const lane of t.lanes) {
    if (!lane.events.length) continue;
    if (t.lanes.length > 1) items.push(el("li", { class: "lane" }, "lane " + lane.lane));
    for (const e of lane.events) {
      if (e.kind === "call") {
        items.push(el("li", { class: "call" + (e.repeat ? " repeat" : "") },
          el("span", { class: "time" }, clock(e.at_unix_ms)),
          el("span", { class: "tool" }, e.tool),
          el("code", {}, e.arguments),
          e.failed ? el("span", { class: "tag failed" }, "failed") : null,
          el("span", { class: "tag " + (e.repeat ? "repeat" : "new") }, e.repeat ? "repeat result" : "new result")));
      } else {
        items.push(el("li", { class: "verdict-row " + e.level },
          el("span", { class: "time" }, clock(e.at_unix_ms)),
          el("span", { class: "badge " + e.level }, e.level + " · " + e.detector + " → " + e.action),
          el("span", { class: "count" }, "count " + e.count),
          el("div", { class: "message" }, e.message === null ? "(observed: the agent got nothing)" : e.message)));
      }
    }
  }
  if (!items.length) items.push(el("li", { class: "muted" }, "No tool call held for this session yet."));
  list.replaceChildren(...items);
}

function renderChart(series) {
  const box = document.getElementById("chart");
  const names = Object.keys(series.detectors);
  box.dataset.total = series.total;
  box.dataset.detectors = names.join(",");
  document.getElementById("chart-total").textContent = "(" + series.total + ")";
  document.getElementById("no-verdicts").hidden = series.total > 0;
  const data = [series.minutes, ...names.map((n) => series.detectors[n])];
  const key = names.join(",");
  if (chart && chartKey === key) { chart.setData(data); return; }
  if (chart) chart.destroy();
  chartKey = key;
  const opts = {
    width: Math.max(320, box.clientWidth || 640),
    height: 220,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    axes: [{}, { label: "verdicts / min" }],
    series: [{}, ...names.map((n, i) => ({
      label: n, stroke: PALETTE[i % PALETTE.length], width: 2,
      fill: PALETTE[i % PALETTE.length] + "22", points: { show: true, size: 5 },
    }))],
  };
  chart = new uPlot(opts, data, box);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const [sessions, recent] = await Promise.all([getJson("/admin/sessions"), getJson("/admin/verdicts/recent")]);
    renderSessions(sessions.sessions);
    renderChart(recent);
    const t = selected ? await getJson("/admin/sessions/" + encodeURIComponent(selected) + "/timeline").catch(() => null) : null;
    renderTimeline(t);
    status.textContent = "updated " + clock(Date.now()) + " · every " + POLL_MS / 1000 + " s";
    status.className = "muted";
  } catch (err) {
    status.textContent = "cannot reach the admin API: " + err.message;
    status.className = "error";
  }
  document.body.dataset.polls = String(Number(document.body.dataset.polls) + 1);
}

poll();
setInterval(poll, POLL_MS);
