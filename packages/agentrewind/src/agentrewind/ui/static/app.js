// agentrewind viewer: a small single-page app over the read-only JSON API (/api/...).
// Every stored value is rendered as text (textContent, createTextNode, setAttribute), never
// parsed as HTML; the server's Content-Security-Policy forbids inline script besides.
"use strict";

const app = document.getElementById("app");
const SVG = "http://www.w3.org/2000/svg";
let routeToken = 0; // bumped on navigation, so a stale poll or fetch never paints over a page

// -- DOM helpers ----------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
}
function link(href, ...children) { return h("a", { href, "data-nav": "" }, ...children); }
const enc = encodeURIComponent;
const runHref = (id) => `/runs/${enc(id)}`;
function badge(text) { return h("span", { class: `badge ${text}` }, text); }
function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : "–"; }
function secs(x) { return x >= 1 ? `${x.toFixed(2)} s` : `${(x * 1000).toFixed(1)} ms`; }
// Ids as the CLI prints them (the shortest unique prefix), sent by the API with each node and step.
function short(id, labels) { return (labels && labels[id]) || String(id || ""); }

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || `${r.status}`);
  return data;
}
function render(...nodes) { app.replaceChildren(...nodes.flat(Infinity).filter((n) => n)); }
function fail(err) { render(h("p", { class: "error" }, String(err.message || err))); }

// -- JSON tree: collapsible objects, long text collapsed ------------------------------------
const LONG = 240;
function jsonTree(value, key, depth = 0) {
  const label = key === undefined ? null : h("span", { class: "k" }, String(key), ": ");
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
    const sum = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    const d = h("details", depth < 2 ? { open: "" } : {}, h("summary", {}, label, h("span", { class: "z" }, sum)));
    for (const [k, v] of entries) d.appendChild(jsonTree(v, k, depth + 1));
    return d;
  }
  const leaf = h("div", { class: "leaf" }, label);
  if (typeof value === "string") {
    const text = h("span", { class: "s" });
    if (value.length > LONG) {
      let open = false;
      const btn = h("button", { type: "button" });
      const paint = () => {
        text.textContent = JSON.stringify(open ? value : value.slice(0, LONG) + "…");
        btn.textContent = open ? "collapse" : `show all ${value.length} chars`;
      };
      btn.addEventListener("click", () => { open = !open; paint(); });
      paint();
      leaf.append(text, btn);
    } else {
      text.textContent = JSON.stringify(value);
      leaf.append(text);
    }
  } else {
    leaf.append(h("span", { class: value === null ? "z" : "n" }, String(value)));
  }
  return leaf;
}
function jsonPanel(title, value) {
  return h("div", { class: "panel" }, h("h2", {}, title), h("div", { class: "json" }, jsonTree(value)));
}

// -- runs list ------------------------------------------------------------------------------
async function runsPage(token, query) {
  const runs = await getJSON("/api/runs");
  if (token !== routeToken) return;
  const q = h("input", { type: "search", placeholder: "search run id", value: query.get("q") || "", "data-testid": "search" });
  const status = h("select", { "data-testid": "status-filter" }, h("option", { value: "" }, "any status"),
    ["queued", "running", "paused", "completed", "failed", "crashed", "cancelled", "active"].map((x) => h("option", { value: x }, x)));
  const kind = h("select", { "data-testid": "kind-filter" }, h("option", { value: "" }, "any kind"),
    ["journal", "timeline", "langgraph"].map((x) => h("option", { value: x }, x)));
  status.value = query.get("status") || ""; kind.value = query.get("kind") || "";
  const body = h("tbody");
  const count = h("span", { class: "muted" });
  const paint = () => {
    const want = q.value.trim().toLowerCase();
    const rows = runs.filter((r) => (!want || r.run_id.toLowerCase().includes(want))
      && (!status.value || r.status === status.value) && (!kind.value || r.kind === kind.value));
    body.replaceChildren(...rows.map((r) => h("tr", { class: "clickable", "data-run": r.run_id,
      onclick: (e) => { if (!e.target.closest("a")) navigate(runHref(r.ref || r.run_id)); } },
      h("td", {}, link(runHref(r.ref || r.run_id), r.ref || r.run_id)), h("td", {}, badge(r.status)), h("td", {}, r.kind),
      h("td", { class: "num" }, r.steps), h("td", { class: "num" }, r.replay_hits),
      h("td", { class: "num" }, r.tokens_saved), h("td", { class: "num" }, secs(r.seconds_saved)),
      h("td", {}, when(r.updated_at)))));
    count.textContent = `${rows.length} of ${runs.length} run(s)`;
    const p = new URLSearchParams();
    if (q.value) p.set("q", q.value);
    if (status.value) p.set("status", status.value);
    if (kind.value) p.set("kind", kind.value);
    history.replaceState(null, "", p.toString() ? `/?${p}` : "/");
  };
  for (const el of [q, status, kind]) el.addEventListener("input", paint);
  paint();
  render(h("h1", {}, "Runs"), h("div", { class: "filters" }, q, status, kind, count),
    h("table", { "data-testid": "runs" }, h("thead", {}, h("tr", {}, ["run", "status", "kind"].map((x) => h("th", {}, x)),
      ["steps", "replay hits", "tokens saved", "time saved"].map((x) => h("th", { class: "num" }, x)), h("th", {}, "updated"))), body));
}

