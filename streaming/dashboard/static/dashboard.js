// SiftStream dashboard page: draws /api/state's snapshot, updated by the server-sent events of
// /api/events (polling /api/state when the stream is down), and one subscriber's history from
// /api/subscriber. Every text from the topics is set with textContent, never as HTML.
"use strict";

const MAX_ROWS = 200; // table rows drawn at once: sort or search to reach the others
const state = { snap: null, found: null, selected: null, sort: { key: "alert", dir: -1 }, search: "", charts: {} };

// ---- small helpers ------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "title") node.title = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}
const $ = (sel) => document.querySelector(sel);
const fmt = (x, digits = 3) => (x === null || x === undefined ? "n/a" : Number(x).toFixed(digits));
const pct = (x, digits = 1) => (x === null || x === undefined ? "n/a" : (100 * x).toFixed(digits) + "%");
const ms = (x) =>
  x === null || x === undefined ? "n/a"
    : x >= 1e9 ? "unbounded" // the QoS model's stand-in for a saturated queue's delay
    : x >= 1000 ? (x / 1000).toFixed(2) + " s" : x.toFixed(1) + " ms";
const when = (t) => (t ? new Date(t).toLocaleTimeString() : "n/a");
const num = (x, digits = 0) =>
  x === null || x === undefined ? "n/a" : Number(x).toLocaleString(undefined, { maximumFractionDigits: digits });

function fillBody(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
}

function sparkline(points, wish) {
  // points: [[t, predicted, measured], ...]; an inline SVG, predicted solid, measured dashed
  const w = 90, h = 20, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("class", "spark");
  if (!points || points.length < 2) return svg;
  const ts = points.map((p) => p[0]);
  const t0 = Math.min(...ts), t1 = Math.max(...ts) || 1;
  const values = points.flatMap((p) => [p[1], p[2]]).filter((v) => v !== null);
  if (wish !== null && wish !== undefined) values.push(wish);
  const lo = Math.min(...values, 1), hi = Math.max(...values, lo + 1e-3);
  const x = (t) => ((t - t0) / (t1 - t0 || 1)) * (w - 2) + 1;
  const y = (v) => h - 1 - ((v - lo) / (hi - lo || 1)) * (h - 2);
  const line = (idx, color, dash) => {
    const pts = points.filter((p) => p[idx] !== null).map((p) => `${x(p[0]).toFixed(1)},${y(p[idx]).toFixed(1)}`);
    if (pts.length < 2) return;
    const pl = document.createElementNS(ns, "polyline");
    pl.setAttribute("points", pts.join(" "));
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", color);
    pl.setAttribute("stroke-width", "1.3");
    if (dash) pl.setAttribute("stroke-dasharray", "3,2");
    svg.append(pl);
  };
  if (wish !== null && wish !== undefined) {
    const l = document.createElementNS(ns, "line");
    l.setAttribute("x1", 0); l.setAttribute("x2", w);
    l.setAttribute("y1", y(wish)); l.setAttribute("y2", y(wish));
    l.setAttribute("stroke", "#c62828"); l.setAttribute("stroke-dasharray", "1,2");
    svg.append(l);
  }
  line(1, "#1f5fbf", false);
  line(2, "#2e7d32", true);
  return svg;
}

function padded(u, lo, hi) {
  // a time axis of points less than a minute apart spans a minute
  return hi - lo < 60 ? [lo - 30, hi + 30] : [lo, hi];
}

function chart(name, container, opts, data) {
  // one uPlot per name, re-made when its series change, else given the new data; a single point
  // gets empty (null) neighbours half a minute away, so that its time axis spans a minute
  if (data[0].length === 1) {
    const t = data[0][0];
    data = [[t - 30, t, t + 30], ...data.slice(1).map((ys) => [null, ys[0], null])];
  }
  const old = state.charts[name];
  const width = Math.max(300, container.clientWidth || 600);
  if (old && old.series.length === opts.series.length && old.width === width) {
    old.setData(data);
    return;
  }
  if (old) old.destroy();
  container.replaceChildren();
  if (typeof uPlot === "undefined") {
    container.append(el("p", { class: "muted" }, "chart library not loaded"));
    return;
  }
  state.charts[name] = new uPlot({ width, height: 220, ...opts }, data, container);
}

