"""Shaping logits into distributions: llama.cpp's order (top-k, top-p, min-p, temperature)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ggufspec.errors import UserError
from ggufspec.loop.sampling import SamplingSettings, probabilities, sample

logit_rows = arrays(np.float32, st.integers(2, 64), elements=st.floats(-20, 20, width=32))


@settings(max_examples=200, deadline=None)
@given(
    logits=logit_rows,
    temp=st.floats(0.05, 3.0),
    top_k=st.integers(0, 70),
    top_p=st.floats(0.05, 1.0),
    min_p=st.floats(0.0, 0.9),
)
def test_shaped_rows_are_distributions_that_keep_the_argmax(logits, temp, top_k, top_p, min_p) -> None:
    s = SamplingSettings(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p)
    p = probabilities(logits, s)
    assert p.shape == logits.shape and p.dtype == np.float64
    assert abs(p.sum() - 1.0) < 1e-9 and (p >= 0).all()
    assert p[int(np.argmax(logits))] == p.max() > 0
    if top_k:
        assert np.count_nonzero(p) <= top_k


def test_temperature_one_is_softmax_and_greedy_is_one_hot() -> None:
    logits = np.array([1.0, 2.0, 0.5], dtype=np.float32)
    ref = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(probabilities(logits, SamplingSettings(temperature=1.0)), ref, rtol=1e-6)
    np.testing.assert_array_equal(probabilities(logits, SamplingSettings()), [0.0, 1.0, 0.0])


def test_top_k_top_p_min_p_filter_as_llama_cpp() -> None:
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.1])).astype(np.float32)
    kept = lambda **kw: np.flatnonzero(probabilities(logits, SamplingSettings(temperature=1.0, **kw))).tolist()
    assert kept(top_k=2) == [0, 1]
    assert kept(top_p=0.7) == [0, 1]  # 0.5 < 0.7 <= 0.75
    assert kept(top_p=0.75) == [0, 1]
    assert kept(top_p=0.76) == [0, 1, 2]
    assert kept(min_p=0.3) == [0, 1]  # keep p >= 0.3 * 0.5
    p = probabilities(logits, SamplingSettings(temperature=1.0, top_k=2))
    np.testing.assert_allclose(p[:2], [2 / 3, 1 / 3], rtol=1e-6)


def test_sample_follows_the_distribution_and_skips_zeros() -> None:
    rng = np.random.default_rng(0)
    p = np.array([0.0, 0.7, 0.0, 0.3])
    draws = np.bincount([sample(p, rng) for _ in range(20000)], minlength=4)
    assert draws[0] == draws[2] == 0
    assert abs(draws[1] / 20000 - 0.7) < 0.02


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.1}, "temperature must be >= 0"),
        ({"top_p": 0.0}, r"top-p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top-p must be in \(0, 1\]"),
        ({"top_k": -1}, "top-k must be >= 0"),
        ({"min_p": 1.0}, r"min-p must be in \[0, 1\)"),
        ({"seed": -2}, r"seed must be in \[0, 9223372036854775807\] \(2\^63 - 1\), or -1 for a random seed, got -2"),
        ({"seed": 2**63}, r"seed must be in \[0, 9223372036854775807\].*got 9223372036854775808"),
    ],
)
def test_bad_settings_are_user_errors(kwargs, message) -> None:
    with pytest.raises(UserError, match=message):
        SamplingSettings(**kwargs)


def test_seed_minus_one_is_a_fresh_random_seed_as_in_llama_cpp() -> None:
    s = SamplingSettings(temperature=1.0, seed=-1)
    assert s.seed is None  # the same as no seed: unseeded runs (pacing, fresh entropy)
    assert s == SamplingSettings(temperature=1.0)
    draws = {tuple(s.rng().random(4)) for _ in range(3)}
    assert len(draws) == 3  # fresh entropy each time
    seeded = SamplingSettings(temperature=1.0, seed=7)
    assert seeded.rng().random(4).tolist() == seeded.rng().random(4).tolist()
