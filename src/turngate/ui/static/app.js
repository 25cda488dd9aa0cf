// turngate observer: a read-only view of the ledger. One ES module, no dependencies, no build step.
// Every request carries the API key from sessionStorage as `Authorization: Bearer` (none when the
// key is empty: unauthenticated dev mode). /tail is read with fetch() + ReadableStream (not
// EventSource) so that the header can be sent. All data is rendered with textContent, never HTML.

import { policiesView } from "./policies.js";
import { reviewsView } from "./reviews.js";
import { budgetsSection } from "./budgets.js";

const KEY_STORAGE = "turngate.apiKey";
const TURNS_PAGE = 50;
const THREADS_PAGE = 50;
const FINDINGS_SHOWN = 200;

const state = {
  key: null, // null: signed out; "": dev mode without a key
  config: null,
  tail: null, // AbortController of the live /tail
  lastIndex: null,
  listeners: new Set(),
  view: null, // cleanup function of the current view
  gen: 0, // navigation counter: a view whose data arrives after the user moved on stays hidden
};

// --------------------------------------------------------------------------- DOM helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const $ = (selector) => document.querySelector(selector);
const enc = encodeURIComponent;

function shortDigest(digest) {
  if (!digest) return "–";
  const hex = String(digest).replace(/^sha256:/, "");
  return `sha256:${hex.slice(0, 10)}…${hex.slice(-6)}`;
}

function digestEl(digest, full = false) {
  if (!digest) return h("span", { class: "muted" }, "–");
  return h("code", { class: "digest", title: digest }, full ? digest : shortDigest(digest));
}

