"""ggufspec bench: the formula, prompt files, and a whole bench on tiny models (fast)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
import stat
from pathlib import Path

import pytest

from ggufspec import bench
from ggufspec.cli import main
from ggufspec.errors import UserError
from ggufspec.loop.speculation import SpeculativeSettings

# ---- the expected speedup (Leviathan et al. 2023, Theorem 3.8) ---------------------------------


def test_expected_speedup_hand_values() -> None:
    # a = 0.8, K = 4: 1 + .8 + .64 + .512 + .4096 = 3.3616 tokens per round
    assert bench.expected_tokens_per_round(a=0.8, k=4) == pytest.approx(3.3616)
    assert bench.expected_speedup(a=0.8, k=4, c=0.0) == pytest.approx(3.3616)
    # a draft half as costly as the target: 3.3616 / (0.5 * 4 + 1)
    assert bench.expected_speedup(a=0.8, k=4, c=0.5) == pytest.approx(3.3616 / 3.0)
    # the measured default pair's regime: a = 0.9, c = 0.78 -> barely above 1 at its best K
    assert bench.expected_speedup(a=0.9, k=1, c=0.78) == pytest.approx(1.9 / 1.78)
    assert bench.expected_speedup(a=0.9, k=4, c=0.78) == pytest.approx((1 - 0.9**5) / (0.1 * 4.12))
    # limits: nothing accepted costs cK + 1 for one token; everything accepted gives K + 1
    assert bench.expected_speedup(a=0.0, k=3, c=0.2) == pytest.approx(1 / 1.6)
    assert bench.expected_speedup(a=1.0, k=3, c=0.2) == pytest.approx(4 / 1.6)
    # continuity at a -> 1
    assert bench.expected_speedup(a=1 - 1e-9, k=3, c=0.2) == pytest.approx(4 / 1.6, rel=1e-6)
    # pricing the verify call as measured (v plain steps) instead of 1
    assert bench.expected_speedup_measured_verify(a=0.8, k=4, c=0.5, v=1.5) == pytest.approx(3.3616 / 3.5)
    # prompt lookup drafting in half the rounds (c = 0): (0.5 * 3.3616 + 0.5) / (0.5 * 1 + 0.5)
    assert bench.expected_speedup_partial(a=0.8, k=4, c=0.0, share=0.5) == pytest.approx(0.5 * 3.3616 + 0.5)
    assert bench.expected_speedup_partial(a=0.8, k=4, c=0.5, share=1.0) == pytest.approx(bench.expected_speedup(a=0.8, k=4, c=0.5))
    with pytest.raises(ValueError):
        bench.expected_speedup(a=1.5, k=2, c=0.1)


def test_alpha_counts_only_judged_tokens() -> None:
    # rounds of K=4: [accept 4], [accept 1, reject] -> judged 4 + 2, kept 5
    assert bench.estimate_alpha(accepted=5, rejections=1) == pytest.approx(5 / 6)
    assert bench.estimate_alpha(accepted=0, rejections=0) == 0.0


# ---- prompt files ---------------------------------------------------------------------------------


def test_builtin_prompts() -> None:
    prompts = bench.load_prompts()
    assert len(prompts) >= 30
    assert {p.category for p in prompts} >= set(bench.CATEGORIES)
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.messages[-1]["role"] == "user" for p in prompts)
    quick = bench.pick_prompts(prompts, {"chat": 3, "code": 1})
    assert [p.category for p in quick] == ["chat", "chat", "chat", "code"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["a"]', "expected a JSON object"),
        ('{"id": "a", "category": "chat"}', "missing 'messages'"),
        ('{"id": "", "category": "chat", "messages": [{"role": "user", "content": "x"}]}', "'id' must be"),
        ('{"id": "a", "category": "chat", "messages": []}', "non-empty list"),
        ('{"id": "a", "category": "chat", "messages": [{"role": "robot", "content": "x"}]}', "unknown role"),
        ('{"id": "a", "category": "chat", "messages": [{"role": "user"}]}', "string 'role' and 'content'"),
        ('{"id": "a", "category": "chat", "messages": [{"role": "assistant", "content": "x"}]}', "last message"),
    ],
)
def test_prompt_file_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('# a comment\n\n' + line + "\n")
    with pytest.raises(UserError, match=message) as exc:
        bench.load_prompts(f)
    assert f"{f}:3:" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_prompt_file_duplicates_empty_missing(tmp_path: Path) -> None:
    ok = '{"id": "a", "category": "chat", "messages": [{"role": "user", "content": "hi"}]}'
    f = tmp_path / "dup.jsonl"
    f.write_text(ok + "\n" + ok + "\n")
    with pytest.raises(UserError, match=r"dup.jsonl:2: duplicate id 'a'"):
        bench.load_prompts(f)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n# nothing\n")
    with pytest.raises(UserError, match="holds no prompts"):
        bench.load_prompts(empty)
    with pytest.raises(UserError, match="prompt file not found"):
        bench.load_prompts(tmp_path / "missing.jsonl")


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--sweep-k", "1,x"]) == 2
    assert main(["bench", "--sweep-k", "0,2"]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    assert main(["bench", "--prompts", str(bad)]) == 2
    assert main(["bench", "--repeats", "0"]) == 2
    assert main(["bench", "--draft-quants", "Q9_9"]) == 2
    assert main(["bench", "--ngl", "some"]) == 2
    assert main(["bench", "--ngl", "4", "--sweep-ngl", "0,all"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 7 and all(line.startswith("error: ") for line in err)
    assert "--ngl takes a layer count" in err[5] and "drop --ngl" in err[6]
    assert "bad.jsonl:1" in err[2]


# ---- peers' output parsing ----------------------------------------------------------------------------

NATIVE_LOG = """
encoded   40 tokens in    0.120 seconds, speed:  333.333 t/s
decoded  129 tokens in    1.500 seconds, speed:   86.000 t/s

