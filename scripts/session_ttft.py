#!/usr/bin/env python
"""Time to first token of a conversation's next turn: cold vs resumed from a saved session.

On the embedded default pair (or --target/--draft), with a conversation of about --tokens prompt
tokens, three processes (each a fresh load, as after a restart):

    save    : answers the conversation so far, saves the session (target and draft caches);
    cold    : a new process answers the next turn from empty caches (cache_prompt=False);
    resumed : a new process loads the session, then answers the same next turn (prefix reuse).

TTFT is wall time from `pair.generate(...)` to its first token (tokenizing the chat included);
`load_s` is the session load before it. Greedy output of cold and resumed must be identical.
Run on a quiet machine:

    python scripts/session_ttft.py --tokens 2000 --repeats 3 --out session_ttft.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOPICS = ["design", "sales", "operations", "data", "legal", "support", "finance", "research"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def conversation(pair, n_tokens: int) -> list[dict]:
    """A deterministic chat of about n_tokens prompt tokens, ending on a user turn."""
    messages = [{"role": "system", "content": "You are a concise assistant that keeps meeting notes."}]
    i = 0
    while True:
        notes = "\n".join(
            f"Note {i}.{j}: the {TOPICS[(i + j) % 8]} team moved its weekly meeting to {DAYS[(i * 3 + j) % 5]} "
            f"and asked for the {TOPICS[(i + 2 * j) % 8]} report by the end of week {i + j + 1}."
            for j in range(6)
        )
        messages.append({"role": "user", "content": f"Here are more notes:\n{notes}\nAcknowledge briefly."})
        if len(pair.encode(messages=messages)) >= n_tokens:
            return messages
        messages.append({"role": "assistant", "content": f"Noted: {6 * (i + 1)} notes so far."})
        i += 1


def timed_turn(pair, messages: list[dict], *, max_tokens: int, cache_prompt: bool) -> dict:
    t0 = time.perf_counter()
    gen = pair.generate(messages=messages, max_tokens=max_tokens, cache_prompt=cache_prompt)
    next(gen)
    ttft = time.perf_counter() - t0
    gen.run()
    s = gen.stats
    return dict(ttft_s=ttft, prompt_s=s.prompt_s, prompt_tokens=s.prompt_tokens, cached_tokens=s.cached_tokens,
                tokens=gen.tokens, text=gen.text)


def child(args: argparse.Namespace) -> None:
    from ggufspec import ContextSettings, PairSettings, load_pair

    settings = PairSettings(context=ContextSettings(n_ctx=args.ctx))
    with load_pair(target=args.target, draft=args.draft, settings=settings) as pair:
        if args.phase == "save":
            messages = conversation(pair, args.tokens)
            out = timed_turn(pair, messages, max_tokens=args.max_tokens, cache_prompt=False)
            messages = [*messages, {"role": "assistant", "content": out["text"]},
                        {"role": "user", "content": "Which team meets on Thursday most often? One line."}]
            pair.save_session(args.session, meta={"next": messages})
            out["session_bytes"] = Path(args.session).stat().st_size
        else:
            from ggufspec.session import read_session

            messages = read_session(args.session)[0]["meta"]["next"]
            load_s = 0.0
            if args.phase == "resumed":
                t0 = time.perf_counter()
                pair.load_session(args.session)
                load_s = time.perf_counter() - t0
            out = timed_turn(pair, messages, max_tokens=args.max_tokens, cache_prompt=args.phase == "resumed")
            out["load_s"] = load_s
    print(json.dumps(out))


def run_child(args: argparse.Namespace, phase: str, session: str) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--session", session, "--tokens", str(args.tokens),
           "--max-tokens", str(args.max_tokens), "--ctx", str(args.ctx)]
    cmd += [x for flag, v in (("--target", args.target), ("--draft", args.draft)) if v for x in (flag, v)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                     os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=2000, help="conversation length in prompt tokens (about)")
    ap.add_argument("--max-tokens", type=int, default=24, help="new tokens a turn")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=1, help="cold/resumed pairs of processes (medians reported)")
    ap.add_argument("--target", default=None)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--phase", choices=["save", "cold", "resumed"], help=argparse.SUPPRESS)
    ap.add_argument("--session", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        return child(args)

    with tempfile.TemporaryDirectory() as tmp:
        session = str(Path(tmp) / "conversation.session")
        saved = run_child(args, "save", session)
        cold = [run_child(args, "cold", session) for _ in range(args.repeats)]
        resumed = [run_child(args, "resumed", session) for _ in range(args.repeats)]
    identical = all(r["tokens"] == cold[0]["tokens"] for r in [*cold, *resumed])
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    result = dict(
        conversation_tokens=saved["prompt_tokens"], next_turn_tokens=cold[0]["prompt_tokens"],
        session_bytes=saved["session_bytes"], cached_tokens=resumed[0]["cached_tokens"],
        cold_ttft_s=med(cold, "ttft_s"), resumed_ttft_s=med(resumed, "ttft_s"), resumed_load_s=med(resumed, "load_s"),
        cold_prefill_s=med(cold, "prompt_s"), resumed_prefill_s=med(resumed, "prompt_s"),
        identical=identical, repeats=args.repeats,
    )
    result["ratio"] = result["resumed_ttft_s"] / result["cold_ttft_s"]
    result["ratio_with_load"] = (result["resumed_ttft_s"] + result["resumed_load_s"]) / result["cold_ttft_s"]
    print(f"next turn: {result['next_turn_tokens']} prompt tokens, {result['cached_tokens']} from the session "
          f"({result['session_bytes'] / 2**20:.1f} MiB)")
    print(f"{'':12}{'TTFT s':>10}{'prefill s':>10}{'load s':>10}")
    print(f"{'cold':12}{result['cold_ttft_s']:>10.3f}{result['cold_prefill_s']:>10.3f}{'':>10}")
    print(f"{'resumed':12}{result['resumed_ttft_s']:>10.3f}{result['resumed_prefill_s']:>10.3f}"
          f"{result['resumed_load_s']:>10.3f}")
    print(f"resumed / cold: {result['ratio']:.3f} (with the load: {result['ratio_with_load']:.3f}); "
          f"greedy output identical: {identical}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if not identical:
        sys.exit("error: resumed output differs from the cold run")


if __name__ == "__main__":
    main()