// ---- panels -------------------------------------------------------------------------------------

function sortValue(s, key) {
  switch (key) {
    case "id": return s.id;
    case "predicted": return s.predicted ?? -1;
    case "band": return s.high !== null && s.low !== null ? s.high - s.low : -1;
    case "measured": return s.measured ?? -1;
    case "wish": return s.wish.min_reliability ?? -1;
    case "alert": return s.alert ? (s.alert.severity === "critical" ? 2 : 1) : 0;
    default: return 0;
  }
}

function drawSubscribers(snap) {
  // a search keeps the subscribers the server found for it (by subscriber or subscription id)
  const found = state.search.trim() && state.found ? new Set(state.found) : null;
  let rows = found ? snap.subscribers.filter((s) => found.has(s.id)) : snap.subscribers;
  const { key, dir } = state.sort;
  const byId = (a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }); // s2 before s10
  rows = rows.slice().sort((a, b) => {
    if (key === "id") return dir * byId(a, b);
    const va = sortValue(a, key), vb = sortValue(b, key);
    if (va < vb) return -dir;
    if (va > vb) return dir;
    return byId(a, b);
  });
  const shown = rows.slice(0, MAX_ROWS);
  $("#subscriber-count").textContent =
    `${rows.length} of ${snap.subscribers.length}` + (rows.length > shown.length ? `, first ${MAX_ROWS} shown` : "") +
    (snap.subscribers_dropped ? ` (${snap.subscribers_dropped} least recent no longer kept)` : "");
  fillBody(
    $("#subscribers"),
    shown.map((s) => {
      const minRel = s.wish.min_reliability;
      const below = (v) => (minRel !== null && v !== null && v < minRel ? "num below" : "num");
      const wish = [
        minRel !== null ? `R ≥ ${fmt(minRel)}` : null,
        s.wish.deadline_ms !== null ? `within ${ms(s.wish.deadline_ms)}` : null,
      ].filter(Boolean).join(", ") || "none";
      const n = s.wish.subscription_count;
      const subs = n ? ` (${n} subscription${n === 1 ? "" : "s"})` : "";
      const alert = s.alert
        ? el("span", {}, el("span", { class: `sev ${s.alert.severity}` }, s.alert.severity), " ",
            el("span", { class: "alert-message", title: s.alert.message }, s.alert.message))
        : el("span", { class: "muted" }, "none");
      const tr = el(
        "tr",
        { "data-subscriber": s.id, class: s.id === state.selected ? "selected" : "" },
        el("td", { class: "subscriber-id" }, s.id),
        el("td", { class: below(s.predicted) + " predicted" }, fmt(s.predicted)),
        el("td", { class: "num" }, s.low === null ? "n/a" : `${fmt(s.low)} – ${fmt(s.high)}`),
        el("td", { class: below(s.measured) + " measured" }, fmt(s.measured)),
        el("td", {}, wish + subs),
        el("td", {}, sparkline(s.recent, minRel)),
        el("td", {}, alert)
      );
      tr.addEventListener("click", () => select(s.id));
      return tr;
    })
  );
}

