"""Compatibility names for code not yet moved to `ggufspec.llama` (to be removed).

llama.cpp lives in the package `ggufspec.llama`; this module only re-exports its names under the
ones `ggufspec.backend` had. Importing it loads llama.cpp (over the exact kernels when built).
"""

from __future__ import annotations

from ggufspec.devices import physical_cores
from ggufspec.llama.context import CacheType, Context, ContextSettings
from ggufspec.llama.detok import Detokenizer
from ggufspec.llama.lib import batch_invariant_kernels, set_verbose
from ggufspec.llama.measure import MeasuredMemory, measure_contexts, measure_memory
from ggufspec.llama.model import Model, ModelSettings
from ggufspec.llama.quantize import FTYPES, quantize

__all__ = [
    "FTYPES",
    "CacheType",
    "Context",
    "ContextSettings",
    "Detokenizer",
    "MeasuredMemory",
    "Model",
    "ModelSettings",
    "batch_invariant_kernels",
    "measure_contexts",
    "measure_memory",
    "physical_cores",
    "quantize",
    "set_verbose",
]