// -- one run: the waterfall -----------------------------------------------------------------
function runHeader(run, active) {
  const base = runHref(run.run_id);
  const tabs = [["calls", base], ["graph", `${base}/graph`]];
  return [h("h1", {}, run.run_id),
    h("div", { class: "tabs" }, badge(run.status), " ", h("span", { class: "muted" }, `${run.kind} · updated ${when(run.updated_at)}${run.cancelled_at ? ` · cancelled ${when(run.cancelled_at)}` : ""} `),
      tabs.map(([name, href]) => name === active ? h("b", {}, name, " ") : [link(href, name), " "]))];
}

function waterfall(run, wf) {
  const rows = wf.rows;
  const t0 = Math.min(...rows.map((r) => r.start)), t1 = Math.max(...rows.map((r) => r.end), t0 + 1e-3);
  const span = t1 - t0;
  const pct = (t) => (100 * (t - t0)) / span;
  const body = h("tbody");
  rows.forEach((r, i) => {
    const bar = h("div", { class: `wf-bar ${r.outcome}`, style: null, title: `${r.outcome} ${secs(r.duration)}` });
    bar.style.left = `${Math.min(pct(r.start), 98.5)}%`;
    bar.style.width = `${Math.max(pct(r.end) - pct(r.start), 0)}%`;
    const href = r.step_id ? `${runHref(run.run_id)}/steps/${enc(r.step_id)}` : null;
    body.appendChild(h("tr", { class: "clickable", "data-outcome": r.outcome, "data-row": i,
      onclick: (e) => { if (href && !e.target.closest("a")) navigate(href); } },
      h("td", {}, r.kind), h("td", {}, href ? link(href, r.name) : r.name),
      h("td", {}, badge(r.outcome), r.diverged ? [" ", badge("diverged")] : null,
        r.error ? h("div", { class: "error" }, r.error) : null),
      h("td", { class: "num" }, r.outcome === "replayed" ? `saved ${secs(r.seconds_saved)}` : secs(r.duration)),
      h("td", { class: "num" }, r.tokens || ""), h("td", { class: "wf-bar-cell" }, bar)));
  });
  const c = wf.counts;
  const counts = h("div", { class: "cards" },
    [["executed", c.executed], ["replayed", c.replayed], ["cached", c.cached], ["failed", c.failed], ["started, not finished", c.started]]
      .map(([k, v]) => h("div", { class: "card", "data-count": k.split(",")[0] }, h("b", {}, v), k)));
  const note = c.replayed_unplaced ? h("p", { class: "muted" },
    `${c.replayed_unplaced} more replay hit(s) came after the last write of the run, so they have no place on the axis.`) : null;
  return [counts, note, h("table", { "data-testid": "waterfall" }, h("thead", {}, h("tr", {},
    ["kind", "name", "outcome"].map((x) => h("th", {}, x)), h("th", { class: "num" }, "duration"),
    h("th", { class: "num" }, "tokens"), h("th", {}, h("div", { class: "axis" }, h("span", {}, "0"), h("span", {}, secs(span)))))), body)];
}

