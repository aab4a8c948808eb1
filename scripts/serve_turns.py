#!/usr/bin/env python
"""A long conversation through `ggufspec serve`: time to first token per turn, with the server's
prompt cache (the default) and without it (cache_prompt false), and the greedy text of both.

One server process. Turn 1 sends a long user message (the built-in bench prompts' texts pasted as
notes, about --target-tokens tokens of prompt) and asks for a summary; turns 2 and 3 ask follow-up
questions with the whole history. Each turn streams (stream_options.include_usage), so the time to
first token is the wall time from sending the request to the first content chunk. Then the same
three requests again with cache_prompt false, each decoding its whole prompt: their text must equal
the cached run's (greedy), and their first tokens show what the cache saves.

    python scripts/serve_turns.py                       # the embedded default pair
    python scripts/serve_turns.py --target T.gguf --draft D.gguf --out docs/bench/serve_turns

Writes <out>.md and <out>.json (default docs/bench/serve_turns), atomically. Exit status 1 when a
turn's text differs or a later turn's first token is over 10% of turn 1's.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from serve_compare import _write  # noqa: E402

FOLLOW_UPS = ["Which of those notes matters most for a small team, and why?",
              "Now give me three action items, one line each."]


def _notes(target_tokens: int) -> str:
    from ggufspec.bench.prompts import load_prompts

    texts = [m["content"] for p in load_prompts() for m in p.messages if m["role"] == "user"]
    out, n = [], 0
    while n < target_tokens * 4:  # ~4 characters a token in English
        t = texts[len(out) % len(texts)]
        out.append(t)
        n += len(t)
    return "Here are my notes:\n\n" + "\n\n".join(out) + "\n\nSummarise them in a few sentences."


def _stream(url: str, messages: list, max_tokens: int, cache_prompt: bool) -> dict:
    body = {"model": "any", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "cache_prompt": cache_prompt}
    t0 = time.perf_counter()
    first, parts, usage = None, [], None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices", []):
                text = c.get("delta", {}).get("content")
                if text:
                    first = first if first is not None else time.perf_counter() - t0
                    parts.append(text)
            usage = chunk.get("usage") or usage
    return {"ttft_s": first, "wall_s": time.perf_counter() - t0, "text": "".join(parts),
            "prompt_tokens": usage["prompt_tokens"], "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
            "completion_tokens": usage["completion_tokens"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target")
    p.add_argument("--draft")
    p.add_argument("--pair")
    p.add_argument("--tokens", type=int, default=24, help="new tokens a turn (default 24)")
    p.add_argument("--target-tokens", type=int, default=1950, help="about this many prompt tokens in turn 1")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "serve_turns")
    args = p.parse_args()

    cmd = [sys.executable, "-m", "ggufspec.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--ctx", str(args.ctx),
           "--log-level", "warning", "--no-remember"]  # (every run from a fresh controller)
    for flag in ("target", "draft", "pair", "threads"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    log = Path(tempfile.mkstemp(prefix="serve_turns.", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        url = None
        while url is None:
            if proc.poll() is not None:
                print(f"error: the server exited with {proc.returncode}; see {log}", file=sys.stderr)
                return 2
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
            url = m.group(1) if m else None
            time.sleep(0.2)
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        _stream(url, [{"role": "user", "content": "Hello"}], 4, False)  # warm up

        messages = [{"role": "user", "content": _notes(args.target_tokens)}]
        cached, turns = [], []
        for i in range(3):
            res = _stream(url, messages, args.tokens, True)
            cached.append(res)
            turns.append(list(messages))
            messages = messages + [{"role": "assistant", "content": res["text"]}]
            if i < 2:
                messages.append({"role": "user", "content": FOLLOW_UPS[i]})
        fresh = [_stream(url, m, args.tokens, False) for m in turns]
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    rows, ok = [], True
    for i, (c, f) in enumerate(zip(cached, fresh), 1):
        same = c["text"] == f["text"]
        ratio = c["ttft_s"] / cached[0]["ttft_s"]
        ok &= same and (i == 1 or ratio <= 0.10)
        rows.append({"turn": i, "prompt_tokens": c["prompt_tokens"], "cached_tokens": c["cached_tokens"],
                     "ttft_s": c["ttft_s"], "ttft_vs_turn1": ratio, "fresh_ttft_s": f["ttft_s"],
                     "same_text": same, "cached": c, "fresh": f})
    md = ("# ggufspec serve: a 3-turn conversation, prompt cache on and off\n\n"
          "| turn | prompt tokens | reused from the cache | first token (cache) | vs turn 1 | first token "
          "(cache_prompt false) | same greedy text |\n|---:|---:|---:|---:|---:|---:|---|\n"
          + "".join(f"| {r['turn']} | {r['prompt_tokens']} | {r['cached_tokens']} | {r['ttft_s']:.3f} s | "
                    f"{r['ttft_vs_turn1']:.1%} | {r['fresh_ttft_s']:.3f} s | {'yes' if r['same_text'] else 'NO'} |\n"
                    for r in rows)
          + f"\n{args.tokens} new tokens a turn, greedy. Command: `python scripts/serve_turns.py {' '.join(sys.argv[1:])}`\n")
    _write(args.out.with_suffix(".json"), json.dumps({"command": cmd, "rows": rows}, indent=2) + "\n")
    _write(args.out.with_suffix(".md"), md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
