// Conversations kept in localStorage, one per tab: a reload keeps the tab's conversation
// (sessionStorage remembers which it is), a new tab takes the most recent one no other open tab
// holds (Web Locks, where the browser has them) or starts a new one. Several tabs can so chat at
// once (serve --parallel N) without writing over each other.

const PREFIX = "ggufspec.chat.";
const KEY = "ggufspec.apiKey";
const TAB = "ggufspec.tab";

export const apiKey = {
  get: () => localStorage.getItem(KEY) || "",
  set: (k) => (k ? localStorage.setItem(KEY, k) : localStorage.removeItem(KEY)),
};

export function blank() {
  return {
    id: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`,
    updated: Date.now(), system: "", messages: [],
    settings: { temperature: 0, top_p: 1, max_tokens: 256, draft: "", draft_max: "", marks: true },
  };
}

export function save(conv) {
  conv.updated = Date.now();
  localStorage.setItem(PREFIX + conv.id, JSON.stringify(conv));
  sessionStorage.setItem(TAB, conv.id);
}

function load(id) {
  try { return JSON.parse(localStorage.getItem(PREFIX + id)); } catch (_) { return null; }
}

function saved() {
  const out = [];
  for (let i = 0; i < localStorage.length; i++) {
    const k = localStorage.key(i);
    if (k.startsWith(PREFIX)) { const c = load(k.slice(PREFIX.length)); if (c && c.id) out.push(c); }
  }
  return out.sort((a, b) => b.updated - a.updated);
}

// Hold a lock named after the conversation for as long as this tab shows it. `waitMs`: wait that
// long for it (a reload: the page before may hold it a moment longer), else only if free now.
let release = null;
async function hold(id, waitMs = 0) {
  if (release) { release(); release = null; }
  if (!navigator.locks) return true;
  const abort = new AbortController();
  const options = waitMs ? { signal: abort.signal } : { ifAvailable: true };
  if (waitMs) setTimeout(() => abort.abort(), waitMs);
  return new Promise((resolve) => {
    navigator.locks.request(PREFIX + id, options, (lock) => {
      if (!lock) { resolve(false); return undefined; }
      resolve(true);
      return new Promise((r) => { release = r; });
    }).catch(() => resolve(false)); // aborted: another tab shows it
  });
}

// The conversation this tab shows: its own after a reload, else the latest one free.
export async function open() {
  const mine = sessionStorage.getItem(TAB);
  if (mine) {
    const c = load(mine);
    if (c && (await hold(c.id, 1500))) return c;
  }
  for (const c of saved()) if (await hold(c.id)) return c;
  const c = blank();
  await hold(c.id);
  return c;
}

export async function fresh() {
  const c = blank();
  await hold(c.id);
  save(c);
  return c;
}
