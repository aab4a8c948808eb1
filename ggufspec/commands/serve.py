"""Serve a target/draft pair over the OpenAI HTTP API, with speculative decoding.

Endpoints: POST /v1/completions, POST /v1/chat/completions (stream: true for server-sent
events), GET /v1/models, GET /health, GET /metrics (Prometheus), and a chat page at GET / that
shows where each token came from. Responses carry `usage` and a `speculative` block (drafted,
accepted, accept_rate, mean_accepted_len, gen_tps). Requests may choose the drafters (draft: names
the server loaded, or none), draft_max, draft_min, fixed, always_draft and accept (greedy |
rejection | match) besides OpenAI's sampling fields; the speculation flags (--draft-max ...
--variant) are the server's defaults for them.

The pair's KV caches are kept between requests: a request decodes only what its prompt does not
share with the previous one (a conversation's next turn re-reads nothing);
usage.prompt_tokens_details.cached_tokens says how many prompt tokens were reused, and a request
may opt out with "cache_prompt": false (llama.cpp server's name).

One generation runs at a time unless --parallel N: then N run at once, each in its own slot (its
own KV caches and prefix cache; a request goes to the free slot sharing the longest prefix with
its prompt), their decodes merged into one batch per step; while several slots generate, each
runs the target alone (batching pays more than drafting), drafting again when alone. Up to
--queue requests wait, and more get 429 with Retry-After (the time the queue takes, from this
server's measured speed). A client that disconnects stops its generation. On SIGTERM or Ctrl-C
every open stream ends with an error event (code server_shutting_down) and data: [DONE], requests
in flight get 503, then it exits. With no --target/--draft, serves the embedded default pair.
Binds 127.0.0.1 unless --host says otherwise. Needs the server extra: pip install 'ggufspec[server]'.

examples:
  ggufspec serve
  ggufspec serve --target ./big.gguf --draft ./small.gguf --port 8000 --api-key "$KEY"
  ggufspec serve --parallel 4
  curl -s localhost:8080/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}]}'
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from ggufspec.commands import add_draft_kv_argument, add_model_arguments, add_remember_argument, add_rpc_argument
from ggufspec.commands.speculation_args import add_speculation_arguments, speculative_settings
from ggufspec.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("models")
    add_model_arguments(m, repeatable_draft=True, draft_help="draft model reference, 'lookup' for prompt lookup (repeatable: several drafters), "
                        "'none' for the target alone")
    m.add_argument("--model-name", metavar="NAME", help="model id served by /v1/models (default: the target's file name)")
    s = p.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one and prints it)")
    s.add_argument("--api-key", metavar="KEY", default=os.environ.get("GGUFSPEC_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $GGUFSPEC_API_KEY, else no key)")
    s.add_argument("--parallel", "-np", type=int, default=1, metavar="N",
                   help="generations at once (default 1), their decodes batched; costs N KV caches of --ctx tokens "
                        "each, for the target and every draft model")
    s.add_argument("--queue", type=int, default=8, metavar="N", help="requests that may wait while every slot generates (default 8); more get 429")
    s.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"), help="uvicorn log level")
    r = p.add_argument_group("runtime")
    add_rpc_argument(r)
    add_draft_kv_argument(r)
    add_remember_argument(r)
    r.add_argument("--ctx", type=int, default=4096, metavar="N", help="context size in tokens (default 4096)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    r.add_argument("--llama-log", action="store_true", help="show llama.cpp's own log")
    add_speculation_arguments(p.add_argument_group(
        "speculation (the server's defaults: a request's draft_max, draft_min, fixed, always_draft and accept "
        "override them)"))


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UserError(f"cannot resolve --host {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port") from None
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise UserError(f"ggufspec serve needs {exc.name}: pip install 'ggufspec[server]'") from None
    from ggufspec.llama.compute import compute_thread
    from ggufspec.llama.lib import set_verbose
    from ggufspec.loop.acceptance import AcceptRule
    from ggufspec.models.resolve import resolve_pair_refs
    from ggufspec.server import create_app, open_pair
    from ggufspec.server.adapter import describe
    from ggufspec.server.shutdown import DrainingServer
    from ggufspec.settings import ContextSettings, PairSettings

    set_verbose(args.llama_log)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in [0, 65535], got {args.port}")
    if args.parallel < 1:
        raise UserError(f"--parallel must be >= 1, got {args.parallel}")
    if args.queue < 0:
        raise UserError(f"--queue must be >= 0, got {args.queue}")
    if args.api_key is not None and not args.api_key.strip():
        raise UserError("--api-key is empty; give a key or leave it out")
    settings = PairSettings(context=ContextSettings(n_ctx=args.ctx, n_threads=args.threads), offline=args.offline,
                            rpc=(args.rpc,) if args.rpc else (), parallel=args.parallel, draft_kv=args.draft_kv,
                            remember=args.remember)
    # the server's speculation settings; a request may change draft_max, draft_min, fixed, always_draft, accept
    speculative = speculative_settings(args)
    if speculative.accept is AcceptRule.GREEDY:  # requests sample by default (OpenAI's temperature 1)
        raise UserError("serve --accept greedy would refuse every request that samples; a request at "
                        "temperature 0 is judged greedily anyway: drop --accept, or give rejection or match")
    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair)

    sock = _bind(args.host, args.port)  # before loading: a busy port fails fast
    # every decode on one thread, the load's warm-up included: decodes from a second thread run
    # at about half speed with llama.cpp's OpenMP CPU backend (ggufspec.llama.compute)
    with compute_thread(), open_pair(refs=refs, settings=settings) as pair:
        info = describe(pair)
        name = args.model_name or info.target_stem
        app = create_app(pair=pair, model_name=name, api_key=args.api_key, queue_size=args.queue,
                         speculative=speculative)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        err = sys.stderr
        learnt = f", the controller from {pair.remembered_rounds} rounds of earlier runs" if pair.remembered_rounds else ""
        err.write(
            f"ggufspec serve: {name} (target {info.target_file}, draft {info.draft_name})"
            + (f", {args.parallel} slots" if args.parallel > 1 else "") + learnt + "\n" +
            f"ggufspec serve: listening on http://{shown}:{port}/v1\n"
        )
        if host not in ("127.0.0.1", "::1", "localhost") and args.api_key is None:
            err.write("ggufspec serve: warning: reachable from other machines and no --api-key is set\n")
        err.flush()
        config = uvicorn.Config(
            app, log_level=args.log_level, timeout_graceful_shutdown=5, lifespan="on",
        )
        # on SIGTERM the generations end first, each stream with an error event and [DONE]
        server = DrainingServer(config, halt=app.state.server.worker.halt)
        server.run(sockets=[sock])
        lost = app.state.server.worker.lost
        if lost is not None:  # freeing buffers on a dead worker would wait for it: leave it to the OS
            err.write(f"error: an RPC worker stopped answering ({lost}); restart it and the server\n")
            err.flush()
            os._exit(2)
    return 0
