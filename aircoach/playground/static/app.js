// The study page: what a student sees, driven by the public HTTP API only.
// Text from the server goes in through textContent; the model's Markdown goes through marked
// and then DOMPurify (no style, no image, no form, only http(s) links), never raw innerHTML.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const $ = (id) => document.getElementById(id);
const OFFLINE_MARK = "[modello offline]";
// Rejoins of a turn whose stream dropped before `done` (after 0, 2 and 4 s).
const REJOINS = 3;
// A section of the manual as the answers cite it: `§ 3.2`, maybe `§ 3.2 (Strumenti di volo)`.
const CITATION = /§\s?(\d{1,2}\.\d{1,2})(\s\([^()\n]{1,80}\))?/g;
// HTML written in the model's text is shown as text: parsing it at all (even in DOMPurify's
// inert document) would report its `style` and `on*` attributes as CSP violations.
const escapeHtml = (text) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const md = new Marked({ async: false, gfm: true, breaks: true });
md.use({ renderer: { html: ({ text }) => escapeHtml(text) } });
const PURIFY = {
  FORBID_TAGS: ["style", "img", "svg", "math", "form", "input", "button", "textarea", "select", "iframe", "video", "audio", "picture", "source"],
  FORBID_ATTR: ["style", "class", "id", "srcset", "target"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

const state = {
  token: null, // in memory only: gone when the page closes
  permissions: [],
  config: { dev_sign_in: false, admin_permission: "admin:docs" },
  tools: [],
  switches: {},
  chapters: [], // [{capitolo, titolo, domande}] of the course
  historyCursor: null,
  turnsCursor: null, // `next_cursor` of the chat on screen's stored turns: null when none is older
  busy: false, // a turn is streaming or the panels after it are refreshing
  queued: [], // [{query, quiz}] made while busy: sent in order, one turn each, when the turn ends
  reviewCursor: null, // `next_cursor` of the review page on screen: null on the last one
  opener: null, // what opened the side panel on screen: focus goes back there
  conversation: null, // the chat on screen: null is the user's default conversation
  exam: null, // the exam being taken: {id, domande, scadenza, soglia}
  examTimer: null,
  // [{g, view, box}] gradings shown as cards of their own, oldest first: their question's
  // card was not on screen, and may come with older turns.
  looseGradings: [],
};

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function notice(text, kind = "error", where = $("notices")) {
  const box = el("div", { class: `notice notice-${kind}`, role: kind === "error" ? "alert" : "status" }, text);
  where.append(box);
  return box;
}

function queryNote(text) {
  $("query-note").textContent = text;
  $("query-note").hidden = !text;
}

function clearNotices() {
  $("notices").replaceChildren();
}

function announce(text) {
  $("live").textContent = text;
}

// ---- HTTP

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function errorOf(response) {
  let message = `Errore ${response.status}`;
  try {
    const body = await response.json();
    if (body.message) message = body.message;
    else if (Array.isArray(body.detail) && body.detail[0]) message = `${body.detail[0].loc.join(".")}: ${body.detail[0].msg}`;
  } catch {
    // not JSON: keep the status
  }
  return new HttpError(response.status, message);
}

async function api(path, options = {}) {
  // The page is Italian: so are the server's messages.
  const headers = { Accept: "application/json", "Accept-Language": "it", ...(options.headers || {}) };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (options.json !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.json !== undefined ? JSON.stringify(options.json) : undefined,
  });
  if (!response.ok) throw await errorOf(response);
  return options.raw ? response : response.json();
}

// What went wrong, in Italian: the browser's own words for a network failure are English
// ("Failed to fetch").
function problemOf(error) {
  return error instanceof HttpError ? error.message : "Errore di rete: la connessione si è interrotta. Controlla la rete e riprova.";
}

function failed(error) {
  if (error instanceof HttpError && error.status === 401) {
    signOut();
    notice("Accesso richiesto: il token manca, è scaduto o non è valido. Accedi di nuovo.");
  } else {
    notice(problemOf(error));
  }
}

// ---- sign-in

function claimsOf(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0))));
  } catch {
    return {};
  }
}

async function signIn(token) {
  const claims = claimsOf(token);
  state.token = token;
  state.permissions = Array.isArray(claims.permissions) ? claims.permissions : [];
  clearNotices();
  $("who-name").textContent = claims.sub ? `Utente: ${claims.sub}` : "Utente con token";
  $("nav").hidden = false;
  $("signin").hidden = true;
  $("app").hidden = false;
  $("docs-panel").hidden = !state.permissions.includes(state.config.admin_permission);
  $("turns").replaceChildren();
  showOlderTurns(null);
  $("welcome").hidden = false;
  state.conversation = null;
  stopExam();
  showView("chat");
  // Where the student left off: the default conversation's last turns. They never hold the
  // rest of the page, and a message sent before they arrive stays after them.
  loadTurns(false).catch((error) => {
    if (!(error instanceof HttpError && error.status === 401)) failed(error); // the calls below say it once
  });
  try {
    await loadTools();
    await Promise.all([loadChapters(), loadHistory(true), loadConversations(), $("docs-panel").hidden ? null : loadDocsVersion()]);
    await loadProgress();
    // The box is sticky, always on screen: focused with a scroll, it moved the page off the
    // newest turn (the scroll-padding-bottom counts the box itself).
    $("query").focus({ preventScroll: true });
  } catch (error) {
    failed(error);
  }
}

function signOut() {
  state.token = null;
  state.queued = [];
  state.permissions = [];
  state.conversation = null;
  stopExam();
  closePanels();
  $("nav").hidden = true;
  $("app").hidden = true;
  $("signin").hidden = false;
}

async function devSignIn(event) {
  event.preventDefault();
  try {
    const body = await api("/api/dev/token", {
      method: "POST",
      json: { name: $("dev-name").value.trim(), admin: $("dev-admin").checked },
    });
    await signIn(body.access_token);
  } catch (error) {
    // The API's 422 names its field (`name`); the student sees the box's label.
    if (error instanceof HttpError && error.status === 422) notice(DEV_NAME_INVALID);
    else failed(error);
  }
}

const DEV_NAME_INVALID =
  "Nome dell'utente di prova non valido: usa lettere, cifre, spazi, punti, apostrofi o trattini (al massimo 40 caratteri), iniziando con una lettera o una cifra.";

// ---- views and side panels

const VIEWS = { chat: "nav-chat", exam: "nav-exam", review: "nav-review", progress: "nav-progress" };

// One view at a time: the chat, the exam, the review or the progress.
function showView(name) {
  for (const [view, nav] of Object.entries(VIEWS)) {
    $(`${view}-view`).hidden = view !== name;
    if (view === name) $(nav).setAttribute("aria-current", "page");
    else $(nav).removeAttribute("aria-current");
  }
  if (name === "progress") {
    $("progress-title").focus();
    loadProgress().catch(failed);
  } else if (name === "exam") {
    $("exam-title").focus();
    if (!state.exam && $("exam-result").hidden) loadExams().catch(failed);
  } else if (name === "review") {
    $("review-title").focus();
    loadReview().catch(failed);
  }
}

// One side panel at a time (the settings drawer or a manual section); a closed one is
// `hidden`, not moved out of view.
function openPanel(id, opener) {
  closePanels(false);
  state.opener = opener || document.activeElement;
  $(id).hidden = false;
  $("nav-settings").setAttribute("aria-expanded", String(id === "settings"));
  $(id).querySelector("h2").focus();
}

