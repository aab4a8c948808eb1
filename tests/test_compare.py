"""`ggufspec run --compare --repeats N`: the pure spread verdict and ABBA order on fakes, then the
CLI on tiny models (the JSON shape, N alternated repeats, the noisy note on an injected spread)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggufspec.compare import ALONE, SPECULATIVE, Measured, compare, report_lines, run_order, spread

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
    assert lines[0].startswith("speedup 1.50x, median of 3 repeat(s) (min 1.50x, max 2.00x, spread +-33%)")
    assert "30.0 / 40.0 / 36.0" in lines[1] and "20.0 / 20.0 / 24.0" in lines[1]
    assert lines[2].startswith("NOISY") and "load average 3.50 2.00 1.00" in lines[2] and "CPU pressure 40%" in lines[2]


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


def test_cli_compare_json_runs_n_alternated_repeats(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    # count the generations the command starts, by side, in order (the pair's generate, wrapped)
    prelude = (
        "import ggufspec.runtime as rt\n"
        "_orig = rt.SpeculativePair.generate\n"
        "def _counting(self, **kw):\n"
        "    side = 'alone' if kw.get('drafters', 1) == () else 'speculative'\n"
        "    paced = not kw['speculative'].length.fixed\n"
        "    sys.stderr.write(f\"GEN {side} {kw['max_tokens']} {'paced' if paced else 'fixed'}\\n\")\n"
        "    return _orig(self, **kw)\n"
        "rt.SpeculativePair.generate = _counting\n"
    )
    proc = _cli(*_common(tiny_target_q8, tiny_draft_q8), "--compare", "--repeats", "3", "--json", prelude=prelude)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    gens = [line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("GEN ")]
    # an uncounted warm-up of each side (16 tokens; the speculative one at a fixed length, so that
    # the pair's pacer never learns from cold timings), then 3 ABBA pairs of 20 tokens
    assert [g[:2] for g in gens] == [["speculative", "16"], ["alone", "16"],
                                     ["speculative", "20"], ["alone", "20"], ["alone", "20"], ["speculative", "20"],
                                     ["speculative", "20"], ["alone", "20"]]
    assert [g[2] for g in gens if g[0] == "speculative"] == ["fixed", "paced", "paced", "paced"]  # paced: the controller
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


def test_cli_compare_says_noisy_when_the_speedups_spread(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    # inject a spread: the target alone's counted runs measure 100, 50, 100 tok/s; speculative 100
    prelude = (
        "import ggufspec.commands.run as cr\n"
        "from ggufspec.compare import Measured\n"
        "_alone = iter([100.0, 50.0, 100.0])\n"
        "def _fake(gen, side):\n"
        "    tps = next(_alone) if side == 'alone' else 100.0\n"
        "    return Measured(gen_tps=tps, generated_tokens=gen.stats.generated_tokens, tokens=tuple(gen.tokens))\n"
        "cr._measured = _fake\n"
    )
    common = _common(tiny_target_q8, tiny_draft_q8)
    proc = _cli(*common, "--compare", prelude=prelude)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "speedup 1.00x, median of 3 repeat(s) (min 1.00x, max 2.00x, spread +-100%)" in err
    assert "NOISY: the speedups spread +-100% around their median (beyond +-10%); load average" in err
    assert "output identical to the target alone in every repeat" in err
    out = json.loads(_cli(*common, "--compare", "--json", prelude=prelude).stdout)
    assert out["compare"]["noisy"] is True and out["compare"]["speedups"] == [1.0, 2.0, 1.0]
    assert out["speedup"] == 1.0 and out["compare"]["spread_pct"] == 100.0


def test_cli_repeats_needs_compare_and_a_positive_count(tiny_target_q8: Path) -> None:
    for extra, fragment in ((["--repeats", "2"], "add --compare"), (["--compare", "--repeats", "0"], "--repeats must be >= 1")):
        proc = _cli("run", "--target", str(tiny_target_q8), "-p", "hi", *extra)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        assert proc.stderr.startswith("error: ") and fragment in proc.stderr


def test_a_spread_just_past_the_tolerance_is_not_printed_as_the_tolerance() -> None:
    from ggufspec.compare import _pct

    assert _pct(spread([1.0, 1.104, 1.0])) == "10.4"  # NOISY, and not "+-10% (beyond +-10%)"
    assert _pct(spread([1.0, 1.33, 1.0])) == "33"
