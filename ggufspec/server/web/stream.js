// The server's /v1/chat/completions as a stream of parsed chunks (server-sent events, "data: ..."
// lines, ending in "data: [DONE]"). An HTTP error becomes an ApiError with the server's message.

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(key) {
  const h = { "Content-Type": "application/json" };
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  try { message = (await response.json()).error.message || message; } catch (_) { /* not JSON */ }
  return new ApiError(response.status, message);
}

export async function getJSON(path, key) {
  const r = await fetch(path, { headers: headers(key) });
  if (!r.ok) throw await failure(r);
  return r.json();
}

// Yields every chunk object of one streamed chat completion; `signal` aborts it.
export async function* streamChat(body, { key, signal }) {
  const r = await fetch("/v1/chat/completions", {
    method: "POST", headers: headers(key), body: JSON.stringify({ ...body, stream: true }), signal,
  });
  if (!r.ok) throw await failure(r);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(500, chunk.error.message);
        yield chunk;
      }
    }
  }
}
