"""llama.cpp's native `llama-speculative-simple` and `llama-bench`, the bench's native peers:
built by scripts/build_native.sh, run as subprocesses, their own timings parsed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from ggufspec.paths import cache_dir

# ---- llama.cpp's native binaries ----------------------------------------------------------------


def native_dir() -> Path:
    """Where scripts/build_native.sh puts llama.cpp's binaries."""
    env = os.environ.get("GGUFSPEC_NATIVE_DIR")
    if env:
        return Path(env) / "bin"
    return cache_dir() / "native" / "bin"


def find_native() -> Path | None:
    """The directory holding llama-speculative-simple and llama-bench, or None."""
    d = native_dir()
    if (d / "llama-speculative-simple").is_file() and (d / "llama-bench").is_file():
        return d
    return None


_NATIVE_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+) t/s")
_NATIVE_ENCODED = re.compile(r"encoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+) t/s")


def parse_native_speculative(output: str) -> dict:
    """Figures from llama-speculative-simple's log: decoded tokens, seconds, t/s, drafted, accepted."""
    m = _NATIVE_DECODED.search(output)
    if not m:
        raise ValueError("no 'decoded N tokens in T seconds' line in llama-speculative-simple's output")
    out = {"generated_tokens": int(m.group(1)), "gen_s": float(m.group(2)), "gen_tps": float(m.group(3))}
    e = _NATIVE_ENCODED.search(output)
    if e:
        out.update(prompt_tokens=int(e.group(1)), prompt_tps=float(e.group(3)))
    for key in ("n_drafted", "n_accept"):
        km = re.search(rf"{key}\s*=\s*(\d+)", output)
        out[key] = int(km.group(1)) if km else 0
    return out


def _run_native(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run one native binary; RuntimeError with the last lines of its log when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, errors="replace")
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"{Path(cmd[0]).name} exited {proc.returncode}: {tail}")
    return proc


def _layers(n: int) -> str:
    """llama.cpp's -ngl for a count ours was loaded with (-1: all; 999 is what its tools take for all)."""
    return "999" if n < 0 else str(n)


def run_native_speculative(
    *, bin_dir: Path, target: Path, draft: Path, prompt: str, k: int, n_predict: int, n_ctx: int, threads: int,
    cache_type: str = "f16", repack: bool = True, ngl: int = 0, ngld: int = 0,
) -> dict:
    """One greedy llama-speculative-simple run; its own timing of the decode phase.
    `cache_type`: the target's KV cache type (ours, so both sides do the same work); the draft's is f16.
    `repack`: llama.cpp's weight repacking (ours: `ggufspec.llama.lib.repack()`)."""
    cmd = [
        str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
        "-p", prompt, "-n", str(n_predict), "-c", str(n_ctx), "-t", str(threads), "-td", str(threads),
        "--temp", "0", "--top-k", "1", "-fa", "on", "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0", "--spec-type", "draft-simple", "-ngl", _layers(ngl), "-ngld", _layers(ngld),
        "-ctk", cache_type, "-ctv", cache_type, *(() if repack else ("--no-repack",)),
    ]
    proc = _run_native(cmd)
    return parse_native_speculative(proc.stdout + proc.stderr)  # its figures are in the log


def run_llama_bench(
    *, bin_dir: Path, model: Path, n_gen: int, depth: int, threads: int, reps: int = 3, cache_type: str = "f16",
    repack: bool = True, ngl: int = 0,
) -> dict:
    """llama-bench's generation tokens/s for the target alone (`-o json`), at a KV depth like ours,
    with our KV cache type and weight repacking."""
    cmd = [
        str(bin_dir / "llama-bench"), "-m", str(model), "-p", "0", "-n", str(n_gen), "-d", str(depth),
        "-t", str(threads), "-fa", "1", "-r", str(reps), "-ngl", _layers(ngl), "-o", "json",
        "-ctk", cache_type, "-ctv", cache_type, "--repack", "1" if repack else "0",
    ]
    rows = json.loads(_run_native(cmd).stdout)
    row = next(r for r in rows if r.get("n_gen", 0) > 0)
    return {
        "gen_tps": float(row["avg_ts"]), "stddev_tps": float(row.get("stddev_ts", 0.0)),
        "samples_ts": row.get("samples_ts", []), "n_gen": int(row["n_gen"]), "n_depth": int(row.get("n_depth", depth)),
        "n_threads": int(row.get("n_threads", threads)), "build": row.get("build_commit"), "cpu": row.get("cpu_info"),
    }
