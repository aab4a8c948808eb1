"""The draft/verify loop (pure but for the `Target` and `Drafter` a caller hands it).

  engine      one generation: prefill, rounds, emitted steps (`generate`)
  round_runner one round played: plan, draft, check, extension, verify, accept (`RoundRunner`)
  rounds      a round as records: `Candidate`, `Choice` (the plan), `Round` (what happened), `Source`
  control     which drafter and how many tokens each round (`DraftController`), built on
              costmodel (a, V(K), D(K), T(K), the best K), throughput (realized rates, accept
              curves), catchup (what a draft model's backlog costs), exploration (retries,
              opening, spacing, prefill), hold, checks (a free proposal met by the model's
              first token) and controlsettings (`ControlSettings`)
  estimates   the controller's running estimates: timing samples, acceptance counts, rates
  drafters    who proposes: a draft model, prompt lookup (the `Drafter` protocol)
  late        free drafters asked after a held round, at the history it had (`FreeView`)
  speculation the speculation settings (`DraftLengthSettings`, `SpeculativeSettings`) and their builders
  acceptance  which drafted tokens the target keeps (greedy, rejection sampling, match)
  sampling    logits -> probabilities as llama.cpp shapes them; draws
  text        token ids -> released text: incremental UTF-8, stop strings
  stats       what one generation cost (`RunStats`), tallied round by round (`RoundTally`)
  target      what the loop needs from a model (`Target`)
  clock       the loop's one clock (tests replace it)
  kvshare     when a draft model may import the target's KV cache
  exactness   when greedy output equals the target alone bit for bit
  batcher     concurrent generations' decode calls merged into one batch
  parallel    N generations at once on one pair, their decodes batched (server slots)
"""

from pathlib import Path as _Path

from ggufspec.loop import compiled as _compiled

# the controller compiled (setup.py) or its source: chosen before any of its modules is imported
RUNS = _compiled.choose(_Path(__file__).parent)