async function runPage(token, runId, stepId) {
  const data = await getJSON(`/api/runs/${enc(runId)}`);
  if (token !== routeToken) return;
  const run = data.run;
  const detail = h("div");
  const nodes = [...runHeader(run, "calls"), h("div", { class: "cards" },
    [["executions", run.executions], ["steps", run.steps], ["attempts", run.attempts], ["replay hits", run.replay_hits],
      ["tokens saved", run.tokens_saved], ["time saved", secs(run.seconds_saved)], ["failures", run.failures]]
      .map(([k, v]) => h("div", { class: "card", "data-figure": k }, h("b", {}, v), k)))];
  if (run.status === "crashed") { // its process died: say how it comes back
    nodes.push(h("div", { class: "hint", "data-testid": "resume-hint" },
      h("b", {}, "This run's process died mid-run. "), "Finished calls replay when it resumes: run the same code with run id ",
      h("code", {}, run.run_id), " (", h("code", {}, `with middleware.run("${run.run_id}"):`), "); a registered workflow is resumed by ",
      h("code", {}, "agentrewind worker MODULE:middleware"), " or ", h("code", {}, `agentrewind resume ${run.run_id} --app MODULE:middleware`), "."));
  }
  const fw = run.framework || {};
  if (fw.error || fw.interrupts || (fw.next && fw.next.length)) { // the framework's own words
    nodes.push(h("div", { "data-testid": "framework" },
      fw.error ? h("div", { class: "error" }, `${fw.error.type}: ${fw.error.message}`) : null,
      (fw.interrupts || []).map((i) => h("div", {}, "interrupt: ", h("code", {}, JSON.stringify(i.value)))),
      fw.next && fw.next.length ? h("div", { class: "muted" }, `next: ${fw.next.join(", ")}`) : null));
  }
  if (data.waterfall.rows.length) nodes.push(...waterfall(run, data.waterfall), callsChart(data.waterfall.rows));
  else nodes.push(h("p", { class: "muted" }, "No calls recorded yet."));
  nodes.push(detail);
  render(...nodes);
  if (stepId) {
    const step = await getJSON(`/api/runs/${enc(runId)}/steps/${enc(stepId)}`);
    if (token !== routeToken) return;
    detail.replaceChildren(stepView(step));
    detail.scrollIntoView({ block: "nearest" });
  }
  if (run.status === "running") { // live: poll while the run is in progress
    setTimeout(() => { if (token === routeToken) runPage(token, runId, stepId).catch(fail); }, 2000);
  }
}

function stepView(step) {
  const m = step.meta || {};
  const facts = h("table", {}, h("tbody", {}, ["step_id", "seq", "parent_id", "key", "kind", "name", "status"]
    .map((k) => h("tr", {}, h("th", {}, k), h("td", {}, step[k] === null ? "–" : String(step[k]))))));
  const parts = [h("h2", {}, `Step ${step.name}`), facts];
  if (m.error) parts.push(h("p", { class: "error" }, `${m.error.type}: ${m.error.message}`));
  const d = step.detail;
  if (d && typeof d === "object" && "channel_values" in d) {
    parts.push(h("div", { class: "split" }, jsonPanel("Channel values", d.channel_values),
      jsonPanel(`Pending writes (${d.pending_writes.length})`, d.pending_writes)), jsonPanel("Metadata", d.metadata));
  } else {
    parts.push(h("div", { class: "split", "data-testid": "inputs-output" }, jsonPanel("Inputs", step.inputs === undefined ? null : step.inputs),
      jsonPanel("Output", step.output)), jsonPanel("Meta (timings, usage, errors)", m));
  }
  return h("section", { "data-testid": "step" }, parts);
}

// -- graph: timeline branches or LangGraph checkpoints ---------------------------------------
function layout(nodes) {
  const order = [...nodes].sort((a, b) => a.seq - b.seq || a.created_at - b.created_at);
  const pos = new Map(), usedLane = new Map(); // node id -> {x, lane}; parent id -> lane taken
  let lanes = 0;
  order.forEach((n, i) => {
    const p = n.parent_id && pos.get(n.parent_id);
    let lane;
    if (p && !usedLane.has(n.parent_id)) lane = p.lane; else lane = lanes;
    if (p) usedLane.set(n.parent_id, true);
    lanes = Math.max(lanes, lane + 1);
    pos.set(n.id, { x: i, lane });
  });
  return { pos, lanes, order };
}

