// The board: every session, those needing a person first; refreshed on the daemon's events.
"use strict";

(() => {
  const { el, post, snapshotPage, age, usageBar, showError, timed } = anvil;
  const body = document.querySelector("#sessions tbody");
  const roleFilter = document.getElementById("role");
  const stateFilter = document.getElementById("state");
  const convoyFilter = document.getElementById("convoy");
  let sessions = [];

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

  snapshotPage("/api/sessions", (data) => {
    sessions = data.sessions;
    render();
  }, (item) => {
    const type = item.event.type || "";
    return item.session === null && (item.event.id !== undefined || type.startsWith("bead_"));
  });

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
})();
