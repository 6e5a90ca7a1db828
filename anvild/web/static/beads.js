// Beads and convoys: progress per convoy, each bead with its dependencies and the person's verbs.
"use strict";

(() => {
  const { el, getJSON, post, feed, showLive, showError } = anvil;
  let source = null;
  let pending = null;

  function act(id, command) {
    return async () => {
      try {
        await post(`/api/beads/${encodeURIComponent(id)}/ctl`, { command });
        showError(null);
      } catch (error) {
        showError(error);
      }
    };
  }

  function actions(bead) {
    const out = [];
    if (bead.status === "pending") {
      const who = el("input", { type: "text", class: "who", placeholder: "session or user" });
      out.push(who, el("button", { type: "button", class: "claim",
        onclick: () => act(bead.id, `claim ${who.value.trim()}`)() }, "Claim"));
    }
    if (bead.status === "in_progress" || bead.status === "pending_approval") {
      out.push(el("button", { type: "button", class: "release", onclick: act(bead.id, "release") }, "Release"));
    }
    if (bead.status === "pending_approval") {
      const reason = el("input", { type: "text", class: "reason", placeholder: "reason for rejecting" });
      out.push(el("button", { type: "button", class: "approve", onclick: act(bead.id, "approve") }, "Approve"),
        reason,
        el("button", { type: "button", class: "reject danger",
          onclick: () => act(bead.id, `reject ${reason.value.trim()}`)() }, "Reject"));
    }
    return el("div", { class: "buttons" }, ...out);
  }

  function render(data) {
    const beads = new Map(data.beads.map((b) => [b.id, b]));
    document.getElementById("convoys").replaceChildren(...data.convoys.map((c) =>
      el("div", { class: "convoy", "data-id": c.id },
        el("div", {}, el("strong", {}, c.title), ` ${c.id} · ${c.status}`,
          c.coordinator ? ` · coordinator ${c.coordinator}` : ""),
        el("div", { class: "usage" },
          el("progress", { max: String(c.total || 1), value: String(c.done) }),
          ` ${c.done}/${c.total} ${c.percent}%`),
        el("div", { class: "muted" }, c.beads.map((id) =>
          `${id} (${beads.has(id) ? beads.get(id).status : "?"})`).join(" → ")))));
    document.querySelector("#beads tbody").replaceChildren(...data.beads.map((b) =>
      el("tr", { "data-id": b.id, class: b.status === "pending_approval" ? "needs" : "" },
        el("td", {}, b.id),
        el("td", { title: b.reason || "" }, b.title),
        el("td", {}, b.role),
        el("td", { class: `state ${b.status}` }, b.status),
        el("td", {}, b.assigned_to || ""),
        el("td", {}, b.depends_on.map((d) =>
          `${d}${beads.has(d) && beads.get(d).status === "completed" ? " ✓" : ""}`).join(", ")),
        el("td", {}, b.convoy || ""),
        el("td", {}, actions(b)))));
    document.getElementById("empty").hidden = data.beads.length > 0;
    if (data.unavailable) showError(data.unavailable);
  }

  async function load() {
    try {
      const data = await getJSON("/api/beads");
      render(data);
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
    const seq = await load();
    if (source) source.close();
    source = feed(`/events?after=${seq ?? ""}`, (item) => {
      const type = item.event.type || "";
      if (item.session === null && (type.startsWith("bead_") || type.startsWith("convoy_"))) {
        refreshSoon();
      }
    }, start, showLive);
  }

  start();
})();
