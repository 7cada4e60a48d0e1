// The playground: what a student sees, driven by the public HTTP API only.
// Every text from the server goes in through textContent, never parsed as HTML.

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

const state = {
  token: null, // in memory only: gone when the page closes
  permissions: [],
  config: { dev_sign_in: false, admin_permission: "admin:docs" },
  tools: [],
  switches: {},
  historyCursor: null,
  busy: false, // a turn is streaming or the panels after it are refreshing
  queued: null, // a quiz choice made while busy: sent when the turn ends
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

function clearNotices() {
  $("notices").replaceChildren();
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

function failed(error) {
  if (error instanceof HttpError && error.status === 401) {
    signOut();
    notice("Accesso richiesto: il token manca, è scaduto o non è valido. Accedi di nuovo.");
  } else {
    notice(error instanceof HttpError ? error.message : `Errore di rete: ${error.message}`);
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
  $("who").hidden = false;
  $("signin").hidden = true;
  $("app").hidden = false;
  $("docs-panel").hidden = !state.permissions.includes(state.config.admin_permission);
  $("turns").replaceChildren();
  try {
    await loadTools();
    await Promise.all([loadProgress(), loadHistory(true), $("docs-panel").hidden ? null : loadDocsVersion()]);
    $("query").focus();
  } catch (error) {
    failed(error);
  }
}

function signOut() {
  state.token = null;
  state.queued = null;
  state.permissions = [];
  $("who").hidden = true;
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
    failed(error);
  }
}

// ---- tools

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

// ---- the chat

function turnView(query) {
  const answer = el("div", { class: "answer" });
  const extras = el("div", { class: "extras" });
  const footer = el("footer", { class: "turn-footer muted small" });
  const item = el("li", { class: "turn" }, el("p", { class: "human", text: query }), extras, answer, footer);
  $("turns").append(item);
  item.scrollIntoView({ block: "end" });
  return { item, answer, extras, footer };
}

async function send(query) {
  if (state.busy || !query.trim()) return;
  state.busy = true;
  $("send").disabled = true;
  clearNotices();
  const view = turnView(query);
  const started = performance.now();
  try {
    const response = await api("/api/stream_query", {
      method: "POST",
      raw: true,
      headers: { Accept: "text/event-stream" },
      json: { query, tools: { ...state.switches } },
    });
    for await (const event of sseEvents(response)) render(view, event, started);
    await Promise.all([loadProgress(), loadHistory(true)]);
  } catch (error) {
    view.item.classList.add("turn-failed");
    failed(error);
  } finally {
    state.busy = false;
    $("send").disabled = false;
  }
  const queued = state.queued;
  state.queued = null;
  if (queued && state.token) send(queued);
}

// A quiz choice is never lost: made while the previous answer is still arriving (or the
// panels after it refreshing), it is sent as soon as that turn ends.
function sendWhenFree(query) {
  if (state.busy) state.queued = query;
  else send(query);
}

// SSE over POST: EventSource only does GET, so read the body and split it into messages.
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

function render(view, event, started) {
  switch (event.type) {
    case "agent_message":
      view.answer.textContent += event.content;
      break;
    case "tool_result":
      view.extras.append(toolCard(event));
      break;
    case "error":
      notice(event.message, "error", view.extras);
      break;
    case "grounding":
      if (event.unverified && event.unverified.length) {
        const box = notice("Attenzione: alcune affermazioni non trovano riscontro nelle fonti.", "warning", view.extras);
        box.append(el("ul", {}, ...event.unverified.map((u) => el("li", { text: typeof u === "string" ? u : u.text || JSON.stringify(u) }))));
      }
      break;
    case "done": {
      const seconds = ((performance.now() - started) / 1000).toFixed(1).replace(".", ",");
      view.footer.textContent = `Modello: ${event.model} · Prompt: ${event.prompt_version} · Turni di contesto: ${event.context_turns} · ${seconds} s`;
      view.item.classList.add("turn-done");
      $("docs-version").textContent = event.prompt_version;
      break;
    }
  }
}

function labelOf(name) {
  const tool = state.tools.find((t) => t.name === name);
  return tool ? tool.label : name;
}

function toolCard(event) {
  const data = event.data || {};
  if (event.tool_name === "domanda_teoria" && (data.question || data.questions)) {
    const questions = data.questions || [data.question];
    return el("div", { class: "cards" }, ...questions.map(questionCard));
  }
  if (event.tool_name === "verifica_risposta" && "corretta" in data) return gradingCard(data);
  const items = Array.isArray(data.items) ? data.items : Array.isArray(data.results) ? data.results : null;
  if (data.success === false) {
    return el("div", { class: "card card-error" }, `${labelOf(event.tool_name)}: ${data.error || "errore"}`);
  }
  if (items) return sourceCards(event.tool_name, items);
  return el("details", { class: "card" }, el("summary", { text: `Risultato di ${labelOf(event.tool_name)}` }), el("pre", { text: JSON.stringify(data, null, 2) }));
}

function questionCard(q) {
  const options = el("div", { class: "options", role: "group", "aria-label": "Risposte" });
  const card = el(
    "article",
    { class: "card quiz", "data-question": `${q.capitolo}-${q.numero}` },
    el("header", { class: "muted small", text: `Capitolo ${q.capitolo} · domanda ${q.numero}${q.argomento ? ` · ${q.argomento}` : ""}${q.difficolta ? ` · ${q.difficolta}` : ""}` }),
    el("p", { class: "question", text: q.testo }),
    options,
    el("div", { class: "grading" }),
  );
  for (const [letter, text] of Object.entries(q.risposte || {})) {
    options.append(
      el("button", {
        type: "button",
        class: "option",
        "data-letter": letter,
        onclick: () => {
          for (const b of options.querySelectorAll("button")) b.disabled = true;
          card.querySelector(`[data-letter="${CSS.escape(letter)}"]`).classList.add("chosen");
          sendWhenFree(`la ${letter}`);
        },
      }, el("b", { text: `${letter}) ` }), text),
    );
  }
  return card;
}

function gradingCard(g) {
  const result = el(
    "div",
    { class: g.corretta ? "result right" : "result wrong", "data-corretta": String(g.corretta) },
    el("strong", { text: g.corretta ? "✔ Risposta corretta" : "✘ Risposta sbagliata" }),
    el("span", { text: ` · hai risposto ${g.risposta}, la risposta corretta è ${g.risposta_corretta}` }),
    g.spiegazione ? el("p", { text: g.spiegazione }) : null,
  );
  const cards = document.querySelectorAll(`[data-question="${CSS.escape(`${g.capitolo}-${g.numero}`)}"]`);
  const card = cards[cards.length - 1];
  if (card) {
    for (const b of card.querySelectorAll("button.option")) b.disabled = true;
    card.querySelector(".grading").replaceChildren(result.cloneNode(true));
    card.querySelector(`[data-letter="${CSS.escape(String(g.risposta_corretta))}"]`)?.classList.add("correct");
  }
  return el("div", { class: "card grading-card" }, el("header", { class: "muted small", text: `Capitolo ${g.capitolo} · domanda ${g.numero}` }), result);
}

function safeUrl(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function sourceCards(toolName, items) {
  const list = el("div", { class: "sources", "aria-label": `Fonti: ${labelOf(toolName)}` });
  if (!items.length) list.append(el("p", { class: "muted small", text: `${labelOf(toolName)}: nessun risultato` }));
  for (const item of items.slice(0, 6)) {
    const url = safeUrl(item.url);
    const title = item.title || item.url || labelOf(toolName);
    list.append(
      el("article", { class: "card source" },
        url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: title }) : el("strong", { text: title }),
        el("p", { class: "small", text: String(item.snippet || item.content || item.text || "").slice(0, 300) }),
      ),
    );
  }
  return list;
}

// ---- side panels

async function loadProgress() {
  const progress = await api("/api/progress");
  const chapters = progress.capitoli || [];
  const box = $("progress");
  box.replaceChildren(el("p", { class: "small", text: `Risposte: ${progress.risposte} · corrette: ${progress.corrette}` }));
  if (!chapters.length) return;
  const row = 22;
  const most = Math.max(1, ...chapters.map((c) => c.risposte));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 300 ${chapters.length * row}`);
  svg.setAttribute("width", "100%");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Risposte corrette per capitolo");
  const svgEl = (tag, attrs, text) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  chapters.forEach((c, i) => {
    const y = i * row;
    const g = svgEl("g", { "data-capitolo": c.capitolo, "data-risposte": c.risposte, "data-corrette": c.corrette });
    g.append(
      svgEl("title", {}, `Capitolo ${c.capitolo}${c.titolo ? ` (${c.titolo})` : ""}: ${c.corrette} corrette su ${c.risposte}`),
      svgEl("text", { x: 0, y: y + 15, class: "axis" }, `Cap. ${c.capitolo}`),
      svgEl("rect", { x: 50, y: y + 4, width: 200, height: 14, class: "bar-bg" }),
      svgEl("rect", { x: 50, y: y + 4, width: (200 * c.risposte) / most, height: 14, class: "bar-all" }),
      svgEl("rect", { x: 50, y: y + 4, width: (200 * c.corrette) / most, height: 14, class: "bar-right" }),
      svgEl("text", { x: 256, y: y + 15, class: "count" }, `${c.corrette}/${c.risposte}`),
    );
    svg.append(g);
  });
  box.append(svg);
  if (progress.deboli && progress.deboli.length) {
    box.append(el("p", { class: "small", text: `Da ripassare: capitoli ${progress.deboli.map((d) => d.capitolo ?? d).join(", ")}` }));
  }
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
    $("history").append(
      el("li", {}, el("span", { class: "muted small", text: when }), el("p", { class: "human", text: turn.human }), el("p", { class: "small", text: turn.system.slice(0, 200) })),
    );
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
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    if (state.busy) return; // the text stays in the box until the answer is done
    const query = $("query").value;
    $("query").value = "";
    send(query);
  });
  $("query").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("history-more").addEventListener("click", () => loadHistory(false).catch(failed));
  $("docs-reload").addEventListener("click", reloadDocs);
  try {
    state.config = await api("/playground/config");
  } catch (error) {
    failed(error);
  }
  $("dev-form").hidden = !state.config.dev_sign_in;
}

start();
