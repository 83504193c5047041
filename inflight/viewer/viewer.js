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
  ["target", "target"],
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
// "1 compaction", "2 compactions": a count and its noun.
const counted = (n, noun) => `${number(n)} ${noun}${n === 1 ? "" : "s"}`;
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
  markShadows(view);
  shown = { id, view, page: 0, starts: [0], selected: null };
  document.title = `inflight · ${view.label}`;
  const left = view.turns_left == null ? "unknown" : `about ${number(view.turns_left)}`;
  const growth = view.average_growth == null ? "–" : `${number(view.average_growth)} tokens a turn`;
  const rewrites =
    view.rewrites_per_100_turns == null
      ? "–"
      : `${number(view.rewrites)} (${number(view.rewrites_per_100_turns)} per 100 turns)`;
  const cached = view.cached_share == null ? "–" : `${Math.round(view.cached_share * 100)}%`;
  const cost =
    view.cost == null
      ? "–"
      : `${number(view.cost)} (without inflight ${number(view.cost_client)}, ${Math.round((100 * view.cost) / view.cost_client)}%)`;
  const churned = view.compactions.filter((c) => churns(c)).length;
  const shadows = view.compactions.filter((c) => c.shadow).length;
  // Turns whose model read back what compaction took out (`inflight_retrieve`): the handles it named.
  const readBack = view.turns.reduce((sum, t) => sum + (Array.isArray(t.retrieved) ? t.retrieved.length : 0), 0);
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
      fact("prefix rewrites", rewrites),
      fact("cached share (estimated)", cached),
      fact("prompt cost in input tokens (estimated)", cost),
      churned > 0 && fact("churn", `${counted(churned, "compaction")} left too few turns before the next`),
      shadows > 0 && fact("shadow", `${counted(shadows, "compaction")} planned, not sent`),
      readBack > 0 && fact("read back", `${counted(readBack, "original")} (inflight_retrieve)`),
      fact("last seen", when(view.last)),
    ),
    h("figure", { class: "chart" }, ...drawing(view)),
    h("nav", { id: "compactions", class: "compactions", "aria-label": "Compactions" }),
    h("section", { id: "detail", class: "detail", hidden: true, "aria-live": "polite" }),
  );
  shown.starts = pageStarts(view.compactions);
  showPage(0);
}

// Shadow mode: a compaction planned and recorded, the client's request sent upstream unchanged. Its turns
// carry `shadow: true` (their `sent` is what would have been sent), and so do its compactions; an archive
// written before shadow mode has no such field, which reads as false.
function markShadows(view) {
  const shadowTurns = new Set(view.turns.filter((t) => t.shadow === true).map((t) => t.n));
  for (const c of view.compactions) c.shadow = c.shadow === true || shadowTurns.has(c.n);
}

function niceStep(max, count, factors = [1, 2, 2.5, 5, 10]) {
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw || 1));
  return factors.map((f) => f * magnitude).find((f) => f >= raw);
}

const short = (n) => new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 }).format(n);

// The chart's layout, in pixels: what is sent is drawn in a panel of PLOT.height; when the client's own
// tokens run past that panel's scale (a conversation many windows long), they get a panel of their own
// above it, PLOT.client high, so that neither squeezes the other.
const PLOT = { top: 12, client: 56, gap: 26, height: 210, bottom: 38, left: 58, right: 150 };
const LABEL_CHAR = 7; // a 12px label's characters are narrower than this: the right margin fits the longest
const LABEL_GAP = 14; // between two labels' baselines, for 12px text