function closePanels(restoreFocus = true) {
  const open = ["settings", "manual-panel"].some((id) => !$(id).hidden);
  $("settings").hidden = true;
  $("manual-panel").hidden = true;
  $("nav-settings").setAttribute("aria-expanded", "false");
  if (open && restoreFocus && state.opener && state.opener.isConnected) state.opener.focus();
  if (restoreFocus) state.opener = null;
}

async function openSection(reference, opener) {
  try {
    const section = await api(`/api/manual/sections/${encodeURIComponent(reference)}`);
    $("manual-title").textContent = `§ ${section.riferimento} ${section.titolo}`;
    $("manual-chapter").textContent = section.materia ? `Capitolo ${section.capitolo} · ${section.materia}` : "";
    $("manual-text").replaceChildren(el("p", { text: section.testo }));
    openPanel("manual-panel", opener);
  } catch (error) {
    if (error instanceof HttpError && error.status === 404) notice(`La sezione § ${reference} non è nel manuale del corso.`, "warning");
    else failed(error);
  }
}

// ---- tools (in the settings drawer)

async function loadTools() {
  state.tools = await api("/api/tools");
  state.switches = Object.fromEntries(state.tools.map((t) => [t.name, t.available && t.default_enabled]));
  const bar = $("toolbar");
  bar.replaceChildren();
  for (const tool of state.tools) {
    const box = el("input", {
      type: "checkbox",
      id: `tool-${tool.name}`,
      "data-tool": tool.name,
      "aria-describedby": tool.available ? null : `reason-${tool.name}`,
      disabled: !tool.available,
      onchange: (e) => (state.switches[tool.name] = e.target.checked),
    });
    box.checked = state.switches[tool.name];
    const item = el("label", { class: tool.available ? "tool" : "tool tool-off", title: tool.description }, box, tool.label);
    if (!tool.available) item.append(el("small", { id: `reason-${tool.name}`, class: "reason", text: tool.unavailable_reason || "Non disponibile" }));
    bar.append(item);
  }
}

async function loadChapters() {
  const list = await api("/api/quiz/chapters");
  state.chapters = list.items || [];
  $("chapter-picker").replaceChildren(
    ...state.chapters.map((c) =>
      el("li", {}, el("button", { type: "button", class: "chapter-choice", "data-capitolo": c.capitolo, onclick: () => askChapter(c.capitolo) }, `${c.capitolo}. ${c.titolo}`)),
    ),
  );
}

function askChapter(capitolo) {
  $("chapter-picker").hidden = true;
  $("action-chapter").setAttribute("aria-expanded", "false");
  sendWhenFree(`Dammi una domanda del capitolo ${capitolo}`);
}

// ---- Markdown, citations

function safeUrl(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function citationLink(reference, text) {
  return el("a", { href: `#manuale-${reference}`, class: "citation", "data-ref": reference, text });
}

// Every `§ N.M` in the text nodes of `root` (not in a link or code) becomes a link opening
// that section of the manual.
function linkCitations(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement?.closest("a, code, pre") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  const nodes = [];
  while (walker.nextNode()) if (walker.currentNode.nodeValue.includes("§")) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const text = node.nodeValue;
    const parts = [];
    let last = 0;
    for (const match of text.matchAll(CITATION)) {
      parts.push(text.slice(last, match.index), citationLink(match[1], match[0]));
      last = match.index + match[0].length;
    }
    if (!parts.length) continue;
    parts.push(text.slice(last));
    node.replaceWith(...parts.filter((p) => p !== ""));
  }
  return root;
}

function markdown(text) {
  const fragment = DOMPurify.sanitize(md.parse(text), PURIFY);
  for (const link of fragment.querySelectorAll("a")) {
    const url = safeUrl(link.getAttribute("href"));
    if (url) {
      link.setAttribute("href", url);
      link.setAttribute("target", "_blank");
      link.setAttribute("rel", "noopener noreferrer");
    } else {
      link.replaceWith(...link.childNodes);
    }
  }
  return linkCitations(fragment);
}

function withoutOfflineMark(text) {
  const trimmed = text.trimStart();
  return trimmed.startsWith(OFFLINE_MARK) ? { offline: true, text: trimmed.slice(OFFLINE_MARK.length).trimStart() } : { offline: false, text };
}

// The doubted passages of an answer, when the grounding verdict gives their offsets.
function markDoubted(view) {
  for (const passage of view.doubted) {
    const walker = document.createTreeWalker(view.answer, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      const at = node.nodeValue.indexOf(passage);
      if (at < 0 || node.parentElement.closest("mark")) continue;
      const rest = node.splitText(at);
      rest.splitText(passage.length);
      rest.replaceWith(el("mark", { class: "doubted", title: "Non trova riscontro nelle fonti" }, rest.nodeValue));
      break;
    }
  }
}

// ---- the chat

// A new turn comes up to the top of the screen, its question first, and follows as its answer
// arrives, until the student scrolls the page themselves (`follow` goes false) or the turn
// grades a card above it. Scrolled to its end while still empty, a turn stayed under the
// sticky message box on a phone.
function turnView(query, follow = true) {
  $("welcome").hidden = true;
  const answer = el("div", { class: "answer" });
  const extras = el("div", { class: "extras" });
  const sources = el("div", { class: "turn-sources" }); // after the answer: it comes first
  const footer = el("footer", { class: "turn-footer muted small" });
  const item = el("li", { class: "turn" }, el("p", { class: "human", text: query }), extras, answer, sources, footer);
  $("turns").append(item);
  const view = { item, answer, extras, sources, footer, raw: "", offline: false, doubted: [], follow };
  keepInView(view);
  return view;
}

function keepInView(view) {
  if (view.follow && view.item.getBoundingClientRect().top > 0) view.item.scrollIntoView({ block: "start" });
}

function renderAnswer(view) {
  const { offline, text } = withoutOfflineMark(view.raw);
  view.offline = offline;
  view.answer.replaceChildren(markdown(text));
  markDoubted(view);
}

// While an answer arrives the chat takes no other message, and cannot be left: the buttons
// that would do it are disabled (a click on them is not silently lost).
function setBusy(busy) {
  state.busy = busy;
  $("send").disabled = busy;
  $("new-chat").disabled = busy;
  for (const button of $("conversations").querySelectorAll("button")) button.disabled = busy;
}

