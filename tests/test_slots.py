"""Slots on pure fakes: the batcher's merging, waiting and packing; slot choice; the drafting
policy; greedy identity of concurrent slots whose decodes go through one batcher (no llama.cpp)."""

from __future__ import annotations

import threading
import time
from typing import Sequence

import pytest
from fakes import FakeModel, greedy_reference, letters_vocab, ngram_lm

from ggufspec.loop.batcher import Batcher, Request
from ggufspec.loop.control import DraftController
from ggufspec.loop.model_drafter import ModelDrafter
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.parallel import Activity, Slot, pick_slot
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

V = 40
VOCAB = letters_vocab(V)
GREEDY = SamplingSettings(temperature=0)


class Recorder:
    """A batcher runner that records each merged decode's (key, tokens) and echoes the tokens."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[object, tuple[int, ...]]]] = []

    def __call__(self, requests: Sequence[Request]) -> None:
        self.batches.append([(r.key, r.tokens) for r in requests])
        for r in requests:
            r.result = ("decoded", r.key, r.tokens)


def _submit_all(b: Batcher, jobs: dict[object, list[int]]) -> dict[object, object]:
    out: dict[object, object] = {}

    def one(key: object, tokens: list[int]) -> None:
        out[key] = b.submit(key, tokens)

    threads = [threading.Thread(target=one, args=kv) for kv in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def test_members_decoding_together_share_one_decode() -> None:
    rec = Recorder()
    b = Batcher(rec, max_tokens=64, max_wait_s=5.0)  # a long wait: only "every member is in" ends it
    for key in "abc":
        b.join(key)
    t0 = time.monotonic()
    out = _submit_all(b, {"a": [1], "b": [2, 3], "c": [4]})
    assert time.monotonic() - t0 < 4.0
    assert len(rec.batches) == 1 and sorted(rec.batches[0]) == [("a", (1,)), ("b", (2, 3)), ("c", (4,))]
    assert out == {k: ("decoded", k, tuple(v)) for k, v in {"a": [1], "b": [2, 3], "c": [4]}.items()}
    assert (b.decodes, b.merged, b.sequences, b.rows) == (1, 1, 3, 4)
    assert b.wait_s > 0


def test_members_served_by_a_decode_are_waited_for_before_the_next_one() -> None:
    """A request that came in during a decode is old when it ends; it still waits (max_wait_s from
    that end) for the members that decode served, instead of going alone and leaving two groups
    that take turns."""
    first_running, release = threading.Event(), threading.Event()
    batches: list[list[object]] = []

    def run(requests: Sequence[Request]) -> None:
        batches.append(sorted(r.key for r in requests))
        if len(batches) == 1:
            first_running.set()
            release.wait(10)
        for r in requests:
            r.result = r.key

    b = Batcher(run, max_tokens=64, max_wait_s=0.3)
    b.join("a")

    def a_twice() -> None:
        b.submit("a", [1])  # decoded alone ("b" is not generating yet), held until released
        time.sleep(0.05)  # a slot's Python between two decodes
        b.submit("a", [2])

    ta = threading.Thread(target=a_twice)
    ta.start()
    assert first_running.wait(10)
    b.join("b")
    tb = threading.Thread(target=b.submit, args=("b", [3]))
    tb.start()
    time.sleep(0.5)  # "b" waits for the running decode, longer than max_wait_s
    release.set()
    ta.join(10)
    tb.join(10)
    assert batches == [["a"], ["a", "b"]]


def test_no_wait_for_a_slot_that_is_not_generating() -> None:
    rec = Recorder()
    b = Batcher(rec, max_tokens=64, max_wait_s=5.0)
    b.join("a")  # "b" exists but is idle: not a member
    t0 = time.monotonic()
    assert b.submit("a", [7]) == ("decoded", "a", (7,))
    assert time.monotonic() - t0 < 1.0
    b.leave("a")  # nobody generating: a lone request goes at once
    t0 = time.monotonic()
    assert b.submit("b", [8]) == ("decoded", "b", (8,))
    assert time.monotonic() - t0 < 1.0
    assert rec.batches == [[("a", (7,))], [("b", (8,))]]


def test_a_member_busy_elsewhere_costs_at_most_the_bounded_wait() -> None:
    rec = Recorder()
    b = Batcher(rec, max_tokens=64, max_wait_s=0.05)
    b.join("a")
    b.join("b")  # generating, but it never decodes here
    t0 = time.monotonic()
    b.submit("a", [1])
    waited = time.monotonic() - t0
    assert 0.04 <= waited < 2.0
    assert rec.batches == [[("a", (1,))]]


def test_leaving_releases_a_waiting_member() -> None:
    rec = Recorder()
    b = Batcher(rec, max_tokens=64, max_wait_s=30.0)
    b.join("a")
    b.join("b")
    done = threading.Event()
    threading.Thread(target=lambda: (b.submit("a", [1]), done.set()), daemon=True).start()
    assert not done.wait(0.2)  # waiting for "b"
    b.leave("b")
    assert done.wait(5.0)


def test_requests_pack_up_to_the_batch_size_oldest_first() -> None:
    rec = Recorder()
    gate, first = threading.Event(), threading.Event()

    def blocking(requests: Sequence[Request]) -> None:  # the first decode holds while others queue
        first.set()
        gate.wait(10)
        rec(requests)

    b = Batcher(blocking, max_tokens=4, max_wait_s=30.0)
    b.join("a")
    threads = [threading.Thread(target=b.submit, args=("a", [1, 1, 1]))]
    threads[0].start()
    assert first.wait(5)  # "a" is the only member and it is in: its decode runs at once
    for key, tokens in (("b", [2, 2, 2]), ("c", [3]), ("d", [4])):
        threads.append(threading.Thread(target=b.submit, args=(key, tokens)))
        threads[-1].start()
        time.sleep(0.05)  # arrival order b, c, d
    gate.set()
    for t in threads[:3]:
        t.join(10)
    # b (3 tokens) + c (1) fill a batch of 4 (full: no wait for member "a"); d waits for "a" ...
    assert threads[3].is_alive()
    b.leave("a")  # ... until "a" stops generating
    threads[3].join(10)
    assert rec.batches == [[("a", (1, 1, 1))], [("b", (2, 2, 2)), ("c", (3,))], [("d", (4,))]]


def test_a_failed_decode_fails_every_request_in_it() -> None:
    def boom(requests: Sequence[Request]) -> None:
        raise RuntimeError("llama_decode failed with code 1")

    b = Batcher(boom, max_tokens=8, max_wait_s=5.0)
    b.join("a"), b.join("b")
    errors: list[str] = []

    def one(key: str) -> None:
        try:
            b.submit(key, [1])
        except RuntimeError as exc:
            errors.append(f"{key}: {exc}")

    threads = [threading.Thread(target=one, args=(k,)) for k in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(errors) == ["a: llama_decode failed with code 1", "b: llama_decode failed with code 1"]


def test_bad_requests_are_refused() -> None:
    b = Batcher(Recorder(), max_tokens=4)
    with pytest.raises(ValueError):
        b.submit("a", [])
    with pytest.raises(ValueError):
        b.submit("a", [1] * 5)
    with pytest.raises(ValueError):
        Batcher(Recorder(), max_tokens=0)


# ---- slots on fakes --------------------------------------------------------------------------------


class FakeMulti:
    """Fake multi-sequence context: one FakeModel per sequence, decodes through one Batcher."""

    def __init__(self, lm, n_seq: int, *, max_wait_s: float = 0.01) -> None:
        self.models = [FakeModel(lm, VOCAB, n_ctx=256) for _ in range(n_seq)]
        self.batcher = Batcher(self._run, max_tokens=64, max_wait_s=max_wait_s)
        self.views = [View(self, i) for i in range(n_seq)]

    def _run(self, requests: Sequence[Request]) -> None:
        for r in requests:
            model, mode = r.payload
            model.decode(r.tokens, logits=mode)
            r.result = list(model._rows)


class View:
    """A `Target` whose decodes go through the fake context's batcher."""

    def __init__(self, owner: FakeMulti, seq: int) -> None:
        self.owner, self.seq, self.fake = owner, seq, owner.models[seq]
        self.n_ctx, self.n_batch, self.model = self.fake.n_ctx, self.fake.n_batch, VOCAB
        self._rows: list = []

    n_past = property(lambda self: self.fake.n_past)
    tokens = property(lambda self: tuple(self.fake.kv))

    def common_prefix(self, seq) -> int:
        return self.fake.common_prefix(seq)

    def decode(self, tokens, *, logits="last", wait=True) -> None:
        if tokens:
            self._rows = self.owner.batcher.submit(self.seq, list(tokens), (self.fake, logits))

    def logits(self, i: int = -1):
        return self._rows[i]

    def truncate(self, n: int) -> None:
        self.fake.truncate(n)

    def clear(self) -> None:
        self.fake.clear()


