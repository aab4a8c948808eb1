"""`ggufspec run --compare --repeats N`: the pure spread verdict and ABBA order on fakes, then the
CLI on tiny models (the JSON shape, N alternated repeats, the noisy note on an injected spread)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ggufspec.compare import ALONE, SPECULATIVE, Drafting, Measured, compare, report_lines, run_order, spread

# ---- the verdict (pure) ---------------------------------------------------------------------------


def test_spread_median_range_and_the_10_percent_rule() -> None:
    s = spread([1.0, 1.2, 1.1])
    assert (s.median, s.min, s.max) == (1.1, 1.0, 1.2)
    # 1.2 / 1.1 = +9.1%, 1.0 / 1.1 = -9.1%: inside +-10%
    assert s.spread_pct == pytest.approx(100 * (1.2 / 1.1 - 1)) and not s.noisy
    # the three draws of issue 12: 0.98x, 1.43x, 1.64x around 1.43: -31% / +15%
    s = spread([0.98, 1.43, 1.64])
    assert s.median == 1.43 and s.noisy and s.spread_pct == pytest.approx(100 * (1 - 0.98 / 1.43))
    # one side alone beyond the band is enough: above ...
    assert spread([1.0, 1.0, 1.11]).noisy and not spread([1.0, 1.0, 1.1]).noisy
    # ... or below (0.9 is on the boundary: not beyond)
    assert spread([1.0, 1.0, 0.89]).noisy and not spread([1.0, 1.0, 0.9]).noisy
    # an even count: the median of the middle two
    assert spread([1.0, 2.0]).median == 1.5 and spread([1.0, 2.0]).noisy
    # a single repeat has no spread
    one = spread([1.3])
    assert (one.median, one.spread_pct, one.noisy) == (1.3, 0.0, False)
    # a looser tolerance
    assert not spread([0.98, 1.43, 1.64], tolerance=0.35).noisy
    with pytest.raises(ValueError):
        spread([])
    with pytest.raises(ValueError):
        spread([1.0, 0.0])


def test_run_order_alternates_abba() -> None:
    assert run_order(3) == [(0, SPECULATIVE), (0, ALONE), (1, ALONE), (1, SPECULATIVE), (2, SPECULATIVE), (2, ALONE)]
    assert run_order(1) == [(0, SPECULATIVE), (0, ALONE)]


def test_compare_on_fakes_warms_up_then_pairs_runs_per_repeat() -> None:
    calls: list[object] = []
    tps = {(0, SPECULATIVE): 30.0, (0, ALONE): 20.0, (1, SPECULATIVE): 40.0, (1, ALONE): 20.0,
           (2, SPECULATIVE): 36.0, (2, ALONE): 24.0}

    def run(repeat: int, side: str) -> Measured:
        calls.append((repeat, side))
        return Measured(gen_tps=tps[(repeat, side)], generated_tokens=9, tokens=(1, 2, 3))

    def warmup() -> int:
        calls.append("warmup")
        return 16

    c = compare(run=run, repeats=3, greedy=True, warmup=warmup)
    assert calls == ["warmup", *run_order(3)]
    assert c.speedups == (1.5, 2.0, 1.5)  # per repeat: speculative / target alone of the same repeat
    assert c.spread.median == 1.5 and c.spread.noisy  # 2.0 is +33%
    assert c.tps(SPECULATIVE) == [30.0, 40.0, 36.0] and c.tps(ALONE) == [20.0, 20.0, 24.0]
    assert c.identical is True and c.warmup_tokens == 16
    d = c.to_dict(load={"loadavg": [1.0, 0.5, 0.2]})
    assert d["repeats"] == 3 and d["median"] == 1.5 and d["min"] == 1.5 and d["max"] == 2.0
    assert d["spread_pct"] == pytest.approx(33.33) and d["noisy"] is True and d["load"]["loadavg"] == [1.0, 0.5, 0.2]
    assert d["order"] == ["speculative:0", "alone:0", "alone:1", "speculative:1", "speculative:2", "alone:2"]
    lines = report_lines(c, load={"loadavg": [3.5, 2.0, 1.0], "cpu_pressure_avg10": 40.0, "cpu_pressure_avg60": 20.0})
    assert lines[0].startswith("speedup 1.50x, median of 3 repeat(s) alternated (min 1.50x, max 2.00x, spread +-33%)")
    assert d["lockstep"] is False
    assert "30.0 / 40.0 / 36.0" in lines[1] and "20.0 / 20.0 / 24.0" in lines[1]
    assert lines[2].startswith("NOISY") and "load average 3.50 2.00 1.00" in lines[2] and "CPU pressure 40%" in lines[2]


def test_compare_in_lockstep_runs_both_sides_of_a_repeat_at_once() -> None:
    calls: list[object] = []
    tps = {0: (30.0, 20.0), 1: (40.0, 20.0), 2: (36.0, 24.0)}  # repeat -> (speculative, alone)

    def run_both(repeat: int, sides: tuple[str, str]) -> dict[str, Measured]:
        calls.append((repeat, sides))
        s, a = tps[repeat]
        # the speculative side drafts in its first repeat only (a fresh controller finding out)
        drafted = {"none": 6, "draft": 2} if repeat == 0 else {"none": 9}
        spec = Drafting(rounds=sum(drafted.values()), drafted=4 if repeat == 0 else 0, accepted=3 if repeat == 0 else 0,
                        drafter_rounds=drafted)
        return {SPECULATIVE: Measured(gen_tps=s, generated_tokens=9, tokens=(1, 2, 3), drafting=spec),
                ALONE: Measured(gen_tps=a, generated_tokens=9, tokens=(1, 2, 3),
                                drafting=Drafting(rounds=9, drafter_rounds={"none": 9}))}

    c = compare(run_both=run_both, repeats=3, greedy=True, warmup=lambda: 16)
    # one call a repeat, its sides in run_order's order (the first takes the first step)
    assert calls == [(0, (SPECULATIVE, ALONE)), (1, (ALONE, SPECULATIVE)), (2, (SPECULATIVE, ALONE))]
    assert c.speedups == (1.5, 2.0, 1.5) and c.lockstep and c.identical is True
    d = c.to_dict()
    assert d["lockstep"] is True and d["order"] == [f"{side}:{r}" for r, side in run_order(3)]
    # each counted run in that order, with what it drafted
    assert [(r["side"], r["repeat"]) for r in d["runs"]] == [(side, r) for r, side in run_order(3)]
    assert d["runs"][0] == {"repeat": 0, "side": SPECULATIVE, "gen_tps": 30.0, "generated_tokens": 9, "rounds": 8,
                            "drafted": 4, "accepted": 3, "drafter_rounds": {"none": 6, "draft": 2}}
    assert d["runs"][1]["drafter_rounds"] == {"none": 9} and d["runs"][1]["drafted"] == 0
    lines = report_lines(c, load={})
    assert lines[0].startswith("speedup 1.50x, median of 3 repeat(s) in lockstep (min 1.50x")
    assert lines[2] == "  rounds that drafted per repeat: 2 of 8 / 0 of 9 / 0 of 9"
    with pytest.raises(ValueError):
        compare(run=lambda r, side: Measured(gen_tps=1.0, generated_tokens=1, tokens=()), run_both=run_both,
                repeats=1, greedy=True)
    with pytest.raises(ValueError):
        compare(repeats=1, greedy=True)


def test_compare_greedy_identity_must_hold_in_every_repeat() -> None:
    def run(repeat: int, side: str) -> Measured:
        tokens = (1, 2, 9) if (repeat, side) == (1, SPECULATIVE) else (1, 2, 3)
        return Measured(gen_tps=10.0, generated_tokens=3, tokens=tokens)

    c = compare(run=run, repeats=2, greedy=True)
    assert c.identical is False and c.warmup_tokens == 0 and not c.spread.noisy
    assert "OUTPUT DIFFERS" in report_lines(c, load={})[-1]
    assert compare(run=run, repeats=2, greedy=False).identical is None
    with pytest.raises(ValueError):
        compare(run=run, repeats=0, greedy=True)


def test_compare_without_a_timed_baseline_reports_no_speedup() -> None:
    c = compare(run=lambda r, side: Measured(gen_tps=0.0, generated_tokens=1, tokens=(1,)), repeats=2, greedy=True)
    assert c.speedups == () and c.spread is None and c.to_dict()["median"] is None
    assert report_lines(c, load=None)[0].startswith("speedup: not measured")


# ---- through the CLI on tiny models ---------------------------------------------------------------------


def _cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """`python -m ggufspec.cli ARGS` as a subprocess; `prelude` runs first (to replace a seam)."""
    code = f"import sys\n{prelude}\nfrom ggufspec.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


def _common(target: Path, draft: Path) -> list[str]:
    return ["run", "--target", str(target), "--draft", str(draft), "-p", "Once upon a time", "-n", "20",
            "--threads", "1", "--ctx", "256"]


# count the generations the command starts, in order: side, tokens, paced or fixed, the target
# context (its lane) and the controller, each by the order it first appears (the loop's generate, wrapped)
_COUNTING = (
    "import ggufspec.loop.engine as eng\n"
    "_orig, _seen = eng.generate, {}\n"
    "def _counting(**kw):\n"
    "    side = 'alone' if tuple(kw['drafters']) == () else 'speculative'\n"
    "    paced = 'fixed' if kw['speculative'].length.fixed else 'paced'\n"
    "    lane = _seen.setdefault(('t', id(kw['target'])), len([k for k in _seen if k[0] == 't']))\n"
    "    ctl = _seen.setdefault(('c', id(kw['controller'])), len([k for k in _seen if k[0] == 'c']))\n"
    "    sys.stderr.write(f\"GEN {side} {kw['max_tokens']} {paced} lane{lane} ctl{ctl}\\n\")\n"
    "    return _orig(**kw)\n"
    "eng.generate = _counting\n"
)


def _gens(stderr: str) -> list[list[str]]:
    return [line.split()[1:] for line in stderr.splitlines() if line.startswith("GEN ")]


def _common_compare_json(out: dict) -> None:
    c = out["compare"]
    assert c["repeats"] == 3 and len(c["speedups"]) == 3 and c["warmup_tokens"] == 16
    assert c["order"] == ["speculative:0", "alone:0", "alone:1", "speculative:1", "speculative:2", "alone:2"]
    assert c["min"] <= c["median"] <= c["max"] and isinstance(c["noisy"], bool) and c["spread_pct"] >= 0
    assert c["speedups"] == pytest.approx([s / a for s, a in zip(c["speculative_tps"], c["alone_tps"])], rel=1e-2)
    assert "loadavg" in c["load"]
    # the keys that were there before repeats: speedup is the median, identical holds in every repeat
    assert out["speedup"] == pytest.approx(c["median"], abs=1e-3)
    assert out["identical"] is True and c["identical"] is True and out["text"] == out["baseline"]["text"]
    assert set(out["baseline"]) == {"text", "gen_tps"} and out["stats"]["generated_tokens"] == 20
    # each counted run in order, with what it drafted: the first speculative run is `stats`'s
    runs = c["runs"]
    assert [f"{r['side']}:{r['repeat']}" for r in runs] == c["order"]
    for r in runs:
        assert sum(r["drafter_rounds"].values()) == r["rounds"] > 0 and r["generated_tokens"] == 20
        assert r["accepted"] <= r["drafted"]
        if r["side"] == "alone":
            assert r["drafter_rounds"] == {"none": r["rounds"]} and r["drafted"] == 0
    first = runs[0]
    assert first["side"] == "speculative" and first["drafted"] == out["stats"]["drafted"]
    assert first["drafter_rounds"] == out["stats"]["drafter_rounds"]


def test_cli_compare_json_runs_n_repeats_in_lockstep_on_two_lanes(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    proc = _cli(*_common(tiny_target_q8, tiny_draft_q8), "--compare", "--repeats", "3", "--json", prelude=_COUNTING)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # an uncounted warm-up of each side on each lane (16 tokens; the speculative one at a fixed
    # length, so that the pair's controller never learns from cold timings), then 3 repeats of 20
    # tokens, both sides started together; the speculative side on lane repeat % 2, the target
    # alone on the other; the pair's controller (ctl0) drafts, the target alone has its own
    assert _gens(proc.stderr) == [
        ["speculative", "16", "fixed", "lane0", "ctl0"], ["alone", "16", "paced", "lane0", "ctl1"],
        ["speculative", "16", "fixed", "lane1", "ctl0"], ["alone", "16", "paced", "lane1", "ctl1"],
        ["speculative", "20", "paced", "lane0", "ctl0"], ["alone", "20", "paced", "lane1", "ctl1"],
        ["alone", "20", "paced", "lane0", "ctl1"], ["speculative", "20", "paced", "lane1", "ctl0"],
        ["speculative", "20", "paced", "lane0", "ctl0"], ["alone", "20", "paced", "lane1", "ctl1"],
    ]
    assert out["compare"]["lockstep"] is True
    _common_compare_json(out)


def test_cli_compare_sequential_alternates_on_the_pairs_contexts(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    proc = _cli(*_common(tiny_target_q8, tiny_draft_q8), "--compare", "--sequential", "--repeats", "3", "--json",
                prelude=_COUNTING)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    gens = _gens(proc.stderr)
    # the warm-up of each side, then 3 ABBA pairs, all on the pair's target context
    assert [g[:2] for g in gens] == [["speculative", "16"], ["alone", "16"],
                                     ["speculative", "20"], ["alone", "20"], ["alone", "20"], ["speculative", "20"],
                                     ["speculative", "20"], ["alone", "20"]]
    assert [g[2] for g in gens if g[0] == "speculative"] == ["fixed", "paced", "paced", "paced"]  # paced: the controller
    assert {g[3] for g in gens} == {"lane0"}
    assert out["compare"]["lockstep"] is False
    _common_compare_json(out)


def test_cli_compare_without_room_for_a_second_context_runs_sequential(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    # llama.cpp cannot make the second target context (a full device): one note, the sides alternate
    prelude = (
        "import ggufspec.runtime as rt\n"
        "def _full(self, drafters):\n"
        "    raise ValueError('Failed to create llama_context')\n"
        "rt.SpeculativePair.fork = _full\n"
    )
    proc = _cli(*_common(tiny_target_q8, tiny_draft_q8), "--compare", "--repeats", "2", "--json", prelude=prelude)
    assert proc.returncode == 0, proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("note: --compare")]
    assert notes == ["note: --compare runs its two sides one after the other: a second target context could not be "
                     "made (Failed to create llama_context)"]
    out = json.loads(proc.stdout)
    assert out["compare"]["lockstep"] is False and out["identical"] is True
    assert out["compare"]["order"] == ["speculative:0", "alone:0", "alone:1", "speculative:1"]


def test_cli_compare_says_noisy_when_the_speedups_spread(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    # inject a spread: the target alone's counted runs measure 100, 50, 100 tok/s; speculative 100
    prelude = (
        "import ggufspec.commands.run as cr\n"
        "from ggufspec.compare import Drafting, Measured\n"
        "_alone = iter([100.0, 50.0, 100.0])\n"
        "def _fake(gen, side):\n"
        "    tps = next(_alone) if side == 'alone' else 100.0\n"
        "    drafting = Drafting(rounds=gen.stats.rounds, drafter_rounds=dict(gen.stats.drafter_rounds))\n"
        "    return Measured(gen_tps=tps, generated_tokens=gen.stats.generated_tokens, tokens=tuple(gen.tokens),\n"
        "                    drafting=drafting)\n"
        "cr._measured = _fake\n"
    )
    common = _common(tiny_target_q8, tiny_draft_q8)
    proc = _cli(*common, "--compare", prelude=prelude)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "speedup 1.00x, median of 3 repeat(s) in lockstep (min 1.00x, max 2.00x, spread +-100%)" in err
    assert "NOISY: the speedups spread +-100% around their median (beyond +-10%); load average" in err
    assert "output identical to the target alone in every repeat" in err
    assert re.search(r"^  rounds that drafted per repeat: \d+ of \d+ / \d+ of \d+ / \d+ of \d+$", err, re.M), err
    out = json.loads(_cli(*common, "--compare", "--json", prelude=prelude).stdout)
    assert out["compare"]["noisy"] is True and out["compare"]["speedups"] == [1.0, 2.0, 1.0]
    assert out["speedup"] == 1.0 and out["compare"]["spread_pct"] == 100.0


def test_cli_repeats_needs_compare_and_a_positive_count(tiny_target_q8: Path) -> None:
    for extra, fragment in ((["--repeats", "2"], "add --compare"), (["--compare", "--repeats", "0"], "--repeats must be >= 1")):
        proc = _cli("run", "--target", str(tiny_target_q8), "-p", "hi", *extra)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        assert proc.stderr.startswith("error: ") and fragment in proc.stderr
    proc = _cli("run", "--target", str(tiny_target_q8), "-p", "hi", "--sequential")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --sequential is how --compare runs its two sides; add --compare or drop --sequential")


def test_a_spread_just_past_the_tolerance_is_not_printed_as_the_tolerance() -> None:
    from ggufspec.compare import _pct

    assert _pct(spread([1.0, 1.104, 1.0])) == "10.4"  # NOISY, and not "+-10% (beyond +-10%)"
    assert _pct(spread([1.0, 1.33, 1.0])) == "33"
