"""What a bench produces: one `RunRecord` per generation, and the `BenchResult` that bench.json holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ggufspec.bench.configs import BenchPlan

SCHEMA = "ggufspec.bench/1"  # bench.json's "schema"


@dataclass(kw_only=True)
class RunRecord:
    """One generation of one configuration on one prompt."""

    config: str
    engine: str
    draft: str
    k: int
    adaptive: bool
    accept: str
    temperature: float
    prompt_id: str
    category: str
    repeat: int
    order: int  # position in the whole bench (for drift checks)
    prompt_tokens: int
    generated_tokens: int
    gen_tps: float
    prompt_tps: float = 0.0
    gen_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    rounds: int = 0
    paused_rounds: int = 0  # rounds the controller ran the target alone
    k_hist: dict[int, int] = field(default_factory=dict)  # rounds per drafted length
    drafter_rounds: dict[str, int] = field(default_factory=dict)  # rounds per chosen drafter ("none")
    checks: int = 0  # lookup proposals checked by the draft model's first token (RunStats.checks)
    checks_failed: int = 0  # ... where the model's round ran instead
    extended: int = 0  # lookup's tokens appended to model drafts (RunStats.extended)
    extended_accepted: int = 0  # ... of them, accepted
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    stop_reason: str = ""
    identical: bool | None = None  # greedy: same tokens as the target alone on this prompt
    error: str | None = None
    lane: int | None = None  # lockstep: the lane (own contexts) it ran on; None: the pair's contexts


@dataclass(kw_only=True)
class BenchResult:
    """A whole bench: the plan, every run, the machine, the peers' extras, the micro timings, the summary."""

    plan: BenchPlan
    runs: list[RunRecord]
    machine: dict
    peers: dict  # llama-bench rows, notes on absent peers
    micro: dict  # step times, c per draft, verify cost per K
    summary: dict
    started: str
    wall_s: float

    def to_dict(self) -> dict:
        """bench.json's content."""
        plan = self.plan
        return {
            "schema": SCHEMA,
            "started": self.started,
            "wall_s": round(self.wall_s, 2),
            "machine": self.machine,
            "plan": {
                "target": plan.target,
                "drafts": [asdict(d) for d in plan.drafts],
                "prompts": [p.id for p in plan.prompts],
                "configs": [asdict(c) for c in plan.configs],
                "default_config": plan.default_config,
                "repeats": plan.repeats,
                "max_tokens": plan.max_tokens,
                "temperature": plan.temperature,
                "n_ctx": plan.n_ctx,
                "n_threads": plan.n_threads,
                "quick": plan.quick,
                "lockstep": plan.lockstep,
            },
            "summary": self.summary,
            "micro": self.micro,
            "peers": self.peers,
            "runs": [asdict(r) for r in self.runs],
        }