def _slots(n: int, *, noise: float = 0.6) -> tuple[list[Slot], FakeMulti, FakeMulti, Activity]:
    target = FakeMulti(ngram_lm(n_vocab=V, seed=0), n)
    draft = FakeMulti(ngram_lm(n_vocab=V, seed=0, noise=noise), n)
    activity = Activity()
    slots = [Slot(index=i, target=target.views[i], drafters=(ModelDrafter(draft.views[i], name="d"),),
                  batcher=target.batcher, draft_batchers=(draft.batcher,), activity=activity) for i in range(n)]
    return slots, target, draft, activity


def _spec(**kw) -> SpeculativeSettings:
    return SpeculativeSettings(length=DraftLengthSettings(draft_max=4, **kw))


PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]


@pytest.mark.parametrize("always_draft", [False, True])
def test_concurrent_slots_give_the_target_alone_token_for_token(always_draft: bool) -> None:
    slots, target, draft, _ = _slots(4)
    # every slot counts as generating from the start (as each will once it starts), so the first
    # decodes wait for all four however the threads get scheduled: merging is certain. (Drafting
    # slots also wait in the draft batcher: there a long wait would stall them against each other.)
    target.batcher.max_wait_s = 0.05 if always_draft else 5.0
    for i in range(4):
        target.batcher.join(i)
    out: dict[int, list[int]] = {}

    def run(i: int) -> None:
        out[i] = slots[i].generate(prompt=PROMPTS[i], max_tokens=60, sampling=GREEDY,
                                   speculative=_spec(always_draft=always_draft)).run().tokens

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    lm = ngram_lm(n_vocab=V, seed=0)
    for i in range(4):
        assert out[i] == greedy_reference(lm, VOCAB, PROMPTS[i], max_tokens=60, n_ctx=256), i
    assert target.batcher.merged > 0  # the slots' target decodes were merged
    if always_draft:
        assert draft.batcher.merged > 0  # ... and their draft decodes too
    assert target.batcher.members == 0 and draft.batcher.members == 0  # every slot left when done


