// The archive viewer: the conversations (#/), one conversation (#/c/<id>) and one of its compactions
// (#/c/<id>/<compaction>). What it shows was written by clients, so it goes into the page as text only:
// textContent, createElement and setAttribute, never innerHTML.
"use strict";

const KEY = "inflight.admin-key"; // sessionStorage: this tab only
const SVG = "http://www.w3.org/2000/svg";
const LIMITS = [
  ["window", "window"],
  ["budget", "budget"],
  ["summarize_at", "summarize at"],
  ["prune_at", "prune at"],
  ["background_at", "background at"],
];
const HOW = { summarized: "summarized", masked: "masked", truncated: "truncated" };
const LONG = { chars: 600, lines: 10 }; // dropped content past this starts collapsed

const main = document.getElementById("main");
const keyForm = document.getElementById("key-form");
let shown = null; // the conversation on screen: {id, view}
let ticket = 0; // counts navigations: an answer for an earlier one, arriving late, is dropped

class NeedKey extends Error {}

function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  node.append(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

function s(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

const number = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
const conversationLink = (id, compaction) =>
  `#/c/${encodeURIComponent(id)}` + (compaction ? `/${encodeURIComponent(compaction)}` : "");

async function api(path) {
  const key = sessionStorage.getItem(KEY);
  const response = await fetch(path, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  if (response.status === 401) throw new NeedKey(key ? "That key was refused." : "");
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error(body?.error?.message ?? `${response.status} ${response.statusText}`);
  return body;
}

async function route() {
  const mine = ++ticket;
  const stale = () => mine !== ticket;
  keyForm.hidden = true;
  try {
    const found = /^#\/c\/([^/]+)(?:\/([^/]+))?$/.exec(location.hash) ?? [];
    const [, cid, mid] = found.map((part) => part && decodeURIComponent(part));
    if (!cid) return await showList(stale);
    if (shown?.id !== cid) await showConversation(cid, stale);
    if (!stale()) await showCompaction(mid, stale);
  } catch (error) {
    if (!stale()) fail(error);
  }
}

function fail(error) {
  shown = null;
  if (error instanceof NeedKey) {
    main.replaceChildren();
    document.getElementById("key-error").textContent = error.message;
    keyForm.hidden = false;
    document.getElementById("key-input").focus();
  } else {
    main.replaceChildren(h("p", { class: "error", role: "alert" }, String(error.message ?? error)));
  }
}

keyForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("key-input");
  sessionStorage.setItem(KEY, input.value.trim());
  input.value = "";
  route();
});

async function showList(stale) {
  shown = null;
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  const { conversations } = await api("conversations");
  if (stale()) return;
  document.title = "inflight · conversations";
  const heads = [["Conversation"], ["Model"], ["Turns", "num"], ["Compactions", "num"], ["Last seen"]];
  const rows = conversations.map((c) =>
    h(
      "tr",
      {},
      h("td", {}, h("a", { href: conversationLink(c.id) }, c.label)),
      h("td", {}, c.model),
      h("td", { class: "num" }, number(c.turn_count)),
      h("td", { class: "num" }, number(c.compaction_count)),
      h("td", {}, when(c.last)),
    ),
  );
  const table = h(
    "table",
    { class: "list" },
    h("thead", {}, h("tr", {}, heads.map(([t, c]) => h("th", { class: c }, t)))),
    h("tbody", {}, rows),
  );
  const none = "Nothing archived yet: conversations appear here once they pass through the proxy.";
  main.replaceChildren(h("h1", {}, "Conversations"), conversations.length ? table : h("p", { class: "muted" }, none));
}

async function showConversation(id, stale) {
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  const view = await api(`conversations/${encodeURIComponent(id)}`);
  if (stale()) return;
  shown = { id, view };
  document.title = `inflight · ${view.label}`;
  const left = view.turns_left == null ? "unknown" : `about ${number(view.turns_left)}`;
  const growth = view.average_growth == null ? "–" : `${number(view.average_growth)} tokens a turn`;
  const rewrites = view.rewrites_per_100_turns == null ? "–" : number(view.rewrites_per_100_turns);
  const cached = view.cached_share == null ? "–" : `${Math.round(view.cached_share * 100)}%`;
  const churned = view.compactions.filter((c) => churns(c)).length;
  const fact = (name, value) => h("span", {}, h("span", { class: "muted" }, name), " ", h("b", {}, value));
  main.replaceChildren(
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← Conversations")),
    h("h1", {}, view.label),
    h(
      "p",
      { class: "facts" },
      fact("model", view.model),
      fact("turns", number(view.turn_count)),
      fact("compactions", number(view.compaction_count)),
      fact("average growth", growth),
      fact("turns to the next compaction", left),
      fact("prefix rewrites per 100 turns", rewrites),
      fact("cached share (estimated)", cached),
      churned > 0 && fact("churn", `${number(churned)} compactions left too few turns before the next`),
      fact("last seen", when(view.last)),
    ),
    h("figure", { class: "chart" }, chart(view), legend(view)),
    compactionButtons(view),
    h("section", { id: "detail", class: "detail", hidden: true, "aria-live": "polite" }),
  );
}

function niceStep(max, count, factors = [1, 2, 2.5, 5, 10]) {
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw || 1));
  return factors.map((f) => f * magnitude).find((f) => f >= raw);
}

