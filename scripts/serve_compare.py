#!/usr/bin/env python
"""End to end through the OpenAI API: `ggufspec serve` against llama.cpp's `llama-server` on the
same GGUF files, as a client waits for them.

Servers (all started at once, on 127.0.0.1, the same threads and context per sequence):
  ggufspec            ggufspec serve --target T --draft D
  ggufspec+always     ggufspec serve ... --always-draft (with --always-draft: every slot drafts while
                      others generate, where the default runs the target alone; docs/gpu.md)
  llama-server+draft  llama-server -m T -md D --spec-type draft-simple --spec-draft-n-max K
  llama-server        llama-server -m T (no draft)
llama-server gets the KV cache type ggufspec's target uses (exactness.auto_cache_type) and flash
attention, as ggufspec's contexts have; both get `--parallel` slots as there are clients at most.

Workload: the built-in chat prompts (ggufspec/prompts/bench.jsonl, category chat), greedy, at each
--tokens, by one client (one request after another) then by --clients at once (each client sends
every prompt, one after another, starting at its own; so the server always has that many requests). Every request sends cache_prompt false (both servers' field), so
each one prefills its whole prompt: a repeat of the same prompt is not served from the cache. Servers
alternate within each repeat (rotated each repeat) so a slow spell of the machine hits all of them.

Figure: completion tokens per wall second of one pass over the prompts (prefill, first token and
HTTP included): the sum of usage.completion_tokens over the wall time from the first request sent to
the last answer received. The table shows the median over --repeats passes with min-max.

    scripts/build_native.sh          # builds llama-server too (once)
    python scripts/serve_compare.py --repeats 3     # 12 prompts: about 45 min at ~60 tok/s
    python scripts/serve_compare.py --limit 1 --tokens 16 --repeats 1 --clients 2 --out /tmp/smoke

Writes <out>.md and <out>.json (default docs/bench/serve_compare), atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ggufspec.errors import UserError  # noqa: E402
from ggufspec.llama.lib import repack  # noqa: E402
from ggufspec.settings import DRAFT_MAX  # noqa: E402


@dataclass
class Server:
    name: str
    cmd: list[str]
    url: str = ""
    proc: subprocess.Popen | None = None
    log: Path | None = None
    results: dict = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(args) -> tuple[Path, Path]:
    from ggufspec.models.resolve import resolve_pair_refs
    from ggufspec.models.refs import resolve_path

    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair)
    if refs.draft in (None, "lookup"):
        raise UserError("the comparison needs a draft model (llama-server -md); give --draft FILE or --pair NAME")
    return resolve_path(refs.target), resolve_path(refs.draft)


def _llama_server(args) -> Path:
    from ggufspec.bench.native import native_dir

    exe = Path(args.llama_server) if args.llama_server else native_dir() / "llama-server"
    if not exe.is_file():
        raise UserError(f"{exe} not found; build it with scripts/build_native.sh or pass --llama-server PATH")
    return exe


def _servers(args, target: Path, draft: Path, exe: Path, cache_type: str) -> list[Server]:
    threads = ["--threads", str(args.threads)] if args.threads else []
    slots = max(args.clients)
    port = _free_port
    ours = Server("ggufspec", [sys.executable, "-m", "ggufspec.cli", "serve", "--target", str(target), "--draft",
                               str(draft), "--host", "127.0.0.1", "--port", "0", "--ctx", str(args.ctx),
                               "--parallel", str(slots), "--queue", str(2 * slots), "--log-level", "warning",
                               "--no-remember", *threads])  # (a new user's server: a fresh controller every run)
    common = ["-m", str(target), "--host", "127.0.0.1", "-c", str(args.ctx * slots), "-np", str(slots),
              "-fa", "on", "-ctk", cache_type, "-ctv", cache_type, "--no-webui"]
    if not repack():  # ours repacks weights only where llama.cpp's AMX matmul cannot crash: the same here
        common.append("--no-repack")
    if args.threads:
        common += ["-t", str(args.threads), "-tb", str(args.threads)]
    spec = ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.draft_max)]
    if args.threads:
        spec += ["-td", str(args.threads), "-tbd", str(args.threads)]
    ours_too = [Server("ggufspec+always", [*ours.cmd, "--always-draft"])] if args.always_draft else []
    peers = [Server("llama-server+draft", [str(exe), *common, *spec]), Server("llama-server", [str(exe), *common])]
    for p in peers:
        p.url = f"http://127.0.0.1:{port()}"
        p.cmd += ["--port", p.url.rsplit(":", 1)[1]]
    return [ours, *ours_too, *peers]


def _start(server: Server, logdir: Path) -> None:
    server.log = logdir / f"{server.name}.log"
    with server.log.open("wb") as out:
        server.proc = subprocess.Popen(server.cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                       env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})


def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise UserError(f"{server.name} exited with {server.proc.returncode}; see {server.log}")
        if not server.url:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", server.log.read_text(errors="replace"))
            server.url = m.group(1) if m else ""
        if server.url:
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    raise UserError(f"{server.name} did not come up in {timeout:.0f} s; see {server.log}")


def _ask(url: str, messages: list, max_tokens: int) -> int:
    """One greedy chat completion; its completion tokens."""
    body = {"model": "any", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "cache_prompt": False}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def _pass(url: str, prompts: list, max_tokens: int, clients: int) -> dict:
    """`clients` users at once, each sending every prompt in turn (user j starts at prompt j), so
    the server has `clients` requests in hand from start to end: completion tokens per wall second."""

    def user(j: int) -> int:
        return sum(_ask(url, prompts[(j + i) % len(prompts)], max_tokens) for i in range(len(prompts)))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(user, range(clients)))
    wall = time.perf_counter() - t0
    return {"completion_tokens": tokens, "wall_s": wall, "tps": tokens / wall}


def _table(rows: list[dict]) -> str:
    head = ("| server | new tokens | clients | completion tok/s (median) | min-max | completion tokens | passes |\n"
            "|---|---:|---:|---:|---:|---:|---:|\n")
    lines = [f"| {r['server']} | {r['max_tokens']} | {r['clients']} | {r['median_tps']:.1f} | "
             f"{r['min_tps']:.1f}-{r['max_tps']:.1f} | {r['completion_tokens']} | {r['passes']} |" for r in rows]
    return head + "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--target", help="target GGUF reference (default: the embedded default pair)")
    p.add_argument("--draft", help="draft GGUF reference")
    p.add_argument("--pair", help="a catalog pair")
    p.add_argument("--llama-server", help="llama-server binary (default: scripts/build_native.sh's)")
    p.add_argument("--tokens", type=int, nargs="+", default=[64, 256], help="new tokens a request (default 64 256)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4], help="clients at once (default 1 4)")
    p.add_argument("--repeats", type=int, default=3, help="passes over the prompts per cell (default 3)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N chat prompts")
    p.add_argument("--draft-max", type=int, default=DRAFT_MAX,
                   help=f"llama-server's --spec-draft-n-max (default {DRAFT_MAX}, ggufspec's --draft-max)")
    p.add_argument("--ctx", type=int, default=4096, help="context per sequence (default 4096)")
    p.add_argument("--threads", type=int, default=None, help="threads for every server (default: each one's own)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "serve_compare",
                   help="output stem: writes STEM.md and STEM.json (default docs/bench/serve_compare)")
    p.add_argument("--always-draft", action="store_true",
                   help="also ggufspec serve --always-draft (its slots draft while others generate)")
    p.add_argument("--startup-timeout", type=float, default=600, help="seconds a server may take to load")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from ggufspec.bench.machine import load_now, machine_info
    from ggufspec.bench.prompts import load_prompts
    from ggufspec.ggufinfo import read_model_info
    from ggufspec.loop.exactness import auto_cache_type

    if args.repeats < 1 or min(args.clients) < 1 or min(args.tokens) < 1:
        raise UserError("--repeats, --clients and --tokens must be >= 1")
    prompts = [list(x.messages) for x in load_prompts() if x.category == "chat"][: args.limit]
    target, draft = _files(args)
    exe = _llama_server(args)
    cache_type = auto_cache_type(read_model_info(target), on_gpu=False)
    servers = _servers(args, target, draft, exe, cache_type)
    logdir = Path(tempfile.mkdtemp(prefix="serve_compare."))
    print(f"target {target.name}, draft {draft.name}, {len(prompts)} chat prompts, KV cache {cache_type}; logs in {logdir}",
          file=sys.stderr)
    try:
        for s in servers:
            _start(s, logdir)
        for s in servers:
            _wait_ready(s, args.startup_timeout)
            _ask(s.url, prompts[0], 8)  # warm up: first-request costs stay out of the figures
        cells = [(n, c) for n in args.tokens for c in args.clients]
        for rep in range(args.repeats):
            order = servers[rep % len(servers):] + servers[: rep % len(servers)]
            for n, c in cells:
                for s in order:
                    res = _pass(s.url, prompts, n, c)
                    s.results.setdefault((n, c), []).append(res)
                    print(f"repeat {rep + 1}/{args.repeats} {s.name:<18} n={n:<4} clients={c}: "
                          f"{res['tps']:.1f} tok/s ({res['completion_tokens']} tokens, {res['wall_s']:.2f} s)",
                          file=sys.stderr)
    finally:
        for s in servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)
        for s in servers:
            if s.proc is not None:
                try:
                    s.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    s.proc.kill()

    rows = []
    for n, c in [(n, c) for n in args.tokens for c in args.clients]:
        for s in servers:
            tps = [r["tps"] for r in s.results[(n, c)]]
            rows.append({"server": s.name, "max_tokens": n, "clients": c, "median_tps": statistics.median(tps),
                         "min_tps": min(tps), "max_tps": max(tps), "passes": len(tps),
                         "completion_tokens": s.results[(n, c)][0]["completion_tokens"],  # of one pass
                         "runs": s.results[(n, c)]})
    setup = {"target": str(target), "draft": str(draft), "prompts": len(prompts), "cache_type": cache_type,
             "draft_max": args.draft_max, "ctx": args.ctx, "threads": args.threads, "repeats": args.repeats,
             "commands": {s.name: s.cmd for s in servers}}
    result = {"setup": setup, "machine": machine_info(n_threads=args.threads), "load": load_now(), "rows": rows}
    md = (f"# ggufspec serve vs llama-server, end to end\n\n"
          f"Target `{target.name}`, draft `{draft.name}` (llama-server: `--spec-type draft-simple "
          f"--spec-draft-n-max {args.draft_max}`), {len(prompts)} built-in chat prompts, greedy, cache_prompt false, "
          f"KV cache {cache_type}. Completion tokens per wall second of a pass over the prompts (prefill, first "
          f"token and HTTP included), median of {args.repeats} passes with min-max.\n\n"
          + _table(rows) + f"\nMachine: {result['machine'].get('cpu')}; load when done: {result['load']}.\n"
          f"Command: `python scripts/serve_compare.py {' '.join(sys.argv[1:])}`\n")
    _write(args.out.with_suffix(".json"), json.dumps(result, indent=2, default=str) + "\n")
    _write(args.out.with_suffix(".md"), md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
