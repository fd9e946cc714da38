// The pvgpu dashboard: polls the control API once a second with the bearer
// token the operator typed, and changes things through the same API.
// Everything shown is set as text (never parsed as HTML).
"use strict";

const TOKEN_KEY = "pvgpu-token";
const POLL_MS = 1000;
const POINTS = 60;

const state = { timer: null, last: null, rtt: [], tput: [], cmds: [], editing: new Set(), noticeUntil: 0, peers: [] };

function $(id) { return document.getElementById(id); }

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// What the operator just did (or what failed) stays up for a few seconds
// before the poll's own line replaces it.
function status(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
  state.noticeUntil = text ? Date.now() + 4000 : 0;
}

async function api(method, path, body) {
  const opts = { method, headers: { "Authorization": "Bearer " + token() } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (r.status === 401) {
    logout("The token was refused.");
    throw new Error("unauthorized");
  }
  if (!r.ok) {
    throw new Error((data && data.error) || (method + " " + path + ": " + r.status));
  }
  return data;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return u === 0 ? n + " B" : v.toFixed(1) + " " + units[u];
}

function age(s) {
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

// Rows and cards are kept across polls and only their text changes, so a
// button the operator is about to press is never swapped out under the
// pointer.
function keyed(box, key, make) {
  const k = String(key);
  let el = Array.from(box.children).find((c) => c.dataset.key === k);
  if (!el) {
    el = make();
    el.dataset.key = key;
  }
  return el;
}

// Puts `els` into `box` in that order, moving only what is out of place,
// and drops every other keyed child.
function arrange(box, els) {
  const keep = new Set(els);
  for (const c of Array.from(box.children)) {
    if (c.dataset.key !== undefined && !keep.has(c)) c.remove();
  }
  let at = box.firstElementChild;
  while (at && at.dataset.key === undefined) at = at.nextElementSibling;
  for (const el of els) {
    if (el === at) {
      at = at.nextElementSibling;
    } else {
      box.insertBefore(el, at);
    }
  }
}

function gpuCard(index) {
  const d = document.createElement("div");
  d.dataset.gpu = index;
  const title = document.createElement("strong");
  const st = document.createElement("div");
  st.className = "state";
  const b = document.createElement("button");
  b.className = "drain";
  b.dataset.gpu = index;
  b.addEventListener("click", async () => {
    const drained = d.classList.contains("drained");
    try {
      await api(drained ? "DELETE" : "POST", "/v1/devices/" + index + "/drain");
      status("GPU " + index + (drained ? " given to new sessions again" : " drained"));
      refresh();
    } catch (e) { status(e.message, true); }
  });
  const gauges = document.createElement("div");
  gauges.className = "gauges";
  d.append(title, st, b, gauges);
  return d;
}

function gauges(box, g) {
  box.replaceChildren();
  const util = g.utilization_ratio == null ? null : g.utilization_ratio;
  const used = g.memory_used_bytes, total = g.memory_total_bytes;
  const lines = [
    ["utilisation", util == null ? "?" : Math.round(util * 100) + " %", util],
    ["memory", used == null ? "?" : bytes(used) + " of " + bytes(total), used == null ? null : used / total],
  ];
  for (const [name, text, frac] of lines) {
    const l = document.createElement("div");
    l.textContent = name + ": " + text;
    box.appendChild(l);
    if (frac != null) {
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("div");
      fill.style.width = Math.min(100, frac * 100).toFixed(1) + "%";
      bar.appendChild(fill);
      box.appendChild(bar);
    }
  }
  const extra = document.createElement("div");
  extra.textContent = (g.temperature_celsius == null ? "" : g.temperature_celsius + " °C  ") +
    (g.power_watts == null ? "" : g.power_watts.toFixed(0) + " W");
  box.appendChild(extra);
}

function renderGpus(gpus) {
  const box = $("gpus");
  $("gpus-none").hidden = gpus.length > 0;
  const cards = gpus.map((g) => {
    const d = keyed(box, g.index, () => gpuCard(g.index));
    d.className = g.drained ? "gpu drained" : "gpu";
    const [title, st, b, gauge] = d.children;
    title.textContent = g.index + ": " + g.name;
    const users = g.sessions.length ? "sessions " + g.sessions.join(", ") : "no sessions";
    st.textContent = (g.drained ? "drained (no new sessions), " : "open, ") + users;
    b.textContent = g.drained ? "Resume" : "Drain";
    gauges(gauge, g);
    return d;
  });
  arrange(box, cards);
}

function sessionRow(id) {
  const tr = document.createElement("tr");
  tr.dataset.session = id;
  for (const cls of ["num", "", "", "", "", "num", "num", ""]) cell(tr, "", cls);
  const b = document.createElement("button");
  b.className = "end";
  b.dataset.session = id;
  b.textContent = "End";
  b.addEventListener("click", async () => {
    if (!confirm("End session " + id + "? Its program's next call fails.")) return;
    try {
      await api("DELETE", "/v1/sessions/" + id);
      status("session " + id + " is ending");
      refresh();
    } catch (e) { status(e.message, true); }
  });
  const actions = cell(tr, "");
  if (state.peers.length) actions.append(moveControls(id), " ");
  actions.appendChild(b);
  return tr;
}

// A peer to pick (the backend's --peer) and a button that moves the
// session there; the program goes on there at its next call.
function moveControls(id) {
  const span = document.createElement("span");
  const pick = document.createElement("select");
  pick.className = "peer";
  pick.dataset.session = id;
  pick.setAttribute("aria-label", "move session " + id + " to");
  for (const p of state.peers) {
    const o = document.createElement("option");
    o.value = p.name;
    o.textContent = p.name;
    o.title = p.address;
    pick.appendChild(o);
  }
  const b = document.createElement("button");
  b.className = "migrate";
  b.dataset.session = id;
  b.textContent = "Move";
  b.addEventListener("click", async () => {
    const peer = pick.value;
    if (!confirm("Move session " + id + " to " + peer + "? Its program pauses while its state moves.")) return;
    b.disabled = true;
    status("moving session " + id + " to " + peer + "...");
    try {
      const r = await api("POST", "/v1/sessions/" + id + "/migrate", { peer });
      status("session " + id + " moved to " + peer + " (" + r.to + "): " + bytes(r.state_bytes) + ", checkpoint " +
        r.checkpoint_seconds.toFixed(2) + " s, restore " + r.restore_seconds.toFixed(2) + " s");
      refresh();
    } catch (e) {
      b.disabled = false;
      status(e.message, true);
    }
  });
  span.append(pick, " ", b);
  return span;
}

// Under --gpu-share weighted: its turn now and the time it has held while
// others waited.
function gpuTurn(s) {
  if (s.gpu_turn_seconds == null) return "-";
  return (s.gpu_turn || "idle") + ", " + s.gpu_turn_seconds.toFixed(1) + " s held";
}

function renderSessions(sessions) {
  const body = $("sessions").querySelector("tbody");
  const sorted = sessions.slice().sort((a, b) => (a.tenant || "").localeCompare(b.tenant || "") || a.id - b.id);
  const rows = sorted.map((s) => {
    const tr = keyed(body, s.id, () => sessionRow(s.id));
    const texts = [String(s.id), s.tenant || "-", s.peer, s.transport,
      s.devices.length ? s.devices.join(",") : "-", bytes(s.memory_bytes), age(s.age_seconds), gpuTurn(s)];
    texts.forEach((t, i) => { if (tr.children[i].textContent !== t) tr.children[i].textContent = t; });
    return tr;
  });
  arrange(body, rows);
}

function quotaInput(cls) {
  const i = document.createElement("input");
  i.type = "number";
  i.min = "0";
  i.className = "quota " + cls;
  return i;
}

function tenantRow(name) {
  const tr = document.createElement("tr");
  tr.dataset.tenant = name;
  cell(tr, name);
  const mem = quotaInput("memory");
  const ses = quotaInput("sessions");
  const gpus = document.createElement("input");
  gpus.type = "text";
  gpus.className = "quota gpus";
  gpus.placeholder = "all";
  const share = quotaInput("share");
  share.min = "1";
  share.max = "1000";
  share.placeholder = "1";
  for (const i of [mem, ses, gpus, share]) {
    i.addEventListener("input", () => state.editing.add(name));
    cell(tr, "").appendChild(i);
  }
  for (let i = 0; i < 4; i++) cell(tr, "", i === 1 ? "" : "num");
  const b = document.createElement("button");
  b.className = "save";
  b.textContent = "Save";
  b.addEventListener("click", async () => {
    const list = gpus.value.trim();
    if (list !== "" && !/^\d+(\s*,\s*\d+)*$/.test(list)) {
      status("GPUs of " + name + ": numbers separated by commas, or empty for all", true);
      return;
    }
    const quota = {
      memory_bytes: mem.value === "" ? null : Math.round(Number(mem.value) * 1048576),
      max_sessions: ses.value === "" ? null : Math.round(Number(ses.value)),
      gpus: list === "" ? null : list.split(",").map((n) => Number(n.trim())),
      gpu_share: share.value === "" ? null : Math.round(Number(share.value)),
    };
    try {
      await api("PUT", "/v1/tenants/" + encodeURIComponent(name) + "/quota", quota);
      state.editing.delete(name);
      status("quota of " + name + " saved");
      refresh();
    } catch (e) { status(e.message, true); }
  });
  cell(tr, "").appendChild(b);
  return tr;
}

function renderTenants(tenants) {
  const body = $("tenants").querySelector("tbody");
  const rows = tenants.map((t) => {
    const tr = keyed(body, t.name, () => tenantRow(t.name));
    const c = tr.children;
    // Quotas being edited are kept as the operator left them.
    if (!state.editing.has(t.name)) {
      const q = t.quota;
      c[1].firstChild.value = q.memory_bytes == null ? "" : String(Math.round(q.memory_bytes / 1048576));
      c[2].firstChild.value = q.max_sessions == null ? "" : String(q.max_sessions);
      c[3].firstChild.value = q.gpus == null ? "" : q.gpus.join(",");
      c[4].firstChild.value = q.gpu_share == null ? "" : String(q.gpu_share);
    }
    c[5].textContent = String(t.live_keys);
    c[6].textContent = t.members.length ? t.members.join(", ") : "-";
    c[7].textContent = String(t.sessions);
    c[8].textContent = bytes(t.memory_bytes);
    return tr;
  });
  arrange(body, rows);
}

function chart(canvas, series, colors) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  let max = 0;
  for (const s of series) for (const v of s) max = Math.max(max, v);
  max = max > 0 ? max * 1.15 : 1;
  ctx.fillStyle = "#667";
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillText(max.toPrecision(3), 4, 12);
  series.forEach((s, k) => {
    ctx.strokeStyle = colors[k];
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.forEach((v, i) => {
      const x = (i / (POINTS - 1)) * (w - 8) + 4;
      const y = h - 4 - (v / max) * (h - 20);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  });
  canvas.dataset.points = String(series[0].length);
}

function push(list, v) {
  list.push(v);
  if (list.length > POINTS) list.shift();
}

function renderRates(sum) {
  const last = state.last;
  state.last = sum;
  if (!last) return;
  const dt = Math.max(1e-3, sum.at_unix_seconds - last.at_unix_seconds);
  const timed = sum.timed_replies - last.timed_replies;
  const rtt = timed > 0 ? ((sum.service_seconds - last.service_seconds) / timed) * 1e6 : 0;
  const copied = sum.copy_bytes.reduce((a, b) => a + b, 0) - last.copy_bytes.reduce((a, b) => a + b, 0);
  push(state.rtt, rtt);
  push(state.tput, copied / dt / 1e6);
  push(state.cmds, (sum.commands - last.commands) / dt / 1e3);
  chart($("rtt-chart"), [state.rtt], ["#3a7bd5"]);
  chart($("tput-chart"), [state.tput, state.cmds], ["#2e9e5b", "#d5843a"]);
}

async function refresh() {
  try {
    const [sessions, gpus, sum] = await Promise.all([api("GET", "/v1/sessions"), api("GET", "/v1/devices"), api("GET", "/v1/summary")]);
    renderSessions(sessions);
    renderGpus(gpus);
    renderRates(sum);
    try {
      renderTenants(await api("GET", "/v1/tenants"));
      $("tenants-panel").hidden = false;
    } catch (e) {
      // A backend without --state-dir keeps no tenants.
      $("tenants-panel").hidden = true;
    }
    if (Date.now() > state.noticeUntil) {
      $("status").textContent = sessions.length + " session(s), updated " + new Date().toLocaleTimeString();
      $("status").className = "";
    }
  } catch (e) {
    if (e.message !== "unauthorized") status(e.message, true);
  }
}

async function showApp() {
  // Peers are the backend's configuration: read once per login.
  state.peers = await api("GET", "/v1/peers").catch(() => []);
  $("login-panel").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  status("");
  refresh();
  state.timer = setInterval(refresh, POLL_MS);
}

function logout(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  state.last = null;
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login-panel").hidden = false;
  const err = $("login-error");
  err.textContent = why || "";
  err.hidden = !why;
}

async function login(ev) {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  try {
    await api("GET", "/v1/sessions");
    $("login-error").hidden = true;
    showApp();
  } catch (e) {
    if (e.message !== "unauthorized") logout(e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout(""));
  if (token()) showApp();
});
