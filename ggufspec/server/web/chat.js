// The chat page: the conversation, the composer, the settings, the statistics and compare.
import { ReplyStats, drawChart } from "/web/stats.js";
import { ApiError, getJSON, streamChat } from "/web/stream.js";
import * as store from "/web/store.js";

const $ = (id) => document.getElementById(id);
const ui = {
  model: $("model"), keyForm: $("key-form"), key: $("api-key"), messages: $("messages"), error: $("error"),
  composer: $("composer"), input: $("input"), send: $("send"), stop: $("stop"), regenerate: $("regenerate"),
  compare: $("compare"), system: $("system"), temperature: $("temperature"), topP: $("top-p"),
  maxTokens: $("max-tokens"), draftMax: $("draft-max"), draft: $("draft"), marksOn: $("marks-on"),
  chart: $("chart"), comparison: $("comparison"),
};

let conv = null; // the tab's conversation (store.js)
let config = null; // GET /web/config
let running = null; // the AbortController of the reply streaming now

// ---- messages ------------------------------------------------------------------------------

// a mark as saved: [text, by, round, drafted, source]
const packMark = (m) => [m.text, m.by, m.round, m.drafted, m.source];
const unpack = (p) => ({ text: p[0], by: p[1], round: p[2], drafted: p[3], source: p[4] });

function tokenSpan(m) {
  const span = document.createElement("span");
  span.className = `tok by-${m.by}`;
  span.textContent = m.text;
  const what = { target: "target", draft: "draft model", lookup: "prompt lookup" }[m.by];
  span.title = `${what}${m.source === "correction" ? " (correction)" : m.source === "bonus" ? " (bonus)" : ""}, round ${m.round}`;
  return span;
}

function metaText(msg) {
  const s = msg.stats;
  if (!s || !s.final) return msg.stopped ? "stopped" : "";
  const u = s.final.usage, sp = s.final.speculative;
  const parts = [`${u.completion_tokens} tokens`, `${sp.gen_tps.toFixed(1)} tok/s`,
    `prompt ${u.prompt_tokens} (${u.prompt_tokens_details.cached_tokens} cached)`, `draft ${sp.draft}`];
  if (sp.drafted) parts.push(`${(100 * sp.accept_rate).toFixed(0)}% accepted`);
  return (msg.stopped ? "stopped · " : "") + parts.join(" · ");
}

function messageItem(msg) {
  const li = document.createElement("li");
  li.className = msg.role;
  const role = document.createElement("span");
  role.className = "role";
  role.textContent = msg.role === "user" ? "you" : "assistant";
  const body = document.createElement("div");
  body.className = "body";
  if (msg.marks && msg.marks.length) for (const p of msg.marks) body.appendChild(tokenSpan(unpack(p)));
  else body.textContent = msg.content;
  const meta = document.createElement("span");
  meta.className = "meta";
  meta.textContent = msg.role === "assistant" ? metaText(msg) : "";
  li.append(role, body, meta);
  li.dataset.state = "done";
  return li;
}

function render() {
  ui.messages.replaceChildren(...conv.messages.map(messageItem));
  ui.messages.scrollTop = ui.messages.scrollHeight;
  const last = [...conv.messages].reverse().find((m) => m.role === "assistant");
  showStats(last && last.stats);
  showComparison(last && last.compare);
  buttons();
}

function buttons() {
  const busy = running !== null;
  const lastIsReply = conv.messages.length && conv.messages[conv.messages.length - 1].role === "assistant";
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
  ui.regenerate.disabled = busy || !conv.messages.length;
  ui.compare.disabled = busy || !lastIsReply;
}

function fail(text) {
  ui.error.textContent = text;
  ui.error.hidden = !text;
}

// ---- statistics ----------------------------------------------------------------------------