function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return h("time", { datetime: iso }, d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"));
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms} ms`;
}

function badge(kind, text) {
  return h("span", { class: `badge ${kind}` }, text);
}

function decisionBadge(decision) {
  if (decision === "ALLOW") return badge("allow", "ALLOW");
  if (decision === "DENY") return badge("deny", "DENY");
  return badge("pending", decision || "pending");
}

function statusText(status) {
  return {
    pending: "waiting for a decision",
    running: "allowed, executing",
    denied: "denied",
    error: "executed with an error",
    redacted: "answer redacted",
    done: "answered",
  }[status] || status;
}

function dl(pairs) {
  const list = h("dl");
  for (const [term, value] of pairs) {
    if (value === undefined) continue;
    list.append(h("dt", null, term), h("dd", null, value === null || value === "" ? "–" : value));
  }
  return list;
}

function table(caption, headers, rows, options = {}) {
  const head = h("tr", null, headers.map((x) => h("th", { scope: "col", class: x.num ? "num" : null }, x.label ?? x)));
  const body = h("tbody", null, rows);
  return h("table", { class: options.class || null }, h("caption", null, caption), h("thead", null, head), body);
}

function announce(text) {
  const live = $("#live-text");
  if (live) live.textContent = text;
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// --------------------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.reason_code)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

function authHeaders() {
  return state.key ? { Authorization: `Bearer ${state.key}` } : {};
}

async function api(path, params = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.set(name, value);
  }
  const response = await fetch(url, { headers: { Accept: "application/json", ...authHeaders() }, cache: "no-store" });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (response.status === 401) {
    signOut("The API refused the key (401). Sign in again.");
    throw new ApiError(401, body);
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function errorBox(error) {
  const code = error.body && error.body.reason_code ? ` (${error.body.reason_code})` : "";
  return h("div", { class: "alert", role: "alert" }, `Could not load: ${error.message}${code}`);
}

// --------------------------------------------------------------------------- live tail (SSE over fetch)

function parseSseBlock(block) {
  const message = { event: "message", data: "", id: null };
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") message.event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") message.id = value;
  }
  if (!data.length) return null;
  message.data = data.join("\n");
  return message;
}

function setLive(mode, text) {
  const live = $("#live");
  live.hidden = false;
  live.classList.toggle("on", mode === "on");
  live.classList.toggle("off", mode === "off");
  announce(text);
}

async function runTail(controller) {
  let backoff = 500;
  while (!controller.signal.aborted) {
    try {
      const url = new URL("/tail", location.origin);
      if (state.lastIndex !== null) url.searchParams.set("since", String(state.lastIndex));
      else url.searchParams.set("backlog", "0");
      const response = await fetch(url, {
        headers: { Accept: "text/event-stream", ...authHeaders() },
        signal: controller.signal,
        cache: "no-store",
      });
      if (response.status === 401) {
        signOut("The API refused the key (401). Sign in again.");
        return;
      }
      if (!response.ok || !response.body) throw new Error(`tail answered ${response.status}`);
      setLive("on", "Live: connected");
      backoff = 500;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let match;
        while ((match = /\r?\n\r?\n/.exec(buffer))) {
          const block = buffer.slice(0, match.index);
          buffer = buffer.slice(match.index + match[0].length);
          const message = parseSseBlock(block);
          if (!message || message.event !== "envelope") continue;
          let event;
          try {
            event = JSON.parse(message.data);
          } catch {
            continue;
          }
          if (typeof event.index === "number") state.lastIndex = Math.max(state.lastIndex ?? -1, event.index);
          for (const listener of [...state.listeners]) {
            try {
              listener(event);
            } catch (error) {
              console.error(error);
            }
          }
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    setLive("off", "Live: reconnecting");
    await new Promise((resolve) => setTimeout(resolve, backoff));
    backoff = Math.min(backoff * 2, 10000);
  }
}

function startTail() {
  stopTail();
  state.tail = new AbortController();
  runTail(state.tail);
}

function stopTail() {
  if (state.tail) state.tail.abort();
  state.tail = null;
}

function onLive(listener) {
  state.listeners.add(listener);
  return () => state.listeners.delete(listener);
}

// --------------------------------------------------------------------------- sign in / out

function signOut(message) {
  sessionStorage.removeItem(KEY_STORAGE);
  state.key = null;
  state.config = null;
  stopTail();
  $("#main-nav").hidden = true;
  $("#sign-out").hidden = true;
  $("#live").hidden = true;
  renderLogin(message);
}

async function signIn(key) {
  state.key = key;
  const config = await api("/ui/api/config");
  state.config = config;
  sessionStorage.setItem(KEY_STORAGE, key);
  state.lastIndex = typeof config.head_index === "number" ? config.head_index : null;
  $("#version").textContent = `turngate ${config.version}`;
  $("#main-nav").hidden = false;
  $("#sign-out").hidden = false;
  startTail();
}

function renderLogin(message) {
  cleanupView();
  document.title = "Sign in · turngate observer";
  const input = h("input", { id: "api-key", name: "api-key", type: "password", autocomplete: "off", spellcheck: "false", "aria-describedby": "api-key-hint" });
  const status = h("div", { id: "login-status", "aria-live": "assertive" });
  if (message) status.append(h("p", { class: "alert", role: "alert" }, message));
  const form = h(
    "form",
    { class: "login", "aria-labelledby": "login-title", novalidate: true },
    h("h1", { id: "login-title", tabindex: "-1" }, "Sign in"),
    h("label", { for: "api-key" }, "API key"),
    input,
    h(
      "p",
      { class: "hint", id: "api-key-hint" },
      "A key from `turngate keys create` with the snapshot.read role. It is kept in this tab only (sessionStorage) and sent as a Bearer token. With `turngate dev` (no authentication) leave it empty.",
    ),
    status,
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Sign in")),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.replaceChildren(h("p", { class: "hint" }, "Checking the key…"));
    try {
      await signIn(input.value.trim());
      if (!location.hash.startsWith("#/") || location.hash.startsWith("#/login")) location.hash = "#/threads";
      else route();
    } catch (error) {
      state.key = null;
      sessionStorage.removeItem(KEY_STORAGE);
      const why = error.status === 401 || error.status === 403 ? "The API refused this key" : "Could not reach the API";
      status.replaceChildren(h("p", { class: "alert", role: "alert" }, `${why}: ${error.message}`));
      input.focus();
    }
  });
  $("#main").replaceChildren(form);
  input.focus();
}

// --------------------------------------------------------------------------- routing

function cleanupView() {
  if (state.view) state.view();
  state.view = null;
}

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/threads";
  const [path, query = ""] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query) };
}

function setNav(name) {
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function show(view, title) {
  document.title = `${title} · turngate observer`;
  $("#main").replaceChildren(view);
  const heading = view.querySelector("h1");
  if (heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus({ preventScroll: true });
  }
}

async function route() {
  if (state.key === null) {
    renderLogin();
    return;
  }
  if (location.hash && !location.hash.startsWith("#/")) return; // an in-page anchor (skip link)
  cleanupView();
  state.gen += 1;
  const { parts, params } = parseHash();
  const [section, id, sub] = parts;
  try {
    if (section === "thread" && id && sub === "proof") await threadProofView(id);
    else if (section === "thread" && id) await threadView(id, params);
    else if (section === "turn" && id) await turnView(id);
    else if (section === "jobs") await jobsView();
    else if (section === "policies") await policiesView(policyUi());
    else if (section === "reviews") await reviewsView(policyUi());
    else await threadsView(params);
  } catch (error) {
    if (error.status === 401) return;
    show(h("div", null, h("h1", null, "Something went wrong"), errorBox(error)), "Error");
  }
}

function crumbs(...items) {
  return h(
    "nav",
    { class: "crumbs", "aria-label": "Breadcrumb" },
    h(
      "ol",
      null,
      items.map(([text, href], i) =>
        h("li", null, href ? h("a", { href }, text) : h("span", { "aria-current": i === items.length - 1 ? "page" : null }, text)),
      ),
    ),
  );
}

// --------------------------------------------------------------------------- threads list

async function threadsView(params) {
  setNav("threads");
  const filters = {
    q: params.get("q") || "",
    actor: params.get("actor") || "",
    decision: params.get("decision") || "",
    since: params.get("since") || "",
    until: params.get("until") || "",
  };
  const offset = Math.max(0, Number(params.get("offset") || 0));

  const field = (name, label, input) => h("div", null, h("label", { for: `f-${name}` }, label), input);
  const text = (name, value, extra = {}) => h("input", { id: `f-${name}`, name, value, ...extra });
  const toLocal = (iso) => (iso ? iso.replace(/Z$/, "").slice(0, 16) : "");
  const decision = h(
    "select",
    { id: "f-decision", name: "decision" },
    [
      ["", "any"],
      ["ALLOW", "has ALLOW"],
      ["DENY", "has DENY"],
      ["error", "has errors"],
      ["pending", "has undecided turns"],
    ].map(([value, label]) => h("option", { value, selected: value === filters.decision }, label)),
  );
  const form = h(
    "form",
    { class: "search", role: "search", "aria-label": "Search threads" },
    field("q", "Thread id contains", text("q", filters.q, { type: "search" })),
    field("actor", "Actor", text("actor", filters.actor)),
    field("decision", "Decision", decision),
    field("since", "Active from (UTC)", text("since", toLocal(filters.since), { type: "datetime-local" })),
    field("until", "Active until (UTC)", text("until", toLocal(filters.until), { type: "datetime-local" })),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit" }, "Search"),
      h("button", { type: "button", class: "secondary", onclick: () => (location.hash = "#/threads") }, "Clear"),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const query = new URLSearchParams();
    for (const name of ["q", "actor", "decision"]) if (data.get(name)) query.set(name, data.get(name));
    for (const name of ["since", "until"]) if (data.get(name)) query.set(name, `${data.get(name)}:00Z`);
    location.hash = `#/threads${query.toString() ? `?${query}` : ""}`;
  });

  const results = h("div", { id: "threads-results" });
  const view = h("div", null, h("h1", null, "Threads"), form, results);
  show(view, "Threads");

  let rows = [];
  let total = 0;
  let totalText = "0";
  const load = async () => {
    const page = await api("/ui/api/threads", { ...filters, limit: THREADS_PAGE, offset });
    rows = page.threads;
    total = page.total;
    // past the server's count cap the total is a lower bound
    totalText = page.total_exact === false ? `${total}+` : String(total);
    draw();
  };

  const draw = () => {
    // Live redraws must not take the keyboard focus away from the row the user is on.
    const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest("tr[data-thread]") : null;
    const keep = focused && results.contains(focused) ? focused.dataset.thread : null;
    drawRows();
    if (keep !== null) {
      const again = [...results.querySelectorAll("tr[data-thread]")].find((tr) => tr.dataset.thread === keep);
      const link = again && again.querySelector("a");
      if (link) link.focus({ preventScroll: true });
    }
  };

  const drawRows = () => {
    if (!rows.length) {
      results.replaceChildren(
        h("p", { class: "empty" }, total ? "No threads on this page." : "No threads match. New turns appear here as soon as they are recorded."),
      );
      return;
    }
    const body = rows.map((t) =>
      h(
        "tr",
        { "data-thread": t.thread_id, class: t.fresh ? "fresh" : null },
        h("th", { scope: "row" }, h("a", { href: `#/thread/${enc(t.thread_id)}` }, t.thread_id)),
        h("td", { class: "num" }, t.turns),
        h(
          "td",
          null,
          t.allowed ? badge("allow", `ALLOW ${t.allowed}`) : null,
          t.denied ? badge("deny", `DENY ${t.denied}`) : null,
          t.errors ? badge("error", `errors ${t.errors}`) : null,
          t.pending ? badge("pending", `undecided ${t.pending}`) : null,
        ),
        h("td", null, t.actors.join(", "), t.actor_count > t.actors.length ? ` +${t.actor_count - t.actors.length}` : ""),
        h("td", null, fmtTime(t.last_at)),
        h("td", { class: "num" }, `${t.first_index}–${t.last_index}`),
      ),
    );
    const end = offset + rows.length;
    const pager = h(
      "div",
      { class: "pager" },
      h("span", { class: "range" }, `Threads ${offset + 1}–${end} of ${totalText}`),
      offset > 0 ? h("a", { href: pageHash(Math.max(0, offset - THREADS_PAGE)) }, "Previous page") : null,
      end < total ? h("a", { href: pageHash(offset + THREADS_PAGE) }, "Next page") : null,
    );
    results.replaceChildren(
      table(
        `${totalText} thread(s), most recently active first; updated live`,
        ["Thread", { label: "Turns", num: true }, "Decisions", "Actors", "Last activity", { label: "Ledger indexes", num: true }],
        body,
        { class: "threads" },
      ),
      pager,
    );
  };

  const pageHash = (value) => {
    const query = new URLSearchParams(params);
    query.set("offset", String(value));
    return `#/threads?${query}`;
  };

  const refetch = debounce(() => load().catch(() => {}), 400);
  const unsubscribe = onLive((event) => {
    const row = rows.find((t) => t.thread_id === event.thread_id);
    if (!row) {
      refetch();
      return;
    }
    if (event.index <= row.last_index) return; // already counted by the page that was loaded
    row.events += 1;
    row.last_index = Math.max(row.last_index, event.index);
    row.last_at = event.created_at || row.last_at;
    if (event.kind === "INTENT") {
      row.turns += 1;
      row.pending += 1;
    } else if (event.kind === "DECISION") {
      row.pending = Math.max(0, row.pending - 1);
      if (event.payload.decision === "DENY") row.denied += 1;
      else row.allowed += 1;
    } else if (event.kind === "EXECUTION" && event.payload.error) {
      row.errors += 1;
    }
    if (!row.actors.includes(event.actor)) row.actors.push(event.actor);
    row.fresh = true;
    rows.sort((a, b) => b.last_index - a.last_index);
    draw();
    row.fresh = false;
  });
  state.view = unsubscribe;
  try {
    await load();
  } catch (error) {
    if (error.status === 401) return;
    results.replaceChildren(errorBox(error));
  }
}

