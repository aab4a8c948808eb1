"""The in-process peers measured on the same model files and prompts as ours.

`llama_cpp.Llama` alone and with prompt lookup, and Hugging Face transformers assisted
generation when torch and transformers import. llama_cpp, torch and transformers are imported
only when a peer is built. llama.cpp's native binaries are run by `ggufspec.bench.native`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ggufspec.bench.configs import LOOKUP

if TYPE_CHECKING:
    from ggufspec.bench.configs import BenchPlan, Config

# ---- in-process peers ---------------------------------------------------------------------------


class LlamaCppPython:
    """llama-cpp-python's own high-level path: `Llama` alone and with prompt-lookup drafting."""

    def __init__(self, plan: BenchPlan, target: Path, threads: int, *, n_gpu_layers: int = 0) -> None:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        common = dict(
            model_path=str(target), n_ctx=plan.n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
            flash_attn=True, verbose=False, n_gpu_layers=n_gpu_layers,  # where ours runs (-1: all)
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
