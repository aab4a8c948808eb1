"""The bench's two built-in prompt sets (tuned, heldout): loading, per-set summaries, bench.md's
tables per set, files landing whole; a smoke run through the CLI on tiny models."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ggufspec import bench
from ggufspec.bench.prompts import BenchPrompt
from ggufspec.cli import main
from ggufspec.errors import UserError
from ggufspec.loop.speculation import SpeculativeSettings


def _contents(prompts) -> set[str]:
    return {m["content"] for p in prompts for m in p.messages}


def test_heldout_set_is_fresh_and_covers_four_categories() -> None:
    tuned, held = bench.load_prompts(prompt_set="tuned"), bench.load_prompts(prompt_set="heldout")
    assert {p.prompt_set for p in tuned} == {"tuned"} and {p.prompt_set for p in held} == {"heldout"}
    assert len(held) >= 20
    per = {c: sum(p.category == c for p in held) for c in ("chat", "code", "summarise", "maths")}
    assert all(n >= 4 for n in per.values()) and sum(per.values()) == len(held), per
    # nothing shared with the tuned set: no id, no message text, no long sentence
    assert not {p.id for p in tuned} & {p.id for p in held}
    assert not _contents(tuned) & _contents(held)
    tuned_text = " ".join(_contents(tuned))
    sentences = [s.strip() for t in _contents(held) for s in t.replace("\n", " ").split(".") if len(s.strip()) > 30]
    assert sentences and not [s for s in sentences if s in tuned_text]
    # the file says it is never used for tuning
    from ggufspec.bench.prompts import builtin_prompts

    assert "NEVER use these to tune" in builtin_prompts("heldout").read_text()
    both = bench.load_prompt_sets("both")
    assert [p.id for p in both] == [p.id for p in tuned + held]
    assert [p.id for p in bench.load_prompt_sets("heldout")] == [p.id for p in held]
    with pytest.raises(UserError, match="unknown prompt set 'mixed'"):
        bench.load_prompt_sets("mixed")


def test_quick_and_limit_pick_from_each_set() -> None:
    both = bench.load_prompt_sets("both")
    quick = bench.pick_prompts(both, {"chat": 2, "code": 1})
    assert [(p.prompt_set, p.category) for p in quick] == [
        ("tuned", "chat"), ("tuned", "chat"), ("tuned", "code"), ("heldout", "chat"), ("heldout", "chat"), ("heldout", "code")]
    limited = bench.limit_per_set(both, 2)
    assert [p.prompt_set for p in limited] == ["tuned", "tuned", "heldout", "heldout"]
    assert bench.load_prompts(None)[0].prompt_set == "tuned"  # None: the tuned set, as before


# ---- per-set summaries on hand-built runs (no model) ------------------------------------------------


def _plan():
    def bp(pid: str, cat: str, pset: str) -> BenchPrompt:
        return BenchPrompt(id=pid, category=cat, messages=({"role": "user", "content": pid},), prompt_set=pset)

    prompts = [bp("t1", "chat", "tuned"), bp("t2", "code", "tuned"), bp("h1", "chat", "heldout"), bp("h2", "maths", "heldout")]
    return bench.make_plan(
        prompts=prompts, target="t.gguf", drafts=[bench.DraftSpec(label="d", ref="d.gguf")],
        sweep_draft_lens=(2,), speculative=SpeculativeSettings.from_options(draft_max=4), temperature=0.0, repeats=1, native=False, llama_cpp_peer=False, sweep_all_drafts=False,
    )


def _runs(plan, speedups: dict[str, float]):
    from ggufspec.bench.results import RunRecord

    cfg = {c.name: c for c in plan.configs}
    cats = {p.id: p.category for p in plan.prompts}
    out = []
    for pid, x in speedups.items():
        for c, tps in ((cfg["target alone"], 10.0), (cfg[plan.default_config], 10.0 * x), (cfg["d K=2"], 10.0 * x * 0.9)):
            out.append(RunRecord(
                config=c.name, engine=c.engine, draft=c.draft, k=c.draft_max, adaptive=not c.fixed, accept=c.accept,
                temperature=0.0, prompt_id=pid, category=cats[pid], repeat=0, order=0, prompt_tokens=5,
                generated_tokens=9, gen_tps=tps, gen_s=0.8, identical=True,
                **({} if c.is_baseline else dict(drafted=8, accepted=6, rejections=1, rounds=4, drafted_at=[4, 4], accepted_at=[3, 3])),
            ))
    return out


def test_summary_per_set_and_over_all_prompts() -> None:
    from ggufspec.bench.summary import summarise

    plan = _plan()
    s = summarise(plan, _runs(plan, {"t1": 2.0, "t2": 1.6, "h1": 1.2, "h2": 1.0}))
    # the top-level keys stay, over all four prompts
    assert s["speedup"] == pytest.approx(1.4) and s["speedup_min"] == pytest.approx(1.0)
    assert s["best_speedup"]["name"] == plan.default_config and s["identical_greedy"] == 1.0
    assert s["prompt_sets"] == ["tuned", "heldout"]
    t, h = s["sets"]["tuned"], s["sets"]["heldout"]
    assert t["prompts"] == ["t1", "t2"] and h["prompts"] == ["h1", "h2"]
    assert t["speedup"] == pytest.approx(1.8) and t["speedup_min"] == pytest.approx(1.6) and t["speedup_chat"] == 2.0
    assert h["speedup"] == pytest.approx(1.1) and h["speedup_min"] == 1.0 and h["speedup_chat"] == 1.2
    assert h["by_category"][plan.default_config] == {"chat": 1.2, "maths": 1.0}
    assert h["by_category"]["d K=2"] == pytest.approx({"chat": 1.08, "maths": 0.9})
    assert set(t["by_category"][plan.default_config]) == {"chat", "code"}
    assert {"speedup", "speedup_min", "best_speedup", "identical_greedy", "configs"} <= set(h)


def _result(plan, runs):
    from ggufspec.bench.results import BenchResult
    from ggufspec.bench.summary import summarise

    machine = {"cpu": "cpu", "physical_cores": 2, "logical_cores": 2, "ram_bytes": 2**33, "gpus": [], "threads": 2,
               "versions": {"python": "3", "llama_cpp": "0"}, "load_start": {"loadavg": [1.0, 1.0, 1.0]}, "load_end": {}}
    return BenchResult(plan=plan, runs=runs, machine=machine, peers={"notes": []}, micro={},
                       summary=summarise(plan, runs), started="now", wall_s=1.0)


def test_markdown_has_a_table_per_set_and_the_plots_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan()
    result = _result(plan, _runs(plan, {"t1": 2.0, "t2": 1.6, "h1": 1.2, "h2": 1.0}))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if matplotlib were missing
    out = tmp_path / "out"
    (out).mkdir()
    (out / "bench.md").write_text("old report")
    files = bench.write_outputs(result, out)
    assert files["plots"] == []
    md = (out / "bench.md").read_text()
    assert "plots skipped: pip install matplotlib" in md  # the plots come first, their note reaches bench.md
    assert "plots skipped" in " ".join(json.loads((out / "bench.json").read_text())["peers"]["notes"])
    assert "## Prompt set `tuned`: 2 prompts, the built-in set the defaults were tuned on" in md
    assert "## Prompt set `heldout`: 2 prompts, written fresh and never used for tuning" in md
    held = md[md.index("## Prompt set `heldout`"):md.index("## Configurations")]
    assert "default configuration: **1.10x** (worst prompt 1.00x; chat prompts 1.20x)" in held
    assert "| configuration | all | chat | maths |" in held
    assert f"| {plan.default_config} | 1.10 | 1.20 | 1.00 |" in held
    assert "## Speedup by prompt category (all prompts, both sets)" in md
    # every file landed whole: no temporary file left beside them
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "bench.md", "runs.csv"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    from ggufspec.atomic import write_atomic

    f = tmp_path / "bench.md"
    write_atomic(f, "first")
    with pytest.raises(TypeError):
        write_atomic(f, object())  # type: ignore[arg-type]  # fails halfway: after the temporary file exists
    assert f.read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["bench.md"]
    import os
    import stat

    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600


def test_cli_prompt_set_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "category": "chat", "messages": [{"role": "user", "content": "hi"}]}\n')
    assert main(["bench", "--prompts", str(f), "--prompt-set", "heldout"]) == 2
    assert capsys.readouterr().err.strip() == "error: give --prompts FILE or --prompt-set, not both"


# ---- a smoke run through the CLI on tiny models -------------------------------------------------------


def test_cli_bench_reports_both_sets_by_default(
    tmp_path: Path, tiny_target_q8: Path, tiny_draft_q8: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rc = main([
        "bench", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--limit", "1", "--repeats", "1",
        "-n", "8", "--sweep-k", "2", "--draft-max", "3", "--temp", "0", "--threads", "1", "--ctx", "512",
        "--no-peers", "--no-plots", "--out", str(out), "--json",
    ])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)["summary"]
    data = json.loads((out / "bench.json").read_text())
    s = data["summary"]
    assert s["prompt_sets"] == ["tuned", "heldout"] and printed["sets"].keys() == {"tuned", "heldout"}
    assert s["sets"]["tuned"]["prompts"] == ["chat-01"] and s["sets"]["heldout"]["prompts"] == ["h-chat-01"]
    for sub in (s, s["sets"]["tuned"], s["sets"]["heldout"]):
        assert sub["speedup"] > 0 and sub["identical_greedy"] == 1.0
    assert {r["prompt_id"] for r in data["runs"]} == {"chat-01", "h-chat-01"}
    md = (out / "bench.md").read_text()
    assert "## Prompt set `tuned`: 1 prompts" in md and "## Prompt set `heldout`: 1 prompts" in md


def test_default_vs_best_fixed_or_always_draft_per_category() -> None:
    from ggufspec.bench.summary import default_vs_best

    configs = [
        {"name": "target alone", "engine": "ggufspec", "draft": "none", "temperature": 0.0, "fixed": True, "speedup": 1.0},
        {"name": "d adaptive", "engine": "ggufspec", "draft": "d", "temperature": 0.0, "fixed": False, "speedup": 1.1},
        {"name": "d K=4", "engine": "ggufspec", "draft": "d", "temperature": 0.0, "fixed": True, "speedup": 1.2},
        {"name": "d always", "engine": "ggufspec", "draft": "d", "temperature": 0.0, "fixed": False, "always_draft": True, "speedup": 0.9},
        {"name": "lookup adaptive", "engine": "ggufspec", "draft": "lookup", "temperature": 0.0, "fixed": False, "speedup": 3.0},
        {"name": "native K=4", "engine": "native", "draft": "d", "temperature": 0.0, "fixed": True, "speedup": 5.0},
    ]
    by_cat = {"d adaptive": {"chat": 1.1, "code": 0.95}, "d K=4": {"chat": 1.25, "code": 0.8},
              "d always": {"chat": 1.0, "code": 0.9}, "lookup adaptive": {"chat": 3.0, "code": 3.0}}
    vs = default_vs_best(configs, by_cat, default="d adaptive")
    # over all prompts: against K=4 (adaptive lookup, native and the target alone are not rivals)
    assert vs["all"] == {"default": 1.1, "reference": "d K=4", "reference_speedup": 1.2, "ratio": pytest.approx(1.1 / 1.2)}
    assert vs["chat"]["reference"] == "d K=4" and vs["chat"]["ratio"] == pytest.approx(1.1 / 1.25)
    # no rival beats the target alone on code: the reference is the target alone
    assert vs["code"] == {"default": 0.95, "reference": "target alone", "reference_speedup": 1.0, "ratio": 0.95}


def test_cli_bench_prints_each_sets_lowest_category_with_its_interval(
    tmp_path: Path, tiny_target_q8: Path, tiny_draft_q8: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json the table goes to stderr, then each set's category where the default is
    furthest behind its best rival, with the bootstrap interval bench.json holds."""
    out = tmp_path / "out"
    rc = main([
        "bench", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--limit", "1", "--repeats", "2",
        "-n", "8", "--sweep-k", "2", "--draft-max", "3", "--temp", "0", "--threads", "1", "--ctx", "512",
        "--no-peers", "--no-plots", "--out", str(out),
    ])
    assert rc == 0
    err = capsys.readouterr().err
    s = json.loads((out / "bench.json").read_text())["summary"]
    for name in ("tuned", "heldout"):
        cells = s["sets"][name]["default_vs_best"]
        assert set(cells) == {"all", "chat"} and all(c["ratio_low"] <= c["ratio_high"] for c in cells.values())
        cat = min(cells, key=lambda c: cells[c]["ratio"])  # ties: the first ("all")
        cell = cells[cat]
        printed = f"{name} {cat} {cell['ratio']:.2f} [{cell['ratio_low']:.2f}-{cell['ratio_high']:.2f}] ({cell['reference']})"
        assert printed in " ".join(err.split()), err
    assert "lowest category (90% interval over repeats)" in " ".join(err.split())