// --------------------------------------------------------------------------- thread timeline

function threadHeader(threadId, current) {
  return [
    crumbs(["Threads", "#/threads"], [`Thread ${threadId}`, null]),
    h("h1", null, "Thread ", h("code", null, threadId)),
    h(
      "nav",
      { class: "subnav", "aria-label": "Thread views" },
      h(
        "ul",
        null,
        h("li", null, h("a", { href: `#/thread/${enc(threadId)}`, "aria-current": current === "timeline" ? "page" : null }, "Timeline")),
        h("li", null, h("a", { href: `#/thread/${enc(threadId)}/proof`, "aria-current": current === "proof" ? "page" : null }, "Proof")),
      ),
    ),
  ];
}

function stepIntent(turn) {
  const intent = turn.intent;
  if (!intent) return h("div", { class: "step skipped" }, h("p", { class: "step-kind" }, "INTENT"), "not recorded");
  return h(
    "div",
    { class: "step" },
    h("p", { class: "step-kind" }, `INTENT · index ${intent.index}`),
    h("p", { class: "text" }, intent.message, intent.message_cut ? " …" : ""),
    dl([
      ["actor", turn.actor],
      ["refs", String(intent.declared_refs)],
      ...(intent.requested_model_id ? [["model asked", intent.requested_model_id]] : []),
    ]),
  );
}

function stepDecision(turn) {
  const d = turn.decision;
  if (!d) return h("div", { class: "step skipped" }, h("p", { class: "step-kind" }, "DECISION"), "waiting for the decision");
  const deny = d.decision === "DENY";
  return h(
    "div",
    { class: `step ${deny ? "denied-step" : ""}` },
    h("p", { class: "step-kind" }, `DECISION · index ${d.index}`),
    h("p", null, decisionBadge(d.decision), h("span", { class: "visually-hidden" }, " reason codes: "), d.reason_codes.map((code) => h("code", { class: "reason" }, code, " "))),
    dl([
      ["policy", d.policy_id || "–"],
      ["model", d.provider ? `${d.provider} / ${d.model_id}` : "–"],
      ...(d.error_code ? [["error", d.error_code]] : []),
    ]),
    shadowMark(d.shadow_disagreements || []),
  );
}

// A shadow policy (recorded beside the decision, never deciding) that would have decided otherwise.
function shadowMark(disagreements) {
  if (!disagreements.length) return null;
  return h(
    "div",
    { class: "shadow-disagrees" },
    badge("pending", "shadow disagrees"),
    disagreements.map((s) => h("p", null, `${s.policy_id} v${s.policy_version} would have decided `, decisionBadge(s.decision), " ", (s.reason_codes || []).map((code) => h("code", { class: "reason" }, code, " ")))),
  );
}

function stepExecution(turn) {
  const x = turn.execution;
  if (!x) {
    const why = turn.status === "denied" ? "not executed: the turn was denied" : turn.decision ? "executing…" : "not executed yet";
    return h("div", { class: "step skipped" }, h("p", { class: "step-kind" }, "EXECUTION"), why);
  }
  const failed = Boolean(x.error);
  const tokens = x.input_tokens != null || x.output_tokens != null ? `${x.input_tokens ?? "?"} in / ${x.output_tokens ?? "?"} out` : "–";
  return h(
    "div",
    { class: `step ${failed || x.redacted ? "error-step" : ""}` },
    h("p", { class: "step-kind" }, `EXECUTION · index ${x.index}`),
    failed
      ? h("p", null, badge("error", "ERROR"), h("code", { class: "reason" }, x.error.code), x.error.message ? ` ${x.error.message}` : "")
      : x.redacted
        ? h("p", null, badge("error", "REDACTED"), h("code", { class: "reason" }, x.redaction_code || ""))
        : h("p", { class: "text" }, x.answer, x.answer_cut ? " …" : ""),
    dl([
      ["model", `${x.provider} / ${x.model_id}`],
      ["latency", `${fmtMs(x.latency_ms)} (provider ${fmtMs(x.provider_ms)})`],
      ["tokens", tokens],
    ]),
  );
}

