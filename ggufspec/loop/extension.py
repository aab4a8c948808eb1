"""A free drafter's continuation of a draft model's proposal: appended to it, or taking over (pure).

A free drafter (prompt lookup) can continue history + the model's drafts, not yet verified: its
continuation costs verify rows only, no draft calls, and is judged where the model's drafts were
all kept (its own curve pi_f, `_extension_key`: by the free drafter and its grade).

Extension (`extend`): a model's full proposal of K tokens takes the longest e tokens of the
continuation with
    pi_m(K) pi_f(e) / R >= v
(R the best rate, v the verify line's slope): a token pays for its verify row.

Handover (rule `handover`, `handover`): after the model's j-th draft (j < K) the continuation may
take over: the model stops and the round verifies its j drafts and the continuation's e tokens
(e as the extension at j), where that round's modelled rate beats the full proposal's,
    (E_m(j) + pi_m(j) sum_{i<=e} pi_f(i)) / (V(j + e) + D_m(j))  >  E_m(K) / (V(K) + D_m(K)),
E_m(j) = 1 + sum_{i<=j} pi_m(i). Where the generation enters text the prompt holds (a copy, a
quote, a repeated block), lookup has no match at the round's start, one draft token later it
has: the model's remaining K - j calls are saved. On the gemma3-270m regime (a draft call 0.25 a,
a verify row cheap) a prompt's first round was the model's K = 8 and 2-3 extension tokens, 149 ms
for 11 tokens, where lookup then kept 9 tokens a round at 55 ms (docs/bench/controller.md).
Lossless: the stop is a function of the drafts, which are the model's (q), and the continuation
a function of history and drafts (q one-hot), as for --draft-p-min's stop.
"""

from __future__ import annotations

from ggufspec.loop.checks import Checks


class Extensions(Checks):
    """The checked schedule with a free drafter's continuation of a model's proposal (module docstring)."""

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
        e = 0
        for pi in self.prefix_accept(key, match_len):
            if full * pi / rate < v:
                break
            e += 1
        return e

    def handover(self, name: str, *, drafted: int, draft_len: int, free: str, grade: int, match_len: int) -> int:
        """Tokens of free drafter `free`'s continuation (`grade`, `match_len` tokens) that take
        over from draft model `name` after its first `drafted` of `draft_len` drafts; 0: the
        model drafts on (rule `handover`, module docstring)."""
        if not self.settings.handover or not 0 < drafted < draft_len:
            return 0
        e = self.extend(name, draft_len=drafted, free=free, grade=grade, match_len=match_len)
        if e <= 0:
            return 0
        d_j, d_k = self.draft_cost_s(name, drafted), self.draft_cost_s(name, draft_len)
        v_j, v_k = self.verify_s(drafted + e), self.verify_s(draft_len)
        if d_j is None or d_k is None or v_j is None or v_k is None:
            return 0
        pis = self.prefix_accept(name, draft_len)
        e_j = 1.0 + sum(pis[:drafted])
        e_k = e_j + sum(pis[drafted:])
        key = self._extension_key(free, grade)
        self._model(key, True)
        cont = sum(self.prefix_accept(key, e))
        return e if (e_j + pis[drafted - 1] * cont) / (v_j + d_j) > e_k / (v_k + d_k) else 0
