"""scripts/trace_sim.py's replay (pure: no llama_cpp): hand-built traces, the real controller."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from script_module import load_script

from ggufspec.loop import clock, engine
from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.sampling import SamplingSettings

trace_sim = load_script("trace_sim")

DEFAULT8 = trace_sim.Policy("default", 8)  # the traces below score 8 draft tokens a position
COSTS = trace_sim.Costs({"target_step_s": 0.03, "verify_s": {"0": 0.03, "1": 0.033, "2": 0.035, "4": 0.04, "8": 0.05},
                         "draft_step_s": {"Q4_1": 0.01, "lookup": 0.0}})


def _trace(reply_len: int, accepted: int) -> dict:
    prompt = list(range(100, 110))
    reply = [200 + i for i in range(reply_len)]  # no n-gram recurs: lookup never proposes
    return {"set": "tuned", "category": "chat", "prompt": prompt, "reply": reply, "model_accepted": [accepted] * reply_len,
            "k_max": 8}


def test_fixed_k_rounds_are_priced_as_measured() -> None:
    # 40 tokens: the first from the prefill, then 4 rounds of K = 8 all kept (9 tokens each) and
    # one of K = 2 (3 tokens left: K + 1 <= what remains)
    stats = trace_sim.simulate_prompt(_trace(40, 8), trace_sim.Policy("fixed", 8), None, COSTS, random.Random(0), 0.0)
    round8 = COSTS.verify_s(8) + COSTS.python_s(8) + COSTS.f + 7 * COSTS.b
    round2 = COSTS.verify_s(2) + COSTS.python_s(2) + COSTS.f + COSTS.b
    assert stats.gen_s == pytest.approx(4 * round8 + round2)
    assert (stats.rounds, stats.k_hist, stats.generated_tokens) == (5, {2: 1, 8: 4}, 40)


def test_the_replay_is_the_engines_loop(monkeypatch) -> None:
    # every replayed generation is ggufspec.loop.engine.generate's: the rounds, drafts and
    # acceptance below are what its stats count, on the replay's clock (restored after)
    runs = []
    real = engine.generate

    def spy(**kw):
        runs.append(gen := real(**kw))
        return gen
    monkeypatch.setattr(engine, "generate", spy)
    now = clock.now
    # 3 of each round's drafts kept, 4 tokens a round: after the prefill's token, 8 rounds of K = 8
    # (33 tokens), one of K = 6 (7 left: 37), and a last of K = 2 (3 left), both its drafts kept
    stats = trace_sim.simulate_prompt(_trace(40, 3), trace_sim.Policy("fixed", 8), None, COSTS, random.Random(0), 0.0)
    assert clock.now is now and len(runs) == 1 and runs[0].stats is stats
    assert (stats.rounds, stats.drafted, stats.accepted, stats.k_hist) == (10, 8 * 8 + 6 + 2, 9 * 3 + 2, {2: 1, 6: 1, 8: 8})

    def priced(k: int) -> float:
        return COSTS.verify_s(k) + COSTS.python_s(k) + COSTS.f + (k - 1) * COSTS.b
    assert stats.gen_s == pytest.approx(8 * priced(8) + priced(6) + priced(2))
    # replay(): one generation a prompt, a policy and a repeat, the controller kept across them
    policies = (DEFAULT8, trace_sim.Policy("fixed", 4))
    speedups = trace_sim.replay({"a": _trace(40, 3), "b": _trace(30, 8)}, COSTS, 0.0, 1, policies)
    assert len(runs) == 1 + 2 * 2 * 2 and set(speedups) == {(p, i) for p in policies for i in "ab"}
    assert all(len(v) == 2 for v in speedups.values())


def test_a_policys_noise_does_not_depend_on_the_policies_beside_it() -> None:
    # each policy's own stream: the default's noisy speedups are the same replayed alone, beside
    # one rival or beside two, and differ from a noise-free replay's
    traces = {"a": _trace(40, 3), "b": _trace(30, 8)}
    fixed4, fixed2 = trace_sim.Policy("fixed", 4), trace_sim.Policy("fixed", 2)
    runs = [trace_sim.replay(traces, COSTS, 0.1, 2, policies)
            for policies in ((DEFAULT8,), (DEFAULT8, fixed4), (fixed2, DEFAULT8, fixed4))]
    mine = [{i: sp[(DEFAULT8, i)] for i in traces} for sp in runs]
    assert mine[0] == mine[1] == mine[2]
    assert runs[1][(fixed4, "a")] == runs[2][(fixed4, "a")]
    quiet = trace_sim.replay(traces, COSTS, 0.0, 2, (DEFAULT8,))
    assert mine[0] != {i: quiet[(DEFAULT8, i)] for i in traces}


def test_the_target_alone_replayed_costs_a_step_a_token() -> None:
    # the analytic baseline of replay() is what the loop gives the fake target alone
    r = trace_sim.Replayed(_trace(40, 8), 128)
    sim = trace_sim.ReplayClock(random.Random(0), 0.0)
    now, clock.now = clock.now, sim.now
    try:
        gen = engine.generate(target=trace_sim.TraceTarget(r, sim, COSTS, controlled=False), prompt=r.seq[:10],
                              max_tokens=r.end, sampling=SamplingSettings(temperature=0.0)).run()
    finally:
        clock.now = now
    assert gen.tokens == r.seq[10:50] and gen.stats.rounds == 39
    assert gen.stats.gen_s == pytest.approx(39 * (COSTS.a + COSTS.python_s(0)))


def test_the_trace_drafter_follows_its_round_chain() -> None:
    # from reply position 5, 3 of the draft's tokens are the reply's; its first call a round costs
    # f, a second call in the same round (the engine's check, then the rest) b, and goes on along
    # that round's chain, not the chain recorded at the next position
    trace = _trace(40, 3)
    trace["model_accepted"] = [3] * 5 + [3, 8] + [3] * 33
    r = trace_sim.Replayed(trace, 128)
    sim = trace_sim.ReplayClock(random.Random(0), 0.0)
    d = trace_sim.TraceDrafter(r, sim, COSTS)
    history = r.seq[:15]
    head = d.propose(history, draft_len=1)
    assert head.tokens == (r.seq[15],) and head.decode_s == pytest.approx(COSTS.f) and head.first_s == pytest.approx(COSTS.f)
    rest = d.propose([*history, *head.tokens], draft_len=7)
    assert rest.tokens == (*r.seq[16:18], *[r.wrong] * 5) and rest.decode_s == pytest.approx(7 * COSTS.b)
    sim.verifies += 1  # a new round: the target's cache imported, the chain recorded at the position
    assert d.propose(r.seq[:16], draft_len=8).tokens == tuple(r.seq[16:24])
    assert d.propose([*history, r.wrong], draft_len=2).tokens == (r.wrong, r.wrong)  # past its own wrong token


def test_the_controller_drafts_where_drafts_are_kept_and_not_where_they_are_not() -> None:
    alone = 127 * (COSTS.a + COSTS.python_s(0))
    ctl = DraftController()
    kept = [trace_sim.simulate_prompt(_trace(128, 8), DEFAULT8, ctl, COSTS, random.Random(0), 0.0).gen_s for _ in range(3)]
    assert alone / kept[-1] > 1.5  # 9 tokens for about 2.7 target steps a round
    ctl = DraftController()
    rejected = [trace_sim.simulate_prompt(_trace(128, 0), DEFAULT8, ctl, COSTS, random.Random(0), 0.0).gen_s
                for _ in range(3)]
    assert alone / rejected[-1] > 0.95  # settles on the target alone, retries aside (always-draft: 0.63)


def test_the_confidence_stop_drafts_up_to_the_first_unsure_token() -> None:
    top = [0.9, 0.8, 0.2, 0.95]  # the draft's top probability at each drafted position
    assert trace_sim._drafted(top, 8, 0.0) == (8, 8)  # no stop: K tokens, K decode calls
    assert trace_sim._drafted(top, 8, 0.5) == (2, 3)  # the third call shows p < 0.5: two proposed
    assert trace_sim._drafted(top, 2, 0.5) == (2, 2)
    assert trace_sim.Policy.parse("default:12:0.3") == trace_sim.Policy("default", 12, 0.3)
    assert trace_sim.Policy.parse("K8") == trace_sim.Policy("fixed", 8)


def test_loop_costs_come_from_the_bench_runs() -> None:
    def row(config: str, rounds: int, drafted: int, verify: float, draft: float, overhead: float) -> dict:
        return {"config": config, "error": "", "rounds": str(rounds), "drafted": str(drafted),
                "verify_s": str(verify), "draft_s": str(draft), "overhead_s": str(overhead)}
    rows = [row("target alone", 100, 0, 3.6, 0.0, 0.02),  # a = 36 ms, Python 0.2 ms a round
            row("Q4_1 K=4", 10, 40, 0.5, 0.0049 * 10 + 0.012 * 40, 0.01),  # V(4) = 50 ms, 1 ms a round
            row("Q4_1 K=8", 10, 80, 0.7, 0.0049 * 10 + 0.012 * 80, 0.018)]  # V(8) = 70 ms, 1.8 ms a round
    c = trace_sim.Costs.from_runs(rows, "Q4_1")
    assert (c.a, c.verify_s(0), c.verify_s(4), c.verify_s(8)) == pytest.approx((0.036, 0.036, 0.05, 0.07))
    assert c.verify_s(12) == pytest.approx(0.09)  # the last two points' line, extended
    assert c.b == pytest.approx(0.012) and c.f == pytest.approx(0.012 + trace_sim.FIRST_CALL_S)
    assert (c.python_s(0), c.python_s(8)) == pytest.approx((0.0002, 0.0018))


def test_the_default_appends_lookups_continuation_to_full_model_drafts() -> None:
    # a reply that copies its prompt: after a model round's 8 drafts (all kept) lookup's 3-gram
    # match continues them; the loop appends up to --draft-extend tokens (0: none)
    prompt = list(range(100, 200))
    trace = {"set": "tuned", "category": "summarise", "prompt": prompt, "reply": prompt[:90],
             "model_accepted": [8] * 90, "k_max": 8}
    assert trace_sim.Policy.parse("default:8:0:0") == trace_sim.Policy("default", 8, 0.0, 0)
    runs = {}
    for policy in (DEFAULT8, trace_sim.Policy("default", 8, 0.0, 0)):
        # K priced without the continuation (rule extend_k off): K = 8, so a round verifies more than 8
        ctl = DraftController(settings=ControlSettings(extend_k=False))
        runs[policy.extend] = [trace_sim.simulate_prompt(trace, policy, ctl, COSTS, random.Random(0), 0.0) for _ in range(3)]
    assert not any(s.extended for s in runs[0])
    extended = [s for s in runs[4] if s.extended]
    assert extended and any(s.extended_accepted for s in extended)  # kept: the reply is the prompt's
    assert max(s.drafted_at.index(0) if 0 in s.drafted_at else len(s.drafted_at) for s in extended) > 8  # K + extension


PROFILE = {"name": "test", "target_step_ms": 5.0, "verify_ms": {"1": 5.0, "3": 6.0, "9": 12.0}, "draft_step_ms": 2.0,
           "draft_first_extra_ms": 0.5, "python_round_ms": 0.1, "python_draft_ms": 0.05, "python_controller_ms": 0.3}


def test_a_cost_profile_prices_rounds_as_stated(tmp_path) -> None:
    c = trace_sim.Costs.from_profile(PROFILE)
    # rows are K + 1: 1 row the target step, 3 rows K = 2, 9 rows K = 8; linear between, and past
    # the last point along the last two points' line (1 ms a row)
    assert [c.verify_s(k) * 1e3 for k in (0, 1, 2, 5, 8, 10)] == pytest.approx([5.0, 5.5, 6.0, 9.0, 12.0, 14.0])
    assert (c.a, c.b, c.f) == pytest.approx((0.005, 0.002, 0.0025))
    assert c.python_s(0) * 1e3 == pytest.approx(0.1)
    assert c.python_s(4, controlled=True) * 1e3 == pytest.approx(0.1 + 4 * 0.05 + 0.3)
    assert c.python_s(0, controlled=True) * 1e3 == pytest.approx(0.1 + 0.3)  # no figure of its own: the same
    # the controller's Python where it ran the target alone, apart (a held choice prices nothing)
    held = trace_sim.Costs.from_profile({**PROFILE, "python_controller_none_ms": 0.05})
    assert (held.python_s(0, controlled=True) * 1e3, held.python_s(4, controlled=True) * 1e3) == pytest.approx(
        (0.1 + 0.05, 0.1 + 4 * 0.05 + 0.3))
    # fixed K = 8 over 40 tokens (no controller: no controller's Python): 4 rounds of 8 drafts all
    # kept, then K = 2; each round a verify of K + 1 rows, the draft's first call and K - 1 steps
    seconds = trace_sim.simulate_prompt(_trace(40, 8), trace_sim.Policy("fixed", 8), None, c, random.Random(0), 0.0).gen_s
    round8 = 12.0 + (0.1 + 8 * 0.05) + (2.5 + 7 * 2.0)
    round2 = 6.0 + (0.1 + 2 * 0.05) + (2.5 + 1 * 2.0)
    assert seconds * 1e3 == pytest.approx(4 * round8 + round2)
    # the same numbers from a file, JSON or TOML
    (tmp_path / "p.json").write_text(json.dumps(PROFILE))
    (tmp_path / "p.toml").write_text('target_step_ms = 5.0\ndraft_step_ms = 2.0\ndraft_first_extra_ms = 0.5\n'
                                     'python_round_ms = 0.1\npython_draft_ms = 0.05\npython_controller_ms = 0.3\n'
                                     '[verify_ms]\n1 = 5.0\n3 = 6.0\n9 = 12.0\n')
    for f in ("p.json", "p.toml"):
        d = trace_sim.Costs.from_profile(trace_sim.load_profile(str(tmp_path / f)))
        assert (d.verify_s(5), d.f, d.python_s(2, controlled=True)) == pytest.approx((c.verify_s(5), c.f, c.python_s(2, controlled=True)))


def test_the_built_in_profiles_hold_their_stated_numbers() -> None:
    h200 = trace_sim.Costs.from_profile(trace_sim.load_profile("h200-135m"))
    assert (h200.a, h200.verify_s(8), h200.b, h200.f) == pytest.approx((0.00421, 0.0117, 0.004, 0.004))
    gpu = trace_sim.Costs.from_profile(trace_sim.load_profile("rtx3090-8b"))
    # n rows cost n / (llama-bench's t/s at micro-batch n): 1 row 155.02 t/s, 4 rows 468.95, 8 rows 570.67
    assert [gpu.verify_s(k) for k in (0, 3, 7)] == pytest.approx([1 / 155.02, 4 / 468.95, 8 / 570.67], rel=1e-3)
    assert gpu.b == pytest.approx(1 / 762.37, rel=1e-2)


def test_the_regime_table_compares_the_default_with_its_best_rival() -> None:
    policies = (DEFAULT8, trace_sim.Policy("always", 8), trace_sim.Policy("fixed", 4))
    traces = {"a": {"set": "tuned"}, "b": {"set": "tuned"}, "c": {"set": "heldout"}}
    sp = {(DEFAULT8, "a"): [1.2, 1.2, 1.0, 1.0], (DEFAULT8, "b"): [1.4, 1.4, 1.4, 1.4], (DEFAULT8, "c"): [0.9] * 4,
          (policies[1], "a"): [1.5] * 4, (policies[1], "b"): [1.5] * 4, (policies[1], "c"): [0.8] * 4,
          (policies[2], "a"): [1.1] * 4, (policies[2], "b"): [1.1] * 4, (policies[2], "c"): [0.7] * 4}
    tuned, heldout = trace_sim.regime_rows(traces, sp, policies, seeds=2)
    assert tuned["best"] == "always<=8" and tuned["best_speedup"] == pytest.approx(1.5)
    assert tuned["speedup"] == pytest.approx(1.25)  # median over prompts of each prompt's median: 1.1 and 1.4
    assert (tuned["ratio"], tuned["ratio_low"], tuned["ratio_high"]) == pytest.approx((1.25 / 1.5, 1.2 / 1.5, 1.3 / 1.5))
    assert not tuned["holds"]
    # nothing beats the target alone: the reference is 1.0
    assert heldout["best"] == "target alone" and heldout["ratio"] == pytest.approx(0.9) and not heldout["holds"]


def test_a_gpus_graph_prices_each_change_of_rows() -> None:
    # fixed K = 8, all kept: the first verify after the prefill changes the target's rows (no
    # graph), the second captures it, the rest replay it at the profile's verify
    costs = trace_sim.Costs.from_profile({**trace_sim.PROFILES["h200-135m-graphs"], "python_round_ms": 0.0,
                                          "python_draft_ms": 0.0, "python_controller_ms": 0.0})
    stats = trace_sim.simulate_prompt(_trace(40, 8), trace_sim.Policy("fixed", 8), None, costs, random.Random(0), 0.0)
    draft = costs.f + 7 * costs.b
    bare = costs.bare_s(costs.verify_s(8))
    assert bare == costs.verify_s(8) > costs.uncaptured  # 9 rows cost their replay at least
    verify = [bare, bare + costs.capture, costs.verify_s(8), costs.verify_s(8)]
    k2 = costs.uncaptured  # the last round, K = 2: other rows again (launch-bound: 2.6 ms over 1.67)
    assert costs.bare_s(costs.verify_s(2)) == costs.uncaptured
    assert stats.gen_s == pytest.approx(sum(verify) + 4 * draft + k2 + costs.f + costs.b)
    # a big target (the 7B stand-in) pays its launches over its replay: 7.32 + 3.2 ms a step
    big = trace_sim.Costs.from_profile(trace_sim.PROFILES["h200-as7b-graphs"])
    assert big.bare_s(big.a) == pytest.approx(0.00732 + 0.0032)
    assert big.bare_s(big.verify_s(8)) == pytest.approx(0.01388 + 0.0032)


def test_on_a_gpu_the_controller_prices_the_way_back_to_one_row() -> None:
    # The recorded default-pair traces on the H200 profile with a draft step of 2 ms (nothing
    # pays): timing the target alone only right after drafting rounds (two decodes without the
    # graph), a controller sees a at twice its cost and drafts; rule switch_cost (on where the
    # target runs on a GPU) times a after two rounds alone and charges the way back to the drafter.
    traces = json.loads((Path(__file__).parents[1] / "docs" / "bench" / "traces-default-pair.json").read_text())
    costs = trace_sim.Costs.from_profile({**trace_sim.PROFILES["h200-135m-graphs"], "draft_step_ms": 2.0})
    # (the replay turns the rule on for a profile with a GPU's graph, as the pair does)
    priced, unpriced = DEFAULT8, trace_sim.Policy("default", 8, control=(("switch_cost", False),))
    speedups = trace_sim.replay(traces, costs, 0.0, 1, (priced, unpriced))
    median = {p: sorted(s for (q, _), runs in speedups.items() if q == p for s in runs)[len(traces)]
              for p in (priced, unpriced)}
    assert median[priced] >= 0.9 > 0.8 >= median[unpriced], median  # (0.95 against 0.76)


def test_always_draft_on_a_gpu_still_prices_its_rounds() -> None:
    # rule switch_cost times a only in rounds of the target alone after two others; always-draft
    # runs none, so a comes from its drafting rounds as without the rule (it stayed unmeasured once,
    # K stuck at the prior's 4)
    traces = json.loads((Path(__file__).parents[1] / "docs" / "bench" / "traces-default-pair.json").read_text())
    costs = trace_sim.Costs.from_profile(trace_sim.PROFILES["h200-135m-graphs"])
    policy = trace_sim.Policy("always", 8)
    ctl = DraftController(settings=policy.settings(gpu=True))
    assert ctl.settings.switch_cost
    ks: set[int] = set()
    for trace in list(traces.values())[:3]:
        ks |= set(trace_sim.simulate_prompt(trace, policy, ctl, costs, random.Random(0), 0.0).k_hist)
    assert ctl.base_s() is not None and len(ks - {0}) > 1, ks


def test_the_losses_add_up_to_the_policys_time_against_the_target_alone() -> None:
    # a prompt whose drafts are never kept at costs where nothing pays (a draft step dearer than a
    # target step, each verify row a step): the default runs the target alone but for its retries
    costs = trace_sim.Costs.from_profile({**PROFILE, "draft_step_ms": 6.0, "verify_ms": {"1": 5.0, "9": 45.0},
                                          "python_controller_none_ms": 0.05})
    traces = {"a": _trace(60, 0), "b": _trace(40, 0), "c": _trace(60, 8)}
    for noise in (0.0, 0.1):
        out = trace_sim.losses(traces, costs, DEFAULT8, noise, seeds=2)
        kinds = out["kinds"]
        net = sum(lost + gained for _, lost, gained, _ in kinds.values())
        assert net == pytest.approx(out["policy_s"] - out["alone_s"])  # every second of the gap is some round's
        assert out["generations"] == 12 and sum(n for n, *_ in kinds.values()) > 0
    out = trace_sim.losses(traces, costs, DEFAULT8, 0.0, seeds=1)
    n, lost, gained, _ = out["kinds"][trace_sim.round_losses.ALONE]
    assert gained == 0.0 and lost == pytest.approx(n * 0.05e-3)  # noise-free: only the controller's Python
    model = [v for k, v in out["kinds"].items() if k.startswith(trace_sim.MODEL)]
    assert model and all(lost > 0.0 for _, lost, _, _ in model)  # its retries drafted, and lost


def test_the_cpu_no_pay_profiles_hold_their_stated_numbers() -> None:
    q8 = trace_sim.Costs.from_profile(trace_sim.load_profile("epyc-q8_0"))
    assert (q8.a, q8.verify_s(2), q8.verify_s(8), q8.b, q8.f) == pytest.approx((0.00827, 0.01896, 0.03319, 0.00868, 0.01076))
    # b and e from fixed K = 2 and 8's draft seconds a token: 2b + e = 2 x 9.72, 8b + e = 8 x 8.94
    assert 2 * q8.b + (q8.f - q8.b) == pytest.approx(2 * 9.72e-3, rel=1e-2)
    assert 8 * q8.b + (q8.f - q8.b) == pytest.approx(8 * 8.94e-3, rel=1e-2)
    q4 = trace_sim.Costs.from_profile(trace_sim.load_profile("epyc-q4_1"))
    assert 2 * q4.b + (q4.f - q4.b) == pytest.approx(2 * 9.94e-3, rel=1e-2)
    assert 8 * q4.b + (q4.f - q4.b) == pytest.approx(8 * 9.09e-3, rel=1e-2)


def test_a_draft_with_its_own_cache_catches_up_on_what_it_missed() -> None:
    # own-cache traces (recorded with --own-cache: a target of another network, as the 1B
    # stand-in's): the draft is not kv_shared, is behind by what it has not decoded, and decodes
    # a backlog over the 2 tokens a full accept leaves as a catch-up batch, u a token
    trace = {**_trace(40, 3), "own_cache": True}
    r = trace_sim.Replayed(trace, 128)
    sim = trace_sim.ReplayClock(random.Random(0), 0.0)
    costs = trace_sim.Costs.from_profile(trace_sim.load_profile("epyc-as-1b"))
    d = trace_sim.TraceDrafter(r, sim, costs, own=True)
    assert not d.kv_shared and trace_sim.TraceDrafter(r, sim, costs).kv_shared
    prompt = r.seq[:r.prompt_len]
    assert d.backlog(prompt) == len(prompt)  # never prefilled: the whole prompt
    assert d.prefill(prompt) == pytest.approx((len(prompt) - 1) * costs.u) and d.backlog(prompt) == 1
    history = r.seq[:r.prompt_len + 5]  # 5 rounds of the target alone later: 6 tokens behind
    sim.verifies += 1
    got = d.propose(history, draft_len=4)
    assert (got.catchup_tokens, got.catchup_s) == (6, pytest.approx(6 * costs.u))
    assert got.decode_s == pytest.approx(6 * costs.u + costs.f + 3 * costs.b) and got.first_s == pytest.approx(costs.f)
    # it decoded its drafts but the last (the 4th, rejected): its 3 kept ones are in its cache, the
    # target's correction is not: 1 token behind, no catch-up
    history = r.seq[:r.prompt_len + 9]
    sim.verifies += 1
    assert d.backlog(history) == 1
    assert d.propose(history, draft_len=4).catchup_tokens == 0


def test_the_1b_stand_ins_profile_holds_its_stated_numbers() -> None:
    c = trace_sim.Costs.from_profile(trace_sim.load_profile("epyc-as-1b"))
    # the grid's loop costs: the target alone's and fixed K = 2, 4, 8's verify seconds a round
    assert (c.a, c.verify_s(2), c.verify_s(4), c.verify_s(8)) == pytest.approx((0.0578, 0.1208, 0.2016, 0.2619))
    assert 2 * c.b + (c.f - c.b) == pytest.approx(0.0264) and 8 * c.b + (c.f - c.b) == pytest.approx(0.084)
    assert c.verify_s(7) < c.verify_s(6) and c.u == pytest.approx(0.0035)  # rows in blocks of 4


def test_the_cold_start_replay_runs_fresh_controllers_on_rotated_prompts(tmp_path, monkeypatch, capsys) -> None:
    coldstart_sim = load_script("coldstart_sim")
    traces = {f"{s}-{i}": {**_trace(30, 6), "set": s} for s in ("tuned", "heldout") for i in range(3)}
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(traces))
    out = tmp_path / "gens.json"
    monkeypatch.setattr("sys.argv", ["coldstart_sim", str(path), "--profile", "epyc-as-1b", "--seeds", "3",
                                     "--prompts", "2", "--noise", "0", "--policies", "default", "K4", "--json", str(out)])
    coldstart_sim.main()
    text = capsys.readouterr().out
    assert "| default<=8 |" in text and "| K4 |" in text and "| tuned |" in text
    gens = json.loads(out.read_text())
    # 3 seeds x 2 repeats x (2 tuned + 2 held-out prompts); K4 never runs the target alone
    assert [len(g) for g in gens["K4"]] == [8, 8, 8] and all(none == 0 for g in gens["K4"] for _, _, none in g)
    assert [s for s, _, _ in gens["default<=8"][0][:4]] == ["tuned", "tuned", "heldout", "heldout"]
    with pytest.raises(SystemExit, match="--profile"):
        monkeypatch.setattr("sys.argv", ["coldstart_sim", str(path)])
        coldstart_sim.main()
