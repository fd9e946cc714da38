// The pvgpu dashboard: polls the control API once a second with the bearer
// token the operator typed, and changes things through the same API.
// Everything shown is set as text (never parsed as HTML).
"use strict";

const TOKEN_KEY = "pvgpu-token";
const POLL_MS = 1000;
const POINTS = 60;

const state = { timer: null, last: null, rtt: [], tput: [], cmds: [], editing: new Set(), noticeUntil: 0 };

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

function renderGpus(gpus) {
  const box = $("gpus");
  box.replaceChildren();
  if (gpus.length === 0) {
    const p = document.createElement("p");
    p.className = "hint";
    p.textContent = "This backend lists no GPUs.";
    box.appendChild(p);
    return;
  }
  for (const g of gpus) {
    const d = document.createElement("div");
    d.className = g.drained ? "gpu drained" : "gpu";
    d.dataset.gpu = g.index;
    const title = document.createElement("strong");
    title.textContent = g.index + ": " + g.name;
    d.appendChild(title);
    const state = document.createElement("div");
    state.className = "state";
    const users = g.sessions.length ? "sessions " + g.sessions.join(", ") : "no sessions";
    state.textContent = (g.drained ? "drained (no new sessions), " : "open, ") + users;
    d.appendChild(state);
    const b = document.createElement("button");
    b.className = "drain";
    b.dataset.gpu = g.index;
    b.textContent = g.drained ? "Resume" : "Drain";
    b.addEventListener("click", async () => {
      try {
        await api(g.drained ? "DELETE" : "POST", "/v1/devices/" + g.index + "/drain");
        status("GPU " + g.index + (g.drained ? " given to new sessions again" : " drained"));
        refresh();
      } catch (e) { status(e.message, true); }
    });
    d.appendChild(b);
    const util = g.utilization_ratio == null ? null : g.utilization_ratio;
    const used = g.memory_used_bytes, total = g.memory_total_bytes;
    const lines = [
      ["utilisation", util == null ? "?" : Math.round(util * 100) + " %", util],
      ["memory", used == null ? "?" : bytes(used) + " of " + bytes(total), used == null ? null : used / total],
    ];
    for (const [name, text, frac] of lines) {
      const l = document.createElement("div");
      l.textContent = name + ": " + text;
      d.appendChild(l);
      if (frac != null) {
        const bar = document.createElement("div");
        bar.className = "bar";
        const fill = document.createElement("div");
        fill.style.width = Math.min(100, frac * 100).toFixed(1) + "%";
        bar.appendChild(fill);
        d.appendChild(bar);
      }
    }
    const extra = document.createElement("div");
    extra.textContent = (g.temperature_celsius == null ? "" : g.temperature_celsius + " °C  ") +
      (g.power_watts == null ? "" : g.power_watts.toFixed(0) + " W");
    d.appendChild(extra);
    box.appendChild(d);
  }
}

function renderSessions(sessions) {
  const body = $("sessions").querySelector("tbody");
  body.replaceChildren();
  const sorted = sessions.slice().sort((a, b) => (a.tenant || "").localeCompare(b.tenant || "") || a.id - b.id);
  for (const s of sorted) {
    const tr = document.createElement("tr");
    tr.dataset.session = s.id;
    cell(tr, String(s.id), "num");
    cell(tr, s.tenant || "-");
    cell(tr, s.peer);
    cell(tr, s.transport);
    cell(tr, s.devices.length ? s.devices.join(",") : "-");
    cell(tr, bytes(s.memory_bytes), "num");
    cell(tr, age(s.age_seconds), "num");
    const td = cell(tr, "");
    const b = document.createElement("button");
    b.className = "end";
    b.dataset.session = s.id;
    b.textContent = "End";
    b.addEventListener("click", async () => {
      if (!confirm("End session " + s.id + "? Its program's next call fails.")) return;
      try {
        await api("DELETE", "/v1/sessions/" + s.id);
        status("session " + s.id + " is ending");
        refresh();
      } catch (e) { status(e.message, true); }
    });
    td.appendChild(b);
    body.appendChild(tr);
  }
}

function quotaInput(cls, value) {
  const i = document.createElement("input");
  i.type = "number";
  i.min = "0";
  i.className = "quota " + cls;
  i.value = value == null ? "" : String(value);
  return i;
}

function renderTenants(tenants) {
  const body = $("tenants").querySelector("tbody");
  // Rows being edited are kept as the operator left them.
  for (const tr of Array.from(body.children)) {
    if (!state.editing.has(tr.dataset.tenant)) tr.remove();
  }
  for (const t of tenants) {
    if (state.editing.has(t.name)) continue;
    const tr = document.createElement("tr");
    tr.dataset.tenant = t.name;
    cell(tr, t.name);
    const mem = quotaInput("memory", t.quota.memory_bytes == null ? null : Math.round(t.quota.memory_bytes / 1048576));
    const ses = quotaInput("sessions", t.quota.max_sessions);
    const gpus = document.createElement("input");
    gpus.type = "text";
    gpus.className = "quota gpus";
    gpus.placeholder = "all";
    gpus.value = t.quota.gpus == null ? "" : t.quota.gpus.join(",");
    for (const i of [mem, ses, gpus]) {
      i.addEventListener("input", () => state.editing.add(t.name));
      cell(tr, "").appendChild(i);
    }
    cell(tr, String(t.live_keys), "num");
    cell(tr, t.members.length ? t.members.join(", ") : "-");
    cell(tr, String(t.sessions), "num");
    cell(tr, bytes(t.memory_bytes), "num");
    const b = document.createElement("button");
    b.className = "save";
    b.textContent = "Save";
    b.addEventListener("click", async () => {
      const list = gpus.value.trim();
      if (list !== "" && !/^\d+(\s*,\s*\d+)*$/.test(list)) {
        status("GPUs of " + t.name + ": numbers separated by commas, or empty for all", true);
        return;
      }
      const quota = {
        memory_bytes: mem.value === "" ? null : Math.round(Number(mem.value) * 1048576),
        max_sessions: ses.value === "" ? null : Math.round(Number(ses.value)),
        gpus: list === "" ? null : list.split(",").map((n) => Number(n.trim())),
      };
      try {
        await api("PUT", "/v1/tenants/" + encodeURIComponent(t.name) + "/quota", quota);
        state.editing.delete(t.name);
        status("quota of " + t.name + " saved");
        refresh();
      } catch (e) { status(e.message, true); }
    });
    cell(tr, "").appendChild(b);
    body.appendChild(tr);
  }
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

function showApp() {
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