function turnItem(turn, headingLevel = "h2") {
  const title = `Turn ${turn.position !== undefined ? turn.position + 1 : ""}`.trim();
  const item = h(
    "li",
    { class: `turn ${turn.status}`, "data-correlation": turn.correlation_id, "aria-labelledby": `turn-${turn.correlation_id}` },
    h(
      "div",
      { class: "turn-head" },
      h(headingLevel, { id: `turn-${turn.correlation_id}` }, title, " ", h("code", null, turn.correlation_id)),
      h("span", { class: "meta" }, fmtTime(turn.intent ? turn.intent.created_at : null)),
      h("span", { class: "meta" }, statusText(turn.status)),
    ),
    h("div", { class: "steps" }, stepIntent(turn), stepDecision(turn), stepExecution(turn)),
    h(
      "div",
      { class: "turn-foot" },
      h("a", { href: `#/turn/${enc(turn.correlation_id)}` }, "Context and proof", h("span", { class: "visually-hidden" }, ` of turn ${turn.correlation_id}`)),
      turn.workflow
        ? h("a", { href: turn.workflow.url, target: "_blank", rel: "noopener noreferrer" }, "Workflow in the Temporal UI", h("span", { class: "visually-hidden" }, " (opens in a new tab)"))
        : null,
    ),
  );
  item.dataset.sig = JSON.stringify(turn);
  return item;
}

async function threadView(threadId, params) {
  setNav("threads");
  const list = h("ol", { class: "turns", "aria-label": "Turns" });
  const summary = h("p", { class: "hint" });
  const pagerTop = h("nav", { class: "pager", "aria-label": "Turn pages (top)" });
  const pagerBottom = h("nav", { class: "pager", "aria-label": "Turn pages (bottom)" });
  const view = h("div", null, threadHeader(threadId, "timeline"), summary, pagerTop, list, pagerBottom);
  show(view, `Thread ${threadId}`);

  const requested = params.get("offset");
  let offset = requested === null ? null : Math.max(0, Number(requested));
  let total = 0;

  const pageLinks = (container) => {
    const last = Math.max(0, Math.floor((total - 1) / TURNS_PAGE) * TURNS_PAGE);
    const link = (label, value, disabled) =>
      disabled ? h("span", { class: "muted", "aria-disabled": "true" }, label) : h("a", { href: `#/thread/${enc(threadId)}?offset=${value}` }, label);
    const shown = list.children.length;
    container.replaceChildren(
      h("span", { class: "range" }, total ? `Turns ${offset + 1}–${offset + shown} of ${total}` : "No turns yet"),
      link("First", 0, offset === 0),
      link("Previous", Math.max(0, offset - TURNS_PAGE), offset === 0),
      link("Next", offset + TURNS_PAGE, offset + TURNS_PAGE >= total),
      link("Last", last, offset >= last),
    );
  };

  const load = async () => {
    if (offset === null) {
      // Open on the newest page: ask for the count first (cheap), then the last page.
      const head = await api("/ui/api/turns", { thread_id: threadId, limit: 1, offset: 0 });
      offset = Math.max(0, Math.floor(Math.max(0, head.total_turns - 1) / TURNS_PAGE) * TURNS_PAGE);
    }
    const page = await api("/ui/api/turns", { thread_id: threadId, limit: TURNS_PAGE, offset });
    total = page.total_turns;
    summary.textContent = total
      ? `${total} turn(s), ${page.events} event(s), ledger indexes ${page.first_index}–${page.last_index}. Newest page shown first; updated live.`
      : "No turns in this thread (yet). They appear here as they are recorded.";
    const existing = new Map([...list.children].map((li) => [li.dataset.correlation, li]));
    const wanted = page.turns.map((turn) => {
      const old = existing.get(turn.correlation_id);
      if (old && old.dataset.sig === JSON.stringify(turn)) return old;
      const fresh = turnItem(turn);
      if (old) fresh.classList.add("fresh");
      return fresh;
    });
    if (wanted.length !== list.children.length || wanted.some((li, i) => list.children[i] !== li)) list.replaceChildren(...wanted);
    pageLinks(pagerTop);
    pageLinks(pagerBottom);
  };

  const refetch = debounce(() => load().catch(() => {}), 250);
  state.view = onLive((event) => {
    if (event.thread_id !== threadId) return;
    const onPage = [...list.children].some((li) => li.dataset.correlation === event.correlation_id);
    if (onPage || offset + TURNS_PAGE >= total) refetch();
    else total += event.kind === "INTENT" ? 1 : 0;
  });
  await load();
}

// --------------------------------------------------------------------------- verify (proof)

const CHECKS = [
  ["Event digests recomputed from stored payloads", "checked_events", ["digest_mismatch"]],
  ["Hash chain links (prev_event_digest, no gaps, no duplicates)", "checked_events", ["chain_break", "index_gap", "duplicate"]],
  [
    "DECISIONs recomputed (context digest, resolved refs, normative inputs, ref errors)",
    "checked_decisions",
    [
      "decision_without_intent",
      "decision_malformed",
      "context_digest_mismatch",
      "resolved_refs_mismatch",
      "normative_inputs_mismatch",
      "ref_error_mismatch",
      "input_digest_mismatch",
      "decision_mismatch",
      "execution_without_allow",
      "execution_context_mismatch",
    ],
  ],
  ["Observation never feeds governance (I_context / O_context split)", "checked_decisions", ["observation_leak", "normative_input_unknown"]],
  ["Artifact pointers re-hashed (manifests, snapshots)", "checked_artifacts", ["artifact_missing", "artifact_mismatch", "artifact_pointer_invalid", "artifact_unavailable"]],
];

function verifyPanel(threadId) {
  const output = h("div", { id: "verify-result", "aria-live": "polite" });
  const button = h("button", { type: "button", id: "verify-button" }, "Verify this thread");
  button.addEventListener("click", async () => {
    button.disabled = true;
    output.replaceChildren(h("p", { class: "hint" }, "Verifying: recomputing every digest of this thread…"));
    try {
      const report = await api("/verify", { thread_id: threadId });
      output.replaceChildren(renderReport(report));
    } catch (error) {
      if (error.status !== 401) output.replaceChildren(errorBox(error));
    } finally {
      button.disabled = false;
    }
  });
  return h(
    "section",
    { class: "panel", "aria-labelledby": "verify-title" },
    h("h2", { id: "verify-title" }, "Verify"),
    h("p", { class: "hint" }, "Calls GET /verify?thread_id=… : recomputes each event's digest, the chain links, every DECISION from its stored inputs and every artifact's sha256. It never repairs anything."),
    button,
    output,
  );
}

