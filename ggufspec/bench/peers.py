"""The peers measured on the same model files and prompts as ours.

llama.cpp's native `llama-speculative-simple` and `llama-bench` (built by scripts/build_native.sh;
run as subprocesses, their own timings parsed), `llama_cpp.Llama` alone and with prompt lookup,
and Hugging Face transformers assisted generation when torch and transformers import.
llama_cpp, torch and transformers are imported only when a peer is built.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ggufspec.bench.configs import LOOKUP

if TYPE_CHECKING:
    from ggufspec.bench.configs import BenchPlan, Config

# ---- llama.cpp's native binaries ----------------------------------------------------------------


def native_dir() -> Path:
    """Where scripts/build_native.sh puts llama.cpp's binaries."""
    env = os.environ.get("GGUFSPEC_NATIVE_DIR")
    if env:
        return Path(env) / "bin"
    from ggufspec.models.embedded import cache_dir

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


def run_native_speculative(
    *, bin_dir: Path, target: Path, draft: Path, prompt: str, k: int, n_predict: int, n_ctx: int, threads: int,
    cache_type: str = "f16", repack: bool = True,
) -> dict:
    """One greedy llama-speculative-simple run; its own timing of the decode phase.
    `cache_type`: the target's KV cache type (ours, so both sides do the same work); the draft's is f16.
    `repack`: llama.cpp's weight repacking (ours: `ggufspec.llama.lib.repack()`)."""
    cmd = [
        str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
        "-p", prompt, "-n", str(n_predict), "-c", str(n_ctx), "-t", str(threads), "-td", str(threads),
        "--temp", "0", "--top-k", "1", "-fa", "on", "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0", "--spec-type", "draft-simple", "-ngl", "0",
        "-ctk", cache_type, "-ctv", cache_type, *(() if repack else ("--no-repack",)),
    ]
    proc = _run_native(cmd)
    return parse_native_speculative(proc.stdout + proc.stderr)  # its figures are in the log


def run_llama_bench(
    *, bin_dir: Path, model: Path, n_gen: int, depth: int, threads: int, reps: int = 3, cache_type: str = "f16",
    repack: bool = True,
) -> dict:
    """llama-bench's generation tokens/s for the target alone (`-o json`), at a KV depth like ours,
    with our KV cache type and weight repacking."""
    cmd = [
        str(bin_dir / "llama-bench"), "-m", str(model), "-p", "0", "-n", str(n_gen), "-d", str(depth),
        "-t", str(threads), "-fa", "1", "-r", str(reps), "-ngl", "0", "-o", "json",
        "-ctk", cache_type, "-ctv", cache_type, "--repack", "1" if repack else "0",
    ]
    rows = json.loads(_run_native(cmd).stdout)
    row = next(r for r in rows if r.get("n_gen", 0) > 0)
    return {
        "gen_tps": float(row["avg_ts"]), "stddev_tps": float(row.get("stddev_ts", 0.0)),
        "samples_ts": row.get("samples_ts", []), "n_gen": int(row["n_gen"]), "n_depth": int(row.get("n_depth", depth)),
        "n_threads": int(row.get("n_threads", threads)), "build": row.get("build_commit"), "cpu": row.get("cpu_info"),
    }


# ---- in-process peers ---------------------------------------------------------------------------


class LlamaCppPython:
    """llama-cpp-python's own high-level path: `Llama` alone and with prompt-lookup drafting."""

    def __init__(self, plan: BenchPlan, target: Path, threads: int) -> None:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        common = dict(
            model_path=str(target), n_ctx=plan.n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
            flash_attn=True, verbose=False, n_gpu_layers=0,
        )
        from ggufspec.llama.lib import high_level_repack

        with high_level_repack():  # the weight repacking ours uses (off where llama.cpp's AMX matmul crashes)
            self.alone = llama_cpp.Llama(**common)
            self.lookup = llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding())
        self.max_tokens = plan.max_tokens

    def run(self, cfg: Config, tokens: list[int], is_eog: Callable[[int], bool]) -> dict:
        llm = self.lookup if cfg.draft == LOOKUP else self.alone
        llm.reset()  # no prompt cache between runs: every run prefills, as ours does
        t0 = time.perf_counter()
        t_first = None
        n = 0
        for tok in llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            n += 1
            if t_first is None:
                t_first = time.perf_counter()
            if is_eog(tok) or n >= self.max_tokens:
                break
        t_end = time.perf_counter()
        gen_s = t_end - (t_first or t_end)
        return {
            "generated_tokens": n, "gen_s": gen_s, "gen_tps": (n - 1) / gen_s if n > 1 and gen_s > 0 else 0.0,
            "prompt_tps": len(tokens) / ((t_first or t_end) - t0),
        }

    def close(self) -> None:
        for llm in (self.alone, self.lookup):
            try:
                llm.close()
            except Exception:
                pass


def transformers_available() -> str | None:
    """None when torch and transformers import; else why not (for the report)."""
    try:
        import accelerate  # noqa: F401  (transformers needs it to load a GGUF file)
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return (f"transformers assisted generation skipped: {type(exc).__name__}: {exc} "
                "(pip install 'ggufspec[peers]' and a CPU torch)")
    return None


class Transformers:
    """Hugging Face assisted generation (`assistant_model=`) on the same GGUF files, CPU torch."""

    def __init__(self, plan: BenchPlan, target: Path, draft: Path, threads: int) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(threads)
        self.torch = torch
        self.target = AutoModelForCausalLM.from_pretrained(str(target.parent), gguf_file=target.name, dtype=torch.float32)
        self.draft = AutoModelForCausalLM.from_pretrained(str(draft.parent), gguf_file=draft.name, dtype=torch.float32)
        self.target.eval()
        self.draft.eval()
        self.max_tokens = plan.max_tokens

    def run(self, cfg: Config, tokens: list[int], eos: int) -> dict:
        torch = self.torch
        ids = torch.tensor([tokens])
        kwargs: dict[str, Any] = dict(max_new_tokens=self.max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos)
        if not cfg.is_baseline:
            kwargs.update(assistant_model=self.draft)
            self.draft.generation_config.num_assistant_tokens = cfg.draft_max
            self.draft.generation_config.num_assistant_tokens_schedule = "heuristic" if (not cfg.fixed) else "constant"
        with torch.inference_mode():
            # The first token alone, timed, then the whole generation: gen time = total - first.
            t0 = time.perf_counter()
            self.target.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=eos)
            t1 = time.perf_counter()
            out = self.target.generate(ids, **kwargs)
            t2 = time.perf_counter()
        n = int(out.shape[1] - ids.shape[1])
        gen_s = max(1e-9, (t2 - t1) - (t1 - t0))
        return {"generated_tokens": n, "gen_s": gen_s, "gen_tps": (n - 1) / gen_s if n > 1 else 0.0,
                "prompt_tps": len(tokens) / (t1 - t0)}
