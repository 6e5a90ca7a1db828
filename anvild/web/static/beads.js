// Beads and convoys: progress per convoy, each bead with its dependencies and the person's verbs.
"use strict";

(() => {
  const { el, svg, post, snapshotPage, showError } = anvil;

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

  // The dependency graph: a bead's column is one past its deepest dependency's; an arrow runs
  // from each dependency to the bead that waits on it.
  function graph(beads) {
    const byId = new Map(beads.map((b) => [b.id, b]));
    const depth = new Map();
    const depthOf = (id, seen) => {
      if (depth.has(id)) return depth.get(id);
      if (seen.has(id) || !byId.has(id)) return -1;
      seen.add(id);
      const d = 1 + Math.max(-1, ...byId.get(id).depends_on.map((dep) => depthOf(dep, seen)));
      depth.set(id, d);
      return d;
    };
    const columns = [];
    for (const bead of beads) {
      const d = depthOf(bead.id, new Set());
      (columns[d] = columns[d] || []).push(bead);
    }
    const [w, h, gapX, gapY] = [170, 34, 60, 14];
    const place = new Map();
    columns.forEach((column, x) => column.forEach((bead, y) =>
      place.set(bead.id, { x: 10 + x * (w + gapX), y: 10 + y * (h + gapY) })));
    const rows = Math.max(0, ...columns.map((c) => c.length));
    const root = svg("svg", { class: "graph", width: 20 + columns.length * (w + gapX),
      height: 20 + rows * (h + gapY), role: "img", "aria-label": "bead dependencies" });
    root.append(svg("defs", {}));
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 6, markerHeight: 6, orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
    root.firstChild.append(marker);
    for (const bead of beads) {
      const to = place.get(bead.id);
      for (const dep of bead.depends_on) {
        const from = place.get(dep);
        if (!from) continue;
        root.append(svg("line", { x1: from.x + w, y1: from.y + h / 2, x2: to.x, y2: to.y + h / 2,
          class: "edge", "marker-end": "url(#arrow)" }));
      }
    }
    for (const bead of beads) {
      const at = place.get(bead.id);
      const node = svg("g", { class: `node ${bead.status}`, "data-id": bead.id });
      node.append(svg("rect", { x: at.x, y: at.y, width: w, height: h, rx: 5 }),
        svg("text", { x: at.x + 8, y: at.y + 14 }, bead.id),
        svg("text", { x: at.x + 8, y: at.y + 28, class: "status" }, bead.status));
      root.append(node);
    }
    return root;
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
    document.getElementById("graph").replaceChildren(graph(data.beads));
    document.getElementById("empty").hidden = data.beads.length > 0;
    if (data.unavailable) showError(data.unavailable);
  }

  snapshotPage("/api/beads", render, (item) => {
    const type = item.event.type || "";
    return item.session === null && (type.startsWith("bead_") || type.startsWith("convoy_"));
  });
})();
