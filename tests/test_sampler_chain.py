"""Our sampling shape (ggufspec.loop.sampling.probabilities) against llama.cpp's own sampler chain.

llama.cpp's common chain applies top-k -> top-p -> min-p -> temperature (temperature last: top-p
and min-p see the distribution at temperature 1). A shape that applied the temperature first
keeps another set of tokens at T != 1; this test runs llama.cpp's samplers on the same logits
and compares the kept tokens and their probabilities.
"""

from __future__ import annotations

import ctypes

import llama_cpp as llama
import numpy as np
import pytest

from ggufspec.loop.sampling import SamplingSettings, probabilities


def llama_cpp_chain(logits: np.ndarray, s: SamplingSettings) -> np.ndarray:
    """The distribution llama.cpp's chain leaves before its final draw, as a (V,) array."""
    chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
    try:
        if s.top_k > 0:
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_k(s.top_k))
        if s.top_p < 1.0:
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_p(s.top_p, 1))
        if s.min_p > 0.0:
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_min_p(s.min_p, 1))
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_temp(s.temperature))
        n = len(logits)
        data = (llama.llama_token_data * n)(*[llama.llama_token_data(i, float(x), 0.0) for i, x in enumerate(logits)])
        arr = llama.llama_token_data_array(data, n, -1, False)
        llama.llama_sampler_apply(chain, ctypes.byref(arr))
        ids = np.array([arr.data[i].id for i in range(arr.size)])
        z = np.array([arr.data[i].logit for i in range(arr.size)], dtype=np.float64)
    finally:
        llama.llama_sampler_free(chain)
    p = np.zeros(len(logits))
    w = np.exp(z - z.max())
    p[ids] = w / w.sum()
    return p


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kw", [
    {"temperature": 0.5, "top_p": 0.9},
    {"temperature": 1.7, "top_p": 0.8},
    {"temperature": 0.7, "min_p": 0.05},
    {"temperature": 2.0, "min_p": 0.1},
    {"temperature": 0.6, "top_k": 12, "top_p": 0.9, "min_p": 0.02},
    {"temperature": 1.0, "top_k": 5},
])
def test_same_kept_tokens_and_probabilities_as_llama_cpp(seed: int, kw: dict) -> None:
    logits = (np.random.default_rng(seed).standard_normal(64) * 2.5).astype(np.float32)
    s = SamplingSettings(**kw)
    ours, theirs = probabilities(logits, s), llama_cpp_chain(logits, s)
    np.testing.assert_array_equal(ours > 0, theirs > 0)  # the same tokens survive the filters
    np.testing.assert_allclose(ours, theirs, atol=2e-6)


def test_temperature_first_would_keep_other_tokens() -> None:
    # the check above can fail: at T = 0.5, top-p over the sharpened distribution keeps fewer
    logits = (np.random.default_rng(3).standard_normal(64) * 2.5).astype(np.float32)
    last = probabilities(logits, SamplingSettings(temperature=0.5, top_p=0.9))
    first = probabilities(logits / 0.5, SamplingSettings(temperature=1.0, top_p=0.9))
    assert np.count_nonzero(first) < np.count_nonzero(last)
    assert np.array_equal(last > 0, llama_cpp_chain(logits, SamplingSettings(temperature=0.5, top_p=0.9)) > 0)