function renderReport(report) {
  const kinds = new Map();
  for (const finding of report.failures || []) kinds.set(finding.kind, (kinds.get(finding.kind) || 0) + 1);
  // DECISIONs whose config could not be had were not recomputed: never a PASS for them.
  const unchecked = report.unchecked_decisions || 0;
  const checks = CHECKS.map(([label, counter, names]) => {
    const failed = names.reduce((n, name) => n + (kinds.get(name) || 0), 0);
    const checked = report[counter] || 0;
    const skipped = counter === "checked_decisions" ? unchecked : 0;
    const verdict = failed
      ? badge("deny", "FAIL")
      : skipped
        ? badge("deny", "UNCHECKED")
        : checked
          ? badge("allow", "PASS")
          : badge("plain", "N/A");
    const more = skipped ? `, ${skipped} unchecked` : "";
    const note = failed
      ? `${checked} checked, ${failed} failure(s)${more}`
      : checked || skipped
        ? `${checked} checked${more}`
        : "nothing to check";
    return h("li", { "data-check": names[0] }, verdict, ` ${label}`, h("span", { class: "hint" }, ` (${note})`));
  });
  const findingRows = (list, label) =>
    (list || []).map((f) =>
      h(
        "tr",
        null,
        h("td", null, label),
        h("td", null, h("code", null, f.kind)),
        h("td", { class: "num" }, f.index ?? "–"),
        h("td", null, f.correlation_id ? h("a", { href: `#/turn/${enc(f.correlation_id)}` }, f.correlation_id) : "–"),
        h("td", null, f.detail),
      ),
    );
  const all = [
    ...findingRows(report.failures, "failure"),
    ...findingRows(report.unchecked, "unchecked"),
    ...findingRows(report.warnings, "warning"),
    ...findingRows(report.info, "info"),
  ];
  const rows = all.slice(0, FINDINGS_SHOWN);
  const more = all.length - rows.length;
  return h(
    "div",
    null,
    h(
      "p",
      { class: `banner ${report.ok ? "allow" : "deny"}`, id: "verify-verdict" },
      report.failures.length ? "Verification FAILED: " : report.ok ? "Verified: " : "Verification INCOMPLETE: ",
      `${report.checked_events} events, ${report.checked_decisions} decisions, ${report.checked_artifacts} artifacts checked in ${report.duration_ms} ms; ${report.failures.length} failure(s), ${report.warnings.length} warning(s)` +
        (unchecked ? `, ${unchecked} decision(s) unchecked: their config could not be had.` : "."),
    ),
    h("ul", { class: "checks" }, checks),
    rows.length ? table(more ? `Findings (the first ${rows.length} of ${all.length})` : "Findings", ["Level", "Kind", { label: "Index", num: true }, "Turn", "Detail"], rows) : null,
    more ? h("p", { class: "hint" }, `${more} more finding(s) not shown: run \`turngate verify --thread … --json\` for all of them.`) : null,
    h("p", { class: "hint" }, "Head checked: index ", String(report.head_index ?? "–"), " ", digestEl(report.head_digest, true), ". Context config ", digestEl(report.context_config_digest)),
  );
}

async function threadProofView(threadId) {
  setNav("threads");
  const gen = state.gen;
  const page = await api("/ui/api/turns", { thread_id: threadId, limit: 1, offset: 0 });
  if (gen !== state.gen) return;
  const facts = h(
    "section",
    { class: "panel", "aria-labelledby": "chain-title" },
    h("h2", { id: "chain-title" }, "Position in the hash chain"),
    h(
      "dl",
      { class: "facts" },
      h("dt", null, "turns"),
      h("dd", null, String(page.total_turns)),
      h("dt", null, "events"),
      h("dd", null, String(page.events)),
      h("dt", null, "first / last ledger index"),
      h("dd", null, `${page.first_index ?? "–"} / ${page.last_index ?? "–"}`),
      h("dt", null, "ledger head index"),
      h("dd", null, String(page.head_index ?? "–")),
    ),
    h("p", { class: "hint" }, "Every event's digest covers its index and the previous event's digest, so this thread's events are pinned inside the one global chain. Open a turn for its digests."),
  );
  show(h("div", null, threadHeader(threadId, "proof"), facts, verifyPanel(threadId)), `Proof of thread ${threadId}`);
}

// --------------------------------------------------------------------------- one turn

function manifestSection(title, manifest, id) {
  const budgetCut = manifest.exclusion_log.filter((e) => e.excluded_reason === "budget_limit");
  const include = manifest.inclusion_log.map((e) =>
    h("tr", null, h("td", null, digestEl(e.item_id)), h("td", null, e.item_type), h("td", { class: "num" }, String(e.source_ref)), h("td", null, h("code", null, e.included_reason))),
  );
  const exclude = manifest.exclusion_log.map((e) =>
    h(
      "tr",
      { class: e.excluded_reason === "budget_limit" ? "excluded-budget" : null },
      h("td", null, digestEl(e.item_id)),
      h("td", null, e.item_type),
      h("td", { class: "num" }, String(e.source_ref)),
      h("td", null, h("code", null, e.excluded_reason)),
    ),
  );
  return h(
    "section",
    { class: "panel", "aria-labelledby": id, "data-step": manifest.step_id },
    h("h3", { id }, title),
    h(
      "dl",
      { class: "facts" },
      h("dt", null, "token budget"),
      h("dd", null, `${manifest.token_budget} tokens; ${manifest.estimated_tokens} estimated in the prompt`),
      h("dt", null, "prefix hash"),
      h("dd", null, digestEl(manifest.prefix_hash), ` (${manifest.prefix_length} chars)`),
      h("dt", null, "compiler"),
      h("dd", null, manifest.compiler_version),
      h("dt", null, "run"),
      h("dd", null, h("code", null, manifest.run_id)),
    ),
    budgetCut.length
      ? h("p", { class: "banner error budget-trim" }, `Budget trimming: ${budgetCut.length} item(s) left out (budget_limit) to fit ${manifest.token_budget} tokens; the oldest exchanges go first, the system prompt never.`)
      : null,
    include.length
      ? table("Inclusion log: in the prompt, and why", ["Item", "Type", { label: "Source", num: true }, "Reason"], include)
      : h("p", { class: "empty" }, "Inclusion log: nothing reached a model."),
    exclude.length
      ? table("Exclusion log: available but left out, and why", ["Item", "Type", { label: "Source", num: true }, "Reason"], exclude, { class: "exclusions" })
      : h("p", { class: "hint" }, "Exclusion log: nothing was left out."),
    externalRefsTable(manifest.external_refs || []),
    manifest.artifacts && manifest.artifacts.length
      ? h("p", null, `Artifacts: ${manifest.artifacts.map((a) => a.path).join(", ")}`)
      : null,
  );
}

// Declared retrieval (case_query) and Workbench handles: what was pinned, ranked or refused.
function externalRefsTable(records) {
  if (!records.length) return null;
  const rows = records.map((r) => {
    if (r.ref_type === "case_query") {
      const scores = r.scores || {};
      const ranked = (r.candidate_chunk_ids || []).map((id) => `${shortDigest(id)} ${scores[id]}`).join(", ");
      return h(
        "tr",
        null,
        h("td", null, h("code", null, `case_query ${r.case_id}`)),
        h("td", null, `“${r.retrieval_query}” top ${r.top_k}, min score ${r.min_score}; ${r.ranking_method}/${r.ranking_version}; index `, digestEl(r.index_version)),
        h("td", null, (r.selected_chunk_ids || []).map((id) => [digestEl(id), " "])),
        h("td", null, ranked || "none"),
      );
    }
    return h(
      "tr",
      null,
      h("td", null, h("code", null, `handle ${r.handle_id} (${r.kind})`)),
      h("td", null, h("code", null, r.reason_code), r.detail && r.reason_code !== "workbench.fetched" ? ` ${r.detail}` : null),
      h("td", null, r.content_sha256 ? digestEl(r.content_sha256) : "none"),
      h("td", null, "–"),
    );
  });
  return table("External refs: retrieval and fetched handles (execution-only context)", ["Ref", "Pinned / outcome", "Selected", "Candidates (score)"], rows, { class: "external-refs" });
}