// The y axis of a panel `height` high from `top`: grid lines and ticks from 0 to a round number past `max`.
// Returns the value -> y function (values past the top are drawn at the top).
function yAxis(svg, { top, height, max, ticks, from, to }) {
  const step = niceStep(max, ticks);
  const ceiling = Math.ceil((max * 1.03) / step) * step;
  const y = (v) => +(top + height - (Math.min(v, ceiling) / ceiling) * height).toFixed(1);
  for (let i = 0; i * step <= ceiling; i++) {
    svg.append(s("line", { class: "grid", x1: from, x2: to, y1: y(i * step), y2: y(i * step) }));
    svg.append(s("text", { class: "tick", x: from - 6, y: y(i * step) + 4, "text-anchor": "end" }, short(i * step)));
  }
  return y;
}

// Labels at their values' heights (`y`: baselines), nudged apart until none overlaps the next, kept within
// [low, high]: pushed down from the top one, then back up from the bottom one.
function spread(labels, low, high) {
  labels.sort((a, b) => a.y - b.y);
  labels.forEach((label, i) => (label.y = Math.max(label.y, i ? labels[i - 1].y + LABEL_GAP : low)));
  for (let i = labels.length - 1; i >= 0; i--) {
    labels[i].y = Math.min(labels[i].y, i < labels.length - 1 ? labels[i + 1].y - LABEL_GAP : high);
  }
  return labels;
}

// The turns' tokens: what was sent (scaled to the window), the limits it was measured against, a marker a
// compaction; the client's own tokens on the same scale, or in their own panel when they outgrow it.
function drawing(view) {
  const turns = view.turns;
  const most = (fields) => turns.reduce((m, t) => Math.max(m, ...fields.map((f) => t[f] ?? 0)), 1);
  const limits = most(LIMITS.map(([field]) => field));
  const scale = Math.max(limits, Math.min(most(["sent"]), 1.5 * limits)); // a turn far over the window: clipped
  const apart = most(["tokens"]) > scale * 1.03;
  return [chart(view, { max: apart ? scale : Math.max(scale, most(["tokens"])), apart }), legend(view, apart)];
}

function chart(view, { max, apart }) {
  const turns = view.turns;
  // Drawn at the width it is shown at, so that its text is the page's size; margins hold the labels.
  const W = Math.max(640, main.clientWidth - 66);
  const L = PLOT.left;
  const R = Math.max(PLOT.right, Math.ceil(longestLabel(turns) * LABEL_CHAR) + 12);
  const top = apart ? PLOT.top + PLOT.client + PLOT.gap : PLOT.top;
  const bottom = top + PLOT.height;
  const H = bottom + PLOT.bottom;
  const first = turns[0]?.n ?? 1;
  const last = turns.at(-1)?.n ?? 1;
  const span = Math.max(1, last - first);
  const x = (n) => +(L + ((n - first) / span) * (W - L - R)).toFixed(1);
  const half = (W - L - R) / span / 2;
  const clamp = (v) => +Math.min(W - R, Math.max(L, v)).toFixed(1);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Tokens over the turns" });
  svg.append(s("rect", { class: "plot plot-sent", x: L, y: top, width: W - L - R, height: PLOT.height }));
  const y = yAxis(svg, { top, height: PLOT.height, max, ticks: 7, from: L, to: W - R });

  const xStep = Math.max(1, niceStep(span, 10, [1, 2, 5, 10]));
  for (let n = Math.ceil(first / xStep) * xStep; n <= last; n += xStep) {
    svg.append(s("line", { class: "axis", x1: x(n), x2: x(n), y1: bottom, y2: bottom + 4 }));
    svg.append(s("text", { class: "tick", x: x(n), y: bottom + 17, "text-anchor": "middle" }, String(n)));
  }
  svg.append(s("line", { class: "axis", x1: L, x2: W - R, y1: bottom, y2: bottom }));
  svg.append(s("text", { class: "axis-label", x: (L + W - R) / 2, y: bottom + 32, "text-anchor": "middle" }, "turn"));

  // One hover target a turn, under the lines, with the turn's numbers as its tooltip.
  const hoverTop = apart ? PLOT.top : top;
  for (const t of turns) {
    const sent = t.shadow === true ? "would have been sent (shadow: the request went unchanged)" : "sent";
    const title = `Turn ${t.n}: ${number(t.tokens)} tokens from the client, ${number(t.sent)} ${sent} (${t.actions})`;
    const area = { class: "hover", x: clamp(x(t.n) - half), y: hoverTop, width: 2 * half, height: bottom - hoverTop };
    svg.append(s("rect", area, s("title", {}, title)));
  }

  if (apart) clientPanel(svg, turns, { x, from: L, to: W - R });
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
  for (const label of spread(labels, top + 4, bottom)) {
    svg.append(s("text", { class: `limit-label limit-${label.field}`, x: W - R + 6, y: label.y }, label.text));
  }

  if (!apart) svg.append(s("polyline", { class: "curve curve-tokens", points: line(turns, "tokens", x, y) }));
  sentLine(svg, turns, x, y);
  compactionMarkers(svg, view, { x, y, apart, perTurn: 2 * half });
  return svg;
}