async function drawDetail() {
  const id = state.selected;
  const box = $("#subscriber-detail");
  if (!id) { box.hidden = true; return; }
  let d;
  try {
    const r = await fetch("/api/subscriber?id=" + encodeURIComponent(id));
    if (!r.ok) { box.hidden = true; return; }
    d = await r.json();
  } catch (e) { return; }
  if (id !== state.selected) return;
  box.hidden = false;
  const wish = d.wish.min_reliability;
  $("#detail-title").textContent =
    `${d.id}: ${d.reports} reports; wish ${wish === null ? "none" : "R ≥ " + fmt(wish)}` +
    (d.wish.deadline_ms !== null ? ` within ${ms(d.wish.deadline_ms)}` : "") +
    (d.wish.subscriptions.length ? `; subscriptions ${d.wish.subscriptions.join(", ")}` : "");
  const h = d.history;
  const xs = h.map((p) => p.t / 1000);
  const data = [xs, h.map((p) => p.high), h.map((p) => p.low), h.map((p) => p.predicted), h.map((p) => p.measured),
    h.map(() => wish)];
  chart("detail", $("#detail-chart"), {
    scales: { x: { time: true, range: padded }, y: { range: (u, lo, hi) => [Math.max(0, Math.min(lo ?? 0, wish ?? 1) - 0.02), 1] } },
    series: [
      {},
      { label: "90% high", stroke: "rgba(31,95,191,0.35)", width: 1 },
      { label: "90% low", stroke: "rgba(31,95,191,0.35)", width: 1 },
      { label: "predicted R'", stroke: "#1f5fbf", width: 2 },
      { label: "measured R", stroke: "#2e7d32", width: 2, dash: [6, 3] },
      { label: "wish", stroke: "#c62828", width: 1, dash: [2, 3] },
    ],
    bands: [{ series: [1, 2], fill: "rgba(31,95,191,0.12)" }],
  }, data);
  const alerts = d.alerts.slice().reverse();
  $("#detail-alerts").replaceChildren(
    el("h3", {}, alerts.length ? "Alerts" : "No alerts"),
    el("ul", { class: "alerts" }, ...alerts.map(alertItem))
  );
}

function alertItem(a) {
  const contributors = (a.contributors || [])
    .map((c) => `${c.element}: ${pct(c.share, 0)} of the miss, ${c.delay_ms >= 1e9 ? "" : "+"}${ms(c.delay_ms)}` +
      (c.utilisation !== null ? `, ρ ${fmt(c.utilisation, 2)}` : ""))
    .join("; ");
  return el(
    "li",
    { class: a.severity },
    el("span", { class: `sev ${a.severity}` }, a.severity), " ",
    el("b", {}, a.subscriber), " ", el("span", { class: "muted" }, when(a.t)),
    el("div", { class: "alert-message" }, a.message),
    contributors ? el("div", { class: "contributors" }, "blame: " + contributors) : null
  );
}

function drawAlerts(snap) {
  const open = snap.alerts.open;
  $("#alert-counts").textContent =
    `open: ${open.critical || 0} critical, ${open.warning || 0} warning`;
  const items = snap.alerts.recent.map(alertItem);
  $("#alerts").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "no alerts so far")]));
}

function drawJobs(snap) {
  fillBody(
    $("#jobs"),
    snap.jobs.map((j) =>
      el("tr", { "data-job": j.job },
        el("td", {}, j.job),
        el("td", { class: j.up === 0 ? "below" : "" }, j.up === undefined ? "n/a" : j.up ? "running" : "down"),
        el("td", { class: "num" }, j.input_rate === undefined ? "n/a" : num(j.input_rate, 1) + " /s"),
        el("td", { class: "num" }, j.processed === undefined ? "n/a" : num(j.processed)),
        el("td", { class: "num" }, j.lag === undefined ? "n/a" : num(j.lag) + " records"),
        el("td", { class: "num" },
          j.batch_duration_s !== undefined ? ms(1000 * j.batch_duration_s)
            : j.mean_batch_duration_s !== undefined ? ms(1000 * j.mean_batch_duration_s) + " (mean)" : "n/a"))
    )
  );
  const m = snap.matches;
  $("#matches").textContent = m.events
    ? `matches: ${num(m.events)} events matched, ${fmt(m.per_event, 1)} subscriptions per event` +
      (m.sampled < m.events ? ` (from ${num(m.sampled)} decoded)` : "")
    : "matches: none read yet";
}

function colour(value, lo, hi) {
  // green (lo) .. amber .. red (hi); grey when unknown
  if (value === null || value === undefined) return "#b0b6bf";
  const f = Math.max(0, Math.min(1, (value - lo) / (hi - lo)));
  const hue = 120 - 120 * f;
  return `hsl(${hue.toFixed(0)}, 65%, 45%)`;
}