function artifactButton(correlationId, pointer, label, target) {
  const button = h("button", { type: "button", class: "secondary" }, label);
  button.addEventListener("click", async () => {
    target.replaceChildren(h("p", { class: "hint" }, "Loading…"));
    try {
      const result = await api("/ui/api/artifact", { correlation_id: correlationId, artifact_id: pointer.artifact_id });
      const text = result.media === "json" ? JSON.stringify(result.content, null, 2) : result.content;
      target.replaceChildren(h("h4", null, label, " ", h("code", null, pointer.path)), h("pre", { tabindex: "0", "aria-label": `${label} content` }, text));
    } catch (error) {
      if (error.status !== 401) target.replaceChildren(errorBox(error));
    }
  });
  return button;
}

async function contextSection(turn, events) {
  const byKind = Object.fromEntries(events.map((e) => [e.kind, e]));
  const decision = byKind.DECISION;
  const execution = byKind.EXECUTION;
  const section = h("section", { class: "panel", "aria-labelledby": "context-title", id: "context" }, h("h2", { id: "context-title" }, "Context: what the model saw, and why"));
  if (!decision) {
    section.append(h("p", { class: "empty" }, "No DECISION yet: the context is resolved when the turn is decided."));
    return section;
  }
  const p = decision.payload;
  const refs = (p.resolved_refs || []).map((r) =>
    h(
      "tr",
      null,
      h("td", null, h("code", null, r.ref_id)),
      h("td", null, r.ref_type),
      h("td", null, r.event_kind),
      h("td", { class: "num" }, String(r.event_index)),
      h("td", null, r.admitted_for === "governance" ? badge("gov", "governance") : badge("exo", r.admitted_for)),
      h("td", null, digestEl(r.event_digest)),
    ),
  );
  section.append(
    h("h3", null, "Resolved refs"),
    refs.length
      ? table(
          "Declared refs as resolved (governance: the policy may read it; execution_only: only the model sees it)",
          ["Ref", "Type", "Event", { label: "Index", num: true }, "Admitted for", "Event digest"],
          refs,
        )
      : h("p", { class: "hint" }, "No refs declared: the prompt holds this turn's message only."),
  );
  const applied = p.context_spec && p.context_spec.retrieval && p.context_spec.retrieval.normalization;
  if (applied) section.append(h("p", { class: "hint" }, `Normalization: ${applied.applied_rules.join(", ")}`));

  // Prompt layers and the pinned snapshot.
  const prompt = p.prompt;
  if (prompt) {
    const layers = (prompt.layers || []).map((l) =>
      h("tr", null, h("td", null, l.name), h("td", null, l.origin), h("td", null, l.path || l.builder || "–"), h("td", { class: "num" }, String(l.chars)), h("td", null, digestEl(l.sha256))),
    );
    section.append(
      h("h3", null, "Prompt layers"),
      h(
        "dl",
        { class: "facts" },
        h("dt", null, "pinned snapshot"),
        h("dd", null, digestEl(prompt.snapshot_digest, true)),
        h("dt", null, "pinned by"),
        h("dd", null, prompt.pinned_by_index === null || prompt.pinned_by_index === undefined ? "this turn (first turn of the thread)" : `the DECISION at index ${prompt.pinned_by_index}`),
        h("dt", null, "task / profile"),
        h("dd", null, `${prompt.task_id || "–"} / ${(prompt.profile && (prompt.profile.name || prompt.profile)) || "–"}`),
        h("dt", null, "tools offered"),
        h("dd", null, (prompt.tools_offered || []).join(", ") || "none"),
      ),
      layers.length ? table("Layers in the system prompt, in order", ["Layer", "Origin", "Source", { label: "Chars", num: true }, "sha256"], layers) : null,
      (prompt.skipped_layers || []).length ? h("p", { class: "hint" }, `Skipped layers: ${prompt.skipped_layers.map((l) => `${l.name} (${l.reason})`).join(", ")}`) : null,
    );
  } else {
    section.append(h("h3", null, "Prompt layers"), h("p", { class: "hint" }, "No prompt pack: this gateway sends no system prompt layers (TURNGATE_PROMPTS_DIR is unset)."));
  }

  // Manifests (artifacts), loaded from the store through the turn's own pointers.
  section.append(h("h3", null, "Context manifests"));
  const viewer = h("div", { class: "artifact-view", "aria-live": "polite" });
  for (const [event, title, id] of [
    [decision, "Manifest at DECISION", "manifest-decision"],
    [execution, "Manifest at EXECUTION", "manifest-execution"],
  ]) {
    if (!event || !event.payload.manifest) continue;
    try {
      const result = await api("/ui/api/artifact", { correlation_id: turn.correlation_id, artifact_id: event.payload.manifest.artifact_id });
      const rendered = manifestSection(title, result.content, id);
      if (event === decision) section.append(rendered);
      else section.append(h("details", { class: "more" }, h("summary", null, `${title} (same logs, recorded with the answer)`), rendered));
    } catch (error) {
      if (error.status === 401) throw error;
      section.append(h("h4", null, title), errorBox(error));
    }
  }
  if (p.error && p.error.missing_pointers) section.append(h("p", { class: "alert" }, `Missing pointers (SYSTEM_ERROR): ${p.error.missing_pointers.join(", ")}`));

  // Snapshots: fault snapshots, the pinned prompt snapshot.
  const links = [];
  if (execution && execution.payload.fault_snapshots) {
    for (const [name, pointer] of Object.entries(execution.payload.fault_snapshots)) links.push(artifactButton(turn.correlation_id, pointer, name.replaceAll("_", " "), viewer));
  }
  if (prompt && prompt.snapshot_artifact) links.push(artifactButton(turn.correlation_id, prompt.snapshot_artifact, "pinned prompt snapshot", viewer));
  if (execution && execution.payload.output_artifact) links.push(artifactButton(turn.correlation_id, execution.payload.output_artifact, "full answer", viewer));
  section.append(
    h("h3", null, "Snapshots"),
    links.length ? h("p", { class: "pager" }, links) : h("p", { class: "hint" }, "No fault snapshots (a provider error, a timeout or inputs.debug_snapshot stores them)."),
    viewer,
  );
  return section;
}

