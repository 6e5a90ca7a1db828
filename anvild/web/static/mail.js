// The person's mailbox: unread first, a form that writes the outbox, what was received and sent.
"use strict";

(() => {
  const { el, post, snapshotPage, showError } = anvil;
  const TYPES = ["QUESTION", "ANSWER", "STATUS_UPDATE", "REVIEW_REQUEST", "REVIEW_RESPONSE",
    "APPROVAL_REQUEST", "APPROVAL_RESPONSE", "ERROR_REPORT"];
  let unread = [];

  function message(m) {
    return el("div", { class: "message", "data-id": m.id },
      el("div", {}, el("strong", {}, m.subject || "(no subject)"),
        ` ${m.type} from ${m.from} to ${m.to} · ${new Date(m.timestamp * 1000).toISOString()}`),
      el("pre", {}, m.body));
  }

  function list(id, messages) {
    const box = document.getElementById(id);
    box.replaceChildren(...messages.slice().reverse().map(message));
    if (!messages.length) box.append(el("p", { class: "muted" }, "(none)"));
  }

  const load = snapshotPage("/api/mail", (data) => {
    unread = data.unread;
    list("unread", data.unread);
    list("received", data.received);
    list("sent", data.sent);
  }, (item) => item.session === null && (item.event.type || "").startsWith("mail_"));

  document.getElementById("type").replaceChildren(
    ...TYPES.map((t) => el("option", { value: t }, t)));
  document.getElementById("mark-read").addEventListener("click", async () => {
    try {
      await post("/api/mail/read", { ids: unread.map((m) => m.id).join(" ") });
      load();
    } catch (error) {
      showError(error);
    }
  });
  document.getElementById("compose").addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    const field = (id) => document.getElementById(id).value;
    const draft = { to: field("to").trim(), type: field("type"), subject: field("subject"),
      body: field("body") };
    try {
      await post("/api/mail/send", { draft: JSON.stringify(draft) });
      document.getElementById("body").value = "";
      showError(null);
      load();
    } catch (error) {
      showError(error);
    }
  });
})();
