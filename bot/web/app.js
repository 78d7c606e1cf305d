// The repo-expert web page: pick an instance, ask, watch the answer stream in, follow its
// numbered sources, give 👍/👎, follow up in the same conversation. No framework, no build
// step, nothing loaded from elsewhere. Every text from the server is inserted as text
// (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY = "repo-expert-key";
let conversation = null;
let turns = 0;

function headers() {
  const h = { "Content-Type": "application/json", "X-Repo-Expert-Client": "web" };
  const key = sessionStorage.getItem(KEY);
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function status(text) {
  $("status").textContent = text;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

async function errorLine(resp) {
  try {
    const body = await resp.json();
    return body.error.message;
  } catch (e) {
    return "the server answered " + resp.status;
  }
}

async function loadInstances() {
  const resp = await fetch("v1/instances", { headers: headers() });
  if (resp.status === 401) {
    $("key-form").hidden = false;
    status(await errorLine(resp));
    $("key").focus();
    return;
  }
  if (!resp.ok) {
    status(await errorLine(resp));
    return;
  }
  $("key-form").hidden = true;
  const { instances } = await resp.json();
  const select = $("instance");
  select.replaceChildren();
  for (const inst of instances) {
    const label = inst.description ? `${inst.name} — ${inst.description}` : inst.name;
    select.append(el("option", { value: inst.name, text: label }));
  }
  if (!instances.length) status("No repository is available to you here.");
  else status("");
  select.instances = Object.fromEntries(instances.map((i) => [i.name, i]));
  describe();
}

function describe() {
  const inst = ($("instance").instances || {})[$("instance").value];
  const info = $("instance-info");
  if (!inst) {
    info.textContent = "";
    scopes(null);
    return;
  }
  const repos = inst.repos || [];
  const at = inst.commit ? `indexed at ${inst.commit.slice(0, 12)}`
    : !inst.indexed ? "not indexed yet"
    : repos.length > 1 ? `${repos.length} repositories, each indexed at its own commit` : "indexed";
  info.textContent = [inst.repository, at].filter(Boolean).join(" · ");
  scopes(inst);
}

// An instance over several repositories: which of them to search — every one, a scope (a
// named group of them, `scopes:`), or one — sent as the question's `repo`.
function scopes(inst) {
  const select = $("scope");
  const repos = (inst && inst.repos) || [];
  const kept = select.dataset.instance === (inst && inst.name) ? select.value : "";
  select.replaceChildren(el("option", { value: "", text: "All repositories" }));
  for (const [name, members] of Object.entries((inst && inst.scopes) || {})) {
    select.append(el("option", { value: name, text: `${name} (${members.join(", ")})` }));
  }
  for (const r of repos) select.append(el("option", { value: r.name, text: r.name }));
  select.value = [...select.options].some((o) => o.value === kept) ? kept : "";
  select.dataset.instance = inst ? inst.name : "";
  $("scope-field").hidden = repos.length < 2;
}

// Answer text: paragraphs, ``` fences as code, [n] markers (not in a code span) as links to the
// numbered source. A fence opens at the start of a line: a quote of reStructuredText in the
// answer's backticks ("```exc_info``" mid-line) is not one, or the rest of the answer became
// code, its citations with it.
function renderAnswer(box, text, turn) {
  box.replaceChildren();
  const blocks = text.split(/(^```[^\n]*\n[\s\S]*?(?:^```|(?![\s\S])))/m);
  for (const block of blocks) {
    if (!block) continue;
    if (block.startsWith("```")) {
      const body = block.replace(/^```[^\n]*\n/, "").replace(/```$/, "");
      box.append(el("pre", {}, el("code", { text: body })));
      continue;
    }
    for (const para of block.split(/\n{2,}/)) {
      if (!para.trim()) continue;
      const p = el("p");
      // Outside code spans (core.models.CODE): in one, "[0]" is an index (`argv[0]`).
      const pieces = para.split(/(`[^`\n]*`)/)
        .flatMap((c) => (/^`[^`\n]*`$/.test(c) ? [c] : c.split(/(\[\d{1,3}\])/)));
      for (const piece of pieces) {
        const m = /^\[(\d{1,3})\]$/.exec(piece);
        if (m && turn) {
          p.append(el("a", { class: "cite", href: `#s-${turn}-${m[1]}`, text: piece,
                             "aria-label": `source ${m[1]}` }));
        } else {
          p.append(piece);
        }
      }
      box.append(p);
    }
  }
}

function isLink(url) {
  return /^https?:\/\//.test(url || "");
}

// A source's place; in an instance over several repositories, its repository first.
function where(s) {
  const place = within(s);
  if (!s.repo) return place;
  return place.startsWith("#") ? `${s.repo}${place}` : `${s.repo}: ${place}`;
}

function within(s) {
  if (s.issue !== null && s.issue !== undefined) return `#${s.issue}`;
  // without a web URL, `url` is the pinned place itself: "path:9-12 @ 1a2b3c4"
  if (s.url && !isLink(s.url) && s.path && s.url.startsWith(s.path)) return s.url;
  if (s.path && s.start_line) {
    return s.end_line && s.end_line !== s.start_line
      ? `${s.path}:${s.start_line}-${s.end_line}` : `${s.path}:${s.start_line}`;
  }
  return s.path || s.title;
}

function renderSources(card, sources, turn) {
  if (!sources.length) return;
  card.append(el("h3", { text: "Sources" }));
  const list = el("ol", { class: "sources" });
  for (const s of sources) {
    const label = where(s);
    const heading = s.issue !== null && s.issue !== undefined
      ? s.title.replace(/^#\d+\s+/, "") : s.title;
    const title = heading && heading !== s.path && heading !== label ? ` — ${heading}` : "";
    const item = el("li", { id: `s-${turn}-${s.n}`, value: String(s.n) },
      isLink(s.url)
        ? el("a", { href: s.url, target: "_blank", rel: "noopener noreferrer", class: "source",
                    text: label })
        : el("span", { class: "source", text: label }),
      title,
      el("details", {}, el("summary", { text: "Quoted text" }), el("pre", { text: s.text })));
    for (const p of s.passages || []) {  // further passages of the same file or thread
      const part = { ...s, ...p, symbol: null };
      const plabel = where(part);
      const issue = s.issue !== null && s.issue !== undefined;
      const name = issue ? " — later in the thread"
        : p.title && p.title !== s.path && p.title !== plabel ? ` — ${p.title}` : "";
      item.append(el("div", { class: "passage" }, "↳ ",
        isLink(p.url)
          ? el("a", { href: p.url, target: "_blank", rel: "noopener noreferrer", class: "source",
                      text: plabel })
          : el("span", { class: "source", text: plabel }),
        name,
        el("details", {}, el("summary", { text: "Quoted text" }), el("pre", { text: p.text }))));
    }
    list.append(item);
  }
  card.append(list);
}

function renderFeedback(card, turn) {
  const group = el("div", { class: "feedback", role: "group",
                            "aria-label": "Was this answer helpful?" });
  group.append(el("span", { class: "muted", text: "Helpful?" }));
  for (const [verdict, label] of [["up", "👍 Yes"], ["down", "👎 No"]]) {
    const b = el("button", { type: "button", "aria-pressed": "false", "data-verdict": verdict,
                             text: label });
    b.addEventListener("click", () => sendFeedback(group, turn, verdict, b));
    group.append(b);
  }
  card.append(group);
}

async function sendFeedback(group, turn, verdict, button) {
  const resp = await fetch("v1/feedback", {
    method: "POST", headers: headers(), body: JSON.stringify({ turn, verdict }),
  });
  if (!resp.ok) {
    status(await errorLine(resp));
    return;
  }
  for (const b of group.querySelectorAll("button")) b.setAttribute("aria-pressed", "false");
  button.setAttribute("aria-pressed", "true");
  status("Thank you: your feedback was recorded.");
}

// The server-sent events of a streamed answer: {event, data} as each arrives.
async function* events(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

function finish(card, box, out) {
  const turn = out.turn;
  card.dataset.turn = String(turn);
  box.classList.remove("preview");
  box.setAttribute("aria-busy", "false");
  renderAnswer(box, out.answer, turn);
  if (out.note) card.append(el("p", { class: "note", text: out.note }));
  if (out.unsupported && out.unsupported.length) {
    card.append(el("p", { class: "note",
      text: "Not supported by the sources they cite (check before relying on them):" }));
    const ul = el("ul", { class: "unsupported" });
    for (const s of out.unsupported) ul.append(el("li", { text: s }));
    card.append(ul);
  }
  renderSources(card, out.sources, turn);
  renderFeedback(card, turn);
  conversation = out.conversation;
  const known = ($("instance").instances || {})[out.instance];
  if (known && out.commit) {
    known.commit = out.commit;
    known.indexed = true;
    describe();
  }
  const n = out.sources.length;
  status(n ? `Answered, citing ${n} source${n === 1 ? "" : "s"}.` : "Answered.");
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  const instance = $("instance").value;
  if (!question || !instance) return;
  const n = ++turns;
  const card = el("article", { class: "turn", "aria-labelledby": `q-${n}` });
  card.append(el("h2", { id: `q-${n}`, text: question }));
  const box = el("div", { class: "answer preview", "aria-busy": "true" },
                 el("p", { text: "Searching …" }));
  card.append(box);
  $("log").append(card);
  $("send").disabled = true;
  const body = { instance, question, stream: true };
  if (conversation) body.conversation = conversation;
  // The picker is a default, as a chat channel's: a question that says repo:NAME itself, or
  // follows up one that did, is searched as it says (the server decides: it has the thread).
  if (!$("scope-field").hidden && $("scope").value) body.default_repo = $("scope").value;
  status(`Searching ${instance}${body.default_repo ? ` (${body.default_repo})` : ""} …`);
  try {
    const resp = await fetch("v1/ask", { method: "POST", headers: headers(),
                                         body: JSON.stringify(body) });
    if (!resp.ok) throw new Error(await errorLine(resp));
    for await (const { event: kind, data } of events(resp)) {
      if (kind === "text") renderAnswer(box, data.text, 0);
      else if (kind === "answer") finish(card, box, data);
      else if (kind === "error") throw new Error(data.error.message);
    }
    $("question").value = "";
  } catch (e) {
    box.setAttribute("aria-busy", "false");
    box.replaceChildren(el("p", { class: "error", role: "alert", text: String(e.message || e) }));
    status("The question was not answered.");
  } finally {
    $("send").disabled = false;
  }
}

function newConversation() {
  conversation = null;
  $("log").replaceChildren();
  status("A new conversation.");
  $("question").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("ask").requestSubmit();
    }
  });
  $("new").addEventListener("click", newConversation);
  $("instance").addEventListener("change", () => {
    describe();
    if (conversation) newConversation();
  });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, $("key").value.trim());
    $("key").value = "";
    loadInstances();
  });
  loadInstances();
});