function chart(view) {
  const turns = view.turns;
  // Drawn at the width it is shown at, so that its text is the page's size; margins hold the labels.
  const [W, H, L, R, T, B] = [Math.max(640, main.clientWidth - 66), 290, 58, 150, 12, 34];
  const first = turns[0]?.n ?? 1;
  const last = turns.at(-1)?.n ?? 1;
  const span = Math.max(1, last - first);
  const highest = turns.reduce((m, t) => Math.max(m, t.tokens, t.sent, t.window, t.budget), 1);
  const yStep = niceStep(highest, 5);
  const top = Math.ceil((highest * 1.03) / yStep) * yStep;
  const x = (n) => +(L + ((n - first) / span) * (W - L - R)).toFixed(1);
  const y = (v) => +(H - B - (v / top) * (H - T - B)).toFixed(1);
  const half = (W - L - R) / span / 2;
  const clamp = (v) => +Math.min(W - R, Math.max(L, v)).toFixed(1);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Tokens over the turns" });

  for (let v = 0; v <= top; v += yStep) {
    svg.append(s("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    svg.append(s("text", { class: "tick", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, number(v)));
  }
  const xStep = Math.max(1, niceStep(span, 10, [1, 2, 5, 10]));
  for (let n = Math.ceil(first / xStep) * xStep; n <= last; n += xStep) {
    svg.append(s("line", { class: "axis", x1: x(n), x2: x(n), y1: H - B, y2: H - B + 4 }));
    svg.append(s("text", { class: "tick", x: x(n), y: H - B + 17, "text-anchor": "middle" }, String(n)));
  }
  svg.append(s("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  svg.append(s("text", { class: "axis-label", x: (L + W - R) / 2, y: H - 2, "text-anchor": "middle" }, "turn"));

  // One hover target a turn, under the lines, with the turn's numbers as its tooltip.
  for (const t of turns) {
    const title = `Turn ${t.n}: ${number(t.tokens)} tokens from the client, ${number(t.sent)} sent (${t.actions})`;
    const area = { class: "hover", x: clamp(x(t.n) - half), y: T, width: 2 * half, height: H - T - B };
    svg.append(s("rect", area, s("title", {}, title)));
  }
  const labels = [];
  for (const [field, name] of LIMITS) {
    let d = "";
    let previous = null;
    for (const t of turns) {
      const v = t[field];
      if (v === null || v === undefined) {
        previous = null;
        continue;
      }
      d += (previous === null ? `M${clamp(x(t.n) - half)} ${y(v)}` : `V${y(v)}`) + `H${clamp(x(t.n) + half)}`;
      previous = v;
    }
    if (!d) continue;
    svg.append(s("path", { class: `limit limit-${field}`, d }));
    if (previous !== null) labels.push({ field, text: `${name} ${number(previous)}`, y: y(previous) + 4 });
  }
  labels.sort((a, b) => a.y - b.y).forEach((label, i) => {
    if (i > 0) label.y = Math.max(label.y, labels[i - 1].y + 13); // limits close together: labels stacked
    svg.append(s("text", { class: `limit-label limit-${label.field}`, x: W - R + 6, y: label.y }, label.text));
  });

  for (const field of ["tokens", "sent"]) {
    const points = turns.map((t) => `${x(t.n)},${y(t[field])}`).join(" ");
    svg.append(s("polyline", { class: `curve curve-${field}`, points }));
  }
  const byTurn = new Map(turns.map((t) => [t.n, t]));
  for (const c of view.compactions) {
    const t = byTurn.get(c.n);
    if (!t) continue;
    const title = `Compaction at turn ${c.n} (${c.actions}): ${number(t.tokens)} → ${number(t.sent)} tokens`;
    svg.append(s("line", { class: "drop", x1: x(c.n), x2: x(c.n), y1: y(t.tokens), y2: y(t.sent) }));
    const at = { class: `marker${churns(c) ? " churn" : ""}`, cx: x(c.n), cy: y(t.sent), r: 6, "data-compaction": c.id };
    const marker = s("circle", at, s("title", {}, title));
    marker.addEventListener("click", () => (location.hash = conversationLink(shown.id, c.id)));
    svg.append(marker);
  }
  return svg;
}

function legend(view) {
  const has = (field) => view.turns.some((t) => t[field] !== null && t[field] !== undefined);
  const item = (swatch, text) => h("li", {}, h("span", { class: `swatch ${swatch}` }), text);
  return h(
    "figcaption",
    {},
    h(
      "ul",
      { class: "legend" },
      item("curve-tokens", "client's tokens"),
      item("curve-sent", "sent upstream"),
      LIMITS.filter(([field]) => has(field)).map(([field, name]) => item(`limit limit-${field}`, name)),
      item("marker", "compaction (click for what it dropped)"),
      view.compactions.some((c) => churns(c)) && item("marker churn", "churn: too few turns before the next compaction"),
    ),
  );
}

// A compaction that left fewer than compaction.min_turns_between turns before the next (`x-inflight-actions: churn`).
function churns(compaction) {
  return compaction.actions.split(",").includes("churn");
}

function compactionButtons(view) {
  if (!view.compactions.length) return h("p", { class: "muted" }, "No compaction in this conversation yet.");
  return h(
    "nav",
    { class: "compactions", "aria-label": "Compactions" },
    h("span", { class: "muted" }, "Compactions:"),
    view.compactions.map((c) =>
      h(
        "button",
        {
          type: "button",
          class: churns(c) ? "churn" : null,
          "data-compaction": c.id,
          onclick: () => (location.hash = conversationLink(shown.id, c.id)),
        },
        `turn ${c.n} · ${c.actions}`,
      ),
    ),
  );
}

async function showCompaction(id, stale) {
  const panel = document.getElementById("detail");
  for (const node of main.querySelectorAll("[data-compaction]")) {
    const selected = node.getAttribute("data-compaction") === id;
    node.classList.toggle("selected", selected);
    if (node.tagName === "BUTTON") node.setAttribute("aria-pressed", String(selected));
  }
  if (!id) {
    panel.hidden = true;
    return;
  }
  panel.hidden = false;
  panel.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  const entry = await api(`compactions/${encodeURIComponent(id)}`);
  if (!stale()) panel.replaceChildren(...compactionDetail(entry));
}

function text(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part?.type === "text" ? part.text : `[${part?.type ?? "part"}]`)).join("\n");
  }
  return JSON.stringify(content, null, 2);
}

function messageText(message) {
  const calls = (message.tool_calls ?? []).map((c) => `→ ${c.function?.name ?? "?"}(${c.function?.arguments ?? ""})`);
  return [text(message.content), ...calls].filter(Boolean).join("\n");
}

function compactionDetail(entry) {
  const turn = shown.view.compactions.find((c) => c.id === entry.id)?.n;
  const saved = entry.tokens_before ? Math.round((1 - entry.tokens_after / entry.tokens_before) * 100) : 0;
  const tally = new Map();
  for (const d of entry.dropped) tally.set(d.how, (tally.get(d.how) ?? 0) + 1);
  const counts = [...tally].map(([how, n]) => `${n} ${how}`);
  const fact = (name, value) => h("div", {}, h("dt", {}, name), h("dd", {}, value));
  const summaryTitles = {
    ledger: "Summary (the ledger: the summarizer gave none)",
    "summary-and-ledger": "Summary (an earlier summary, and the ledger of what came after it)",
  };
  const summaryTitle = summaryTitles[entry.summary_kind] ?? "Summary";
  return [
    h("h2", {}, turn ? `Compaction at turn ${turn}` : "Compaction", h("span", { class: "muted id" }, entry.id)),
    h(
      "dl",
      { class: "entry" },
      fact("actions", entry.actions),
      fact("tokens", `${number(entry.tokens_before)} → ${number(entry.tokens_after)} (−${saved}%)`),
      fact("time", when(entry.time)),
      fact("model", entry.model),
      entry.summarized && fact("summarized", `messages ${entry.summarized[0]} to ${entry.summarized[1] - 1}`),
    ),
    h(
      "div",
      { class: "columns" },
      h(
        "section",
        {},
        h("h3", {}, summaryTitle),
        entry.summary == null
          ? h("p", { class: "muted" }, "None: this compaction only masked or truncated messages.")
          : h("pre", { class: "summary" }, text(entry.summary)),
        entry.ledger != null && [h("h3", {}, "Ledger"), h("pre", { class: "ledger" }, entry.ledger)],
      ),
      h(
        "section",
        {},
        h("h3", {}, `Dropped messages (${entry.dropped.length}${counts.length ? ": " + counts.join(", ") : ""})`),
        h("ol", { class: "dropped" }, entry.dropped.map(droppedMessage)),
      ),
    ),
  ];
}

function droppedMessage(item) {
  const message = item.message ?? {};
  const body = messageText(message);
  const lines = body.split("\n");
  const head = h(
    "div",
    { class: "head" },
    h("span", { class: "index" }, `#${item.index}`),
    h("span", { class: "role" }, String(message.role ?? "?")),
    h("span", { class: `how how-${HOW[item.how] ?? "other"}` }, String(item.how)),
    message.tool_call_id && h("span", { class: "muted" }, String(message.tool_call_id)),
  );
  const pre = h("pre", {}, body);
  if (body.length <= LONG.chars && lines.length <= LONG.lines) return h("li", {}, head, pre);
  const preview = `${lines[0].slice(0, 100)}… (${number(lines.length)} lines, ${number(body.length)} characters)`;
  return h("li", {}, head, h("details", {}, h("summary", {}, preview), pre));
}

window.addEventListener("hashchange", route);
route();
