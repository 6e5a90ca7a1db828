// The board: every session, those needing a person first; refreshed on the daemon's events.
"use strict";

(() => {
  const { el, getJSON, post, feed, showLive, age, usageBar, showError, timed, position } = anvil;
  const body = document.querySelector("#sessions tbody");
  const roleFilter = document.getElementById("role");
  const stateFilter = document.getElementById("state");
  const convoyFilter = document.getElementById("convoy");
  let sessions = [];
  let source = null;
  let pending = null;
  let shown = -1; // the position of the snapshot on the page: an older reply is dropped

  function options(select, values) {
    const chosen = select.value;
    const known = new Set([...select.options].map((o) => o.value));
    for (const value of [...values].sort()) {
      if (!known.has(value)) select.append(el("option", { value }, value));
    }
    select.value = chosen;
  }

  const render = timed(() => {
    options(roleFilter, new Set(sessions.map((s) => s.role)));
    options(stateFilter, new Set(sessions.map((s) => s.state)));
    options(convoyFilter, new Set(sessions.flatMap((s) => s.convoys)));
    const shown = sessions.filter(
      (s) => (!roleFilter.value || s.role === roleFilter.value)
        && (!stateFilter.value || s.state === stateFilter.value)
        && (!convoyFilter.value || s.convoys.includes(convoyFilter.value)));
    const rows = shown.map((s) => el("tr", { class: s.needs_person ? "needs" : "", "data-id": s.id },
      el("td", {}, el("a", { href: `/session/${encodeURIComponent(s.id)}` }, s.id)),
      el("td", {}, s.alias || ""),
      el("td", {}, s.convoys.join(", ")),
      el("td", {}, s.role),
      el("td", { class: `state ${s.state}`, title: s.detail || "" }, s.state),
      el("td", {}, s.model),
      el("td", {}, usageBar(s)),
      el("td", { class: "num" }, s.usd),
      el("td", { class: "num", title: s.created }, age(s.created)),
      el("td", { class: "prompt" }, s.first_prompt)));
    body.replaceChildren(...rows);
    document.getElementById("empty").hidden = sessions.length > 0;
    document.getElementById("count").textContent =
      `${shown.length} of ${sessions.length} sessions`;
  });

  async function load() {
    try {
      const data = await getJSON("/api/sessions");
      if (position(data.seq) < shown) return data.seq;
      shown = position(data.seq);
      sessions = data.sessions;
      render();
      showError(null);
      return data.seq;
    } catch (error) {
      showError(error);
      return null;
    }
  }

  function refreshSoon() {
    if (pending === null) pending = setTimeout(() => { pending = null; load(); }, 100);
  }

  async function start() {
    shown = -1; // a new stream (maybe of a restarted daemon): any snapshot is newer
    const seq = await load();
    if (source) source.close();
    source = feed(`/events?after=${seq ?? ""}`, (item) => {
      const type = item.event.type || "";
      if (item.session === null && (item.event.id !== undefined || type.startsWith("bead_"))) {
        refreshSoon();
      }
    }, start, showLive);
  }

  document.getElementById("new-form").addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    try {
      const made = await post("/api/new", { args: document.getElementById("new-args").value });
      location.assign(`/session/${encodeURIComponent(made.id)}`);
    } catch (error) {
      showError(error);
    }
  });
  roleFilter.addEventListener("change", render);
  stateFilter.addEventListener("change", render);
  convoyFilter.addEventListener("change", render);
  setInterval(() => { if (sessions.length) render(); }, 30000); // ages
  start();
})();