def test_a_slot_runs_the_target_alone_while_another_generates() -> None:
    slots, _, _, activity = _slots(2, noise=0.0)  # a perfect draft: alone, the controller drafts
    activity.enter()  # another slot is generating
    try:
        busy = slots[0].generate(prompt=[1, 2], max_tokens=30, sampling=GREEDY, speculative=_spec()).run()
        forced = slots[1].generate(prompt=[1, 2], max_tokens=30, sampling=GREEDY,
                                   speculative=_spec(always_draft=True)).run()
    finally:
        activity.exit()
    alone = slots[0].generate(prompt=[1, 2], max_tokens=30, sampling=GREEDY, speculative=_spec(),
                              cache_prompt=False).run()
    assert busy.stats.drafted == 0 and set(busy.stats.drafter_rounds) == {"none"}
    assert forced.stats.drafted > 0  # always_draft keeps drafting
    assert alone.stats.drafted > 0  # alone again: drafting again
    assert busy.tokens == forced.tokens == alone.tokens
    assert activity.active() == 0
    assert (slots[0].last_used, slots[1].last_used) == (4, 3)  # ticks of their latest generations (1: the manual enter)


def test_a_slot_that_starts_beside_another_does_not_prefill_its_draft_model() -> None:
    slots, _, draft, activity = _slots(2, noise=0.0)
    activity.enter()  # another slot is generating: this one will run the target alone
    try:
        busy = slots[0].generate(prompt=[1, 2, 3], max_tokens=5, sampling=GREEDY, speculative=_spec()).run()
    finally:
        activity.exit()
    assert draft.views[0].tokens == () and draft.batcher.decodes == 0  # its prefill would be wasted
    alone = slots[0].generate(prompt=[1, 2, 3], max_tokens=5, sampling=GREEDY, speculative=_spec(),
                              cache_prompt=False).run()
    assert draft.views[0].tokens[:3] == (1, 2, 3)  # alone, it prefills and drafts
    assert busy.tokens == alone.tokens


