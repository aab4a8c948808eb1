"""scripts/overhead.py's zero-cost models drive the real loop (pure: no llama_cpp)."""

from __future__ import annotations

import pytest
from script_module import load_script

from ggufspec.loop import clock

overhead = load_script("overhead")


def test_every_mode_runs_the_real_loop_on_the_zero_cost_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "now", clock.now)  # the runner points it at each mode's simulated clock
    res = overhead.measure(list(overhead.MODES), repeats=1, rounds=40, max_tokens=32, prompt_len=50)
    assert set(res) == set(overhead.MODES)
    assert all(r["rounds"] >= 40 and r["ms"][0] > 0 for r in res.values())
    assert res["alone"]["by_drafter"] == {"none": 1.0} and res["alone"]["tokens_per_round"] == 1.0
    assert res["K4"]["drafts_per_round"] > 3 and 0.5 < res["K4"]["accept"] < 1.0  # the draft agrees mostly
    # where drafting pays on the simulated clock the controller drafts; at the H200's costs it rarely does
    assert res["default:pays"]["by_drafter"].get("model", 0) > 0.5 > res["default:h200"]["by_drafter"].get("model", 0)


def test_the_fake_models_are_a_function_of_the_prefix() -> None:
    sim = overhead.SimClock()
    a = overhead.ZeroCostModel(sim, draft=False, t_1=0.01, t_row=0.001)
    b = overhead.ZeroCostModel(sim, draft=False, t_1=0.01, t_row=0.001)
    a.decode([5, 6, 7, 8], logits="all")  # one batch
    for t in (5, 6, 7, 8):  # one token at a time
        b.decode([t], logits="last")
        assert int(b.logits(-1).argmax()) == int(a.logits([5, 6, 7, 8].index(t)).argmax())
    assert sim.t == pytest.approx(0.01 + 3 * 0.001 + 4 * 0.01)
