"""Bounded load test of `ggufspec serve` on loopback; stops by itself.

Starts the server (or talks to --url), then runs --rounds rounds of --requests streaming requests
from --clients concurrent clients (greedy, completions and chat alternating). Checks:
  * every request completes (finish_reason and `data: [DONE]`) or gets 429;
  * every greedy output equals the same request made alone, before the load;
  * the server's resident memory does not grow across rounds (after the first, the warm-up).
Prints requests/s, time to first token and per-request tokens/s (p50/p95); exit status 1 if a
check fails.

usage:
  python scripts/load_test.py                                   # the embedded default pair
  python scripts/load_test.py --target t.gguf --draft d.gguf --threads 1
  python scripts/load_test.py --url http://127.0.0.1:8080 --api-key KEY
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

PROMPTS = [
    "Once upon a time",
    "The three primary colours are",
    "def fibonacci(n):",
    "Write a short poem about autumn.",
    "Explain what a hash table is.",
    "List four planets of the solar system.",
    "The quick brown fox",
    "Give me a recipe for pancakes.",
]


@dataclass
class Result:
    index: int
    status: int
    text: str = ""
    ttft_s: float | None = None  # arrival of the first non-empty text
    total_s: float = 0.0
    tokens: int = 0
    complete: bool = False  # finish_reason seen and the stream ended with [DONE]
    error: str | None = None

    @property
    def tps(self) -> float | None:
        gen_s = self.total_s - (self.ttft_s or 0.0)
        return (self.tokens - 1) / gen_s if self.tokens > 1 and gen_s > 0 else None


@dataclass
class Round:
    results: list[Result] = field(default_factory=list)
    wall_s: float = 0.0
    rss_mib: float | None = None


def request_body(i: int, max_tokens: int) -> tuple[str, dict]:
    """Request i: prompt i mod 8; even i -> completion, odd i -> chat. Greedy."""
    prompt = PROMPTS[i % len(PROMPTS)]
    common = {"max_tokens": max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if (i // len(PROMPTS)) % 2 == 0:
        return "/v1/completions", {"prompt": prompt, **common}
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], **common}


def key_of(i: int) -> int:
    """Requests with the same key are the same request (same path and body)."""
    return i % (2 * len(PROMPTS))


async def one_request(client: httpx.AsyncClient, url: str, i: int, max_tokens: int) -> Result:
    path, body = request_body(i, max_tokens)
    t0 = time.perf_counter()
    res = Result(index=i, status=0)
    parts: list[str] = []
    finished = done = False
    try:
        async with client.stream("POST", url + path, json=body) as r:
            res.status = r.status_code
            if r.status_code != 200:
                await r.aread()
                res.error = r.text[:200]
                res.total_s = time.perf_counter() - t0
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = chunk["error"]["message"]
                    continue
                for c in chunk.get("choices", []):
                    piece = c.get("text") if "text" in c else (c.get("delta") or {}).get("content")
                    if piece:
                        if res.ttft_s is None:
                            res.ttft_s = time.perf_counter() - t0
                        parts.append(piece)
                    finished = finished or c.get("finish_reason") is not None
                if chunk.get("usage"):
                    res.tokens = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.total_s = time.perf_counter() - t0
    res.text = "".join(parts)
    res.complete = finished and done and res.error is None
    return res


async def run_round(url: str, headers: dict, indices: list[int], clients: int, max_tokens: int, timeout: float) -> Round:
    todo = list(indices)
    rnd = Round()

    async def client_loop() -> None:
        async with httpx.AsyncClient(headers=headers, timeout=timeout) as client:
            while todo:
                res = await one_request(client, url, todo.pop(0), max_tokens)
                rnd.results.append(res)
                if res.status == 429:  # counted as refused, not retried; back off a little
                    await asyncio.sleep(0.2)

    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    rnd.wall_s = time.perf_counter() - t0
    return rnd


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def start_server(args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "ggufspec.cli", "serve", "--host", "127.0.0.1", "--port", "0",
           "--queue", str(args.queue), "--ctx", str(args.ctx), "--log-level", "warning",
           "--no-remember"]  # (every run from a fresh controller, as the figures were taken)
    for flag, value in (("--target", args.target), ("--draft", args.draft), ("--threads", args.threads),
                        ("--api-key", args.api_key)):
        if value is not None:
            cmd += [flag, str(value)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + args.startup_timeout  # the embedded pair may quantize on first use
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        if url is None and (m := re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())):
            url = m.group(1)
        if url is not None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not come up in {args.startup_timeout} s:\n{log.read_text()}")


def server_pid(url: str) -> int | None:
    """The pid listening on the URL's port (for --url), when this machine can see it."""
    port = httpx.URL(url).port
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return conn.pid
    except psutil.AccessDenied:
        pass
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="a running server (default: start one)")
    p.add_argument("--api-key", help="bearer key for the server")
    p.add_argument("--target", help="target model for the started server (default: the embedded pair)")
    p.add_argument("--draft", help="draft model for the started server")
    p.add_argument("--threads", type=int, help="server CPU threads")
    p.add_argument("--ctx", type=int, default=2048, help="server context (default 2048)")
    p.add_argument("--queue", type=int, default=16, help="server queue size (default 16: no 429 with 16 clients)")
    p.add_argument("--clients", type=int, default=16, help="concurrent streaming clients (default 16)")
    p.add_argument("--requests", type=int, default=32, help="requests per round (default 32)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3; the first warms up)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per request (default 32)")
    p.add_argument("--rss-slack-mib", type=float, default=16.0, help="allowed RSS growth after round 1 (default 16 MiB)")
    p.add_argument("--request-timeout", type=float, default=300.0, help="per-request timeout, s")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="server start timeout, s")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args()
    if args.rounds < 2 or args.requests < 1 or args.clients < 1 or args.max_tokens < 1:
        p.error("need --rounds >= 2 and positive --requests, --clients, --max-tokens")

    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="ggufspec-load-")
    log = Path(tmp.name) / "server.log"
    try:
        if args.url:
            url = args.url.rstrip("/").removesuffix("/v1")
            pid = server_pid(url)
        else:
            proc, url = start_server(args, log)
            pid = proc.pid
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        server = psutil.Process(pid) if pid else None

        # The same requests made alone, one at a time: what the loaded outputs must equal.
        reference: dict[int, str] = {}
        for i in range(2 * len(PROMPTS)):
            res = asyncio.run(run_round(url, headers, [i], 1, args.max_tokens, args.request_timeout)).results[0]
            if not res.complete:
                raise SystemExit(f"reference request {i} failed: {res.status} {res.error}")
            reference[key_of(i)] = res.text

        rounds: list[Round] = []
        for r in range(args.rounds):
            indices = list(range(r * args.requests, (r + 1) * args.requests))
            rnd = asyncio.run(run_round(url, headers, indices, args.clients, args.max_tokens, args.request_timeout))
            rnd.rss_mib = server.memory_info().rss / 2**20 if server else None
            rounds.append(rnd)
            ok = sum(x.complete for x in rnd.results)
            print(f"round {r + 1}: {ok}/{len(rnd.results)} completed, "
                  f"{sum(x.status == 429 for x in rnd.results)} refused (429), {rnd.wall_s:.1f} s"
                  + (f", server RSS {rnd.rss_mib:.1f} MiB" if rnd.rss_mib is not None else ""), file=sys.stderr)
        metrics = httpx.get(f"{url}/metrics", headers=headers, timeout=10).text
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        tmp.cleanup()

    # ---- checks and figures -------------------------------------------------------------------
    results = [x for rnd in rounds for x in rnd.results]
    failed = [x for x in results if not x.complete and x.status != 429]
    refused = [x for x in results if x.status == 429]
    done = [x for x in results if x.complete]
    mismatched = [x for x in done if x.text != reference[key_of(x.index)]]
    rss = [rnd.rss_mib for rnd in rounds]
    rss_growth = (rss[-1] - rss[1]) if rss[1] is not None else None
    wall = sum(rnd.wall_s for rnd in rounds)
    ttft = [x.ttft_s for x in done if x.ttft_s is not None]
    tps = [x.tps for x in done if x.tps is not None]
    accept = re.search(r"^ggufspec_accept_rate (\S+)$", metrics, re.M)
    summary = {
        "url": url,
        "clients": args.clients,
        "requests": len(results),
        "completed": len(done),
        "refused_429": len(refused),
        "failed": len(failed),
        "mismatched_outputs": len(mismatched),
        "requests_per_s": round(len(done) / wall, 3),
        "tokens_per_s_aggregate": round(sum(x.tokens for x in done) / wall, 2),
        "ttft_ms_p50": round(pct(ttft, 0.5) * 1000, 1),
        "ttft_ms_p95": round(pct(ttft, 0.95) * 1000, 1),
        "request_tokens_per_s_p50": round(pct(tps, 0.5), 2),
        "request_tokens_per_s_p95": round(pct(tps, 0.95), 2),
        "accept_rate": round(float(accept.group(1)), 4) if accept else None,
        "rss_mib_by_round": [round(x, 1) if x is not None else None for x in rss],
        "rss_growth_mib_after_round_1": round(rss_growth, 1) if rss_growth is not None else None,
    }
    checks = {
        "every request completed or got 429": not failed,
        "greedy outputs equal the request made alone": not mismatched,
        "server RSS flat after round 1": rss_growth is None or rss_growth <= args.rss_slack_mib,
    }
    summary["checks"] = checks
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for k, v in summary.items():
            if k != "checks":
                print(f"{k:32} {v}")
        for name, passed in checks.items():
            print(f"{'PASS' if passed else 'FAIL'}  {name}")
    for x in failed[:5]:
        print(f"failed request {x.index}: status {x.status}: {x.error}", file=sys.stderr)
    for x in mismatched[:3]:
        print(f"request {x.index} differs from the request alone:\n  {x.text!r}\n  {reference[key_of(x.index)]!r}", file=sys.stderr)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
