// Muster dashboard: plain JS, no build step, no external resources.
// Polls /muster/v0.0.40/dashboard every 2 s (one compact, column-wise snapshot shared by all
// viewers on the server for 1 s); draws the cluster map and the timeline on canvas and the
// queue as a virtualized list, so 1,000 nodes and 10,000 jobs stay fast.
"use strict";
(function () {
  const API = "/muster/v0.0.40", SLURM = "/slurm/v0.0.40", DB = "/slurmdb/v0.0.40";
  const POLL_MS = 2000, USAGE_MS = 30000, EVENTS_MS = 5000, ROW_H = 22;
  const $ = (id) => document.getElementById(id);
  const state = { snap: null, jobs: [], byId: new Map(), view: [], selected: null,
                  filter: "", token: null, mapLayout: null, ganttRows: [], me: null };
  window.muster = state;  // for tests and the curious

  // ---- auth ---------------------------------------------------------------------------
  function readToken() {
    const m = location.hash.match(/token=([^&]+)/);
    if (m) { sessionStorage.setItem("muster-token", decodeURIComponent(m[1]));
             history.replaceState(null, "", location.pathname); }
    return sessionStorage.getItem("muster-token");
  }
  async function api(path, opts) {
    const r = await fetch(path, Object.assign({ headers: { "X-SLURM-USER-TOKEN": state.token } }, opts || {}));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (r.status === 401) { showLogin("Token rejected: " + errText(body)); throw new Error("auth"); }
    if (!r.ok) throw new Error(errText(body) || ("HTTP " + r.status));
    return body;
  }
  function errText(b) { return b && b.errors && b.errors[0] ? b.errors[0].error : ""; }
  function showLogin(msg) {
    $("main").hidden = true; $("login").hidden = false; $("login-error").textContent = msg || "";
  }
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const v = $("token-input").value.trim().replace(/^SLURM_JWT=/, "");
    sessionStorage.setItem("muster-token", v); start();
  });
  $("logout").addEventListener("click", () => { sessionStorage.removeItem("muster-token"); location.reload(); });

  // ---- helpers ------------------------------------------------------------------------
  function fmtTime(t) {
    if (!t) return "N/A";
    const d = new Date(t * 1000), p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  function fmtDur(min) {
    if (min === null || min === undefined) return "UNLIMITED";
    const d = Math.floor(min / 1440), h = Math.floor((min % 1440) / 60), m = min % 60;
    const p = (n) => String(n).padStart(2, "0");
    return (d ? d + "-" : "") + `${p(h)}:${p(m)}:00`;
  }
  function jobColor(id) {
    const h = (id * 137.508) % 360;
    return `hsl(${h},55%,55%)`;
  }
  function esc(s) { return String(s === null || s === undefined ? "" : s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c])); }

  // ---- polling ------------------------------------------------------------------------
  async function poll() {
    try {
      const body = await api(API + "/dashboard");
      ingest(body.dashboard);
      $("updated").textContent = new Date().toLocaleTimeString();
    } catch (e) {
      if (e.message !== "auth") $("updated").textContent = "error: " + e.message;
    }
  }
  function ingest(snap) {
    const t0 = performance.now();
    state.snap = snap;
    const cols = snap.job_columns, idx = {};
    cols.forEach((c, i) => { idx[c] = i; });
    state.jobs = snap.jobs.map((r) => ({
      id: r[idx.id], display: r[idx.display_id], name: r[idx.name], user: r[idx.user],
      account: r[idx.account], partition: r[idx.partition], state: r[idx.state],
      reason: r[idx.reason], submit: r[idx.submit], start: r[idx.start], end: r[idx.end],
      limit: r[idx.limit], nodes: r[idx.nodes], gpus: r[idx.gpus], cpus: r[idx.cpus],
      priority: r[idx.priority], exit: r[idx.exit], num_nodes: r[idx.num_nodes],
      use: r[idx.use] || null, mem: r[idx.mem] || 0 }));
    state.byId = new Map(state.jobs.map((j) => [j.id, j]));
    $("cluster-name").textContent = snap.cluster;
    summarize(); drawMap(); buildQueue(); drawGantt();
    if (state.selected) refreshDetailHeader();
    state.renderMs = performance.now() - t0;  // one full refresh (exposed for perf checks)
  }
  function summarize() {
    const n = state.snap.nodes, counts = {};
    let g = 0, ga = 0, c = 0, ca = 0;
    n.name.forEach((_, i) => {
      const s = n.state[i] + (n.flags[i] ? "+" + n.flags[i] : "");
      counts[s] = (counts[s] || 0) + 1;
      g += n.gpu_owner[i].length; ga += n.gpu_owner[i].filter((x) => x).length;
      c += n.cpus[i]; ca += n.cpus_alloc[i];
    });
    $("nodes-summary").textContent = n.name.length + " (" + Object.entries(counts).map(([k, v]) => v + " " + k).join(", ") + ")";
    $("gpus-alloc").textContent = ga + "/" + g;
    $("cpus-alloc").textContent = ca + "/" + c;
    let run = 0, pend = 0;
    for (const j of state.jobs) { if (j.state === "RUNNING") run++; else if (j.state === "PENDING") pend++; }
    $("jobs-running").textContent = run; $("jobs-pending").textContent = pend;
  }

  // ---- cluster map (canvas) -----------------------------------------------------------
  function nodeClass(i) {
    const n = state.snap.nodes;
    if (n.state[i] === "DOWN" || n.flags[i].includes("NOT_RESPONDING")) return "down";
    if (n.flags[i].includes("DRAIN")) return "drain";
    return "up";
  }
  // GPU state for tests and tooltips: "idle", "alloc:<job>", "drained", "down"
  state.gpuState = function (node, gpu) {
    const n = state.snap.nodes, i = n.name.indexOf(node);
    if (i < 0 || gpu >= n.gpu_owner[i].length) return null;
    const owner = n.gpu_owner[i][gpu], cls = nodeClass(i);
    if (cls === "down") return owner ? "down:" + owner : "down";
    if (owner) return "alloc:" + owner;
    return cls === "drain" ? "drained" : "idle";
  };
  function drawMap() {
    const cv = $("map"), n = state.snap.nodes, N = n.name.length;
    const width = cv.parentElement.clientWidth - 4;
    const maxG = Math.max(1, ...n.gpu_owner.map((g) => g.length));
    const cell = N > 512 ? 5 : N > 128 ? 7 : 12;
    const label = N <= 128;
    const tileW = Math.max(maxG * (cell + 1) + 6, label ? 64 : 0), tileH = cell + (label ? 20 : 6);
    const perRow = Math.max(1, Math.floor(width / (tileW + 4)));
    const rows = Math.ceil(N / perRow);
    const dpr = window.devicePixelRatio || 1, H = rows * (tileH + 4) + 4;
    cv.width = width * dpr; cv.height = H * dpr; cv.style.height = H + "px";
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, H);
    ctx.font = "11px system-ui, sans-serif";
    state.mapLayout = { tileW, tileH, perRow, cell, label };
    for (let i = 0; i < N; i++) {
      const x = 2 + (i % perRow) * (tileW + 4), y = 2 + Math.floor(i / perRow) * (tileH + 4);
      const cls = nodeClass(i);
      ctx.fillStyle = cls === "down" ? "#f6d5d5" : cls === "drain" ? "#fbe3bf" : "#eef1f5";
      ctx.fillRect(x, y, tileW, tileH);
      if (label) { ctx.fillStyle = "#1c2330"; ctx.fillText(n.name[i], x + 3, y + 11); }
      const gy = y + (label ? 15 : 3), owners = n.gpu_owner[i];
      for (let g = 0; g < owners.length; g++) {
        const o = owners[g];
        ctx.fillStyle = cls === "down" ? "#d64545" : o ? jobColor(o) : cls === "drain" ? "#f0a63a" : "#cfe8d4";
        ctx.fillRect(x + 3 + g * (cell + 1), gy, cell, cell);
      }
      if (!owners.length) {  // CPU-only node: a bar of CPU use
        const f = n.cpus[i] ? n.cpus_alloc[i] / n.cpus[i] : 0;
        ctx.fillStyle = "#cfe8d4"; ctx.fillRect(x + 3, gy, tileW - 6, cell);
        ctx.fillStyle = "#6b8fd6"; ctx.fillRect(x + 3, gy, (tileW - 6) * f, cell);
      }
    }
  }
  function mapHit(ev) {
    const L = state.mapLayout, cv = $("map");
    if (!L || !state.snap) return null;
    const r = cv.getBoundingClientRect(), x = ev.clientX - r.left - 2, y = ev.clientY - r.top - 2;
    const col = Math.floor(x / (L.tileW + 4)), row = Math.floor(y / (L.tileH + 4));
    if (col < 0 || col >= L.perRow || row < 0) return null;
    const i = row * L.perRow + col;
    if (i >= state.snap.nodes.name.length) return null;
    const gx = x - col * (L.tileW + 4) - 3, gpu = Math.floor(gx / (L.cell + 1));
    return { i, gpu: gpu >= 0 && gpu < state.snap.nodes.gpu_owner[i].length ? gpu : null };
  }
  $("map").addEventListener("mousemove", (ev) => {
    const h = mapHit(ev), tip = $("tooltip");
    if (!h) { tip.hidden = true; return; }
    const n = state.snap.nodes, i = h.i;
    let t = `${n.name[i]}  ${n.state[i]}${n.flags[i] ? "+" + n.flags[i] : ""}\nCPUs ${n.cpus_alloc[i]}/${n.cpus[i]}  mem ${n.mem_alloc[i]}/${n.mem[i]} MB`;
    if (n.reason[i]) t += `\nreason: ${n.reason[i]}`;
    if (h.gpu !== null) {
      const o = n.gpu_owner[i][h.gpu], j = o && state.byId.get(o);
      t += `\nGPU ${h.gpu}: ${state.gpuState(n.name[i], h.gpu)}` + (j ? ` (${j.name}, ${j.user})` : "");
    }
    tip.textContent = t; tip.hidden = false;
    tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
  });
  $("map").addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
  $("map").addEventListener("click", (ev) => {
    const h = mapHit(ev);
    if (h && h.gpu !== null) { const o = state.snap.nodes.gpu_owner[h.i][h.gpu]; if (o) select(o); }
  });

  // ---- queue (virtualized list) -----------------------------------------------------------
  const COLS = ["JobID", "Name", "User", "Account", "Partition", "State", "Reason", "Submit",
                "Start (expected)", "Time limit", "Nodes", "GPUs"];
  $("queue-head").innerHTML = COLS.map((c) => `<span>${c}</span>`).join("");
  const ORDER = { RUNNING: 0, COMPLETING: 1, PENDING: 2 };
  function buildQueue() {
    const f = state.filter.toLowerCase();
    let v = state.jobs;
    if (f) v = v.filter((j) => [j.display, j.name, j.user, j.account, j.partition, j.state, j.reason, j.nodes]
      .some((x) => x && String(x).toLowerCase().includes(f)));
    v = v.slice().sort((a, b) => ((ORDER[a.state] ?? 3) - (ORDER[b.state] ?? 3)) || (b.id - a.id));
    state.view = v;
    $("queue-count").textContent = `${v.length} jobs`;
    $("queue-spacer").style.height = v.length * ROW_H + "px";
    renderRows();
  }
  function renderRows() {
    const box = $("queue"), first = Math.floor(box.scrollTop / ROW_H);
    const count = Math.ceil(box.clientHeight / ROW_H) + 2, rows = [];
    for (let k = first; k < Math.min(state.view.length, first + count); k++) {
      const j = state.view[k];
      const start = j.state === "PENDING" ? (j.start ? fmtTime(j.start) : "N/A") : fmtTime(j.start);
      const reason = j.state === "PENDING" || j.state === "FAILED" || j.state === "TIMEOUT" ? j.reason : (j.state === "RUNNING" ? j.nodes : j.reason);
      rows.push(`<div class="row${state.selected === j.id ? " sel" : ""}" data-job-id="${j.id}" data-state="${j.state}">` +
        `<span>${esc(j.display)}</span><span>${esc(j.name)}</span><span>${esc(j.user)}</span>` +
        `<span>${esc(j.account)}</span><span>${esc(j.partition)}</span><span class="st-${j.state}">${j.state}</span>` +
        `<span title="${esc(reason)}">${esc(reason)}</span><span>${fmtTime(j.submit)}</span><span>${start}</span>` +
        `<span>${fmtDur(j.limit)}</span><span>${esc(j.nodes || "")}</span>` +
        `<span class="${idleGpu(j) ? "idle-gpu" : ""}" title="${esc(useText(j))}">${j.gpus}</span></div>`);
    }
    const el = $("queue-rows");
    el.style.transform = `translateY(${first * ROW_H}px)`;
    el.innerHTML = rows.join("");
  }
  // ---- usage beside the allocation (sstat's live samples): an idle GPU job stands out -----
  function fmtBytes(b) {
    const u = ["B", "KB", "MB", "GB", "TB"]; let k = 0;
    while (b >= 1024 && k < u.length - 1) { b /= 1024; k++; }
    return (k ? b.toFixed(1) : String(b)) + " " + u[k];
  }
  function stepUse(s) {  // a finished step's CPU time and peak memory (sacct TotalCPU, MaxRSS)
    const mem = ((s.tres.requested || {}).max || []).find((t) => t.type === "mem");
    return mem ? `, CPU ${s.time.total.seconds}s, max RSS ${fmtBytes(mem.count)}` : "";
  }
  function idleGpu(j) { return j.gpus > 0 && j.use && j.use[2] === 0; }
  function useText(j) {
    if (!j.use) return j.state === "RUNNING" ? "no usage sample yet" : "";
    const [cpu, rss, gpu] = j.use;
    return `CPU ${cpu}% of ${j.cpus * 100}%, memory ${fmtBytes(rss)} of ${fmtBytes(j.mem * 1048576)}` +
      (gpu === null ? "" : `, GPU ${gpu}% over ${j.gpus} GPU${j.gpus === 1 ? "" : "s"}${gpu === 0 ? " (idle)" : ""}`);
  }
  $("queue").addEventListener("scroll", renderRows, { passive: true });
  $("queue-rows").addEventListener("click", (ev) => {
    const row = ev.target.closest(".row");
    if (row) select(Number(row.dataset.jobId));
  });
  $("queue-filter").addEventListener("input", (ev) => { state.filter = ev.target.value; buildQueue(); });

  // ---- Gantt timeline (canvas) ----------------------------------------------------------
  function drawGantt() {
    const cv = $("gantt"), now = state.snap.now;
    const jobs = state.jobs.filter((j) => (j.state === "RUNNING" || j.state === "COMPLETING") ||
                                          (j.state === "PENDING" && j.start && j.start > now));
    jobs.sort((a, b) => (a.start || 0) - (b.start || 0) || a.id - b.id);
    const shown = jobs.slice(0, 2000);
    const width = cv.parentElement.clientWidth - 4, rowH = 16, axis = 22;
    const H = Math.max(60, axis + shown.length * rowH + 4), dpr = window.devicePixelRatio || 1;
    cv.width = width * dpr; cv.height = H * dpr; cv.style.height = H + "px";
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, width, H);
    let t0 = now - 3600, t1 = now + 3600;
    for (const j of shown) { if (j.start && j.start < t0) t0 = Math.max(j.start, now - 86400);
      const e = j.end || (j.limit ? j.start + j.limit * 60 : now + 3600); if (e > t1) t1 = Math.min(e, now + 7 * 86400); }
    const L = 140, X = (t) => L + (width - L - 4) * (t - t0) / (t1 - t0);
    ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#6b7585";
    for (let k = 0; k <= 6; k++) { const t = t0 + (t1 - t0) * k / 6, x = X(t);
      ctx.fillRect(x, axis - 4, 1, H); ctx.fillText(fmtTime(t).slice(5, 16), Math.min(x + 2, width - 70), 12); }
    ctx.fillStyle = "#d64545"; ctx.fillRect(X(now), 14, 2, H);
    state.ganttRows = [];
    shown.forEach((j, k) => {
      const y = axis + k * rowH, s = Math.max(j.start || now, t0);
      const e = j.end || (j.limit ? (j.start || now) + j.limit * 60 : t1);
      ctx.fillStyle = "#1c2330"; ctx.fillText(`${j.display} ${j.name}`.slice(0, 22), 2, y + 11);
      ctx.fillStyle = jobColor(j.id);
      if (j.state === "PENDING") { ctx.globalAlpha = 0.45; }
      ctx.fillRect(X(s), y + 2, Math.max(2, X(Math.min(e, t1)) - X(s)), rowH - 4);
      ctx.globalAlpha = 1;
      state.ganttRows.push(j.id);
    });
    if (!shown.length) { ctx.fillStyle = "#6b7585"; ctx.fillText("no running jobs", L, axis + 14); }
  }
  $("gantt").addEventListener("click", (ev) => {
    const r = $("gantt").getBoundingClientRect(), k = Math.floor((ev.clientY - r.top - 22) / 16);
    if (k >= 0 && k < state.ganttRows.length) select(state.ganttRows[k]);
  });

  // ---- job detail ------------------------------------------------------------------------
  function refreshDetailHeader() {
    const j = state.byId.get(state.selected);
    if (j && $("detail-state")) { $("detail-state").textContent = j.state; }
  }
  async function select(id) {
    state.selected = id; renderRows();
    $("detail-id").textContent = "job " + id;
    $("detail").innerHTML = "<p class='muted'>loading…</p>";
    await loadDetail(id);
  }
  async function loadDetail(id) {
    const [job, acct, ev, out] = await Promise.allSettled([
      api(`${SLURM}/job/${id}`), api(`${DB}/job/${id}`),
      api(`${API}/events?job_id=${id}&limit=200`), api(`${API}/job/${id}/output?bytes=16384`)]);
    if (state.selected !== id) return;
    const j = job.status === "fulfilled" ? job.value.jobs[0] : null;
    const a = acct.status === "fulfilled" ? acct.value.jobs[0] : null;
    if (!j && !a) { $("detail").innerHTML = `<p class="error">${esc(job.reason && job.reason.message)}</p>`; return; }
    const num = (x) => (x && x.set ? (x.infinite ? "UNLIMITED" : x.number) : "N/A");
    const st = j ? j.job_state.join("+") : a.state.current.join("+");
    const ex = (j || a).exit_code, exs = ex.status.includes("PENDING") ? "–" :
      `${num(ex.return_code)}:${ex.signal.id.set ? ex.signal.id.number : 0} (${ex.status.join(",")})`;
    const live = state.byId.get(id);
    const gpus = [];
    if (state.snap) state.snap.nodes.name.forEach((nm, i) => state.snap.nodes.gpu_owner[i].forEach((o, g) => { if (o === id) gpus.push(`${nm}:${g}`); }));
    const kv = [["State", `<b id="detail-state" class="st-${st}">${st}</b>`],
      ["Reason", esc(j ? (j.state_description || j.state_reason) : a.state.reason)],
      ["Name / user", esc(`${(j || a).name} / ${j ? j.user_name : a.user}`)],
      ["Account / partition", esc(`${j ? j.account : a.account} / ${j ? j.partition : a.partition}`)],
      ["Submit", fmtTime(j ? num(j.submit_time) : a.time.submission)],
      ["Start", fmtTime(j ? num(j.start_time) : a.time.start)],
      ["End", fmtTime(j ? num(j.end_time) : a.time.end)],
      ["Nodes", esc((j ? j.nodes : a.nodes) || "–")],
      ["GPUs", gpus.length ? gpus.join(" ") : (live ? String(live.gpus) + " requested" : "–")],
      ["Use", live && live.use ? `<span id="detail-use" class="${idleGpu(live) ? "idle-gpu" : ""}">${esc(useText(live))}</span>` : "–"],
      ["Exit code", exs], ["Work dir", esc(j ? j.current_working_directory : a.working_directory)]];
    let html = `<dl class="kv">${kv.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join("")}</dl>`;
    if (a && a.steps.length) {
      html += "<h3>Steps</h3><div class='events'>" + a.steps.map((s) =>
        `<div class="ev"><span>${esc(s.step.id)}</span><span>${esc(s.state.join("+"))}</span><span>${esc(s.nodes.range)}</span>` +
        `<span>exit ${num(s.exit_code.return_code)}:${s.exit_code.signal.id.set ? s.exit_code.signal.id.number : 0}, ${s.time.elapsed}s${stepUse(s)}</span></div>`).join("") + "</div>";
    }
    if (ev.status === "fulfilled") {
      html += "<h3>Events (why pending / why it ended)</h3><div class='events' id='detail-events'>" +
        ev.value.events.slice().reverse().map((e) => `<div class="ev"><span>${fmtTime(e.time).slice(11)}</span><span></span><span>${esc(e.event)}</span><span>${esc(e.detail)}</span></div>`).join("") + "</div>";
    }
    if (out.status === "fulfilled") {
      const o = out.value.output;
      html += `<h3>Output <small class="muted">${esc(o.path || "")}</small></h3>` +
        (o.available ? `<pre class="out" id="detail-output">${o.truncated ? "…\n" : ""}${esc(o.data)}</pre>`
                     : `<p class="muted" id="detail-output">${esc(o.reason)}</p>`);
    } else {
      html += `<p class="muted">Output: ${esc(out.reason.message)}</p>`;
    }
    $("detail").innerHTML = html;
  }
  setInterval(() => {  // keep an unfinished selected job's detail live
    const j = state.selected && state.byId.get(state.selected);
    if (j && !["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"].includes(j.state)) loadDetail(j.id);
  }, 4000);
  window.addEventListener("hashchange", () => { const m = location.hash.match(/job=(\d+)/); if (m) select(Number(m[1])); });

  // ---- usage, events -------------------------------------------------------------------------
  async function loadUsage() {
    try {
      const u = (await api(`${API}/usage?hours=24`)).usage, cv = $("usage");
      const accts = Object.keys(u.gpu_hours), n = u.times.length;
      const width = cv.parentElement.clientWidth - 4, H = 220, dpr = window.devicePixelRatio || 1;
      cv.width = width * dpr; cv.height = H * dpr; cv.style.height = H + "px";
      const ctx = cv.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, width, H);
      const tot = u.times.map((_, i) => accts.reduce((s, a) => s + u.gpu_hours[a][i], 0));
      const max = Math.max(1, ...tot), bw = (width - 40) / n;
      ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#6b7585";
      ctx.fillText(max.toFixed(1) + " GPU-h", 0, 10); ctx.fillText("0", 0, H - 16);
      u.times.forEach((t, i) => {
        let y = H - 20;
        accts.forEach((a, k) => { const h = (H - 36) * u.gpu_hours[a][i] / max;
          ctx.fillStyle = `hsl(${(k * 83) % 360},55%,55%)`; ctx.fillRect(40 + i * bw, y - h, Math.max(1, bw - 1), h); y -= h; });
        if (i % Math.ceil(n / 6) === 0) { ctx.fillStyle = "#6b7585"; ctx.fillText(fmtTime(t).slice(11, 16), 40 + i * bw, H - 4); }
      });
      $("usage-legend").innerHTML = accts.length ? accts.map((a, k) => `<span><i class="sw" style="background:hsl(${(k * 83) % 360},55%,55%)"></i>${esc(a)}: ${u.gpu_hours[a].reduce((s, x) => s + x, 0).toFixed(2)} GPU-h</span>`).join("")
        : "<span class='muted'>no GPU jobs ran in the last 24 h</span>";
    } catch (e) { /* shown on the next poll */ }
  }
  async function loadFairshare() {
    try {
      const rows = (await api(`${API}/fairshare`)).fairshare;
      $("fairshare").innerHTML = rows.length ? "<table><thead><tr><th>Account</th><th>User</th>" +
        "<th>Shares</th><th>Usage (effective)</th><th>FairShare</th></tr></thead><tbody>" +
        rows.map((r) => `<tr><td>${"&nbsp;".repeat(2 * (r.depth || 0))}${esc(r.account)}</td>` +
          `<td>${esc(r.user || "")}</td><td>${Number(r.norm_shares || 0).toFixed(3)}</td>` +
          `<td>${Number(r.effectv_usage || 0).toFixed(3)}</td>` +
          `<td>${r.user ? Number(r.fairshare || 0).toFixed(3) : ""}</td></tr>`).join("") +
        "</tbody></table>" : "<p class='muted'>no associations yet (sacctmgr add account …)</p>";
    } catch (e) { /* shown on the next poll */ }
  }
  async function loadEvents() {
    try {
      const ev = (await api(`${API}/events?limit=60`)).events;
      $("events").innerHTML = ev.map((e) => `<div class="ev"><span>${fmtTime(e.time).slice(11)}</span><span>${e.job_id ? "job " + e.job_id : esc(e.node || "")}</span><span>${esc(e.event)}</span><span>${esc(e.detail)}</span></div>`).join("");
    } catch (e) { /* ignore */ }
  }

  // ---- start -------------------------------------------------------------------------------
  let timers = [];
  async function start() {
    state.token = readToken();
    if (!state.token) { showLogin(""); return; }
    try { state.me = await api(API + "/whoami"); } catch (e) { if (e.message !== "auth") showLogin(e.message); return; }
    $("login").hidden = true; $("main").hidden = false;
    $("user-name").textContent = state.me.user + (state.me.operator ? " (operator)" : "");
    timers.forEach(clearInterval);
    await poll(); loadUsage(); loadEvents(); loadFairshare();
    timers = [setInterval(poll, POLL_MS), setInterval(loadUsage, USAGE_MS), setInterval(loadEvents, EVENTS_MS),
              setInterval(loadFairshare, USAGE_MS)];
    const m = location.hash.match(/job=(\d+)/); if (m) select(Number(m[1]));
  }
  window.addEventListener("resize", () => { if (state.snap) { drawMap(); drawGantt(); } });
  start();
})();