// `quiz` ({card, q, letter} for a quiz card's `la <lettera>`, {card, q} for its "Salta"): a
// card whose choice ends without grading it, or whose skip brings no new question, opens
// again.
async function send(query, quiz = null) {
  if (state.busy || !query.trim()) return;
  setBusy(true);
  clearNotices();
  showView("chat");
  // A choice is graded in its card, where the student is looking: its turn is not followed.
  const view = turnView(query, !quiz?.letter);
  const stopFollowing = () => (view.follow = false);
  for (const gesture of ["wheel", "touchmove"]) window.addEventListener(gesture, stopFollowing, { passive: true });
  announce("Il coach sta scrivendo…");
  const started = performance.now();
  let turnId = null;
  let last = 0; // the id of the last event read: a rejoin goes on after it
  let ended = false;
  let problem = null; // why the turn failed, in Italian
  let failure = null; // the message of the turn's `error` event: the model or the store failed
  const read = async (response) => {
    for await (const { id, data } of sseEvents(response)) {
      if (id) last = id;
      render(view, data, started);
      if (data.type === "error") failure = data.message;
      if (data.type === "done") ended = true;
    }
  };
  try {
    const response = await api("/api/stream_query", {
      method: "POST",
      raw: true,
      headers: { Accept: "text/event-stream" },
      json: { query, tools: { ...state.switches }, ...(state.conversation ? { conversation_id: state.conversation } : {}) },
    });
    view.requestId = response.headers.get("X-Request-ID");
    turnId = response.headers.get("X-Turn-ID");
    if (turnId) view.item.dataset.turn = turnId;
    try {
      await read(response);
    } catch (error) {
      if (!turnId || !state.token) throw error;
    }
    // The connection dropped before `done` (a phone losing its signal): the turn goes on on
    // the server; rejoin it after the last event read (docs/http.md "Rejoining a turn").
    for (let attempt = 0; !ended && turnId && state.token && attempt < REJOINS; attempt++) {
      if (attempt) await new Promise((resolve) => setTimeout(resolve, 1000 * 2 ** attempt));
      try {
        await read(await api(`/api/turns/${encodeURIComponent(turnId)}/events`, { raw: true, headers: { Accept: "text/event-stream", "Last-Event-ID": String(last) } }));
      } catch (error) {
        if (error instanceof HttpError) throw error;
      }
    }
    if (!ended) throw new TypeError("connessione interrotta");
  } catch (error) {
    view.item.classList.add("turn-failed");
    problem = problemOf(error);
    // Said in the turn, where the student is looking (the page's notices sit at its top, off
    // a phone's screen); a lost sign-in goes back to the sign-in, which says why.
    if (error instanceof HttpError && error.status === 401) failed(error);
    else {
      notice(problem, "error", view.extras).classList.add("small", "turn-outcome");
      keepInView(view);
    }
  } finally {
    setBusy(false);
    for (const gesture of ["wheel", "touchmove"]) window.removeEventListener(gesture, stopFollowing);
  }
  if (quiz && state.token) {
    if (quiz.letter && !quiz.card.querySelector(".result")) reopenCard(quiz, problem || failure);
    // A skip happened when its turn brought a new question, even one followed by an `error`
    // (the store refused the turn) or a lost connection: that question is there to answer.
    // Without one (refused, failed, text only, interrupted) the card is not skipped.
    if (!quiz.letter && !view.item.querySelector("article.quiz")) unskipCard(quiz, problem || failure || "il coach non ha mandato una nuova domanda.");
  }
  // The panels follow the turn; meanwhile the chat takes the next message or a new chat.
  Promise.all([loadProgress(), loadHistory(true), loadConversations()]).catch(failed);
  const queued = state.queued.shift();
  if (queued && state.token) send(queued.query, queued.quiz);
}

// A choice or a button in a card is never lost: made while the previous answer is still
// arriving (or the panels after it refreshing), it is sent as soon as that turn ends.
function sendWhenFree(query, quiz = null) {
  if (state.busy) state.queued.push({ query, quiz });
  else send(query, quiz);
}

// SSE over POST: EventSource only does GET, so read the body and split it into messages;
// each `{id, data}` (`id`: the event's number in the turn, 0 for none).
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const lines = buffer.slice(0, end).split(/\r?\n/);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = lines
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      const id = lines.find((line) => line.startsWith("id:"));
      if (data) yield { id: id ? Number(id.slice(3).trim()) || 0 : 0, data: JSON.parse(data) };
    }
  }
}

function render(view, event, started) {
  switch (event.type) {
    case "agent_message":
      view.raw += event.content;
      renderAnswer(view);
      break;
    case "tool_result": {
      const card = toolCard(event, view);
      if (card) (card.classList.contains("sources") ? view.sources : view.extras).append(card);
      // A grading carries the progress after it: the panel shows it before the answer ends.
      if (event.data && event.data.progresso) renderProgress(event.data.progresso);
      break;
    }
    case "error":
      notice(event.message, "error", view.extras);
      break;
    case "grounding":
      grounding(view, event);
      break;
    case "done":
      finish(view, event, started);
      break;
  }
  keepInView(view);
}

function grounding(view, event) {
  if (!event.unverified || !event.unverified.length) return;
  const box = notice("Attenzione: alcune affermazioni non trovano riscontro nelle fonti.", "warning", view.extras);
  box.append(el("ul", {}, ...event.unverified.map((u) => el("li", { text: typeof u === "string" ? u : u.text || JSON.stringify(u) }))));
  // An unverified citation's `sentence` gives the offsets of the sentence that cites it in
  // the answer, in code points (a JavaScript string counts UTF-16 units): mark that sentence.
  const points = Array.from(view.raw);
  for (const c of event.citations || []) {
    const { start, end } = c.sentence || {};
    if (c.verified === false && Number.isInteger(start) && Number.isInteger(end) && end > start) {
      const passage = withoutOfflineMark(points.slice(start, end).join("")).text.trim();
      if (passage) view.doubted.push(passage);
    }
  }
  if (view.doubted.length) renderAnswer(view);
}

function finish(view, event, started) {
  // A failed turn said why in its `error` event; a stopped one sends none.
  if (event.status === "interrupted" || event.status === "cancelled") view.extras.append(outcomeMark("interrupted"));
  const seconds = ((performance.now() - started) / 1000).toFixed(1).replace(".", ",");
  if (view.offline) view.footer.append(el("span", { class: "badge", title: "Risposta del modello di prova, senza intelligenza artificiale" }, "modello offline"));
  view.footer.append(el("span", { class: "elapsed", text: `${seconds} s` }));
  view.item.classList.add("turn-done");
  $("tech-model").textContent = event.model || "—";
  $("tech-prompt").textContent = event.prompt_version || "—";
  $("tech-context").textContent = String(event.context_turns ?? "—");
  $("tech-request").textContent = view.requestId || "—";
  $("tech-time").textContent = `${seconds} s`;
  $("docs-version").textContent = event.prompt_version;
  const said = view.answer.textContent.trim();
  announce(said ? `Risposta del coach: ${said.slice(0, 300)}` : "Risposta completata.");
}

// A turn that did not end `ok`, live or stored. A stored turn keeps its status and, when it
// failed, its error's code, not its message (docs/http.md): the mark says why when the page
// knows the code (in the past: the live message's "riprova tra poco" is stale by now), and
// what the student can do.
const OUTCOMES = {
  error: { kind: "error", text: "Risposta non completata per un errore: invia di nuovo la domanda." },
  interrupted: { kind: "warning", text: "Risposta interrotta prima della fine: invia di nuovo la domanda." },
};
const ERROR_REASONS = {
  model_unavailable: "Risposta non completata: il modello linguistico non ha risposto. Invia di nuovo la domanda.",
};

function outcomeMark(status, errorCode) {
  const outcome = OUTCOMES[status];
  if (!outcome) return null;
  const text = (status === "error" && ERROR_REASONS[errorCode]) || outcome.text;
  return el("p", { class: `notice notice-${outcome.kind} small turn-outcome`, "data-status": status, text });
}

function labelOf(name) {
  const tool = state.tools.find((t) => t.name === name);
  return tool ? tool.label : name;
}

// `cardOf(g)`: the question card a grading belongs to, if it is shown.
function toolCard(event, view, cardOf = lastCardOf) {
  const data = event.data || {};
  const questions = data.questions || (data.question ? [data.question] : []);
  if (event.tool_name === "domanda_teoria" && questions.length) {
    return el("div", { class: "cards" }, ...questions.map(questionCard));
  }
  if (event.tool_name === "domanda_teoria" && data.esame && Array.isArray(data.esame.domande)) return chatExamCard(data.esame, data.nota);
  if (event.tool_name === "verifica_risposta" && "corretta" in data) return grading(data, view, cardOf(data));
  const items = Array.isArray(data.items) ? data.items : Array.isArray(data.results) ? data.results : null;
  if (data.success === false || data.error) {
    // `messaggio` is written for the student and names the tool; `error` is the model's text.
    if (data.messaggio) return el("div", { class: "card card-error" }, data.messaggio);
    return el("div", { class: "card card-error" }, `${labelOf(event.tool_name)}: ${data.error || "errore"}`);
  }
  if (items) return items.length ? sourceCards(event.tool_name, items) : null;
  // Any other sentence for the student (the quiz's "no question matched") has the same name.
  if (typeof data.messaggio === "string" && data.messaggio) return el("p", { class: "notice notice-info tool-note", text: data.messaggio });
  return null; // other tools' internals belong to the settings, not to the student's page
}