def test_policy_drafting_slots_share_one_controller_and_always_draft_uses_the_slots_own() -> None:
    slots, _, _, _ = _slots(2, noise=0.0)
    shared = DraftController()
    for s in slots:
        s.shared = shared
    slots[0].generate(prompt=[1, 2], max_tokens=20, sampling=GREEDY, speculative=_spec()).run()
    learned = shared.round
    assert learned > 0 and slots[0].controller.round == 0
    # the next request lands on another slot: it goes on with what the first one learned
    slots[1].generate(prompt=[3, 4], max_tokens=20, sampling=GREEDY, speculative=_spec()).run()
    assert shared.round > learned and slots[1].controller.round == 0
    slots[1].generate(prompt=[3, 4], max_tokens=20, sampling=GREEDY, speculative=_spec(always_draft=True),
                      cache_prompt=False).run()
    assert slots[1].controller.round > 0


def test_a_closed_generation_leaves_the_batchers() -> None:
    slots, target, draft, activity = _slots(2)
    gen = slots[0].generate(prompt=[1, 2], max_tokens=30, sampling=GREEDY, speculative=_spec())
    next(gen)
    assert activity.active() == 1 and target.batcher.members == 1
    gen.close()
    assert activity.active() == 0 and target.batcher.members == 0 and draft.batcher.members == 0
    assert gen.stats is not None and gen.stats.stop_reason == "cancelled"


def test_each_slot_has_its_own_lookup_state() -> None:
    lookup = LookupDrafter()
    activity = Activity()
    target = FakeMulti(ngram_lm(n_vocab=V, seed=0), 1)
    slot = Slot(index=0, target=target.views[0], drafters=(lookup,), batcher=target.batcher, draft_batchers=(),
                activity=activity)
    gen = slot.generate(prompt=[1, 2, 1, 2, 1], max_tokens=20, sampling=GREEDY, speculative=_spec()).run()
    lm = ngram_lm(n_vocab=V, seed=0)
    assert gen.tokens == greedy_reference(lm, VOCAB, [1, 2, 1, 2, 1], max_tokens=20, n_ctx=256)


def test_pick_slot_prefers_the_longest_cached_prefix_else_the_least_recently_used() -> None:
    slots, _, _, _ = _slots(3)
    slots[1].target.fake.kv.extend([5, 6, 7, 8])
    slots[2].target.fake.kv.extend([5, 6, 9])
    slots[0].last_used, slots[1].last_used, slots[2].last_used = 3, 1, 2
    assert pick_slot(slots, [5, 6, 7, 1]).index == 1
    assert pick_slot(slots, [5, 6, 9, 9]).index == 2
    assert pick_slot([slots[2], slots[0]], [5, 6, 7]).index == 2  # among the free ones only
    # less than half the prompt cached anywhere: the least recently used slot, not the longest prefix
    assert pick_slot(slots, [5, 1, 2, 3, 4]).index == 1
    assert pick_slot([slots[0], slots[2]], [1, 2]).index == 2
    slots[0].last_used = slots[2].last_used = 0
    assert pick_slot(slots, []).index == 0  # never used, lowest index
    with pytest.raises(ValueError):
        pick_slot([], [1])