function drawOverlay(snap) {
  const svg = $("#overlay-map");
  const ns = "http://www.w3.org/2000/svg";
  const nodes = snap.topology.nodes, edges = snap.topology.edges;
  const brokers = Object.fromEntries(snap.brokers.map((b) => [b.id, b]));
  const links = Object.fromEntries(snap.links.map((l) => [l.id, l]));
  svg.replaceChildren();
  if (!nodes.length) {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", 20); t.setAttribute("y", 30);
    t.textContent = "no topology or telemetry yet";
    svg.append(t);
  }
  // brokers on an inner circle, publishers and subscribers on an outer one (each next to its broker)
  const pos = {};
  const inner = nodes.filter((n) => n.kind === "broker"), outer = nodes.filter((n) => n.kind !== "broker");
  inner.forEach((n, i) => {
    const a = (2 * Math.PI * i) / Math.max(1, inner.length) - Math.PI / 2;
    pos[n.id] = [300 + 140 * Math.cos(a), 210 + 140 * Math.sin(a)];
  });
  const attached = {};
  for (const e of edges) if (e.id.includes("--")) attached[e.from] = e.to;
  outer.forEach((n, i) => {
    const home = pos[attached[n.id]];
    const a = home ? Math.atan2(home[1] - 210, home[0] - 300) + ((i % 5) - 2) * 0.08
      : (2 * Math.PI * i) / Math.max(1, outer.length);
    pos[n.id] = [300 + 195 * Math.cos(a), 210 + 195 * Math.sin(a)];
  });
  for (const e of edges) {
    const a = pos[e.from], b = pos[e.to];
    if (!a || !b) continue;
    const l = links[e.id];
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", a[0]); line.setAttribute("y1", a[1]);
    line.setAttribute("x2", b[0]); line.setAttribute("y2", b[1]);
    line.setAttribute("stroke", l ? colour(l.loss, 0, 0.1) : "#c9ced6");
    line.setAttribute("stroke-width", l ? 2.5 : 1);
    line.setAttribute("data-link", e.id);
    const title = document.createElementNS(ns, "title");
    title.textContent = l ? `${e.id}: loss ${pct(l.loss)}, mean delay ${ms(l.mean_delay_ms)} (${l.samples} samples)` : e.id;
    line.append(title);
    svg.append(line);
  }
  for (const n of nodes) {
    const p = pos[n.id];
    const b = brokers[n.id];
    const g = document.createElementNS(ns, "g");
    g.setAttribute("data-node", n.id);
    const c = document.createElementNS(ns, "circle");
    c.setAttribute("cx", p[0]); c.setAttribute("cy", p[1]);
    c.setAttribute("r", n.kind === "broker" ? 11 : 5);
    c.setAttribute("fill", n.kind === "broker" ? colour(b ? b.rho : null, 0.3, 0.95) : "#8a94a3");
    c.setAttribute("stroke", "#fff");
    const title = document.createElementNS(ns, "title");
    title.textContent = b ? `${n.id}: ρ ${fmt(b.rho, 2)}, mean wait ${ms(b.mean_wait_ms)}` : `${n.kind} ${n.id}`;
    c.append(title);
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", p[0] + (n.kind === "broker" ? 13 : 7)); t.setAttribute("y", p[1] + 3);
    t.textContent = n.id;
    g.append(c, t);
    svg.append(g);
  }
  fillBody($("#brokers"), snap.brokers.map((b) =>
    el("tr", { "data-broker": b.id },
      el("td", {}, b.id),
      el("td", { class: "num" }, fmt(b.rho, 2)),
      el("td", { class: "num" }, ms(b.mean_wait_ms)),
      el("td", { class: "num" }, b.arrival_rate_per_s === null ? "n/a" : num(b.arrival_rate_per_s, 1) + " /s"),
      el("td", { class: "num" }, ms(b.sampled_wait_ms)))));
  fillBody($("#links"), snap.links.map((l) =>
    el("tr", { "data-link": l.id },
      el("td", {}, l.id),
      el("td", { class: "num" }, pct(l.loss)),
      el("td", { class: "num" }, ms(l.mean_delay_ms)),
      el("td", { class: "num" }, num(l.samples)))));
}