function questionCard(q) {
  const options = el("div", { class: "options", role: "group", "aria-label": "Risposte" });
  const card = el(
    "article",
    { class: "card quiz", "data-question": `${q.capitolo}-${q.numero}`, "aria-label": `Domanda ${q.numero} del capitolo ${q.capitolo}` },
    el("header", { class: "muted small", text: `Capitolo ${q.capitolo} · domanda ${q.numero}${q.argomento ? ` · ${q.argomento}` : ""}${q.difficolta ? ` · ${q.difficolta}` : ""}` }),
    el("p", { class: "question", text: q.testo }),
    options,
    el("div", { class: "grading", "aria-live": "polite" }),
    el("div", { class: "card-actions" }),
  );
  card.querySelector(".card-actions").append(skipButton(card, q));
  card.dataset.testo = q.testo;
  for (const [letter, text] of Object.entries(q.risposte || {})) {
    options.append(
      el("button", {
        type: "button",
        class: "option",
        "data-letter": letter,
        onclick: () => {
          closeCard(card);
          card.querySelector(`[data-letter="${CSS.escape(letter)}"]`).classList.add("chosen");
          card.querySelector(".grading").replaceChildren();
          sendWhenFree(`la ${letter}`, { card, q, letter });
        },
      }, el("b", { text: `${letter}) ` }), text),
    );
  }
  return card;
}

// A mock exam started in the chat: its questions as text, answered in messages ("1a 2c").
// `nota`: why it has not the size asked ("Hai chiesto 100 domande, ma ..."), in the student's
// words; the turn ends with the exam, so the coach never says it.
function chatExamCard(esame, nota) {
  const total = esame.domande.length;
  return el("article", { class: "card chat-exam", "data-exam": esame.id, "aria-label": "Simulazione d'esame" },
    el("header", { class: "muted small", text: `Simulazione d'esame · ${total} domande` }),
    typeof nota === "string" && nota ? el("p", { class: "notice notice-info chat-exam-note", text: nota }) : null,
    el("ol", { class: "chat-exam-questions" },
      ...esame.domande.map((q) =>
        el("li", { "data-question": `${q.capitolo}-${q.numero}` },
          el("p", { class: "question", text: q.testo }),
          el("ul", { class: "chat-exam-options" }, ...Object.entries(q.risposte || {}).map(([letter, text]) => el("li", {}, el("b", { text: `${letter}) ` }), text))),
        )),
    ),
    el("p", { class: "muted small", text: "Rispondi con il numero e la lettera, per esempio «1a 2c», anche in più messaggi." }),
  );
}

function skipButton(card, q) {
  return el("button", { type: "button", class: "secondary skip-question", onclick: () => skipQuestion(card, q) }, "Salta");
}

function closeCard(card) {
  for (const b of card.querySelectorAll("button.option")) b.disabled = true;
  card.querySelector(".card-actions").replaceChildren();
}

// A choice whose turn ended without a grading (the request refused, the connection lost for
// good, the model failed): the card takes a choice again and says what happened.
function reopenCard({ card, q, letter }, problem) {
  const chosen = card.querySelector("button.option.chosen");
  // Disabled, the chosen option lost the focus: a keyboard user gets it back there.
  const refocus = chosen && (!document.activeElement || document.activeElement === document.body);
  chosen?.classList.remove("chosen");
  openCard(card, q, `La risposta «${letter}» non è stata valutata: ${problem || "il coach non l'ha corretta."} Scegli di nuovo la risposta.`);
  if (refocus) chosen.focus();
}

// A skip whose turn brought no new question (the request refused, the connection lost for
// good, the model failed, only text, interrupted): the card is not skipped; it takes a
// choice or a skip again and says what happened.
function unskipCard({ card, q }, problem) {
  // "Salta" went with the skip, and the focus with it: a keyboard user gets it back there.
  const refocus = !document.activeElement || document.activeElement === document.body;
  card.classList.remove("skipped");
  openCard(card, q, `La domanda non è stata saltata: ${problem} Rispondi o salta di nuovo.`);
  if (refocus) card.querySelector("button.skip-question").focus();
}

function openCard(card, q, why) {
  for (const b of card.querySelectorAll("button.option")) b.disabled = false;
  card.querySelector(".card-actions").replaceChildren(skipButton(card, q));
  card.querySelector(".grading").replaceChildren(el("p", { class: "notice notice-warning", text: why }));
}

function skipQuestion(card, q) {
  closeCard(card);
  card.classList.add("skipped");
  card.querySelector(".grading").replaceChildren(el("p", { class: "muted small", text: "Domanda saltata." }));
  sendWhenFree(`Dammi un'altra domanda del capitolo ${q.capitolo}`, { card, q });
}

function lastCardOf(g) {
  const cards = document.querySelectorAll(`article.quiz[data-question="${CSS.escape(`${g.capitolo}-${g.numero}`)}"]`);
  return cards[cards.length - 1];
}

// The result shown once: in the question's card when there is one (right option green, a
// wrong choice red), else as a card of the turn.
function grading(g, view, card) {
  const result = el(
    "div",
    { class: g.corretta ? "result right" : "result wrong", "data-corretta": String(g.corretta) },
    el("p", {},
      el("strong", { text: g.corretta ? "✔ Risposta corretta" : "✘ Risposta sbagliata" }),
      el("span", { text: ` · hai risposto ${g.risposta}, la risposta corretta è ${g.risposta_corretta}` })),
    g.spiegazione ? el("p", { class: "explanation" }, linkCitations(el("span", { text: g.spiegazione }))) : null,
    el("p", {}, el("a", { href: "#manuale", class: "manual-link", onclick: (e) => { e.preventDefault(); openSectionFor(g, card, e.currentTarget); } }, "Rileggi la sezione del manuale")),
    el("div", { class: "card-actions" },
      el("button", { type: "button", class: "next-question", onclick: () => sendWhenFree(`Dammi un'altra domanda del capitolo ${g.capitolo}`) }, "Prossima domanda"),
      el("button", { type: "button", class: "secondary why", onclick: () => sendWhenFree(whyQuestion(g, card)) }, "Perché?"),
    ),
  );
  if (!card) {
    const box = el("div", { class: "card grading-card" }, el("header", { class: "muted small", text: `Capitolo ${g.capitolo} · domanda ${g.numero}` }), result);
    state.looseGradings.push({ g, view, box });
    return box;
  }
  view.follow = false; // the result is in the card above: that is where the student reads
  closeCard(card);
  card.querySelector(`[data-letter="${CSS.escape(String(g.risposta_corretta))}"]`)?.classList.add("correct");
  if (!g.corretta) card.querySelector(`[data-letter="${CSS.escape(String(g.risposta))}"]`)?.classList.add("wrong");
  card.querySelector(".grading").replaceChildren(result);
  // The result is in the card: the coach's words on it are there if wanted, not a second copy.
  const comment = el("details", { class: "coach-comment" }, el("summary", { class: "small", text: "Commento del coach" }));
  view.answer.replaceWith(comment);
  comment.append(view.answer);
  if (result.isConnected) result.scrollIntoView({ block: "nearest" });
  return null;
}