function showStats(s) {
  const set = (id, text) => { $(id).textContent = text; };
  if (!s) {
    for (const id of ["st-tps", "st-tokens", "st-accept", "st-mal", "st-prompt", "st-draft"]) set(id, "–");
    drawChart(ui.chart, []);
    return;
  }
  set("st-tps", s.tps.toFixed(1));
  set("st-tokens", String(s.tokens));
  const sp = s.final && s.final.speculative;
  const drafted = sp ? sp.drafted : s.rounds.reduce((n, r) => n + r.drafted, 0);
  const kept = sp ? sp.accepted : s.rounds.reduce((n, r) => n + r.kept, 0);
  set("st-accept", drafted ? `${(100 * s.acceptRate).toFixed(0)}% (${kept}/${drafted})` : "no drafts");
  set("st-mal", s.meanAcceptedLength.toFixed(2));
  if (s.final) {
    const u = s.final.usage;
    set("st-prompt", `${u.prompt_tokens} tokens, ${u.prompt_tokens_details.cached_tokens} from the cache`);
    set("st-draft", s.final.speculative.draft);
  } else {
    set("st-prompt", "…");
  }
  drawChart(ui.chart, s.rounds);
}

function showComparison(c) {
  ui.comparison.hidden = !c;
  if (!c) return;
  $("cmp-spec").textContent = c.spec.tps.toFixed(1);
  $("cmp-base").textContent = c.base.tps.toFixed(1);
  $("cmp-spec-n").textContent = String(c.spec.tokens);
  $("cmp-base-n").textContent = String(c.base.tokens);
  const v = $("cmp-verdict");
  const speedup = c.base.tps ? `${(c.spec.tps / c.base.tps).toFixed(2)}x` : "n/a";
  let same = c.identical ? "identical text" : "the text differs";
  if (!c.greedy) same += " (sampled: texts differ by chance)";
  v.textContent = `speedup ${speedup}; ${same}`;
  v.className = c.identical ? "same" : c.greedy ? "differs" : "";
}

// ---- requests ------------------------------------------------------------------------------

function settings() {
  const s = conv.settings;
  s.temperature = Number(ui.temperature.value);
  s.top_p = Number(ui.topP.value);
  s.max_tokens = ui.maxTokens.value;
  s.draft_max = ui.draftMax.value;
  s.draft = ui.draft.value;
  s.marks = ui.marksOn.checked;
  conv.system = ui.system.value;
  return s;
}

function body(messages, overrides = {}) {
  const s = settings();
  const b = {
    model: config ? config.model : undefined,
    messages: [...(conv.system.trim() ? [{ role: "system", content: conv.system }] : []),
      ...messages.map((m) => ({ role: m.role, content: m.content }))],
    temperature: s.temperature, top_p: s.top_p,
    stream_options: { include_usage: true, include_speculative: true },
  };
  if (s.max_tokens) b.max_tokens = Number(s.max_tokens);
  if (s.draft) b.draft = s.draft;
  if (s.draft_max) b.draft_max = Number(s.draft_max);
  return { ...b, ...overrides };
}