function eventsSection(turn, events, ledger) {
  const cards = events.map((e) => {
    const p = e.payload;
    const facts = [["index", `${e.index} (position ${e.index + 1} of ${ledger.length} in the ledger's chain)`], ["recorded", fmtTime(e.created_at)]];
    if (e.kind === "INTENT") {
      facts.push(["message", h("span", { class: "text" }, p.payload ? p.payload.message : "–")]);
      facts.push(["declared refs", (p.declared_refs || []).map((r) => `${r.ref_type}:${r.ref_id}`).join(", ") || "none"]);
      if (p.principal) facts.push(["principal", `tenant ${p.principal.tenant_id ?? "–"} · key ${p.principal.key_id ?? "–"}`]);
    } else if (e.kind === "DECISION") {
      facts.push(["decision", h("span", null, decisionBadge(p.decision), (p.reason_codes || []).map((c) => h("code", { class: "reason" }, c, " ")))]);
      facts.push(["policy", `${p.policy_id || "–"} v${p.policy_version || "–"}`]);
      facts.push(["model", p.provider ? `${p.provider} / ${p.resolved_model_id}` : `unresolved (asked ${p.requested_model_id || "default"})`]);
      if (p.error) facts.push(["error", `${p.error.code}${p.error.message ? `: ${p.error.message}` : ""}`]);
    } else if (e.kind === "EXECUTION") {
      if (p.error) facts.push(["error", h("span", null, badge("error", "ERROR"), h("code", { class: "reason" }, p.error.code), p.error.message ? ` ${p.error.message}` : "")]);
      else if (p.redacted) facts.push(["answer", h("span", null, badge("error", "REDACTED"), (p.redaction && p.redaction.reason_code) || "")]);
      else facts.push(["answer", h("span", { class: "text" }, p.output_text)]);
      facts.push(["model", `${p.provider} / ${p.model_id || p.resolved_model_id}`]);
      if (p.usage) facts.push(["tokens", `${p.usage.input_tokens ?? "?"} in / ${p.usage.output_tokens ?? "?"} out`]);
      if (p._obs && p._obs.duration_ms !== undefined) facts.push(["provider time", fmtMs(p._obs.duration_ms)]);
      if (p.tool_calls) facts.push(["tool calls", p.tool_calls.map((c) => c.name || c.tool || "?").join(", ")]);
    }
    const cls = e.kind === "DECISION" && p.decision === "DENY" ? "step denied-step" : e.kind === "EXECUTION" && (p.error || p.redacted) ? "step error-step" : "step";
    return h(
      "article",
      { class: cls, "aria-labelledby": `event-${e.index}` },
      h("h3", { id: `event-${e.index}` }, e.kind),
      dl(facts),
      h("details", null, h("summary", null, `Raw ${e.kind} event`), h("pre", { tabindex: "0" }, JSON.stringify(e, null, 2))),
    );
  });
  const missing = [];
  if (!events.some((e) => e.kind === "EXECUTION")) {
    missing.push(
      h("article", { class: "step skipped" }, h("h3", null, "EXECUTION"), turn.status === "denied" ? "Not executed: the turn was denied." : "Not recorded yet."),
    );
  }
  return h(
    "section",
    { class: "panel", "aria-labelledby": "events-title", id: "events" },
    h("h2", { id: "events-title" }, "Timeline: INTENT → DECISION → EXECUTION"),
    h("div", { class: "steps" }, cards, missing),
  );
}

function proofSection(turn, events, ledger) {
  const rows = events.map((e) =>
    h(
      "tr",
      null,
      h("th", { scope: "row" }, e.kind),
      h("td", { class: "num" }, String(e.index)),
      h("td", null, digestEl(e.digest, true)),
      h("td", null, digestEl(e.prev_event_digest, true)),
      h("td", { class: "num" }, String(e.canon_len ?? "–")),
    ),
  );
  const decision = events.find((e) => e.kind === "DECISION");
  const extra = [];
  if (decision) {
    const p = decision.payload;
    extra.push(
      h("dt", null, "context_digest"),
      h("dd", null, digestEl(p.context_digest, true)),
      h("dt", null, "context_config_digest"),
      h("dd", null, digestEl(p.boundary && p.boundary.context_config_digest, true)),
      h("dt", null, "policy config digest"),
      h("dd", null, digestEl(p.policy && p.policy.config_digest, true)),
      h("dt", null, "normative input digests"),
      h("dd", null, (p.normative_input_digests || []).length ? p.normative_input_digests.map((d) => h("div", null, digestEl(d, true))) : "none (no INTENT refs)"),
    );
    if (p.manifest) extra.push(h("dt", null, "manifest sha256"), h("dd", null, digestEl(p.manifest.sha256, true)));
  }
  return h(
    "section",
    { class: "panel", "aria-labelledby": "proof-title", id: "proof" },
    h("h2", { id: "proof-title" }, "Proof"),
    table(
      `Digests and chain links (the ledger holds ${ledger.length} events)`,
      ["Event", { label: "Index", num: true }, "Digest", "Previous event digest", { label: "Canonical bytes", num: true }],
      rows,
    ),
    extra.length ? h("dl", { class: "facts" }, extra) : null,
  );
}

async function turnView(correlationId) {
  setNav("threads");
  const gen = state.gen;
  const data = await api("/ui/api/turn", { correlation_id: correlationId });
  if (gen !== state.gen) return;
  const turn = data.summary;
  const events = data.events;
  const d = turn.decision;
  const x = turn.execution;
  let banner;
  if (turn.status === "denied") {
    banner = h("p", { class: "banner deny", id: "turn-verdict" }, "DENIED: ", d.reason_codes.map((c) => h("code", { class: "reason" }, c, " ")), d.error_code && d.error_code !== d.reason_codes[0] ? ` (${d.error_code})` : "");
  } else if (turn.status === "error") {
    banner = h("p", { class: "banner error", id: "turn-verdict" }, "ALLOWED, but the execution failed: ", h("code", { class: "reason" }, x.error.code));
  } else if (turn.status === "redacted") {
    banner = h("p", { class: "banner error", id: "turn-verdict" }, "ALLOWED; the answer was redacted: ", h("code", { class: "reason" }, x.redaction_code || ""));
  } else if (d) {
    banner = h("p", { class: "banner allow", id: "turn-verdict" }, "ALLOWED: ", d.reason_codes.map((c) => h("code", { class: "reason" }, c, " ")), x ? "" : " (executing)");
  } else {
    banner = h("p", { class: "banner pending", id: "turn-verdict" }, "Waiting for the decision.");
  }
  const workflow = turn.workflow
    ? h("p", null, "Workflow ", h("code", null, turn.workflow.workflow_id), ": ", h("a", { href: turn.workflow.url, target: "_blank", rel: "noopener noreferrer" }, "open in the Temporal UI", h("span", { class: "visually-hidden" }, " (opens in a new tab)")))
    : null;
  const view = h(
    "div",
    null,
    crumbs(["Threads", "#/threads"], [`Thread ${turn.thread_id}`, `#/thread/${enc(turn.thread_id)}`], [`Turn ${correlationId}`, null]),
    h("h1", null, "Turn ", h("code", null, correlationId)),
    banner,
    d ? shadowMark(d.shadow_disagreements || []) : null,
    h("p", { class: "hint" }, `thread ${turn.thread_id} · turn ${turn.turn_id}${turn.parent_turn_id ? ` · parent ${turn.parent_turn_id}` : ""} · actor ${turn.actor} · stream ${turn.stream_id} / ${turn.lane}`),
    workflow,
    eventsSection(turn, events, data.ledger),
  );
  show(view, `Turn ${correlationId}`);
  const refetch = debounce(() => {
    if (gen === state.gen) route();
  }, 300);
  state.view = onLive((event) => {
    if (event.correlation_id === correlationId) refetch();
  });
  const context = await contextSection(turn, events);
  if (gen !== state.gen) return;
  view.append(context, proofSection(turn, events, data.ledger), verifyPanel(turn.thread_id));
}