// "Perché?" asks about the question's subject in words (a letter alone would read as an answer).
function whyQuestion(g, card) {
  const right = card?.querySelector(`[data-letter="${CSS.escape(String(g.risposta_corretta))}"]`);
  const option = right ? right.textContent.replace(/^\s*\w\)\s*/, "").replace(/\s*✔$/, "") : "";
  const question = card?.dataset.testo || `la domanda ${g.numero} del capitolo ${g.capitolo}`;
  return `Spiegami perché: ${question} ${option}`.trim().slice(0, 600);
}

// The section that teaches a graded question: the best of its chapter for its text.
async function openSectionFor(g, card, opener) {
  const testo = `${card?.dataset.testo || ""} ${g.spiegazione || ""}`.trim().slice(0, 500);
  try {
    const params = new URLSearchParams({ capitolo: String(g.capitolo), testo, limit: "1" });
    const found = await api(`/api/manual/sections?${params}`);
    if (found.items.length) await openSection(found.items[0].riferimento, opener);
    else notice(`Nessuna sezione del capitolo ${g.capitolo} tratta questa domanda.`, "warning");
  } catch (error) {
    failed(error);
  }
}

function shortened(text, limit) {
  if (text.length <= limit) return text;
  const cut = text.slice(0, limit);
  return `${cut.slice(0, cut.lastIndexOf(" ") > limit / 2 ? cut.lastIndexOf(" ") : limit)}…`;
}

function sourceCards(toolName, items) {
  const list = el("section", { class: "sources", "aria-label": `Fonti: ${labelOf(toolName)}` }, el("h3", { class: "small muted", text: "Fonti" }));
  for (const item of items.slice(0, 6)) {
    const snippet = shortened(String(item.testo || item.snippet || item.content || item.text || ""), 180);
    let heading;
    if (item.riferimento && /^\d{1,2}\.\d{1,2}$/.test(item.riferimento)) {
      heading = citationLink(item.riferimento, `§ ${item.riferimento} ${item.titolo || ""}`.trim());
    } else {
      const url = safeUrl(item.url);
      const title = item.titolo || item.title || item.riferimento || item.url || labelOf(toolName);
      heading = url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: title }) : el("strong", { text: title });
    }
    list.append(el("article", { class: "card source" }, heading, snippet ? el("p", { class: "small", text: snippet }) : null));
  }
  return list;
}

// ---- progress and history

function percent(part, whole) {
  return whole ? Math.round((100 * part) / whole) : 0;
}

async function loadProgress() {
  renderProgress(await api("/api/progress"));
}

function renderProgress(progress) {
  const answered = Object.fromEntries((progress.capitoli || []).map((c) => [c.capitolo, c]));
  const chapters = state.chapters.length ? state.chapters : progress.capitoli || [];
  const box = $("progress");
  box.replaceChildren(
    el("p", { class: "summary", text: `Risposte: ${progress.risposte} · corrette: ${progress.corrette}${progress.risposte ? ` (${percent(progress.corrette, progress.risposte)} %)` : ""}` }),
  );
  const weak = new Set((progress.deboli || []).map((d) => d.capitolo ?? d));
  const list = el("ul", { class: "chapters" });
  for (const chapter of chapters) {
    const c = answered[chapter.capitolo] || { risposte: 0, corrette: 0 };
    const share = percent(c.corrette, c.risposte);
    // Fields the learning-loop API may add (seen, mastered, readiness) show when present.
    const extra = [
      c.viste !== undefined ? `viste ${c.viste}` : null,
      c.padroneggiate !== undefined ? `padroneggiate ${c.padroneggiate}` : null,
      c.prontezza !== undefined ? `prontezza ${Math.round(100 * c.prontezza)} %` : null,
    ].filter(Boolean);
    list.append(
      el("li", { class: weak.has(chapter.capitolo) ? "chapter weak" : "chapter", "data-capitolo": chapter.capitolo, "data-risposte": c.risposte, "data-corrette": c.corrette },
        el("p", { class: "chapter-title" }, `${chapter.capitolo}. ${chapter.titolo}`, weak.has(chapter.capitolo) ? el("span", { class: "tag", text: "da ripassare" }) : null),
        el("progress", { max: "100", value: String(share), "aria-label": `Capitolo ${chapter.capitolo}: ${share} % di risposte corrette` }),
        el("p", { class: "small" },
          c.risposte ? el("span", { class: "count", text: `${c.corrette}/${c.risposte}` }) : null,
          `${c.risposte ? ` corrette (${share} %)` : "Nessuna risposta finora"}${chapter.domande ? ` · ${chapter.domande} domande nel capitolo` : ""}${extra.length ? ` · ${extra.join(" · ")}` : ""}`),
      ),
    );
  }
  box.append(list);
}