// The characters of the longest label in the right margin (a limit's, or the client's tokens').
function longestLabel(turns) {
  const last = (field) => turns.at(-1)?.[field];
  const limits = LIMITS.map(([field, name]) => (last(field) == null ? 0 : `${name} ${number(last(field))}`.length));
  return Math.max(...limits, "client's tokens".length, number(last("tokens")).length);
}

function line(turns, field, x, y) {
  return turns.map((t) => `${x(t.n)},${y(t[field])}`).join(" ");
}

// What was sent: a solid line; on shadow turns, what would have been sent: a dashed one.
function sentLine(svg, turns, x, y) {
  let run = [];
  const draw = (shadow) => {
    const points = run.map((t) => `${x(t.n)},${y(t.sent)}`).join(" ");
    svg.append(s("polyline", { class: `curve curve-sent${shadow ? " shadow" : ""}`, points }));
  };
  turns.forEach((t, i) => {
    if (i > 0 && (t.shadow === true) !== (turns[i - 1].shadow === true)) {
      draw(turns[i - 1].shadow === true);
      run = [turns[i - 1]];
    }
    run.push(t);
  });
  if (run.length) draw(run.at(-1).shadow === true);
}

// The client's tokens in their own panel above, on their own scale, labelled at the right like the limits.
function clientPanel(svg, turns, { x, from, to }) {
  const max = turns.reduce((m, t) => Math.max(m, t.tokens), 1);
  const { top, client: height } = PLOT;
  svg.append(s("rect", { class: "plot plot-client", x: from, y: top, width: to - from, height }));
  const y = yAxis(svg, { top, height, max, ticks: 3, from, to });
  svg.append(s("polyline", { class: "curve curve-tokens", points: line(turns, "tokens", x, y) }));
  const at = Math.min(Math.max(y(turns.at(-1)?.tokens ?? 0) + 4, top + 4), top + height - LABEL_GAP);
  const label = (text, dy) => s("text", { class: "limit-label client-label", x: to + 6, y: at + dy }, text);
  svg.append(label("client's tokens", 0), label(number(turns.at(-1)?.tokens), LABEL_GAP));
}

