"""A free drafter's continuation of a draft model's full proposal, appended to it (pure).

A free drafter (prompt lookup) can continue history + the model's drafts, not yet verified: its
continuation costs verify rows only, no draft calls, and is judged where the model's drafts were
all kept (its own curve pi_f, `_extension_key`: by the free drafter and its grade).

Extension (`extend`): a model's full proposal of K tokens takes the longest e tokens of the
continuation with
    pi_m(K) pi_f(e) / R >= v
(R the best rate, v the verify line's slope): a token pays for its verify row. What the
continuation adds is priced into the model's K too (rule `extend_k`, ggufspec.loop.throughput).

On a CUDA graph (rule switch_cost) an extension changes the verify's rows for one round, and
that round and the next two run without the target's graph. Making the e tokens pay that change
(S) as well was tried (rule `extend_switch`) and removed: on the H200's 7B stand-in, on against
off read 0.989 [0.981-0.996] in lockstep (docs/bench/controller.md).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ggufspec.loop.checks import Checks


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class Extensions(Checks):
    """The checked schedule with a free drafter's continuation of a model's full proposal (module docstring)."""

    def extend(self, name: str, *, draft_len: int, free: str, grade: int, match_len: int) -> int:
        """Tokens of free drafter `free`'s continuation (`grade`, `match_len` tokens) to append to
        draft model `name`'s full proposal of `draft_len` tokens (module docstring)."""
        if match_len <= 0 or draft_len <= 0 or name not in self._drafters or self.base_s() is None:
            return 0
        key = self._extension_key(free, grade)
        self._model(key, True)
        full = self.prefix_accept(name, draft_len)[-1]
        rate = max(self._rates.values(), default=0.0) or (1.0 / self.base_s())  # type: ignore[operator]
        # a row: the verify line's slope (not V(K + 1) - V(K): rule measured_verify may bend V)
        v = self._verify_line(self.base_s())[1]  # type: ignore[arg-type]
        e = 0
        for pi in self.prefix_accept(key, match_len):
            if full * pi / rate < v:  # the e-th token's seconds at the best rate against its row
                break
            e += 1
        return e
