// Spend: tokens and USD per hour and model as drawn charts (from the session records), the live
// sessions per model and per role, and the budgets.
"use strict";

(() => {
  const { el, svg, snapshotPage } = anvil;
  const COLOURS = 6; // .bar.m0 … .m5 in style.css, by the model's place in the legend

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

  // One bar per model in each hour's group, scaled to the tallest; each bar carries its hour,
  // model and value (data-*) and says them in its title.
  function chart(id, slots, rows, models, field, say, tick) {
    const [left, top, height, bar] = [64, 12, 160, 12];
    const group = Math.max(36, models.length * bar + 12);
    const gap = (group - models.length * bar) / 2;
    const width = left + slots.length * group + gap;
    const most = Math.max(0, ...rows.map((r) => r[field]));
    const root = svg("svg", { class: "chart", width, height: top + height + 30, role: "img",
      "aria-label": `${field} per hour and model` });
    root.append(svg("line", { class: "axis", x1: left - 4, y1: top + height, x2: width, y2: top + height }),
      svg("text", { x: left - 8, y: top + 10, class: "tick end" }, tick(most)),
      svg("text", { x: left - 8, y: top + height, class: "tick end" }, tick(0)));
    const byKey = new Map(rows.map((r) => [`${r.hour} ${r.model}`, r]));
    slots.forEach((hour, i) => {
      const x = left + i * group + gap;
      if (i % 3 === 0) {
        root.append(svg("text", { x, y: top + height + 16, class: "tick" }, `${hour.slice(11, 16)}`));
      }
      models.forEach((model, j) => {
        const row = byKey.get(`${hour} ${model}`);
        if (!row) return;
        const h = most > 0 ? Math.max(1, (row[field] / most) * height) : 1;
        const rect = svg("rect", { class: `bar m${j % COLOURS}`, x: x + j * bar, y: top + height - h,
          width: bar - 1, height: h, "data-hour": hour, "data-model": model,
          "data-value": String(row[field]) });
        rect.append(svg("title", {}, `${hour} ${model}: ${say(row[field])}`
          + ` (${row.requests} requests, ${row.input} input, ${row.output} output`
          + `${row.unknown_usd ? `, ${row.unknown_usd} of unknown price` : ""})`));
        root.append(rect);
      });
    });
    document.getElementById(id).replaceChildren(root);
  }

  function draw(data) {
    const models = [...new Set(data.hours.map((r) => r.model))].sort();
    chart("tokens-chart", data.slots, data.hours, models, "tokens", (n) => `${n} tokens`,
      (n) => n.toLocaleString("en"));
    chart("usd-chart", data.slots, data.hours, models, "usd", (n) => `USD ${n.toFixed(6)}`,
      (n) => n.toFixed(4));
    document.getElementById("legend").replaceChildren(...models.map((model, j) =>
      el("span", { class: "key" }, el("span", { class: `swatch m${j % COLOURS}` }), model)));
    document.getElementById("no-hours").hidden = data.hours.length > 0;
    // Requests recorded before their time was: said only when the window holds some.
    const undated = document.getElementById("undated");
    const one = data.undated === 1;
    undated.hidden = !data.undated;
    undated.textContent = data.undated
      ? `${data.undated} request${one ? "" : "s"} recorded by an older anvild, without the time `
        + `${one ? "its response" : "their responses"} finished, count${one ? "s" : ""} in the `
        + `hour ${one ? "its session" : "their sessions"} started.`
      : "";
    table("models", data.models, "model");
    table("roles", data.roles, "role");
    const t = data.total;
    document.getElementById("total").textContent = t
      ? `${t.sessions} session${t.sessions === 1 ? "" : "s"}: ${t.input} input and ${t.output} output tokens, USD ${usd(t.usd)}`
      : "No sessions.";
    document.getElementById("budget").textContent = data.budget;
  }

  snapshotPage("/api/spend", draw,
    (item) => item.session === null && item.event.type === "session_state", 200);
})();