// A marker a compaction, where what was sent dropped to; smaller when they are many (the list under the chart
// reaches each one). With the client's tokens on the same scale, a dashed drop from them to what was sent.
function compactionMarkers(svg, view, { x, y, apart, perTurn }) {
  const byTurn = new Map(view.turns.map((t) => [t.n, t]));
  const ns = view.compactions.map((c) => c.n).sort((a, b) => a - b);
  const gaps = ns.slice(1).map((n, i) => (n - ns[i]) * perTurn).sort((a, b) => a - b);
  const gap = gaps.length ? gaps[Math.floor(gaps.length / 2)] : Infinity;
  const r = Math.max(2.5, Math.min(6, gap / 2.5));
  if (r < 4) svg.classList.add("dense");
  for (const c of view.compactions) {
    const t = byTurn.get(c.n);
    if (!t) continue;
    const answered = String(c.actions).split(",").includes("answered-compaction");
    const planned = c.shadow ? " (shadow: planned, not sent)" : answered ? " (the agent's own compaction, answered)" : "";
    const tokens = `${number(t.tokens)} → ${number(t.sent)} tokens`;
    const title = `Compaction at turn ${c.n} (${c.actions})${planned}: ${tokens}`;
    if (!apart) svg.append(s("line", { class: "drop", x1: x(c.n), x2: x(c.n), y1: y(t.tokens), y2: y(t.sent) }));
    const kind = `marker${churns(c) ? " churn" : ""}${c.shadow ? " shadow" : ""}${answered ? " answered" : ""}`;
    const at = { class: kind, cx: x(c.n), cy: y(t.sent), r, "data-compaction": c.id };
    const marker = s("circle", at, s("title", {}, title));
    marker.addEventListener("click", () => (location.hash = conversationLink(shown.id, c.id)));
    svg.append(marker);
  }
}

function legend(view, apart) {
  const has = (field) => view.turns.some((t) => t[field] !== null && t[field] !== undefined);
  const item = (swatch, text) => h("li", {}, h("span", { class: `swatch ${swatch}` }), text);
  const shadowTurns = view.turns.filter((t) => t.shadow === true).length;
  const shadows = view.compactions.filter((c) => c.shadow).length;
  return h(
    "figcaption",
    {},
    h(
      "ul",
      { class: "legend" },
      item("curve-tokens", apart ? "client's tokens (own scale)" : "client's tokens"),
      shadowTurns < view.turns.length && item("curve-sent", "sent upstream"),
      shadowTurns > 0 && item("curve-sent shadow", "would have been sent (shadow)"),
      LIMITS.filter(([field]) => has(field)).map(([field, name]) => item(`limit limit-${field}`, name)),
      shadows < view.compactions.length && item("marker", "compaction (click for what it dropped)"),
      shadows > 0 && item("marker shadow", "shadow: planned, not sent"),
      view.compactions.some((c) => churns(c)) && item("marker churn", "churn: the next came too soon"),
    ),
  );
}

// A compaction that left fewer than compaction.min_turns_between turns before the next (`x-inflight-actions: churn`).
function churns(compaction) {
  return compaction.actions.split(",").includes("churn");
}


// Compactions listed at a time under the chart: as many as fit on one row beside its text and arrows, so that
// the detail under them stays in view. Each page's first compaction (`shown.starts`), the buttons measured.
function pageStarts(list) {
  const nav = document.getElementById("compactions");
  const most = number(list.length);
  const fixed = [pageText(most, most, most), pageTurn(0, "‹", ""), pageTurn(0, "›", "")];
  const chips = list.map(chip);
  nav.replaceChildren(...fixed, ...chips);
  const gap = parseFloat(getComputedStyle(nav).columnGap) || 0;
  const width = (node) => node.getBoundingClientRect().width + gap;
  const room = nav.clientWidth - fixed.reduce((sum, node) => sum + width(node), 0) - 8;
  const starts = [0];
  let used = 0;
  chips.forEach((node, i) => {
    if (used > 0 && used + width(node) > room) {
      starts.push(i);
      used = 0;
    }
    used += width(node);
  });
  return starts;
}

const pageOf = (index) => shown.starts.findLastIndex((start) => start <= index);

const pageText = (start, end, all) =>
  h("span", { class: "muted" }, all ? `Compactions ${start}–${end} of ${all} · turn` : "Compactions · turn");

const pageTurn = (to, text, label) =>
  h(
    "button",
    { type: "button", class: "page", "aria-label": label, disabled: to === shown.page, onclick: () => showPage(to) },
    text,
  );

