// One session: its files' values, its turns live from its events, approvals and a prompt box.
"use strict";

(() => {
  const { el, getJSON, post, feed, showLive, usageBar, showError, position } = anvil;
  const id = decodeURIComponent(location.pathname.split("/")[2] || "");
  const base = `/api/sessions/${encodeURIComponent(id)}`;
  const turns = document.getElementById("turns");
  const approvals = document.getElementById("approvals");
  let text = null; // the text block being streamed into
  const tools = new Map();
  let source = null;
  let seen = -1; // the position of the last feed line applied

  function line(kind, ...content) {
    text = null;
    turns.append(el("div", { class: `line ${kind}` }, ...content));
  }

  function answer(body) {
    return async () => {
      try {
        await post(`${base}/approval`, body);
        showError(null);
      } catch (error) {
        showError(error);
      }
    };
  }

  function approvalBox(event) {
    const key = event.kind === "tool" ? event.call_id : "result";
    const reason = el("input", { type: "text", class: "reason", placeholder: "reason for rejecting" });
    const reject = async () => {
      if (!reason.value.trim()) { showError("write a reason to reject"); return; }
      await answer({ answer: `reject ${reason.value.trim()}` })();
    };
    const what = event.kind === "tool"
      ? [el("strong", {}, event.tool), " ", el("code", {}, JSON.stringify(event.arguments)),
        el("div", { class: "muted" }, event.reason),
        event.always_adds.length ? el("div", { class: "muted" }, `always adds: ${event.always_adds.join("; ")}`) : null]
      : [el("strong", {}, "result"), " asked by ", event.asked_by || "-",
        el("pre", {}, event.summary)];
    const box = el("div", { class: "approval", "data-key": key },
      el("div", {}, "Approval needed: ", ...what),
      el("div", { class: "buttons" },
        el("button", { type: "button", class: "approve", onclick: answer({ answer: "approve" }) }, "Approve"),
        event.kind === "tool"
          ? el("button", { type: "button", class: "always", onclick: answer({ answer: "always" }) }, "Always")
          : null,
        reason,
        el("button", { type: "button", class: "reject danger", onclick: reject }, "Reject")));
    approvals.append(box);
  }

  function dropApproval(key) {
    for (const box of approvals.querySelectorAll(".approval")) {
      if (box.dataset.key === key) box.remove();
    }
  }

  function apply(event) {
    switch (event.type) {
      case "text_delta":
        if (text === null) {
          text = el("div", { class: "text" });
          turns.append(text);
        }
        text.append(event.text);
        break;
      case "tool_call_started": {
        const result = el("pre", { class: "result" }, "running…");
        const item = el("details", { class: "tool" },
          el("summary", {}, el("strong", {}, event.name), " ", JSON.stringify(event.arguments)),
          result);
        tools.set(event.id, { item, result });
        text = null;
        turns.append(item);
        break;
      }
      case "tool_call_finished": {
        const call = tools.get(event.id);
        if (call) {
          call.result.textContent = event.preview;
          if (event.is_error) call.item.classList.add("failed");
        }
        break;
      }
      case "approval_requested":
        line("note", `approval requested: ${event.kind === "tool" ? event.tool : "result"}`);
        approvalBox(event);
        break;
      case "approval_answered":
        dropApproval(event.kind === "tool" ? event.call_id : "result");
        line("note", `approval ${event.verdict}${event.reason ? `: ${event.reason}` : ""}`);
        break;
      case "step_failed":
        line("error", `step failed: ${event.message}`);
        break;
      case "retrying":
        line("note", `retrying (${event.attempt}/${event.max_attempts}): ${event.reason}`);
        break;
      case "compaction_started":
        line("note", `compacting (${event.trigger}, ${event.tokens} tokens)`);
        break;
      case "compaction_finished":
        line(event.ok ? "note" : "error", event.ok
          ? `compacted: ${event.before} → ${event.after} tokens, ${event.dropped} messages replaced`
          : `compaction failed: ${event.detail}`);
        break;
      case "todos_updated":
        document.getElementById("todos").textContent =
          event.todos.map((t) => `${t.status}\t${t.content}`).join("\n") || "(none)";
        break;
      case "queue": // the board's own line: the session's `queue` whenever it changes
        document.getElementById("queue").textContent = event.text || "(empty)";
        break;
      case "lagged":
        line("error", `${event.dropped} events were dropped here (the reader was too slow)`);
        break;
      case "turn_finished":
        line("end", `turn ${event.outcome}${event.detail ? `: ${event.detail}` : ""}`);
        tools.clear();
        refresh();
        break;
      default:
        break;
    }
  }

  function showInfo(data) {
    const s = data.session;
    document.title = `anvild ${s.alias || s.id}`;
    document.getElementById("title").textContent = s.alias ? `${s.id} (${s.alias})` : s.id;
    const fields = [
      ["state", el("span", { class: `state ${s.state}`, title: s.detail }, s.state)],
      ["role", s.role], ["model", s.model], ["usage", usageBar(s)], ["cost (USD)", s.usd],
      ["created", s.created], ["cwd", s.cwd], ["first prompt", s.first_prompt],
    ];
    document.getElementById("info").replaceChildren(
      ...fields.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
    document.getElementById("out").textContent = data.out;
    document.getElementById("queue").textContent = data.queue || "(empty)";
    document.getElementById("todos").textContent = data.todos || "(none)";
    document.getElementById("cost").textContent = data.cost;
  }

  async function showChanges() {
    const { turns: steps } = await getJSON(`${base}/turns`);
    const box = document.getElementById("changes");
    box.replaceChildren(...steps.slice().reverse().map((step) => {
      const diff = el("pre", { class: "diff" }, "");
      const item = el("details", { class: "turn", "data-number": String(step.number) },
        el("summary", {}, `${step.kind} ${step.number}: ${step.label}`,
          step.outcome ? ` (${step.outcome})` : "", step.changes ? "" : " · no changes"),
        el("pre", { class: "changes" }, step.changes || "(no changes)"), diff);
      item.addEventListener("toggle", async () => {
        if (!item.open || diff.textContent) return;
        try {
          const reply = await fetch(`${base}/turns/${step.number}/diff`, { credentials: "same-origin" });
          diff.textContent = await reply.text();
        } catch (error) {
          showError(error);
        }
      });
      return item;
    }));
    if (!steps.length) box.append(el("p", { class: "muted" }, "(no turns checkpointed)"));
  }

  async function refresh() {
    try {
      let data = await getJSON(base);
      // A snapshot taken before the last line applied would undo what that line showed (a
      // todo list, a state): take a newer one.
      for (let tries = 0; position(data.seq) < seen && tries < 5; tries += 1) {
        data = await getJSON(base); // (a restarted daemon's positions start over: give up)
      }
      showInfo(data);
      await showChanges();
    } catch (error) {
      showError(error);
    }
  }

  async function start() {
    let data;
    try {
      data = await getJSON(base);
    } catch (error) {
      showError(error);
      return;
    }
    showInfo(data);
    showChanges().catch(showError);
    turns.replaceChildren();
    approvals.replaceChildren();
    tools.clear();
    text = null;
    for (const event of data.events) {
      if (event.type !== "queue") apply(event); // the snapshot's queue is newer
    }
    if (source) source.close();
    seen = position(data.seq);
    source = feed(`/events?session=${encodeURIComponent(id)}&after=${data.seq}`, (item, at) => {
      seen = Math.max(seen, at);
      if (item.session === id) apply(item.event);
      else if (item.event.id === id) refresh();
    }, start, showLive);
  }

  document.getElementById("prompt-form").addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    const box = document.getElementById("prompt");
    try {
      await post(`${base}/prompt`, { text: box.value });
      line("user", box.value);
      box.value = "";
      showError(null);
    } catch (error) {
      showError(error);
    }
  });
  function command(line) {
    return async () => {
      try {
        await post(`${base}/ctl`, { command: line() });
        showError(null);
        refresh();
      } catch (error) {
        showError(error);
      }
    };
  }
  document.getElementById("cancel").addEventListener("click", command(() => "cancel"));
  document.getElementById("compact").addEventListener("click", command(() => "compact"));
  document.getElementById("undo").addEventListener("click", command(() => "undo"));
  document.getElementById("switch").addEventListener("click",
    command(() => `model ${document.getElementById("model").value.trim()}`));
  start();
})();