n_draft   = 4
n_predict = 129
n_drafted = 120
n_accept  = 99
accept    = 82.500%
"""


def test_parse_native_speculative() -> None:
    out = bench.parse_native_speculative(NATIVE_LOG)
    assert out == {
        "generated_tokens": 129, "gen_s": 1.5, "gen_tps": 86.0, "prompt_tokens": 40, "prompt_tps": 333.333,
        "n_drafted": 120, "n_accept": 99,
    }
    with pytest.raises(ValueError):
        bench.parse_native_speculative("something else")


def _fake_native(dir: Path) -> Path:
    """Stand-ins for llama-speculative-simple and llama-bench that print canned output."""
    dir.mkdir()
    spec = dir / "llama-speculative-simple"
    spec.write_text("#!/bin/sh\ncat >&2 <<'EOF'\n" + NATIVE_LOG + "EOF\n")
    lb = dir / "llama-bench"
    lb.write_text(
        "#!/bin/sh\ncat <<'EOF'\n"
        '[{"n_prompt": 0, "n_gen": 12, "n_depth": 40, "n_threads": 1, "avg_ts": 100.0, "stddev_ts": 2.0,'
        ' "samples_ts": [98.0, 102.0], "build_commit": "fake", "cpu_info": "fake cpu"}]\n'
        "EOF\n"
    )
    for f in (spec, lb):
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return dir


# ---- a whole bench on tiny models -------------------------------------------------------------------


def _tiny_prompts(tmp_path: Path) -> Path:
    f = tmp_path / "prompts.jsonl"
    rows = [
        {"id": "c1", "category": "chat", "messages": [{"role": "user", "content": "Say hello to the world."}]},
        {"id": "s1", "category": "summarise", "messages": [
            {"role": "user", "content": "one two three four one two three four one two three. Repeat it."}]},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


@pytest.mark.parametrize("lockstep", [True, False])
def test_bench_library_on_tiny_models(tmp_path: Path, tiny_target_q8: Path, tiny_draft_q8: Path, lockstep: bool) -> None:
    native = _fake_native(tmp_path / "native")
    plan = bench.make_plan(
        prompts=bench.load_prompts(_tiny_prompts(tmp_path)), target=str(tiny_target_q8),
        drafts=[bench.DraftSpec(label="q8", ref=str(tiny_draft_q8)), bench.DraftSpec(label="lookup", ref="lookup")],
        sweep_draft_lens=(1, 3), speculative=SpeculativeSettings.from_options(draft_max=4), temperature=0.8, repeats=1, max_tokens=12, n_ctx=512, n_threads=1,
        native=native, native_draft_lens=(2,), llama_cpp_peer=False, sweep_all_drafts=False, lockstep=lockstep,
    )
    seen: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    result = bench.run_bench(plan, progress=lambda label, done, total: seen.append((done, total)))
    wall = time.perf_counter() - t0
    assert seen[-1][0] == seen[-1][1] == bench.count_runs(plan)
    ours = [r for r in result.runs if r.engine == "ggufspec"]
    # one run of each of our configurations per prompt (lockstep runs a repeated baseline once)
    assert sorted(r.config for r in ours if r.prompt_id == "s1") == sorted(
        {c.name for c in plan.configs if c.engine == "ggufspec"}) or not lockstep
    # each run is charged its own steps only: together they fit in the bench's wall time, and
    # the draft and verify seconds a run measured of itself fit in its own
    assert sum(r.gen_s for r in ours) < wall
    assert all(r.draft_s + r.verify_s <= r.gen_s * 1.001 + 1e-4 for r in ours)
    assert all(r.error is None for r in result.runs), [r.error for r in result.runs if r.error]
    s = result.summary
    # greedy speculative output is the target alone's, token for token (Q8_0 is batch-invariant)
    assert s["identical_greedy"] == 1.0
    assert s["vs_native"] == pytest.approx(s["best_ours"]["tps"] / 86.0)
    assert s["llama_bench_tps"] == 100.0
    assert set(s["sampling"]) == {"rejection", "match"}
    by = {c["name"]: c for c in s["configs"]}
    q8 = by["q8 K=3"]
    assert 0.0 <= q8["accept_rate"] <= 1.0 and q8["c"] > 0
    assert q8["expected_speedup"] == pytest.approx(bench.expected_speedup(a=q8["alpha"], k=q8["k_eff"], c=q8["c"]))
    assert len(q8["accept_rate_by_position"]) == 3


def test_bench_cli_writes_json_csv_markdown_plots(
    tmp_path: Path, tiny_target_q8: Path, tiny_draft_q8: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rc = main([
        "bench", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "lookup",
        "--prompts", str(_tiny_prompts(tmp_path)), "--sweep-k", "1,2", "--draft-max", "3", "-n", "10",
        "--repeats", "1", "--temp", "0", "--threads", "1", "--ctx", "512", "--no-native", "--no-transformers",
        "--ngl", "all", "--ngld", "0", "--out", str(out), "--json",
    ])
    assert rc == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    data = json.loads((out / "bench.json").read_text())
    assert printed["summary"]["speedup"] == data["summary"]["speedup"]
    s = data["summary"]
    assert isinstance(s["speedup"], float) and math.isfinite(s["speedup"]) and s["speedup"] > 0
    assert s["vs_native"] is None  # the native peer was not asked for
    assert data["machine"]["physical_cores"] >= 1 and data["machine"]["versions"]["llama_cpp"]
    # --ngl / --ngld reach the loader as run's do (a CPU build says it runs everything on the CPU)
    # and the record says where the models ran, which the llama-cpp-python peer is told too
    assert "--ngl all ignored: this llama.cpp build has no GPU backend" in captured.err
    offload = data["machine"]["offload"]
    assert offload["target_gpu_layers"] == 0 and offload["draft_gpu_layers"] == {"tiny_draft.Q8_0": 0}
    assert offload["target_layers"] >= 2 and offload["devices"][0]["name"] == "CPU"
    assert "**Offload**: target on the CPU; draft tiny_draft.Q8_0 on the CPU." in (out / "bench.md").read_text()
    # the default drafts with both under the controller; each also alone, always drafting, at fixed K
    assert s["default_config"] == "tiny_draft.Q8_0+lookup K<=3"
    assert {c["name"] for c in s["configs"]} >= {
        "target alone", "tiny_draft.Q8_0+lookup K<=3", "tiny_draft.Q8_0 K<=3", "lookup K<=3",
        "tiny_draft.Q8_0 K<=3 always-draft", "lookup K<=3 always-draft", "tiny_draft.Q8_0 K=1", "lookup K=2",
        "llama-cpp-python alone", "llama-cpp-python lookup"}
    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(data["runs"]) and rows[0]["config"] == "target alone"
    md = (out / "bench.md").read_text()
    assert "| configuration |" in md and "llama.cpp native peers absent" not in md
    for name in ("tps_vs_k", "accept_by_position", "time_split", "speedup_expected"):
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


# ---- the summary on hand-built runs (no model) ----------------------------------------------------


def _hand_plan():
    prompts = [
        bench.prompts.BenchPrompt(id="p1", category="chat", messages=({"role": "user", "content": "a"},)),
        bench.prompts.BenchPrompt(id="p2", category="code", messages=({"role": "user", "content": "b"},)),
    ]
    plan = bench.make_plan(
        prompts=prompts, target="t.gguf", drafts=[bench.DraftSpec(label="d", ref="d.gguf")],
        sweep_draft_lens=(2,), speculative=SpeculativeSettings.from_options(draft_max=4), temperature=0.0, repeats=3, native=False, llama_cpp_peer=False, sweep_all_drafts=False,
    )
    # one draft model (the default: it alone under the controller) and lookup beside it
    lookup = bench.configs.Config(name="lookup K<=4", draft="lookup", draft_max=4, fixed=False, group="drafts")
    return dataclasses.replace(plan, configs=(*plan.configs, lookup))


def _rec(cfg, prompt: str, repeat: int, tps: float, **kw):
    from ggufspec.bench.results import RunRecord

    return RunRecord(
        config=cfg.name, engine=cfg.engine, draft=cfg.draft, k=cfg.draft_max, adaptive=(not cfg.fixed), accept=cfg.accept,
        temperature=cfg.temperature, prompt_id=prompt, category={"p1": "chat", "p2": "code"}[prompt], repeat=repeat,
        order=0, prompt_tokens=10, generated_tokens=kw.pop("generated_tokens", 11), gen_tps=tps, **kw,
    )


def test_summary_medians_per_prompt_then_over_prompts() -> None:
    from ggufspec.bench.summary import summarise

    plan = _hand_plan()
    cfg = {c.name: c for c in plan.configs}
    alone, default, lookup = cfg["target alone"], cfg[plan.default_config], cfg["lookup K<=4"]
    # K = 3 on average (15 drafted in 5 drafting rounds), 8 kept, 2 rounds rejected
    spec = dict(drafted=15, accepted=8, rejections=2, rounds=7, drafted_at=[5, 5, 5], accepted_at=[4, 3, 1], draft_s=0.01)
    runs = [
        # target alone: p1 12 tok/s (the 100 is an outlier the median drops), p2 20 tok/s
        *[_rec(alone, "p1", r, t, gen_s=1.0, identical=True) for r, t in enumerate((10.0, 12.0, 100.0))],
        *[_rec(alone, "p2", r, 20.0, gen_s=1.0, identical=True) for r in range(3)],
        # the default: p1 24 -> 2.0x, p2 30 -> 1.5x; one failed run that must not count
        *[_rec(default, "p1", r, t, identical=r != 2, **spec) for r, t in enumerate((18.0, 24.0, 30.0))],
        *[_rec(default, "p2", r, t, identical=True, **spec) for r, t in enumerate((30.0, 25.0, 35.0))],
        _rec(default, "p2", 3, 1000.0, generated_tokens=0, error="RuntimeError: boom"),
        # lookup drafts in 2 rounds of 4
        *[_rec(lookup, p, r, 12.0 if p == "p1" else 20.0, drafted=6, accepted=3, rejections=2, rounds=4,
               drafted_at=[2, 2, 2], accepted_at=[2, 1, 0]) for p in ("p1", "p2") for r in range(3)],
    ]
    micro = {"c": {"d": 0.25, "lookup": 0.0}, "verify_cost": {"1": 1.1, "2": 1.2, "4": 1.4}}
    s = summarise(plan, runs, micro=micro)
    by = {c["name"]: c for c in s["configs"]}

    assert by["target alone"]["tps"] == 16.0 and by["target alone"]["speedup"] == 1.0
    d = by[plan.default_config]
    assert d["runs"] == 6 and d["errors"] == 1 and d["first_error"] == "RuntimeError: boom"
    assert d["tps"] == 27.0  # median of the per-prompt medians 24 and 30
    assert (s["speedup"], s["speedup_min"], d["speedup_max"], d["worst_prompt"]) == (1.75, 1.5, 2.0, "p2")
    assert s["speedup_chat"] == 2.0
    assert s["by_category"][plan.default_config] == {"chat": 2.0, "code": 1.5}
    assert s["accept_rate"] == pytest.approx(48 / 90)
    assert s["alpha"] == pytest.approx(48 / 60) == bench.estimate_alpha(accepted=48, rejections=12)
    assert d["k_eff"] == 3.0 and d["draft_rounds_share"] == pytest.approx(5 / 7)
    assert d["accept_rate_by_position"] == pytest.approx([0.8, 0.6, 0.2])
    assert d["verify_cost"] == pytest.approx(1.3)  # halfway between K=2 and K=4
    # the default drafted in 5 of its 7 rounds: the other 2 are plain target steps
    assert s["expected_speedup"] == pytest.approx(bench.expected_speedup_partial(a=0.8, k=3, c=0.25, share=5 / 7))
    assert d["expected_speedup_measured_verify"] == pytest.approx(
        bench.expected_speedup_partial(a=0.8, k=3, c=0.25, share=5 / 7, v=1.3))
    # c as it happened: 0.01 s per run over 15 drafted, against the target alone's 1 s per 10 tokens
    assert d["c_runs"] == pytest.approx((0.06 / 90) / 0.1)
    # token-identical share per configuration, then the median over those that recorded it
    assert d["identical"] == pytest.approx(5 / 6) and s["identical_greedy"] == pytest.approx((1.0 + 5 / 6) / 2)
    # lookup proposes in half the rounds: the other half are plain target steps
    lk = by["lookup K<=4"]
    assert lk["speedup"] == 1.0 and lk["draft_rounds_share"] == 0.5
    assert lk["expected_speedup"] == pytest.approx(bench.expected_speedup_partial(a=0.6, k=3, c=0.0, share=0.5))
    assert lk["expected_speedup"] == pytest.approx(0.5 * (1 + 0.6 + 0.36 + 0.216) + 0.5)
    assert by["d K=2"]["runs"] == 0 and "tps" not in by["d K=2"]
    assert s["vs_native"] is None and s["llama_bench_tps"] is None


def test_without_the_microbenchmark_the_bound_takes_the_costs_the_runs_measured() -> None:
    """`bench --regimes` runs no microbenchmark, and the default's drafter (a model + lookup) is
    never priced by one: Theorem 3.8 then takes c and the verify cost as they happened in the runs,
    and the headline says so."""
    from ggufspec.bench.summary import summarise
    from ggufspec.bench.writers import _expected_detail

    plan = _hand_plan()
    cfg = {c.name: c for c in plan.configs}
    alone, default = cfg["target alone"], cfg[plan.default_config]
    # the target alone: 10 tokens after the first in 1 s; llama.cpp's decode 0.08 s of each 0.1 s step
    runs = [_rec(alone, p, r, 10.0, gen_s=1.0, verify_s=0.8, rounds=10, identical=True)
            for p in ("p1", "p2") for r in range(3)]
    # 6 rounds: 1 of the target alone (K = 0), 5 drafting 3 each; verify 0.08 + 5 x 0.12 s, so a
    # drafting round's verify costs 1.5 decode steps; drafting 0.06 s for 15 tokens, c = 0.05
    spec = dict(drafted=15, accepted=12, rejections=3, rounds=6, k_hist={0: 1, 3: 5}, drafted_at=[5, 5, 5],
                accepted_at=[5, 4, 3], draft_s=0.06, verify_s=0.08 + 5 * 0.12)
    runs += [_rec(default, p, r, 20.0, identical=True, **spec) for p in ("p1", "p2") for r in range(3)]
    s = summarise(plan, runs, micro={})
    d = next(c for c in s["configs"] if c["name"] == plan.default_config)
    assert d["c"] is None and d["verify_cost"] is None  # no microbenchmark
    assert d["c_runs"] == pytest.approx(0.05) and d["verify_cost_runs"] == pytest.approx(1.5)
    assert d["costs_from"] == "runs" and s["expected_costs_from"] == "runs"
    alpha = bench.estimate_alpha(accepted=12, rejections=3)
    assert s["expected_speedup"] == pytest.approx(bench.expected_speedup_partial(a=alpha, k=3, c=0.05, share=5 / 6))
    assert s["expected_speedup_measured_verify"] == pytest.approx(
        bench.expected_speedup_partial(a=alpha, k=3, c=0.05, share=5 / 6, v=1.5))
    assert _expected_detail(s) == (f" ({s['expected_speedup_measured_verify']:.2f}x with the verify as measured; "
                                   "costs as they happened in the runs)")
    # with the microbenchmark's figures the runs' are not used
    s2 = summarise(plan, runs, micro={"c": {"d": 0.25}, "verify_cost": {"2": 1.2, "4": 1.4}})
    d2 = next(c for c in s2["configs"] if c["name"] == plan.default_config)
    assert d2["costs_from"] == "microbenchmark"
    assert s2["expected_speedup_measured_verify"] == pytest.approx(
        bench.expected_speedup_partial(a=alpha, k=3, c=0.25, share=5 / 6, v=1.3))


def test_the_bound_at_a_runs_own_costs() -> None:
    from ggufspec.bench.expected import MeasuredBound, measured_bound, verify_steps

    # 10 rounds: 2 of the target alone at 0.01 s each, 8 drafting 4 each with verifies of 0.02 s
    b = measured_bound(accepted=24, rejections=6, drafted=32, drafting_rounds=8, rounds=10, draft_s=0.064,
                       verify_s=2 * 0.01 + 8 * 0.02, step_s=0.01)
    assert b is not None and (b.alpha, b.k, b.share) == (0.8, 4.0, 0.8)
    assert b.c == pytest.approx(0.2) and b.verify == pytest.approx(2.0)
    assert b.speedup == pytest.approx(bench.expected_speedup_partial(a=0.8, k=4, c=0.2, share=0.8, v=2.0))
    # nothing drafted, or no step to price by: no bound
    assert measured_bound(accepted=0, rejections=0, drafted=0, drafting_rounds=0, rounds=10, draft_s=0.0,
                          verify_s=0.1, step_s=0.01) is None
    assert measured_bound(accepted=1, rejections=0, drafted=1, drafting_rounds=1, rounds=1, draft_s=0.01,
                          verify_s=0.01, step_s=0.0) is None
    # a verify that measured nothing beyond the plain rounds' steps: priced as one step
    b2 = measured_bound(accepted=1, rejections=0, drafted=1, drafting_rounds=1, rounds=3, draft_s=0.001,
                        verify_s=0.02, step_s=0.01)
    assert isinstance(b2, MeasuredBound) and b2.verify is None
    assert b2.speedup == pytest.approx(bench.expected_speedup_partial(a=1.0, k=1, c=0.1, share=1 / 3, v=1.0))
    assert verify_steps(verify_s=0.05, rounds=3, plain_rounds=1, step_s=0.01) == pytest.approx(2.0)


def test_import_does_not_load_llama_cpp() -> None:
    import subprocess
    import sys

    code = "import sys, ggufspec.bench, ggufspec.commands.bench; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_default_mix_against_each_of_its_drafters_alone() -> None:
    """Issue 12's "lookup in the mix beats the model draft alone": the default (d and lookup under
    the controller) against each drafter alone under the same controller, per category, with the
    per-prompt geometric mean beside the ratio of medians; fixed K is no such configuration."""
    from ggufspec.bench.summary import summarise

    plan = _hand_plan()
    cfg = {c.name: c for c in plan.configs}
    mix = bench.configs.Config(name="d+lookup K<=4", draft="d+lookup", draft_max=4, fixed=False, group="default")
    plan = dataclasses.replace(plan, configs=(*plan.configs, mix), default_config=mix.name)
    tps = {"target alone": (10.0, 20.0), plan.default_config: (15.0, 36.0), "d K<=4": (15.0, 30.0),
           "lookup K<=4": (10.0, 40.0), "d K=2": (30.0, 60.0)}
    runs = [_rec(cfg.get(name, mix), p, r, t[i], gen_s=1.0) for name, t in tps.items()
            for i, p in enumerate(("p1", "p2")) for r in range(3)]
    vs = summarise(plan, runs)["default_vs_drafters"]
    assert set(vs) == {"d K<=4", "lookup K<=4"}
    d = vs["d K<=4"]
    # the mix: 1.5x and 1.8x (median 1.65); d alone 1.5x on both
    assert d["all"]["ratio"] == pytest.approx(1.65 / 1.5) and d["all"]["per_prompt"] == pytest.approx(1.2 ** 0.5)
    assert d["chat"]["ratio"] == pytest.approx(1.0) and d["code"]["ratio"] == pytest.approx(1.2)
    assert d["code"]["ratio_low"] == pytest.approx(1.2) == d["code"]["ratio_high"]  # no spread over repeats
    lk = vs["lookup K<=4"]
    assert lk["code"]["ratio"] == pytest.approx(0.9) and lk["chat"]["ratio"] == pytest.approx(1.5)
    assert lk["chat"]["ratio_low"] is None  # lookup alone no faster than the target alone there: no interval
    single = summarise(_hand_plan(), [_rec(cfg[n], p, r, 10.0 + r, gen_s=1.0) for n in ("target alone", "d K<=4")
                                      for p in ("p1", "p2") for r in range(3)])
    assert single["default_vs_drafters"] == {}  # a default of one drafter has no mix to compare


def test_end_to_end_speedup_counts_the_prompt_seconds() -> None:
    """A draft model prefilled with the prompt is faster to generate and slower to read the prompt:
    the end-to-end speedup weighs both (10 prompt tokens and 11 generated a run here)."""
    from ggufspec.bench.summary import summarise

    plan = _hand_plan()
    cfg = {c.name: c for c in plan.configs}
    alone, default, lookup = cfg["target alone"], cfg[plan.default_config], cfg["lookup K<=4"]
    fixed = cfg["d K=2"]
    runs = [
        # target alone: prompt 0.5 s, 11 tokens in 1.0 s (11 tok/s): 11 / 1.5 s end to end
        *[_rec(alone, p, r, 11.0, prompt_tps=20.0, gen_s=1.0) for p in ("p1", "p2") for r in range(3)],
        # the default skipped the draft's prefill: generation 1.1x, end to end 1.5 / (0.5 + 1 / 1.1)
        *[_rec(default, p, r, 12.1, prompt_tps=20.0, gen_s=1.0 / 1.1) for p in ("p1", "p2") for r in range(3)],
        # the fixed K prefilled the draft (prompt 1.0 s): generation 1.25x, end to end 1.5 / 1.8
        *[_rec(fixed, p, r, 13.75, prompt_tps=10.0, gen_s=0.8) for p in ("p1", "p2") for r in range(3)],
        *[_rec(lookup, p, r, 11.0, prompt_tps=20.0, gen_s=1.0) for p in ("p1", "p2") for r in range(3)],
    ]
    s = summarise(plan, runs)
    by = {c["name"]: c for c in s["configs"]}
    assert by["d K=2"]["speedup"] == pytest.approx(1.25) and by["d K=2"]["speedup_e2e"] == pytest.approx(1.5 / 1.8)
    assert s["speedup"] == pytest.approx(1.1) and s["speedup_e2e"] == pytest.approx(1.5 / (0.5 + 1 / 1.1))
    # generation alone: the default loses to the fixed K; end to end, the fixed K loses to the target alone
    assert s["default_vs_best"]["all"]["ratio"] == pytest.approx(1.1 / 1.25)
    e2e = s["default_vs_best_e2e"]["all"]
    assert e2e["reference"] == "target alone" and e2e["ratio"] == pytest.approx(1.5 / (0.5 + 1 / 1.1))
    assert s["by_category_e2e"]["d K=2"] == {"chat": pytest.approx(1.5 / 1.8), "code": pytest.approx(1.5 / 1.8)}


def test_compared_quants_run_alone_and_stay_out_of_the_default_configuration() -> None:
    """`--draft-quants` adds drafts to compare; the default configuration is what `run` drafts with."""
    prompts = [bench.prompts.BenchPrompt(id="p1", category="chat", messages=({"role": "user", "content": "a"},))]
    drafts = [
        bench.DraftSpec(label="Q4_1", ref="q41.gguf"),
        bench.DraftSpec(label="Q2_K", ref="q2k.gguf", compared=True),
        bench.DraftSpec(label="lookup", ref="lookup"),
    ]
    plan = bench.make_plan(prompts=prompts, target="t.gguf", drafts=drafts, sweep_draft_lens=(2,), speculative=SpeculativeSettings.from_options(draft_max=8),
                           temperature=0.0, repeats=1, native=False, llama_cpp_peer=False, sweep_all_drafts=True)
    names = [c.name for c in plan.configs]
    assert plan.default_config == "Q4_1+lookup K<=8"
    assert {"Q2_K K<=8", "Q2_K K<=8 always-draft", "Q2_K K=2", "Q4_1 K<=8", "lookup K<=8"} <= set(names)
    assert not any("Q2_K" in n and "+" in n for n in names)
    # one own draft beside compared ones: the default is that draft alone, listed once
    solo = bench.make_plan(prompts=prompts, target="t.gguf", drafts=drafts[:2], sweep_draft_lens=(2,), speculative=SpeculativeSettings.from_options(draft_max=8),
                           temperature=0.0, repeats=1, native=False, llama_cpp_peer=False)
    assert solo.default_config == "Q4_1 K<=8" and [c.name for c in solo.configs].count("Q4_1 K<=8") == 1
    with pytest.raises(UserError, match="compared"):
        bench.make_plan(prompts=prompts, target="t.gguf", drafts=drafts[1:2], sweep_draft_lens=(2,), speculative=SpeculativeSettings.from_options(draft_max=8),
                        temperature=0.0, repeats=1, native=False, llama_cpp_peer=False)


def test_a_lockstep_lane_is_warmed_before_its_first_measured_generation(
        tmp_path: Path, tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    """A lane's own contexts run one untimed generation when made, with a throwaway controller:
    the first measured block is not the lanes' cold start, and the measured controller has seen
    nothing yet. Another configuration on the same lane later gives the same output."""
    from ggufspec.bench.ours import Ours

    plan = bench.make_plan(
        prompts=bench.load_prompts(_tiny_prompts(tmp_path)), target=str(tiny_target_q8),
        drafts=[bench.DraftSpec(label="q8", ref=str(tiny_draft_q8))], sweep_draft_lens=(3,), speculative=SpeculativeSettings.from_options(draft_max=4),
        temperature=0.0, repeats=1, max_tokens=12, n_ctx=512, n_threads=1, native=None, native_draft_lens=(),
        llama_cpp_peer=False, sweep_all_drafts=False, lockstep=True,
    )
    ours = Ours(plan)
    try:
        cfg = next(c for c in plan.configs if c.engine == "ggufspec" and not c.is_baseline and not c.fixed)
        prompt = plan.prompts[0]
        gen = ours.start(cfg, prompt, 0, lane=0)
        target, copies = ours.lanes[0]
        assert set(copies) == {"q8"}  # every drafter of the plan, whichever configuration made the lane
        n_prompt = len(ours.tokens[prompt.id])
        assert len(target.tokens) > n_prompt  # the warm-up generated on the lane's own context
        assert ours.controllers[cfg.name].round == 0  # the measured controller has not run yet
        first = gen.run().tokens
        assert first == ours.start(cfg, prompt, 0, lane=0).run().tokens  # warm or not, the same output
        alone = next(c for c in plan.configs if c.engine == "ggufspec" and c.is_baseline)
        assert ours.start(alone, prompt, 0, lane=0).run().tokens == first  # greedy: the target's text
        assert ours.start(cfg, prompt, 0, lane=1).run().tokens == first and len(ours.lanes) == 2
    finally:
        ours.pair.close()


def test_bench_runs_a_target_with_no_chat_template_on_plain_text(
        tmp_path: Path, tiny_target_q8: Path, tiny_draft_q8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a base model (the gemma regime's Gemma 3 270M has no template): each prompt's messages as
    # plain text, as a user would pass them with -p, not a "no chat template" error mid-grid
    from ggufspec.bench.ours import plain_text
    from ggufspec.llama.model import Model

    monkeypatch.setattr(Model, "chat_template", lambda self: None)
    prompts = bench.load_prompts(_tiny_prompts(tmp_path))
    assert plain_text(prompts[1]) == prompts[1].messages[0]["content"]
    plan = bench.make_plan(
        prompts=prompts, target=str(tiny_target_q8), drafts=[bench.DraftSpec(label="q8", ref=str(tiny_draft_q8))],
        sweep_draft_lens=(2,), speculative=SpeculativeSettings.from_options(draft_max=4), temperature=0.8,
        repeats=1, max_tokens=8, n_ctx=512, n_threads=1, native=False, native_draft_lens=(2,), llama_cpp_peer=False,
        llama_bench=False, microbench=False, sweep_all_drafts=False, lockstep=True,
    )
    result = bench.run_bench(plan)
    assert all(r.error is None for r in result.runs), [r.error for r in result.runs if r.error]
    assert result.summary["identical_greedy"] == 1.0
    # lanes rotate: in each lockstep block (a prompt, a repeat, a temperature) every configuration
    # on its own lane, and from block to block each moves on (a lane's own speed is spread over
    # all of them, not one configuration's)
    ours = [r for r in result.runs if r.engine == "ggufspec"]
    blocks = {(r.repeat, r.prompt_id, r.temperature) for r in ours}
    for b in blocks:
        lanes = [r.lane for r in ours if (r.repeat, r.prompt_id, r.temperature) == b]
        assert sorted(lanes) == list(range(len(lanes)))
    for cfg in {r.config for r in ours}:
        n_cfgs = len({r.config for r in ours if r.temperature == next(x.temperature for x in ours if x.config == cfg)})
        n_blocks = len({(r.repeat, r.prompt_id) for r in ours if r.config == cfg})
        assert len({r.lane for r in ours if r.config == cfg}) == min(n_blocks, n_cfgs)
