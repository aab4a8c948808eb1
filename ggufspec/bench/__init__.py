"""Measure speculative decoding the way a careful reviewer would (how to run it: docs/BENCH.md).

A bench is a plan of configurations run on the same prompts, target alone and speculative
alternated inside every (repeat, prompt) block, so that a slow minute on a shared machine hits
both sides alike. Figures are medians: per prompt over repeats, then over prompts.

    plan = make_plan(prompts=load_prompt_sets("both"), sweep_draft_lens=(1, 2, 4, 8), repeats=3)
    result = run_bench(plan)
    write_outputs(result, Path("bench-out"))

Definitions (per configuration, against the target alone at the same temperature):
    speedup        median over prompts of  median gen tok/s (speculative) / median gen tok/s (alone)
    accept rate    accepted / drafted, pooled over runs
    alpha          accepted / (accepted + rejections): the per-token acceptance probability of
                   Leviathan et al. (tokens after a rejection are drafted but never judged)
    c              one draft decode step / one target decode step, timed back to back
    expected       Theorem 3.8 of Leviathan et al. 2023: (1 - a^(K+1)) / ((1 - a)(cK + 1))

Peers on the same model files and prompts: llama.cpp's native `llama-speculative-simple` and
`llama-bench` (built by scripts/build_native.sh), `llama_cpp.Llama` with prompt lookup, and
Hugging Face transformers assisted generation when torch and transformers are importable.

Modules, one concept each (none imports llama_cpp at import time):
    prompts   the built-in prompt sets (tuned, heldout) and --prompts FILE.jsonl
    configs   drafts, configurations and the plan (make_plan)
    expected  Theorem 3.8 and alpha (measured_bound: at one run's own costs)
    theory    a configuration's runs priced by Theorem 3.8 (c and the verify: micro or the runs')
    results   RunRecord, BenchResult (bench.json)
    ours      our engine under bench, and the micro timings (c, verify cost)
    peers     llama.cpp native binaries, llama-cpp-python, transformers
    runner    the alternated runs (run_bench)
    summary   medians, speedups, the summary dict
    machine   machine info, load average, CPU pressure
    writers   bench.json, runs.csv, bench.md;  plots: the PNGs
"""

from ggufspec.bench.configs import LOOKUP, DraftSpec, derive_quant_drafts, draft_label, make_plan
from ggufspec.bench.expected import (
    estimate_alpha,
    expected_speedup,
    expected_speedup_measured_verify,
    expected_speedup_partial,
    expected_tokens_per_round,
)
from ggufspec.bench.native import native_dir, parse_native_speculative
from ggufspec.bench.prompts import CATEGORIES, PROMPT_SETS, limit_per_set, load_prompt_sets, load_prompts, pick_prompts
from ggufspec.bench.runner import count_runs, run_bench
from ggufspec.bench.writers import write_outputs

__all__ = [
    "CATEGORIES",
    "PROMPT_SETS",
    "LOOKUP",
    "DraftSpec",
    "count_runs",
    "derive_quant_drafts",
    "draft_label",
    "estimate_alpha",
    "expected_speedup",
    "expected_speedup_measured_verify",
    "expected_speedup_partial",
    "expected_tokens_per_round",
    "limit_per_set",
    "load_prompt_sets",
    "load_prompts",
    "make_plan",
    "native_dir",
    "parse_native_speculative",
    "pick_prompts",
    "run_bench",
    "write_outputs",
]