// --------------------------------------------------------------------------- jobs

async function jobsView() {
  setNav("jobs");
  const gen = state.gen;
  const config = state.config;
  const temporalList = `${config.temporal_ui_url}/namespaces/${enc(config.temporal_namespace)}/workflows`;
  const temporalLink = (text, href) => h("a", { href, target: "_blank", rel: "noopener noreferrer" }, text, h("span", { class: "visually-hidden" }, " (opens in a new tab)"));
  const jobs = h("div", { id: "jobs", "aria-live": "polite" }, h("p", { class: "hint" }, "Loading jobs…"));
  const runtime = h("div", { "aria-live": "polite" }, h("p", { class: "hint" }, "Loading the turn runtime…"));
  const budgets = h("div", { id: "budgets", "aria-live": "polite" });
  const view = h(
    "div",
    null,
    h("h1", null, "Jobs"),
    jobs,
    h("p", { class: "hint" }, "Every turn is a Temporal workflow too: open a turn for the link to its workflow, or browse them all in the ", temporalLink("Temporal UI", temporalList), "."),
    h("h2", null, "Turn runtime"),
    runtime,
    h("h2", null, "Budgets"),
    budgets,
  );
  show(view, "Jobs");

  // Jobs come from GET /jobs when this gateway has it (job workflows: ingest, embed, index);
  // without it the view says so. Jobs are not ledger events, so the list is polled while open.
  const loadJobs = async () => {
    let body;
    try {
      body = await api("/jobs");
    } catch (error) {
      if (error.status === 401) return;
      const absent = error.status === 404 || error.status === 405;
      jobs.replaceChildren(
        h(
          "div",
          { class: "empty", id: "jobs-empty" },
          absent
            ? h("p", null, h("strong", null, "No jobs. "), "This gateway runs no background jobs yet: its API has no /jobs endpoint (job workflows for ingest, embed and index are a later addition). When it has, they are listed here with their progress.")
            : error.status === 403
              ? h("p", null, h("strong", null, "No jobs shown: "), "this key may not read jobs (403).")
              : errorBox(error),
        ),
      );
      return;
    }
    const list = Array.isArray(body) ? body : body.jobs || [];
    if (!list.length) {
      jobs.replaceChildren(h("div", { class: "empty", id: "jobs-empty" }, h("p", null, h("strong", null, "No jobs yet: "), "none has been submitted.")));
      return;
    }
    const rows = list.map((job) =>
      h(
        "tr",
        { "data-job": job.id },
        h("th", { scope: "row" }, h("code", null, job.id)),
        h("td", null, job.type || "–"),
        h("td", null, job.case_id || "–"),
        h("td", null, badge(job.state === "failed" || job.state === "timed_out" ? "error" : job.state === "completed" ? "allow" : "pending", job.state || "?")),
        h(
          "td",
          null,
          h("progress", { max: "100", value: String(job.progress ?? 0), "aria-label": `progress of ${job.id}` }),
          ` ${job.progress ?? 0}% (${job.items_done ?? 0}/${job.items_total ?? 0})`,
        ),
        h("td", null, fmtTime(job.submitted_at || job.started_at)),
        h("td", null, job.error ? `${job.error.type || job.error.code || "error"}: ${job.error.message || ""}` : "–"),
        h(
          "td",
          null,
          h("a", { href: `${temporalList}/${enc(job.id)}`, target: "_blank", rel: "noopener noreferrer" }, "workflow", h("span", { class: "visually-hidden" }, ` of ${job.id} (opens in a new tab)`)),
        ),
      ),
    );
    jobs.replaceChildren(
      table(`${list.length} job(s), newest first; refreshed every 5 s`, ["Job", "Type", "Case", "State", "Progress", "Submitted", "Error", "Temporal"], rows),
    );
  };
  await loadJobs();
  if (gen !== state.gen) return;
  const timer = setInterval(() => loadJobs().catch(() => {}), 5000);
  state.view = () => clearInterval(timer);

  try {
    const status = await api("/status");
    const jr = status.job_runtime || {};
    runtime.replaceChildren(
      h(
        "dl",
        { class: "facts" },
        h("dt", null, "Temporal"),
        h("dd", null, status.temporal && status.temporal.reachable ? "reachable" : "not reachable"),
        h("dt", null, "running turns"),
        h("dd", null, String((jr.active_counts || {}).turns ?? "–")),
        h("dt", null, "turns allowed and waiting for or in a provider call"),
        h("dd", null, String((jr.queue_sizes || {})["chat.message"] ?? "–")),
        h("dt", null, "provider concurrency per worker"),
        h("dd", null, String((jr.llm || {}).concurrency ?? "–")),
        h("dt", null, "ledger length"),
        h("dd", null, String((status.ledger || {}).length ?? "–")),
      ),
    );
    budgets.replaceChildren(budgetsSection(policyUi(), status.budgets));
  } catch (error) {
    if (error.status !== 401) runtime.replaceChildren(errorBox(error));
  }
}

// The helpers the Policies and Reviews views (policies.js, reviews.js) render with.
function policyUi() {
  return { h, show, setNav, table, dl, decisionBadge, digestEl, fmtTime, errorBox, enc, api, authHeaders, ApiError };
}

// --------------------------------------------------------------------------- start

async function start() {
  $("#sign-out").addEventListener("click", () => signOut("Signed out."));
  $("#skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    $("#main").focus();
  });
  window.addEventListener("hashchange", route);
  const saved = sessionStorage.getItem(KEY_STORAGE);
  if (saved === null) {
    renderLogin();
    return;
  }
  try {
    await signIn(saved);
  } catch (error) {
    if (error.status !== 401) signOut(`Could not reach the API: ${error.message}`);
    return;
  }
  route();
}

start();
