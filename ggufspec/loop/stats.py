"""What one generation cost and how the draft fared.

Definitions (the terms are also in the glossary of docs/ARCHITECTURE.md):
    gen_tps             (generated_tokens - 1) / gen_s: the first token comes from the prefill
    accept rate         accepted / drafted, over the generation's rounds
    mean accepted len   (generated_tokens - 1) / rounds: tokens emitted per target verify call
                        (1.0 for the target alone; at most K + 1)
    time split          gen_s = draft_s + verify_s + overhead_s (our Python between llama.cpp calls)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ggufspec.loop.rounds import Round


@dataclass(frozen=True, kw_only=True)
class RunStats:
    """Counts and timings of one generation.

    prompt phase: prefill of the prompt (target, and the draft model if any) up to the first token;
    `prompt_tokens` counts the whole prompt, `cached_tokens` the part of it reused from the target's
    KV cache (not decoded again), so the prefill decoded prompt_tokens - cached_tokens tokens.
    generation phase: everything after the first token; its wall time splits into draft decode,
    target verify (decode) and our own Python between llama.cpp calls (overhead).
    """

    prompt_tokens: int
    generated_tokens: int
    prompt_s: float
    gen_s: float  # wall time after the first token
    drafted: int
    accepted: int
    rounds: int  # target decode calls after the prompt (one verify each)
    draft_s: float
    verify_s: float
    drafted_at: tuple[int, ...]  # drafted_at[i]: rounds that drafted a token at position i
    accepted_at: tuple[int, ...]  # accepted_at[i]: rounds whose token at position i was accepted
    stop_reason: str  # "length" | "eog" | "stop" | "context" | "cancelled"
    paused_rounds: int = 0  # rounds the controller ran the target alone because drafting did not pay
    k_hist: dict[int, int] = field(default_factory=dict)  # rounds per drafted length (0: the target alone)
    drafter_rounds: dict[str, int] = field(default_factory=dict)  # rounds per chosen drafter ("none": target alone)
    cached_tokens: int = 0  # prompt tokens reused from the target's KV cache (prefix reuse)
    checks: int = 0  # rounds whose free proposal (lookup) was checked by the draft model's first token
    checks_failed: int = 0  # ... of them, where the two differed and the draft model's round ran instead
    extended: int = 0  # tokens of lookup's continuation appended to draft models' proposals (DraftController.extend)
    extended_accepted: int = 0  # ... of them, accepted

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.gen_s - self.draft_s - self.verify_s)

    @property
    def prompt_tps(self) -> float:
        """Prompt tokens decoded (prompt_tokens - cached_tokens) per second of prefill."""
        n = self.prompt_tokens - self.cached_tokens
        return n / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def gen_tps(self) -> float:
        # tokens after the first / time after the first token (the first comes from the prefill)
        n = self.generated_tokens - 1
        return n / self.gen_s if n > 0 and self.gen_s > 0 else 0.0

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_len(self) -> float:
        """Tokens emitted per target verify call (1.0 = no gain; at most K+1)."""
        return (self.generated_tokens - 1) / self.rounds if self.rounds else 0.0

    @property
    def accept_rate_by_position(self) -> tuple[float, ...]:
        return tuple(a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            overhead_s=self.overhead_s,
            prompt_tps=self.prompt_tps,
            gen_tps=self.gen_tps,
            accept_rate=self.accept_rate,
            mean_accepted_len=self.mean_accepted_len,
            accept_rate_by_position=list(self.accept_rate_by_position),
        )
        d["k_hist"] = {str(k): n for k, n in self.k_hist.items()}
        d["drafted_at"] = list(self.drafted_at)
        d["accepted_at"] = list(self.accepted_at)
        return d


class RoundTally:
    """The one accumulator of a generation's rounds: `add` each `Round`, then `stats(...)`."""

    def __init__(self, *, positions: int) -> None:
        self.rounds = self.drafted = self.accepted = self.paused = 0
        self.checks = self.checks_failed = self.extended = self.extended_accepted = 0
        self.draft_s = self.verify_s = 0.0
        self.drafted_at = [0] * positions  # rounds that drafted a token at position i
        self.accepted_at = [0] * positions
        self.k_hist: dict[int, int] = {}
        self.drafter_rounds: dict[str, int] = {}

    def add(self, r: Round) -> None:
        self.rounds += 1
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.paused += r.paused
        self.checks += r.checked
        self.checks_failed += r.check_failed
        self.extended += r.extended
        self.extended_accepted += max(0, r.accepted - r.own)
        self.draft_s += r.draft_s + r.catchup_s + r.check_s  # every draft decode, catch-ups and checks too
        self.verify_s += r.verify_s
        for i in range(r.drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < r.accepted
        self.k_hist[r.drafted] = self.k_hist.get(r.drafted, 0) + 1
        self.drafter_rounds[r.source] = self.drafter_rounds.get(r.source, 0) + 1

    def stats(self, *, prompt_tokens: int, cached_tokens: int, generated_tokens: int, prompt_s: float,
              gen_s: float, stop_reason: str) -> RunStats:
        return RunStats(
            prompt_tokens=prompt_tokens, cached_tokens=cached_tokens, generated_tokens=generated_tokens,
            prompt_s=prompt_s, gen_s=gen_s, drafted=self.drafted, accepted=self.accepted, rounds=self.rounds,
            draft_s=self.draft_s, verify_s=self.verify_s, drafted_at=tuple(self.drafted_at),
            accepted_at=tuple(self.accepted_at), stop_reason=stop_reason, paused_rounds=self.paused,
            k_hist=dict(sorted(self.k_hist.items())), drafter_rounds=dict(self.drafter_rounds), checks=self.checks,
            checks_failed=self.checks_failed, extended=self.extended, extended_accepted=self.extended_accepted,
        )
