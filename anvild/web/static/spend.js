// Spend: tokens and USD of the live sessions per model and per role, bars scaled to the largest.
"use strict";

(() => {
  const { el, getJSON, feed, showLive, showError, position } = anvil;
  let source = null;
  let pending = null;
  let shown = -1; // the position of the snapshot on the page: an older reply is dropped

  function usd(value) {
    return value === null ? "n/a" : value.toFixed(6);
  }

  function table(id, rows, label) {
    const most = Math.max(1, ...rows.map((r) => r.input + r.output));
    document.querySelector(`#${id} thead`).replaceChildren(el("tr", {},
      ...[label, "sessions", "input", "output", "cache read", "tokens", "USD"].map((h) => el("th", {}, h))));
    document.querySelector(`#${id} tbody`).replaceChildren(...rows.map((r) =>
      el("tr", { "data-name": r.name },
        el("td", {}, r.name),
        el("td", { class: "num" }, String(r.sessions)),
        el("td", { class: "num" }, String(r.input)),
        el("td", { class: "num" }, String(r.output)),
        el("td", { class: "num" }, String(r.cache_read)),
        el("td", {}, el("progress", { max: String(most), value: String(r.input + r.output) })),
        el("td", { class: "num" }, usd(r.usd)))));
  }

  async function load() {
    try {
      const data = await getJSON("/api/spend");
      if (position(data.seq) < shown) return data.seq;
      shown = position(data.seq);
      table("models", data.models, "model");
      table("roles", data.roles, "role");
      const t = data.total;
      document.getElementById("total").textContent = t
        ? `${t.sessions} sessions: ${t.input} input and ${t.output} output tokens, USD ${usd(t.usd)}`
        : "No sessions.";
      document.getElementById("budget").textContent = data.budget;
      showError(null);
      return data.seq;
    } catch (error) {
      showError(error);
      return null;
    }
  }

  function refreshSoon() {
    if (pending === null) pending = setTimeout(() => { pending = null; load(); }, 200);
  }

  async function start() {
    shown = -1; // a new stream (maybe of a restarted daemon): any snapshot is newer
    const seq = await load();
    if (source) source.close();
    source = feed(`/events?after=${seq ?? ""}`, (item) => {
      if (item.session === null && item.event.type === "session_state") refreshSoon();
    }, start, showLive);
  }

  start();
})();