function drawChannels(snap) {
  const p = snap.channels.planned;
  if (!p) {
    $("#channel-version").textContent = "";
    $("#channel-detail").textContent = "no channel assignment yet (siftstream.channels.v1)";
    fillBody($("#channels"), []);
  } else {
    const installed = snap.channels.installed.map((v) => v.version);
    $("#channel-version").textContent =
      `version ${p.version} (${p.reason}, ${p.method || "n/a"}, K = ${p.k})` +
      (installed.length ? `; installed: ${installed.slice(-3).join(", ")}` : "; not installed yet");
    $("#channel-detail").textContent =
      `waste ratio ${fmt(p.waste_ratio)} against flooding's ${fmt(p.flooding_waste_ratio)} over ` +
      `${num(p.sample_events)} events. ${p.detail}`;
    fillBody($("#channels"), p.channels.map((c) =>
      el("tr", { "data-channel": c.channel },
        el("td", {}, c.channel),
        el("td", { class: "num" }, num(c.subscriptions)),
        el("td", { class: "num" }, num(c.subscribers)),
        el("td", { class: "num" }, num(c.deliveries)),
        el("td", { class: "num" }, fmt(c.waste_ratio)),
        el("td", { class: "members" }, c.subscriber_ids.join(", ") + (c.subscribers > c.subscriber_ids.length ? ", …" : "")))));
  }
  const w = snap.channels.waste;
  if (w.length) {
    chart("waste", $("#waste-chart"), {
      height: 180,
      scales: { x: { time: true, range: padded }, y: { range: [0, 1] } },
      series: [{}, { label: "waste ratio", stroke: "#1f5fbf", width: 2 },
        { label: "flooding", stroke: "#b26a00", width: 2, dash: [6, 3] }],
    }, [w.map((v) => v.t / 1000), w.map((v) => v.waste_ratio), w.map((v) => v.flooding_waste_ratio)]);
  }
}

function drawComposites(snap) {
  const c = snap.composites;
  fillBody($("#placements"), c.placements.length ? c.placements.map((p) =>
    el("tr", { "data-placement": p.subscription_id },
      el("td", {}, p.subscription_id),
      el("td", {}, p.method),
      el("td", { class: "num" }, fmt(p.cost, 1)),
      el("td", { class: "num" }, fmt(p.baseline_cost, 1)),
      el("td", { class: "members", title: Object.entries(p.reasons).map(([k, v]) => `${k}: ${v}`).join("\n") },
        Object.entries(p.placement).map(([k, v]) => `${k}→${v}`).join(", "))))
    : [el("tr", {}, el("td", { colSpan: 5, class: "muted" }, "no placements yet"))]);
  fillBody($("#detections"), c.detections.length ? c.detections.map((d) =>
    el("tr", {},
      el("td", {}, d.subscription_id),
      el("td", {}, d.subscriber_id || ""),
      el("td", { class: "num" }, num(d.count)),
      el("td", {}, when(d.last))))
    : [el("tr", {}, el("td", { colSpan: 4, class: "muted" }, "no detections yet"))]);
}

function drawRoutes(snap) {
  const p = snap.routes.plan;
  if (!p) {
    $("#plan").replaceChildren(el("p", { class: "muted" }, "no distribution plan yet (siftstream.routes.v1)"));
    return;
  }
  $("#plan").replaceChildren(
    el("p", { id: "plan-cost" }, el("b", {}, `cost ${fmt(p.cost, 2)}`),
      p.previous_cost !== null ? ` (was ${fmt(p.previous_cost, 2)})` : "",
      ` · ${p.method}, version ${p.version}, ${p.feasible ? "feasible" : "INFEASIBLE"}, ` +
      `${num(p.transmissions)} transmissions · ${when(p.t)}`),
    el("ul", {}, ...p.reasons.map((r) => el("li", {}, r)))
  );
  const costs = snap.routes.costs;
  if (costs.length) {
    chart("cost", $("#cost-chart"), {
      height: 150,
      scales: { x: { time: true, range: padded } },
      series: [{}, { label: "plan cost", stroke: "#1f5fbf", width: 2 }],
    }, [costs.map((c) => c.t / 1000), costs.map((c) => c.cost)]);
  }
}