// Stream one reply; `onMarks(marks, stats)` sees each chunk's tokens. Returns {text, marks, stats}
// (stopped: true when the user stopped it).
async function stream(request, onMarks) {
  const stats = new ReplyStats();
  const marks = [];
  let text = "", stopped = false;
  running = new AbortController();
  buttons();
  try {
    for await (const chunk of streamChat(request, { key: store.apiKey.get(), signal: running.signal })) {
      if (chunk.usage) stats.final = { usage: chunk.usage, speculative: chunk.speculative };
      const choice = chunk.choices[0];
      if (!choice) continue;
      const tokens = (chunk.speculative && chunk.speculative.tokens) || [];
      text += (choice.delta && choice.delta.content) || "";
      if (tokens.length) {
        stats.add(tokens);
        marks.push(...tokens);
        onMarks(tokens, stats);
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") throw e;
    stopped = true;
  } finally {
    running = null;
    buttons();
  }
  return { text, marks, stats, stopped };
}

async function reply() {
  const history = conv.messages.slice();
  const msg = { role: "assistant", content: "", marks: [] };
  conv.messages.push(msg);
  const li = messageItem(msg);
  li.dataset.state = "streaming";
  ui.messages.appendChild(li);
  const bodyEl = li.querySelector(".body");
  showComparison(null);
  try {
    const r = await stream(body(history), (tokens, stats) => {
      for (const m of tokens) bodyEl.appendChild(tokenSpan(m));
      ui.messages.scrollTop = ui.messages.scrollHeight;
      showStats(stats.toJSON());
    });
    Object.assign(msg, { content: r.text, marks: r.marks.map(packMark), stats: r.stats.toJSON(), stopped: r.stopped });
    li.replaceWith(messageItem(msg));
    showStats(msg.stats);
  } catch (e) {
    conv.messages.pop();
    li.remove();
    problem(e);
  }
  store.save(conv);
  buttons();
}

function problem(e) {
  if (e instanceof ApiError && e.status === 401) {
    ui.keyForm.hidden = false;
    ui.key.focus();
    fail("this server needs an API key: enter it above");
  } else {
    fail(e.message || String(e));
  }
}

async function send() {
  const text = ui.input.value;
  if (!text.trim() || running) return;
  fail("");
  ui.input.value = "";
  conv.messages.push({ role: "user", content: text });
  store.save(conv);
  render();
  await reply();
}

async function regenerate() {
  if (running) return;
  fail("");
  if (conv.messages.length && conv.messages[conv.messages.length - 1].role === "assistant") conv.messages.pop();
  render();
  await reply();
}

// The last turn again with the target alone: both speeds, and whether the text is the same.
async function compare() {
  const i = conv.messages.length - 1;
  const last = conv.messages[i];
  if (running || !last || last.role !== "assistant" || !last.stats) return;
  fail("");
  try {
    const r = await stream(body(conv.messages.slice(0, i), { draft: "none", max_tokens: last.stats.tokens }), () => {});
    if (r.stopped) return;
    last.compare = {
      spec: { tps: last.stats.tps, tokens: last.stats.tokens },
      base: { tps: r.stats.tps, tokens: r.stats.tokens },
      identical: r.text === last.content, greedy: Number(conv.settings.temperature) === 0,
    };
    store.save(conv);
    showComparison(last.compare);
  } catch (e) {
    problem(e);
  }
}

// ---- start ---------------------------------------------------------------------------------

function showSettings() {
  const s = conv.settings;
  ui.system.value = conv.system || "";
  ui.temperature.value = s.temperature;
  ui.topP.value = s.top_p;
  ui.maxTokens.value = s.max_tokens;
  ui.draftMax.value = s.draft_max;
  ui.marksOn.checked = s.marks !== false;
  ui.messages.classList.toggle("marks", ui.marksOn.checked);
  if ([...ui.draft.options].some((o) => o.value === s.draft)) ui.draft.value = s.draft;
}

async function connect() {
  try {
    config = await getJSON("/web/config", store.apiKey.get());
  } catch (e) {
    problem(e);
    ui.model.textContent = "not connected";
    return;
  }
  ui.keyForm.hidden = !store.apiKey.get();
  fail("");
  const slots = config.slots > 1 ? ` · ${config.slots} slots` : "";
  ui.model.textContent = `${config.model} · draft ${config.draft}${slots}`;
  ui.draftMax.max = config.draft_max_limit;
  ui.draftMax.placeholder = `server's (${config.draft_max})`;
  const options = [["", `all loaded (${config.draft})`], ...config.drafters.map((d) => [d.file, d.file]),
    ["none", "none: the target alone"]];
  ui.draft.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
  showSettings();
}

async function main() {
  conv = await store.open();
  document.body.dataset.conversation = conv.id;
  showSettings();
  render();
  ui.composer.addEventListener("submit", (e) => { e.preventDefault(); send(); });
  ui.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  ui.stop.addEventListener("click", () => running && running.abort());
  ui.regenerate.addEventListener("click", regenerate);
  ui.compare.addEventListener("click", compare);
  ui.marksOn.addEventListener("change", () => { ui.messages.classList.toggle("marks", ui.marksOn.checked); settings(); store.save(conv); });
  for (const el of [ui.system, ui.temperature, ui.topP, ui.maxTokens, ui.draftMax, ui.draft]) {
    el.addEventListener("change", () => { settings(); store.save(conv); });
  }
  $("new-chat").addEventListener("click", async () => {
    if (running) return;
    conv = await store.fresh();
    document.body.dataset.conversation = conv.id;
    showSettings();
    render();
  });
  ui.keyForm.addEventListener("submit", (e) => { e.preventDefault(); store.apiKey.set(ui.key.value.trim()); connect(); });
  await connect();
  document.body.dataset.ready = "1";
}

main();
