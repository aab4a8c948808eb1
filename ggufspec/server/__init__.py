"""OpenAI-compatible HTTP server over one loaded target/draft pair (user guide: docs/SERVER.md).

    pair = open_pair(refs=resolve_pair_refs(target=..., draft=...), settings=PairSettings())
    app = create_app(pair=pair, model_name="smollm2")
    uvicorn.run(app, host="127.0.0.1", port=8080)

Endpoints: POST /v1/completions, POST /v1/chat/completions (``stream: true`` as server-sent events
ending in ``data: [DONE]``), GET /v1/models, GET /health, GET /metrics (Prometheus text); GET /: a
chat page (GET /web/...: its files and config).
Responses carry OpenAI's ``usage`` and a ``speculative`` block (drafted, accepted, accept_rate,
mean_accepted_len, gen_tps, draft); a stream carries them only with
``stream_options: {"include_usage": true}``, on one last chunk with no choices, as OpenAI does.

Modules, one concept each:
  adapter    the one door into the library (load the pair, encode, start a generation)
  schemas    request bodies: read, type-check, refuse what would be ignored
  drafting   a request's drafters and draft length, within what the server loaded
  worker     the one generation thread and its bounded waiting line (429 when full)
  slots      --parallel N: a thread per slot, the same waiting line, decodes batched
  eta        Retry-After: how long the work in hand takes, from this server's measured speed
  delivery   a job's events to its client: one response, or server-sent events; disconnects
  responses  OpenAI-shaped bodies and chunks
  marks      each streamed token's provenance (opt-in: stream_options.include_speculative)
  page       the chat page at GET / (files in web/)
  metrics    Prometheus metrics
  errors     errors in OpenAI's shape
  app        the routes and `create_app`
  shutdown   uvicorn's server, ending the generations first on SIGTERM
"""

from ggufspec.server.adapter import open_pair
from ggufspec.server.app import DEFAULT_QUEUE_SIZE, MAX_BODY_BYTES, create_app

__all__ = ["DEFAULT_QUEUE_SIZE", "MAX_BODY_BYTES", "create_app", "open_pair"]