function drawDeadLetters(snap) {
  const d = snap.dead_letters;
  $("#deadletter-total").textContent = `${num(d.total)} in all`;
  fillBody($("#deadletters"), d.by_class.length ? d.by_class.map((c) =>
    el("tr", { "data-error-class": c.error_class },
      el("td", {}, c.error_class),
      el("td", { class: "num" }, num(c.count)),
      el("td", { class: "example" }, c.example),
      el("td", { class: "members" }, c.topics.join(", "))))
    : [el("tr", {}, el("td", { colSpan: 4, class: "muted" }, "no dead letters"))]);
}

function drawHeader(snap) {
  const f = snap.feed;
  const parts = [`${f.bootstrap_servers}${f.topic_prefix ? " · prefix " + f.topic_prefix : ""}`];
  parts.push(f.caught_up ? "caught up" : `reading: ${num(f.backlog)} records to go`);
  if (f.error) parts.push("feed stopped: " + f.error);
  $("#feed-status").textContent = parts.join(" · ");
  $("#updated").textContent = "updated " + new Date(snap.now).toLocaleTimeString();
  document.body.dataset.version = snap.version;
}

function draw(snap) {
  state.snap = snap;
  if (state.search.trim()) search(); // new subscribers may match the search
  for (const [name, fn] of [["header", drawHeader], ["subscribers", drawSubscribers], ["alerts", drawAlerts],
    ["jobs", drawJobs], ["overlay", drawOverlay], ["channels", drawChannels], ["composites", drawComposites],
    ["routes", drawRoutes], ["deadletters", drawDeadLetters]]) {
    try { fn(snap); } catch (e) { console.error(name, e); }
  }
  if (!state.selected && snap.subscribers.length) {
    const first = snap.subscribers.find((s) => s.alert) || snap.subscribers[0];
    state.selected = first.id;
    drawSubscribers(snap);
  }
  drawDetail();
}

function select(id) {
  state.selected = id;
  if (state.snap) drawSubscribers(state.snap);
  drawDetail();
}

// ---- wiring -------------------------------------------------------------------------------------

function connect() {
  const badge = $("#connection");
  let polling = null;
  const poll = async () => {
    try {
      const r = await fetch("/api/state");
      if (r.ok) draw(await r.json());
    } catch (e) { /* the server is away: the next poll tries again */ }
  };
  if (typeof EventSource === "undefined") {
    badge.textContent = "polling";
    poll();
    setInterval(poll, 3000);
    return;
  }
  const source = new EventSource("/api/events");
  source.addEventListener("state", (ev) => {
    badge.textContent = "live"; badge.className = "badge live";
    if (polling) { clearInterval(polling); polling = null; }
    draw(JSON.parse(ev.data));
  });
  source.addEventListener("open", () => { badge.textContent = "live"; badge.className = "badge live"; });
  source.addEventListener("error", () => {
    badge.textContent = "reconnecting"; badge.className = "badge down";
    if (!polling) polling = setInterval(poll, 3000);  // EventSource retries by itself meanwhile
  });
}

document.querySelectorAll("#subscribers th[data-sort]").forEach((th) => {
  th.addEventListener("click", () => {
    const key = th.dataset.sort;
    state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : key === "id" ? 1 : -1 };
    document.querySelectorAll("#subscribers th").forEach((h) => h.classList.remove("asc", "desc"));
    th.classList.add(state.sort.dir > 0 ? "asc" : "desc");
    if (state.snap) drawSubscribers(state.snap);
  });
});
async function search() {
  const q = state.search.trim();
  if (!q) {
    state.found = null;
  } else {
    try {
      const r = await fetch("/api/search?q=" + encodeURIComponent(q));
      if (!r.ok || q !== state.search.trim()) return; // a newer query is on its way
      state.found = (await r.json()).subscribers;
    } catch (e) { return; }
  }
  if (state.snap) drawSubscribers(state.snap);
}
$("#search").addEventListener("input", (ev) => {
  state.search = ev.target.value;
  search();
});
connect();