function graphSvg(g, selected, onPick) {
  const { pos, lanes, order } = layout(g.nodes);
  const DX = 120, DY = 64, X0 = 30, Y0 = 34;
  const at = (id) => { const p = pos.get(id); return [X0 + p.x * DX, Y0 + p.lane * DY]; };
  const width = X0 * 2 + Math.max(order.length - 1, 0) * DX + 160, height = Y0 * 2 + (lanes - 1) * DY + 20;
  const svg = s("svg", { width, height, "data-testid": "graph", role: "img" });
  for (const n of order) {
    const [x, y] = at(n.id);
    if (n.parent_id && pos.has(n.parent_id)) {
      const [px, py] = at(n.parent_id);
      svg.appendChild(s("path", { class: "edge", d: `M${px},${py} C${px + DX / 2},${py} ${x - DX / 2},${y} ${x},${y}` }));
    }
    for (const m of n.merged || []) {
      if (!pos.has(m)) continue;
      const [mx, my] = at(m);
      svg.appendChild(s("path", { class: "edge merge", d: `M${mx},${my} C${mx + DX / 2},${my} ${x - DX / 2},${y} ${x},${y}` }));
    }
  }
  for (const n of order) {
    const [x, y] = at(n.id);
    const cls = ["node", n.merged && n.merged.length ? "merge" : n.status, selected.includes(n.id) ? "selected" : ""].join(" ");
    const c = s("circle", { cx: x, cy: y, r: 9, class: cls, "data-node": n.id, tabindex: 0 },
      s("title", {}, `${n.short || n.id}  ${n.label}  [${n.status}]`));
    c.addEventListener("click", () => onPick(n));
    svg.appendChild(c);
    if (n.refs && n.refs.length) svg.appendChild(s("text", { x: x - 8, y: y - 14, class: "ref" }, n.refs.join(", ")));
    svg.appendChild(s("text", { x: x - 8, y: y + 22 }, String(n.label).replace(/\s+\(confidence.*$/, "").slice(0, 18)));
  }
  return svg;
}

async function graphPage(token, runId, stepId) {
  const [data, g] = await Promise.all([getJSON(`/api/runs/${enc(runId)}`), getJSON(`/api/runs/${enc(runId)}/graph`)]);
  if (token !== routeToken) return;
  const base = `${runHref(runId)}/graph`;
  const selected = stepId ? [stepId] : [];
  const detail = h("div");
  const diffBox = h("p", { class: "muted" }, "Click a node to see it; click a second one to compare them side by side.");
  const pick = (n) => {
    if (selected.length && selected[0] !== n.id) {
      navigate(`${runHref(runId)}/diff?a=${enc(selected[0])}&b=${enc(n.id)}`);
    } else navigate(`${base}/${enc(n.id)}`);
  };
  const branches = g.branches.length ? h("table", { "data-testid": "branches" }, h("thead", {}, h("tr", {},
    ["branch", "head", "checkpoints"].map((x) => h("th", {}, x)))), h("tbody", {}, g.branches.map((b) =>
    h("tr", {}, h("td", {}, b.name, b.is_current ? " (current)" : ""),
      h("td", {}, b.head ? link(`${base}/${enc(b.head)}`, short(b.head, g.labels)) : "–"), h("td", {}, b.checkpoint_count))))) : null;
  render(...runHeader(data.run, "graph"),
    h("p", { class: "legend muted" }, h("span", {}, `${g.nodes.length} node(s)`), h("span", {}, "green: branch head"),
      h("span", {}, "grey: rolled back"), h("span", {}, "purple: merge"), h("span", {}, "red: failed")),
    h("div", { class: "graph-wrap" }, graphSvg(g, selected, pick)), diffBox, branches, detail);
  if (stepId) {
    const step = await getJSON(`/api/runs/${enc(runId)}/steps/${enc(stepId)}`);
    if (token !== routeToken) return;
    detail.replaceChildren(stepView(step));
  }
}

async function diffPage(token, runId, query) {
  const a = query.get("a"), b = query.get("b");
  const d = await getJSON(`/api/runs/${enc(runId)}/diff?a=${enc(a)}&b=${enc(b)}`);
  if (token !== routeToken) return;
  const ch = d.changes;
  const items = [];
  for (const [p, v] of Object.entries(ch.removed)) items.push(h("li", { class: "del" }, `− ${p}: ${JSON.stringify(v)}`));
  for (const [p, v] of Object.entries(ch.added)) items.push(h("li", { class: "add" }, `+ ${p}: ${JSON.stringify(v)}`));
  for (const [p, v] of Object.entries(ch.changed)) items.push(h("li", { class: "chg" }, `~ ${p}: ${JSON.stringify(v.before)} → ${JSON.stringify(v.after)}`));
  const state = (x) => (x.detail && x.detail.channel_values) || x.output;
  render(h("h1", {}, `Diff in ${runId}`), h("p", {}, link(`${runHref(runId)}/graph`, "← graph")),
    h("ul", { class: "diff-list", "data-testid": "diff" }, items.length ? items : h("li", {}, "no differences")),
    h("div", { class: "split" }, jsonPanel(`A: ${d.a.short || d.a.step_id} ${d.a.meta.description || d.a.name}`, state(d.a)),
      jsonPanel(`B: ${d.b.short || d.b.step_id} ${d.b.meta.description || d.b.name}`, state(d.b))),
    d.a.inputs || d.b.inputs ? h("div", { class: "split", "data-testid": "diff-inputs" }, jsonPanel("A: inputs", d.a.inputs),
      jsonPanel("B: inputs", d.b.inputs)) : null);
}

// -- metrics ----------------------------------------------------------------------------------
// Axes of a W x H chart with margin P: the y axis from 0 to its maximum, both axes named, the x
// axis's ends labelled.
function axes(W, H, P, yMax, yFmt, xName, yName, xFrom, xTo) {
  return [s("line", { x1: P, y1: H, x2: W - P, y2: H, class: "grid" }), s("line", { x1: P, y1: P, x2: P, y2: H, class: "grid" }),
    s("text", { x: P - 4, y: H, class: "tick", "text-anchor": "end" }, "0"),
    s("text", { x: P - 4, y: P + 4, class: "tick", "text-anchor": "end" }, yFmt(yMax)),
    s("text", { x: P, y: H + 14, class: "tick" }, xFrom), s("text", { x: W - P, y: H + 14, class: "tick", "text-anchor": "end" }, xTo),
    s("text", { x: W / 2, y: H + 28, class: "axis", "text-anchor": "middle" }, xName),
    s("text", { x: 10, y: (H + P) / 2, class: "axis", transform: `rotate(-90 10 ${(H + P) / 2})`, "text-anchor": "middle" }, yName)];
}
function barChart(series, key, title) {
  const W = 640, H = 180, P = 30, n = Math.max(series.length, 1);
  const max = Math.max(1, ...series.map((r) => r[key]));
  const bw = Math.min((W - 2 * P) / n, 48);
  const first = series.length ? series[0].run_id : "", last = series.length ? series[series.length - 1].run_id : "";
  const svg = s("svg", { width: W, height: H + 34, "data-testid": `chart-${key}` },
    ...axes(W, H, P, max, String, "runs, oldest first", title, first, last), s("text", { x: P + 4, y: P - 8 }, `${title} (max ${max})`));
  series.forEach((r, i) => {
    const bh = ((H - P) * r[key]) / max;
    svg.appendChild(s("rect", { x: P + i * bw + 1, y: H - bh, width: Math.max(bw - 2, 1), height: bh, class: "bar" },
      s("title", {}, `${r.run_id}: ${r[key]}`)));
  });
  return svg;
}
function lineChart(series, key, title, fmt) {
  const W = 640, H = 180, P = 30;
  let acc = 0;
  const pts = series.map((r) => [r.updated_at, (acc += r[key])]);
  const t0 = pts.length ? pts[0][0] : 0, t1 = pts.length ? pts[pts.length - 1][0] : 1;
  const max = Math.max(acc, 1e-9);
  const xy = pts.map(([t, v]) => [P + ((W - 2 * P) * (t - t0)) / Math.max(t1 - t0, 1e-9), H - ((H - P) * v) / max]);
  return s("svg", { width: W, height: H + 34, "data-testid": `chart-${key}` },
    ...axes(W, H, P, max, fmt, "time (run's last update)", `${title}, cumulative`, pts.length ? when(t0) : "", pts.length ? when(t1) : ""),
    s("text", { x: P + 4, y: P - 8 }, `${title}: ${fmt(acc)} in total`),
    s("polyline", { class: "line", points: xy.map((p) => p.join(",")).join(" ") }));
}
function callsChart(rows) { // one run: executed and replayed calls, cumulative over its time axis
  const W = 640, H = 120, P = 30;
  const t0 = rows[0].start, t1 = Math.max(...rows.map((r) => r.end), t0 + 1e-3);
  const x = (t) => P + ((W - 2 * P) * (t - t0)) / (t1 - t0);
  const svg = s("svg", { width: W, height: H + 34, "data-testid": "chart-calls" },
    ...axes(W, H, P, rows.length, String, "time since the first call", "calls", "0 s", secs(t1 - t0)),
    s("text", { x: P + 4, y: 14 }, "calls over time: executed (blue), replayed (green)"));
  [["executed", "line exec"], ["replayed", "line"]].forEach(([what, cls]) => {
    let n = 0;
    const pts = [[P, 0]]; // a step line: the count rises when a call ends
    for (const r of rows.filter((row) => row.outcome === what)) pts.push([x(r.end), n], [x(r.end), ++n]);
    pts.push([W - P, n]);
    const max = Math.max(rows.length, 1);
    svg.appendChild(s("polyline", { class: cls, points: pts.map(([px, v]) => `${px},${H - ((H - P) * v) / max}`).join(" ") }));
  });
  return h("div", {}, svg);
}

async function metricsPage(token) {
  const m = await getJSON("/api/metrics");
  if (token !== routeToken) return;
  const t = m.total;
  render(h("h1", {}, "Metrics"), h("div", { class: "cards" }, [["runs", m.runs], ["steps", t.steps], ["replay hits", t.replay_hits],
    ["tokens saved", t.tokens_saved], ["time saved", secs(t.seconds_saved)], ["failures", t.failures]]
    .map(([k, v]) => h("div", { class: "card", "data-metric": k }, h("b", {}, v), k))),
  h("h2", {}, "Per run (oldest first)"), barChart(m.series, "steps", "steps"), barChart(m.series, "replay_hits", "replay hits"),
  h("h2", {}, "Savings over time"), lineChart(m.series, "seconds_saved", "time saved", secs),
  lineChart(m.series, "tokens_saved", "tokens saved", (x) => String(x)));
}

async function queuesPage(token) {
  const qs = await getJSON("/api/queues");
  if (token !== routeToken) return;
  const rows = qs.map((q) => h("tr", { "data-queue": q.queue }, h("td", {}, q.queue),
    h("td", { class: "num" }, q.queued), h("td", { class: "num" }, q.delayed), h("td", { class: "num" }, q.in_flight),
    h("td", { class: "num" }, q.age === null ? "–" : secs(q.age)),
    h("td", {}, link(`/?status=queued`, "queued runs"))));
  render(h("h1", {}, "Queues"), qs.length === 0 ? h("p", { class: "muted" }, "No queue holds runs.") :
    h("table", { "data-testid": "queues" }, h("thead", {}, h("tr", {}, h("th", {}, "queue"),
      ["waiting", "delayed", "in flight", "oldest waiting"].map((x) => h("th", { class: "num" }, x)), h("th", {}, ""))),
    h("tbody", {}, rows)));
}

// -- routing ----------------------------------------------------------------------------------
function route() {
  const token = ++routeToken;
  const url = new URL(location.href);
  const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  let page;
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "runs")) page = runsPage(token, url.searchParams);
  else if (parts[0] === "metrics") page = metricsPage(token);
  else if (parts[0] === "queues") page = queuesPage(token);
  else if (parts[0] === "runs" && parts.length === 2) page = runPage(token, parts[1]);
  else if (parts[0] === "runs" && parts[2] === "steps" && parts.length === 4) page = runPage(token, parts[1], parts[3]);
  else if (parts[0] === "runs" && parts[2] === "graph") page = graphPage(token, parts[1], parts[3]);
  else if (parts[0] === "runs" && parts[2] === "diff") page = diffPage(token, parts[1], url.searchParams);
  else page = Promise.reject(new Error("No such page."));
  page.then(() => { document.title = `agentrewind · ${parts.join(" / ") || "runs"}`; }).catch((e) => { if (token === routeToken) fail(e); });
}
function navigate(href) { history.pushState(null, "", href); route(); window.scrollTo(0, 0); }

document.addEventListener("click", (e) => {
  const a = e.target.closest && e.target.closest("a[data-nav]");
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", route);
getJSON("/api/store").then((st) => {
  document.getElementById("store").textContent = `${st.url} · namespace ${st.namespace}`;
  for (const hidden of st.hidden || []) { // runs whose framework's adapter is not installed here
    document.querySelector("header").appendChild(h("div", { class: "error", "data-testid": "hidden-runs" }, hidden.text));
  }
}).catch(() => {});
route();
