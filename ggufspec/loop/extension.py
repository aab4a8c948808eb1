"""A free drafter's continuation of a draft model's full proposal, appended to it (pure).

A free drafter (prompt lookup) can continue history + the model's drafts, not yet verified: its
continuation costs verify rows only, no draft calls, and is judged where the model's drafts were
all kept (its own curve pi_f, `_extension_key`: by the free drafter and its grade).

Extension (`extend`): a model's full proposal of K tokens takes the longest e tokens of the
continuation with
    pi_m(K) pi_f(e) / R >= v
(R the best rate, v the verify line's slope): a token pays for its verify row. What the
continuation adds is priced into the model's K too (rule `extend_k`, ggufspec.loop.throughput).

Where the target runs on a CUDA graph (rule switch_cost), an extension changes the verify's rows
for one round: that round runs without the graph, and so do the next two (back at K + 1 rows, the
second capturing it again): at least S, the measured way back to one row (two decodes without the
graph and a capture; costmodel.shape_s). So the e tokens pay S too:
    sum_{i <= e} (pi_m(K) pi_f(i) / R - v) >= S,   else no extension   (`extend_switch`).
(pi_f is non-increasing, so the e above maximizes the sum: taking S off leaves e or nothing.)
"""

from __future__ import annotations

from ggufspec.loop.checks import Checks


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
        v = self.verify_s(draft_len + 1) - self.verify_s(draft_len)  # type: ignore[operator]
        e, gain = 0, 0.0
        for pi in self.prefix_accept(key, match_len):
            worth = full * pi / rate - v  # the e-th token's seconds at the best rate, less its row
            if worth < 0.0:
                break
            e += 1
            gain += worth
        return e if e == 0 or not self.settings.extend_switch or gain >= self.shape_s() else 0