// The first line of an answer as a student reads it: no offline mark, no Markdown symbols.
function firstLine(text) {
  const line = withoutOfflineMark(text || "").text.split("\n").find((l) => l.trim()) || "";
  return line.replace(/[*_`#>]+/g, "").trim().slice(0, 160);
}

// A quiz question's turn has no answer text (the card is the answer): its question's line,
// as the chat's JSON answer says it.
function historyLine(turn) {
  const line = firstLine(turn.system);
  const q = turn.tool?.data?.question;
  return line || !q ? line : firstLine(`Capitolo ${q.capitolo}, domanda ${q.numero}: ${q.testo}`);
}

async function loadHistory(fresh) {
  if (fresh) {
    state.historyCursor = null;
    $("history").replaceChildren();
  }
  const params = new URLSearchParams({ limit: "10" });
  if (state.historyCursor) params.set(state.historyCursor.name, state.historyCursor.value);
  const page = await api(`/api/history?${params}`);
  for (const turn of page.turns) {
    const when = new Date(turn.timestamp).toLocaleString("it-IT");
    // A turn stopped before any word has no first line: its mark, not an empty line.
    const line = historyLine(turn);
    const answer = line ? el("p", { class: "small first-line", text: line }) : outcomeMark(turn.status, turn.error_code);
    $("history").append(el("li", {}, el("span", { class: "muted small", text: when }), el("p", { class: "human", text: turn.human }), answer));
  }
  // `next_cursor` (paged by cursor) or the older `next_before`.
  const next = page.next_cursor ? { name: "cursor", value: page.next_cursor } : page.next_before ? { name: "before", value: page.next_before } : null;
  state.historyCursor = next;
  $("history-more").hidden = !next;
}

async function loadDocsVersion() {
  const health = await api("/api/health");
  const prompt = health.prompt || {};
  $("docs-version").textContent = prompt.version || "—";
  $("docs-list").replaceChildren(el("li", { text: `${prompt.docs ?? "?"} documenti caricati (l'elenco dopo una ricarica)` }));
}

async function reloadDocs() {
  const button = $("docs-reload");
  button.disabled = true;
  try {
    const result = await api("/api/update_docs", { method: "POST" });
    $("docs-version").textContent = result.prompt_version;
    $("docs-list").replaceChildren(...result.docs_details.map((d) => el("li", {}, el("code", { text: d.key }), ` · ${d.size} byte`)));
    notice(result.prompt_version === result.previous_version ? "Documenti ricaricati: nessuna modifica." : "Documenti ricaricati: nuova versione del prompt.", "info");
  } catch (error) {
    failed(error);
  } finally {
    button.disabled = false;
  }
}

// ---- conversations

// A conversation id the client chooses: 32 hex digits (the API takes [A-Za-z0-9_-]{1,64}).
function newConversationId() {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function loadConversations() {
  const list = await api("/api/conversations?limit=20");
  const stored = list.conversations || [];
  const entries = [{ id: null, label: "Chat principale" }];
  // A new chat is listed before its first turn is stored.
  if (state.conversation && !stored.some((c) => c.conversation_id === state.conversation)) entries.push({ id: state.conversation, label: "Nuova chat" });
  entries.push(...stored.map((c) => ({ id: c.conversation_id, label: shortened(c.first_question, 60) })));
  // The same chats as on screen: their buttons stay (a refresh after each turn replaced
  // them, and a click whose press and release fell on either side of it was lost).
  const shown = [...$("conversations").querySelectorAll("button")];
  if (shown.length === entries.length && entries.every((c, i) => shown[i].dataset.conversation === (c.id ?? "") && shown[i].textContent === c.label)) {
    shown.forEach((button, i) => {
      button.disabled = state.busy;
      if (entries[i].id === state.conversation) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    });
    return;
  }
  $("conversations").replaceChildren(
    ...entries.map((c) =>
      el("li", {},
        el("button", {
          type: "button",
          class: "secondary conversation",
          "data-conversation": c.id ?? "",
          "aria-current": c.id === state.conversation ? "true" : null,
          disabled: state.busy ? "" : null,
          onclick: () => switchChat(c.id),
        }, c.label)),
    ),
  );
}

function newChat() {
  if (state.busy) return;
  state.conversation = newConversationId();
  $("turns").replaceChildren();
  showOlderTurns(null);
  $("welcome").hidden = false;
  showView("chat");
  loadConversations().catch(failed);
  $("query").focus();
}

// The chat shows the conversation's stored turns, oldest first.
async function switchChat(id) {
  if (state.busy) return;
  state.conversation = id;
  showView("chat");
  try {
    await loadTurns(false);
    await loadConversations();
  } catch (error) {
    failed(error);
  }
}

// The chat on screen's last 20 stored turns, or with `older` the 20 before those shown.
// `conversation_id=default` pages the default conversation alone (docs/http.md). Turns sent
// while the page was on its way stay, after the stored ones and not repeated.
async function loadTurns(older) {
  const id = state.conversation;
  const token = state.token;
  const replaced = older ? [] : [...$("turns").children];
  const params = new URLSearchParams({ limit: "20", conversation_id: id ?? "default" });
  if (older && state.turnsCursor) params.set("cursor", state.turnsCursor);
  const page = await api(`/api/history?${params}`);
  if (state.conversation !== id || state.token !== token) return; // another chat or user meanwhile
  for (const node of replaced) node.remove();
  const onScreen = new Set([...$("turns").children].map((node) => node.dataset.turn));
  const waiting = !older && !$("turns").children.length; // nothing was said after the newest
  const turns = storedTurns(page.turns.filter((t) => !onScreen.has(t.turn_id)), waiting);
  $("turns").prepend(...turns);
  showOlderTurns(page.next_cursor);
  $("welcome").hidden = $("turns").children.length > 0;
  // The button may be gone: the reader goes on from the oldest turn just shown.
  if (older && turns.length) {
    turns[0].tabIndex = -1;
    turns[0].focus();
  } else if (waiting && turns.length) {
    showNewest();
  }
}

// A chat opens at its newest turn, as chat apps do: a student coming back reads where they
// left off, not 20 turns back. Its end shows above the message box (the page's
// scroll-padding-bottom); a turn taller than the screen shows from its start.
function showNewest() {
  const newest = $("turns").lastElementChild;
  newest.scrollIntoView({ block: "end" });
  if (newest.getBoundingClientRect().top < 0) newest.scrollIntoView({ block: "start" });
}

function showOlderTurns(cursor) {
  state.turnsCursor = cursor || null;
  $("turns-older").hidden = !state.turnsCursor;
}

// A page of stored turns (newest first) as the chat shows them, oldest first, with their tool
// results as the live turn showed them: a grading in the card of its question (when that is
// on the same page), source cards, a chat exam's questions. A question card takes an answer
// only in the newest turn of the chat (`waiting`: nothing was said after it, so the coach
// still waits for its answer) and not graded yet; any other is shown closed.
//
// These turns are older than every turn on screen: a grading shown there as a card of its own
// goes into the latest card of its question here, as if they had come on one page.
function storedTurns(newestFirst, waiting) {
  const cards = new Map(); // "capitolo-numero" -> the latest card of that question so far
  const turns = newestFirst.slice().reverse();
  const onScreen = state.looseGradings.filter(({ box }) => box.isConnected);
  state.looseGradings = [];
  const items = turns.map((turn, i) => storedTurn(turn, cards, waiting && i === turns.length - 1));
  const older = state.looseGradings;
  const left = [];
  for (const loose of onScreen) {
    const card = cards.get(`${loose.g.capitolo}-${loose.g.numero}`);
    if (!card) {
      left.push(loose);
      continue;
    }
    grading(loose.g, loose.view, card);
    loose.box.remove();
  }
  state.looseGradings = [...older, ...left];
  return items;
}

function storedTurn(turn, cards, waiting) {
  const { offline, text } = withoutOfflineMark(turn.system || "");
  const view = {
    answer: el("div", { class: "answer" }, markdown(text)),
    extras: el("div", { class: "extras" }),
    sources: el("div", { class: "turn-sources" }),
  };
  const footer = el("footer", { class: "turn-footer muted small" }, el("span", { text: new Date(turn.timestamp).toLocaleString("it-IT") }));
  if (offline) footer.prepend(el("span", { class: "badge" }, "modello offline"));
  const item = el("li", { class: "turn turn-done turn-stored", "data-turn": turn.turn_id }, el("p", { class: "human", text: turn.human }), view.extras, view.answer, view.sources, footer);
  for (const tool of turn.tools || []) {
    const card = toolCard({ tool_name: tool.tool_name, data: tool.data }, view, (g) => cards.get(`${g.capitolo}-${g.numero}`));
    if (!card) continue;
    (card.classList.contains("sources") ? view.sources : view.extras).append(card);
    for (const quiz of card.querySelectorAll("article.quiz")) {
      if (!waiting) closeCard(quiz);
      cards.set(quiz.dataset.question, quiz);
    }
  }
  const mark = outcomeMark(turn.status, turn.error_code);
  if (mark) view.extras.append(mark);
  return item;
}

// ---- mock exams

function stopExam() {
  clearInterval(state.examTimer);
  state.examTimer = null;
  state.exam = null;
}

function examStep(step) {
  $("exam-start").hidden = step !== "start";
  $("exam-run").hidden = step !== "run";
  $("exam-result").hidden = step !== "result";
}

async function loadExams() {
  stopExam();
  examStep("start");
  const list = await api("/api/exams");
  const items = list.items || [];
  $("exam-list").replaceChildren(...(items.length ? items.map(examEntry) : [el("li", { class: "muted", text: "Nessuna simulazione finora." })]));
}

function examEntry(x) {
  const when = new Date(x.creato).toLocaleString("it-IT");
  let outcome;
  if (x.punteggio === null || x.punteggio === undefined) outcome = Date.parse(x.scadenza) > Date.now() ? "in corso: riprendi" : "non consegnata";
  else outcome = `${x.punteggio}/${x.totale} · ${x.superato ? "superata" : "non superata"}`;
  return el("li", { "data-exam": x.id }, el("button", { type: "button", class: "secondary exam-open", onclick: () => openExam(x.id).catch(failed) }, `${when} · ${outcome}`));
}

async function openExam(id) {
  const exam = await api(`/api/exams/${encodeURIComponent(id)}`);
  if (exam.esito) {
    forgetAnswers(id);
    showExamResult(exam.esito, exam.domande);
  } else takeExam(exam);
}

async function startExam() {
  $("exam-new").disabled = true;
  try {
    takeExam(await api("/api/exams", { method: "POST", json: {} }));
  } finally {
    $("exam-new").disabled = false;
  }
}

// All the questions on one page, as radio groups: the keyboard moves through them natively.
function takeExam(exam) {
  stopExam();
  state.exam = exam;
  const total = exam.domande.length;
  $("exam-questions").replaceChildren(
    ...exam.domande.map((q, i) =>
      el("li", { class: "exam-question" },
        el("fieldset", { "data-question": `${q.capitolo}-${q.numero}` },
          el("legend", {},
            el("span", { class: "muted small exam-meta", text: `Domanda ${i + 1} di ${total} · capitolo ${q.capitolo}` }),
            el("span", { class: "question", text: q.testo })),
          ...Object.entries(q.risposte || {}).map(([letter, text]) =>
            el("label", { class: "exam-option" },
              el("input", { type: "radio", name: `exam-${q.capitolo}-${q.numero}`, value: letter, "data-letter": letter }),
              el("span", {}, el("b", { text: `${letter}) ` }), text))),
        )),
    ),
  );
  for (const [question, letter] of Object.entries(keptAnswers(exam.id))) {
    const option = $("exam-questions").querySelector(`input[name="exam-${question}"][value="${CSS.escape(letter)}"]`);
    if (option) option.checked = true;
  }
  $("exam-expired").hidden = true;
  examStep("run");
  countAnswered();
  tick();
  state.examTimer = setInterval(tick, 1000);
  $("exam-title").focus();
}

function tick() {
  if (!state.exam) return;
  const left = Math.max(0, Math.round((Date.parse(state.exam.scadenza) - Date.now()) / 1000));
  const minutes = String(Math.floor(left / 60)).padStart(2, "0");
  const seconds = String(left % 60).padStart(2, "0");
  $("exam-timer").textContent = `${minutes}:${seconds}`;
  $("exam-timer").setAttribute("aria-label", `${Math.floor(left / 60)} minuti e ${left % 60} secondi`);
  if (left === 0) {
    $("exam-expired").hidden = false;
    clearInterval(state.examTimer);
    state.examTimer = null;
  }
}

function examAnswers() {
  const answers = [];
  for (const set of $("exam-questions").querySelectorAll("fieldset")) {
    const chosen = set.querySelector("input:checked");
    const [capitolo, numero] = set.dataset.question.split("-").map(Number);
    if (chosen) answers.push({ capitolo, numero, risposta: chosen.value });
  }
  return answers;
}

// The answers chosen so far, kept in this tab (sessionStorage, never the token) under the
// exam's id: a reload signs the student out, and the exam taken up again after the new
// sign-in has them back. They go when the exam is graded.
function examKey(id) {
  return `aircoach.exam.${id}`;
}

function keptAnswers(id) {
  try {
    return JSON.parse(sessionStorage.getItem(examKey(id))) || {};
  } catch {
    return {}; // storage off (a private window's policy) or a value of another shape
  }
}

function keepAnswers() {
  if (!state.exam) return;
  const chosen = Object.fromEntries(examAnswers().map((a) => [`${a.capitolo}-${a.numero}`, a.risposta]));
  try {
    sessionStorage.setItem(examKey(state.exam.id), JSON.stringify(chosen));
  } catch {
    // storage off or full: the answers stay on the page until it is left
  }
}

function forgetAnswers(id) {
  try {
    sessionStorage.removeItem(examKey(id));
  } catch {
    // storage off: nothing was kept
  }
}

function countAnswered() {
  if (!state.exam) return;
  const total = state.exam.domande.length;
  $("exam-answered").textContent = `Risposte date: ${examAnswers().length} di ${total}. Una domanda senza risposta conta come sbagliata.`;
}

async function submitExam() {
  const exam = state.exam;
  if (!exam) return;
  $("exam-submit").disabled = true;
  try {
    const result = await api(`/api/exams/${encodeURIComponent(exam.id)}/submit`, { method: "POST", json: { risposte: examAnswers() } });
    forgetAnswers(exam.id);
    showExamResult(result, exam.domande);
    loadProgress().catch(failed);
  } catch (error) {
    // Already submitted (another tab): show what was graded.
    if (error instanceof HttpError && error.status === 409) await openExam(exam.id);
    else throw error;
  } finally {
    $("exam-submit").disabled = false;
  }
}

function showExamResult(r, domande) {
  stopExam();
  const questions = new Map((domande || []).map((q) => [`${q.capitolo}-${q.numero}`, q]));
  const share = percent(r.punteggio, r.totale);
  const wrong = r.esiti.filter((o) => !o.corretta);
  const verdict = el("p", { class: r.superato ? "exam-verdict passed" : "exam-verdict failed", "data-superato": String(r.superato), tabindex: "-1" },
    el("strong", { text: r.superato ? "✔ Simulazione superata" : "✘ Simulazione non superata" }));
  $("exam-result").replaceChildren(
    verdict,
    el("p", { class: "exam-score", text: `Punteggio: ${r.punteggio} su ${r.totale} (${share} %) · soglia per superarla ${Math.round(100 * r.soglia)} %${r.in_ritardo ? " · consegnata dopo la scadenza: non superata" : ""}` }),
    el("h3", { text: "Per capitolo" }),
    el("ul", { class: "chapters exam-chapters" },
      ...r.capitoli.map((c) => {
        const p = percent(c.punteggio, c.totale);
        return el("li", { class: "chapter", "data-capitolo": c.capitolo },
          el("p", { class: "chapter-title", text: `${c.capitolo}. ${c.titolo}` }),
          el("progress", { max: "100", value: String(p), "aria-label": `Capitolo ${c.capitolo}: ${p} % di risposte corrette` }),
          el("p", { class: "small", text: `${c.punteggio}/${c.totale} corrette (${p} %)` }));
      })),
    el("h3", { text: wrong.length ? `Le risposte sbagliate (${wrong.length})` : "Nessuna risposta sbagliata" }),
    el("ol", { class: "exam-wrong" }, ...wrong.map((o) => wrongOutcome(o, questions.get(`${o.capitolo}-${o.numero}`)))),
    el("div", { class: "card-actions" }, el("button", { type: "button", class: "secondary", id: "exam-back", onclick: () => loadExams().catch(failed) }, "Torna alle simulazioni")),
  );
  examStep("result");
  verdict.focus();
}

function wrongOutcome(o, q) {
  const right = q?.risposte?.[o.risposta_corretta];
  const link = o.riferimento ? citationLink(o.riferimento, `Rileggi § ${o.riferimento}`) : null;
  link?.classList.add("manual-link");
  return el("li", { class: "card exam-outcome", "data-question": `${o.capitolo}-${o.numero}` },
    el("p", { class: "muted small", text: `Capitolo ${o.capitolo} · domanda ${o.numero}` }),
    q ? el("p", { class: "question", text: q.testo }) : null,
    el("p", { class: "result wrong" },
      el("strong", { text: o.risposta ? `Hai risposto ${o.risposta}` : "Senza risposta" }),
      el("span", { text: ` · la risposta corretta è ${o.risposta_corretta}${right ? `) ${right}` : ""}` })),
    o.spiegazione ? el("p", { class: "explanation" }, linkCitations(el("span", { text: o.spiegazione }))) : null,
    link ? el("p", {}, link) : null);
}

// ---- review (the due questions, answered through the quiz API)

// Five at a time: the first page, or with `more` the page after the one on screen (the
// cursor names the questions listed so far, so none comes back; docs/quiz.md).
async function loadReview(more = false) {
  const params = new URLSearchParams({ limit: "5" });
  if (more && state.reviewCursor) params.set("cursor", state.reviewCursor);
  let list;
  try {
    list = await api(`/api/quiz/review?${params}`);
  } catch (error) {
    if (error instanceof HttpError && error.status === 401) throw error;
    // Said in the view (the page's notices sit off a phone's screen), with a way to try again.
    const retry = el("button", { type: "button", class: "secondary", onclick: () => loadReview(more).catch(failed) }, "Riprova");
    $("review-cards").replaceChildren(el("div", { id: "review-failed", class: "notice notice-error", role: "alert" }, el("p", { text: `Le domande da ripassare non sono arrivate. ${problemOf(error)}` }), retry));
    $("review-more").hidden = true;
    return;
  }
  const items = list.items || [];
  state.reviewCursor = list.next_cursor || null;
  const cards = items.map(reviewCard);
  let end = null;
  if (!items.length && !more) end = "Nessuna domanda da ripassare adesso: torna più tardi, o chiedi al coach una domanda del capitolo che vuoi.";
  else if (more && !state.reviewCursor) end = "Non ci sono altre domande da ripassare per ora.";
  $("review-cards").replaceChildren(...cards, ...(end ? [el("p", { id: "review-end", class: "muted", role: "status", text: end })] : []));
  $("review-more").hidden = !state.reviewCursor;
  // The cards the button replaced are gone: the reader goes on from the first new one.
  if (more) (cards[0] || $("review-title")).focus();
}

function reviewCard(q) {
  const options = el("div", { class: "options", role: "group", "aria-label": "Risposte" });
  const card = el(
    "article",
    { class: "card review-card", "data-question": `${q.capitolo}-${q.numero}`, "aria-label": `Domanda ${q.numero} del capitolo ${q.capitolo}`, tabindex: "-1" },
    el("header", { class: "muted small", text: `Capitolo ${q.capitolo} · domanda ${q.numero}${q.scadenza ? " · da ripassare" : " · nuova"}` }),
    el("p", { class: "question", text: q.testo }),
    options,
    el("div", { class: "grading", "aria-live": "polite" }),
  );
  for (const [letter, text] of Object.entries(q.risposte || {})) {
    options.append(el("button", { type: "button", class: "option", "data-letter": letter, onclick: () => answerReview(card, q, letter) }, el("b", { text: `${letter}) ` }), text));
  }
  return card;
}

async function answerReview(card, q, letter) {
  const buttons = [...card.querySelectorAll("button.option")];
  for (const b of buttons) b.disabled = true;
  card.querySelector(`[data-letter="${CSS.escape(letter)}"]`).classList.add("chosen");
  let g;
  try {
    g = await api("/api/quiz/answers", { method: "POST", json: { capitolo: q.capitolo, numero: q.numero, risposta: letter } });
  } catch (error) {
    for (const b of buttons) b.disabled = false;
    failed(error);
    return;
  }
  card.querySelector(`[data-letter="${CSS.escape(String(g.risposta_corretta))}"]`)?.classList.add("correct");
  if (!g.corretta) card.querySelector(`[data-letter="${CSS.escape(String(g.risposta))}"]`)?.classList.add("wrong");
  const link = g.riferimento ? citationLink(g.riferimento, `Rileggi § ${g.riferimento}`) : null;
  link?.classList.add("manual-link");
  card.querySelector(".grading").replaceChildren(
    el("div", { class: g.corretta ? "result right" : "result wrong", "data-corretta": String(g.corretta) },
      el("p", {},
        el("strong", { text: g.corretta ? "✔ Risposta corretta" : "✘ Risposta sbagliata" }),
        el("span", { text: ` · hai risposto ${g.risposta}, la risposta corretta è ${g.risposta_corretta}` })),
      g.spiegazione ? el("p", { class: "explanation" }, linkCitations(el("span", { text: g.spiegazione }))) : null,
      link ? el("p", {}, link) : null),
  );
}

// ---- wiring

async function start() {
  $("dev-form").addEventListener("submit", devSignIn);
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token-input").value.trim();
    $("token-input").value = "";
    signIn(token);
  });
  $("sign-out").addEventListener("click", signOut);
  $("nav-chat").addEventListener("click", () => showView("chat"));
  $("nav-progress").addEventListener("click", () => showView("progress"));
  $("action-progress").addEventListener("click", () => showView("progress"));
  $("nav-settings").addEventListener("click", (e) => ($("settings").hidden ? openPanel("settings", e.currentTarget) : closePanels()));
  $("settings-close").addEventListener("click", () => closePanels());
  $("manual-close").addEventListener("click", () => closePanels());
  $("action-review").addEventListener("click", () => showView("review"));
  $("nav-review").addEventListener("click", () => showView("review"));
  $("review-more").addEventListener("click", () => loadReview(true).catch(failed));
  $("action-exam").addEventListener("click", () => showView("exam"));
  $("nav-exam").addEventListener("click", () => showView("exam"));
  $("exam-new").addEventListener("click", () => startExam().catch(failed));
  $("exam-run").addEventListener("submit", (e) => {
    e.preventDefault();
    submitExam().catch(failed);
  });
  $("exam-run").addEventListener("change", () => {
    countAnswered();
    keepAnswers();
  });
  $("new-chat").addEventListener("click", newChat);
  $("action-chapter").addEventListener("click", (e) => {
    const picker = $("chapter-picker");
    picker.hidden = !picker.hidden;
    e.currentTarget.setAttribute("aria-expanded", String(!picker.hidden));
    if (!picker.hidden) picker.querySelector("button")?.focus();
  });
  for (const button of document.querySelectorAll("button.suggestion")) {
    button.addEventListener("click", () => sendWhenFree(button.textContent));
  }
  // Citation links anywhere on the page open their section in the side panel.
  document.addEventListener("click", (e) => {
    const link = e.target.closest?.("a.citation");
    if (!link) return;
    e.preventDefault();
    openSection(link.dataset.ref, link);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") closePanels();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    if (state.busy) return; // the text stays in the box until the answer is done
    const query = $("query").value;
    $("query").value = "";
    queryNote("");
    send(query);
  });
  // The box holds what the API takes (its maxlength); the browser cuts a longer paste without
  // a word, and the student would send half a question thinking it whole: say so.
  $("query").addEventListener("paste", (e) => {
    const box = e.currentTarget;
    const pasted = e.clipboardData?.getData("text") ?? "";
    if (box.value.length - (box.selectionEnd - box.selectionStart) + pasted.length > box.maxLength) {
      queryNote(`Il testo incollato è stato tagliato: un messaggio può avere al massimo ${box.maxLength} caratteri.`);
    }
  });
  $("query").addEventListener("input", (e) => {
    const box = e.currentTarget;
    if (box.value.length < box.maxLength) queryNote("");
    else if ($("query-note").hidden) queryNote(`Un messaggio può avere al massimo ${box.maxLength} caratteri.`);
  });
  $("query").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("history-more").addEventListener("click", () => loadHistory(false).catch(failed));
  $("turns-older").addEventListener("click", () => loadTurns(true).catch(failed));
  $("docs-reload").addEventListener("click", reloadDocs);
  // What a scroll brings into view stops above the sticky message box, not under it (0 while
  // the chat, and so the box, is hidden).
  new ResizeObserver(([entry]) => {
    document.documentElement.style.scrollPaddingBottom = `${entry.borderBoxSize[0].blockSize}px`;
  }).observe($("composer"));
  try {
    state.config = await api("/playground/config");
  } catch (error) {
    failed(error);
  }
  $("dev-form").hidden = !state.config.dev_sign_in;
}

start();
