"""ggufspec: speculative decoding over GGUF models on llama.cpp.

    from ggufspec import load_pair, PairSettings, ContextSettings, SamplingSettings

    with load_pair(settings=PairSettings(context=ContextSettings(n_ctx=2048))) as pair:
        gen = pair.generate(messages=[{"role": "user", "content": "Hi!"}], max_tokens=64,
                            sampling=SamplingSettings(temperature=0.7, seed=1))
        for step in gen:
            print(step.text, end="")
        print(gen.stats.gen_tps, gen.stats.accept_rate)

Names are imported on first use, so `import ggufspec` (and the CLI's `--help`) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ggufspec.llama import kernels as _kernels

__version__ = "0.1.0"

# Before anything imports llama_cpp: point it at the batch-invariant kernels where they are built
# (ggufspec.llama.kernels; it only sets LLAMA_CPP_LIB_PATH). Some packages that ship GGUF files import
# llama_cpp themselves; whichever module comes first, the right libraries are loaded.
_kernels.activate()

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "load_pair": "ggufspec.runtime",
    "SpeculativePair": "ggufspec.runtime",
    "PAIR_DRAFTERS": "ggufspec.runtime",
    "DraftController": "ggufspec.loop.control",
    "ControlSettings": "ggufspec.loop.control",
    "PairSettings": "ggufspec.settings",
    "ContextSettings": "ggufspec.settings",
    "ModelSettings": "ggufspec.settings",
    "LookupSettings": "ggufspec.settings",
    "SamplingSettings": "ggufspec.loop.sampling",
    "SpeculativeSettings": "ggufspec.loop.speculation",
    "DraftLengthSettings": "ggufspec.loop.speculation",
    "AcceptRule": "ggufspec.loop.acceptance",
    "Variant": "ggufspec.loop.acceptance",
    "generate": "ggufspec.loop.engine",
    "Generation": "ggufspec.loop.engine",
    "Step": "ggufspec.loop.engine",
    "Source": "ggufspec.loop.rounds",
    "RunStats": "ggufspec.loop.stats",
    "SessionInfo": "ggufspec.session",
    "Target": "ggufspec.loop.target",
    "Drafter": "ggufspec.loop.drafters",
    "ModelDrafter": "ggufspec.loop.model_drafter",
    "LookupDrafter": "ggufspec.loop.lookup",
    "PairRefs": "ggufspec.models.resolve",
    "resolve_pair_refs": "ggufspec.models.resolve",
    "plan_offload": "ggufspec.plan",
    "read_model_info": "ggufspec.ggufinfo",
    "UserError": "ggufspec.errors",
    "Device": "ggufspec.hardware",
    "llama_devices": "ggufspec.hardware",
    "DeviceLayers": "ggufspec.plan.split",
    "compute_thread": "ggufspec.llama.compute",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ggufspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from ggufspec.errors import UserError
    from ggufspec.ggufinfo import read_model_info
    from ggufspec.hardware import Device, llama_devices
    from ggufspec.llama.compute import compute_thread
    from ggufspec.loop.acceptance import AcceptRule, Variant
    from ggufspec.loop.control import ControlSettings, DraftController
    from ggufspec.loop.drafters import Drafter
    from ggufspec.loop.model_drafter import ModelDrafter
    from ggufspec.loop.lookup import LookupDrafter
    from ggufspec.loop.engine import Generation, Step, generate
    from ggufspec.loop.rounds import Source
    from ggufspec.loop.sampling import SamplingSettings
    from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings
    from ggufspec.loop.stats import RunStats
    from ggufspec.loop.target import Target
    from ggufspec.models.resolve import PairRefs, resolve_pair_refs
    from ggufspec.plan import plan_offload
    from ggufspec.plan.split import DeviceLayers
    from ggufspec.runtime import PAIR_DRAFTERS, SpeculativePair, load_pair
    from ggufspec.session import SessionInfo
    from ggufspec.settings import ContextSettings, LookupSettings, ModelSettings, PairSettings