// The list of compactions under the chart, a page at a time: a small button a compaction, by its turn.
function showPage(page) {
  const nav = document.getElementById("compactions");
  const list = shown.view.compactions;
  if (!list.length) {
    nav.replaceChildren(h("span", { class: "muted" }, "No compaction in this conversation yet."));
    return;
  }
  const pages = shown.starts.length;
  shown.page = Math.min(Math.max(0, page), pages - 1);
  const start = shown.starts[shown.page];
  const end = shown.starts[shown.page + 1] ?? list.length;
  const items = [
    pages > 1 ? pageText(number(start + 1), number(end), number(list.length)) : pageText(),
    pages > 1 && pageTurn(Math.max(0, shown.page - 1), "‹", "Earlier compactions"),
    list.slice(start, end).map(chip),
    pages > 1 && pageTurn(Math.min(pages - 1, shown.page + 1), "›", "Later compactions"),
  ];
  nav.replaceChildren(...items.flat().filter(Boolean));
  markSelected();
}

function chip(c) {
  const what = `turn ${c.n} · ${c.actions}${c.shadow ? " · shadow: planned, not sent" : ""}`;
  const kind = ["chip", churns(c) && "churn", c.shadow && "shadow"].filter(Boolean).join(" ");
  const open = () => (location.hash = conversationLink(shown.id, c.id));
  const props = { type: "button", class: kind, title: what, "aria-label": `Compaction at ${what}`, onclick: open };
  return h("button", { ...props, "data-compaction": c.id }, String(c.n));
}

function markSelected() {
  for (const node of main.querySelectorAll("[data-compaction]")) {
    const selected = node.getAttribute("data-compaction") === shown.selected;
    node.classList.toggle("selected", selected);
    if (node.tagName === "BUTTON") node.setAttribute("aria-pressed", String(selected));
  }
}

async function showCompaction(id, stale) {
  const panel = document.getElementById("detail");
  shown.selected = id ?? null;
  const index = shown.view.compactions.findIndex((c) => c.id === id);
  if (index >= 0 && pageOf(index) !== shown.page) showPage(pageOf(index));
  else markSelected();
  if (!id) {
    panel.hidden = true;
    return;
  }
  panel.hidden = false;
  panel.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  const entry = await api(`compactions/${encodeURIComponent(id)}`);
  if (stale()) return;
  panel.replaceChildren(...compactionDetail(entry).filter(Boolean));
  // The panel is under the chart: on a screen too short for both, brought up to mid-height when it would start
  // below the fold (or, stepping from one compaction to the next, above the top).
  const at = panel.getBoundingClientRect().top;
  if (at > window.innerHeight - 120 || at < 0) window.scrollBy({ top: at - window.innerHeight * 0.4 });
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
  const list = shown.view.compactions;
  const index = list.findIndex((c) => c.id === entry.id);
  const turn = list[index]?.n;
  const shadow = entry.shadow === true || list[index]?.shadow === true;
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
    h(
      "div",
      { class: "detail-head" },
      h("h2", {}, turn ? `Compaction at turn ${turn}` : "Compaction", h("span", { class: "muted id" }, entry.id)),
      index >= 0 && steps(list, index),
    ),
    shadow &&
      h(
        "p",
        { class: "shadow-note" },
        h("b", {}, "shadow"),
        ": planned, not sent — the upstream got the client's request unchanged",
      ),
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

// The compactions before and after this one, a click away (the list under the chart shows a page of them).
function steps(list, index) {
  const open = (to) => () => (location.hash = conversationLink(shown.id, to.id));
  const step = (to, text, label) =>
    h("button", { type: "button", class: "step", "aria-label": label, disabled: !to, onclick: to && open(to) }, text);
  return h(
    "nav",
    { class: "steps", "aria-label": "Other compactions" },
    step(list[index - 1], "← previous", "Previous compaction"),
    h("span", { class: "muted" }, `${number(index + 1)} of ${number(list.length)}`),
    step(list[index + 1], "next →", "Next compaction"),
  );
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
