// Shared by the board's pages: DOM building (text only, never HTML), JSON calls, the feed.
"use strict";

const anvil = (() => {
  const csrf = document.querySelector('meta[name="csrf"]').content;
  const stats = {
    batches: 0, maxMs: 0, renders: 0, renderMaxMs: 0, snapshots: 0, inFlight: 0, maxInFlight: 0,
    minGapMs: Infinity, // the shortest time between two reloads a feed line asked for
  };
  window.anvilStats = stats;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  // An SVG element (drawn charts and graphs); `text` its text content.
  function svg(tag, attrs, text) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  async function getJSON(url) {
    const reply = await fetch(url, { credentials: "same-origin" });
    const text = await reply.text();
    let body;
    try { body = JSON.parse(text); } catch { body = { error: text }; }
    if (!reply.ok) throw new Error(body.error || `${reply.status} ${reply.statusText}`);
    return body;
  }

  async function post(url, body) {
    const reply = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-anvil-csrf": csrf },
      body: JSON.stringify(body),
    });
    const text = await reply.text();
    if (reply.ok) return JSON.parse(text);
    let message = text;
    try { message = JSON.parse(text).error || text; } catch { /* plain text */ }
    throw new Error(message.trim() || `${reply.status} ${reply.statusText}`);
  }

  // One SSE stream; the browser resumes it with Last-Event-ID after a reconnect. `reset`
  // means lines were lost: the page reloads its snapshot and opens a new stream.
  function feed(url, onItem, onReset, live) {
    const source = new EventSource(url);
    source.onopen = () => live(true);
    source.onerror = () => live(false);
    source.onmessage = (message) => {
      const started = performance.now();
      onItem(JSON.parse(message.data), position(message.lastEventId));
      const took = performance.now() - started;
      stats.batches += 1;
      stats.maxMs = Math.max(stats.maxMs, took);
    };
    source.addEventListener("reset", () => { source.close(); onReset(); });
    return source;
  }

  // A page that draws one snapshot (`url`: JSON with the feed position `seq` it was taken at)
  // and takes a newer one, `delay` ms later, when a feed line `wanted(item)` says it changed.
  // Coalesced: at most one request in flight and one more due after it, at least `gap` ms
  // after the previous one began, however many lines came meanwhile (100 sessions changing
  // state make a request every `gap` ms at most, not one each). Returns `load`, to take one
  // now (after an action).
  function snapshotPage(url, draw, wanted, delay = 100, gap = 500) {
    let source = null;
    let pending = null; // the timer of the next request
    let inFlight = false;
    let again = false; // a line came while a request was in flight: one more after it
    let began = -Infinity; // when the latest request began
    let shown = -1; // the position of the snapshot on the page: an older reply is dropped

    function due() {
      if (pending !== null) return;
      const wait = Math.max(delay, began + gap - performance.now());
      pending = setTimeout(refresh, wait);
    }

    async function refresh() {
      pending = null;
      if (inFlight) { again = true; return; }
      inFlight = true;
      const now = performance.now();
      stats.minGapMs = Math.min(stats.minGapMs, now - began);
      began = now;
      try { await load(); } finally { inFlight = false; }
      if (again) { again = false; due(); }
    }

    async function load() {
      stats.snapshots += 1;
      stats.inFlight += 1;
      stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
      try {
        const data = await getJSON(url);
        if (position(data.seq) < shown) return data.seq;
        shown = position(data.seq);
        showError(null);
        draw(data);
        return data.seq;
      } catch (error) {
        showError(error);
        return null;
      } finally {
        stats.inFlight -= 1;
      }
    }

    async function start() {
      shown = -1; // a new stream (maybe of a restarted daemon): any snapshot is newer
      const seq = await load();
      if (source) source.close();
      source = feed(`/events?after=${seq ?? ""}`, (item) => {
        if (wanted(item)) due();
      }, start, showLive);
    }

    start();
    return load;
  }

  // The N of a feed position `EPOCH-N` (a snapshot's `seq`, an SSE id); -1 when there is none.
  function position(text) {
    const n = Number(String(text || "").split("-").pop());
    return Number.isInteger(n) ? n : -1;
  }

  function showLive(up) {
    const badge = document.getElementById("live");
    badge.textContent = up ? "live" : "reconnecting…";
    badge.className = up ? "live up" : "live down";
  }

  function age(created) {
    const seconds = Math.max(0, (Date.now() - Date.parse(created)) / 1000);
    if (seconds < 60) return `${Math.floor(seconds)}s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
    return `${Math.floor(seconds / 86400)}d`;
  }

  function usageBar(info) {
    const bar = el("progress", { max: String(info.window), value: String(info.used || 0) });
    return el("span", { class: "usage", title: info.usage }, bar, " ", info.usage);
  }

  function showError(error) {
    const box = document.getElementById("error");
    box.textContent = error ? String(error.message || error) : "";
  }

  // Time a page's redraw, kept beside the event handling times (window.anvilStats).
  function timed(draw) {
    return (...args) => {
      const started = performance.now();
      const result = draw(...args);
      stats.renders += 1;
      stats.renderMaxMs = Math.max(stats.renderMaxMs, performance.now() - started);
      return result;
    };
  }

  return {
    el, svg, getJSON, post, feed, snapshotPage, showLive, age, usageBar, showError, timed, position,
  };
})();
