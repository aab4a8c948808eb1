"""The compute thread (`ggufspec.llama.compute`): the callables handed to it run on it, in order,
with their results and exceptions handed back; and with it installed, a pair's every llama_decode,
the load's warm-up included, runs on it whichever thread generates, with the same greedy text."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ggufspec.llama import compute


def test_calls_run_on_the_compute_thread_in_order() -> None:
    thread = compute.ComputeThread()
    try:
        seen: list[tuple[int, int]] = []
        for i in range(5):
            assert thread.call(lambda i=i: (seen.append((i, threading.get_ident())), i * i)[1]) == i * i
        assert [i for i, _ in seen] == list(range(5))
        assert {t for _, t in seen} == {thread._thread.ident} != {threading.get_ident()}
    finally:
        thread.close()
    assert not thread._thread.is_alive()


def test_an_exception_comes_back_to_the_caller_and_the_thread_goes_on() -> None:
    thread = compute.ComputeThread()
    try:
        with pytest.raises(ZeroDivisionError):
            thread.call(lambda: 1 / 0)
        assert thread.call(lambda: "still here") == "still here"
    finally:
        thread.close()


def test_a_call_from_the_compute_thread_runs_at_once() -> None:
    """A decode made by a callable already on the compute thread must not wait for itself."""
    thread = compute.ComputeThread()
    try:
        assert thread.call(lambda: thread.call(lambda: threading.get_ident())) == thread._thread.ident
    finally:
        thread.close()


def test_calls_from_several_threads_all_run_on_it() -> None:
    thread = compute.ComputeThread()
    idents: list[int] = []
    lock = threading.Lock()

    def caller() -> None:
        for _ in range(20):
            ident = thread.call(threading.get_ident)
            with lock:
                idents.append(ident)

    try:
        workers = [threading.Thread(target=caller) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        thread.close()
    assert len(idents) == 80 and set(idents) == {thread._thread.ident}


def test_one_compute_thread_at_a_time() -> None:
    import ggufspec

    assert ggufspec.compute_thread is compute.compute_thread  # public, from the package root
    assert compute.current() is None
    with compute.compute_thread() as owner:
        assert compute.current() is owner
        with pytest.raises(RuntimeError, match="already installed"):
            with compute.compute_thread():
                pass
    assert compute.current() is None
    assert not owner._thread.is_alive()


def test_every_decode_runs_on_the_compute_thread(tiny_target_q8: Path, tiny_draft_q8: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded under the compute thread, generated from another thread (as the server's worker
    does): every llama_decode, the warm-up's included, runs on the compute thread, and the greedy
    text is the one a plain in-thread run gives."""
    from ggufspec.llama import lib
    from ggufspec.runtime import load_pair
    from ggufspec.settings import ContextSettings, PairSettings

    settings = PairSettings(context=ContextSettings(n_ctx=512, n_threads=1))
    prompt = "Once upon a time"

    with load_pair(target=tiny_target_q8, draft=tiny_draft_q8, settings=settings) as pair:
        expected = pair.generate(prompt=prompt, max_tokens=24, cache_prompt=False).run().text

    real = lib.llama.llama_decode
    idents: list[int] = []

    def recording(ctx, batch):
        idents.append(threading.get_ident())
        return real(ctx, batch)

    monkeypatch.setattr(lib.llama, "llama_decode", recording)
    out: dict[str, str] = {}
    with compute.compute_thread() as owner:
        with load_pair(target=tiny_target_q8, draft=tiny_draft_q8, settings=settings) as pair:
            warmups = len(idents)
            worker = threading.Thread(target=lambda: out.setdefault(
                "text", pair.generate(prompt=prompt, max_tokens=24, cache_prompt=False).run().text))
            worker.start()
            worker.join()
        ident = owner._thread.ident
    assert warmups >= 1  # the load's warm-up decoded, on the compute thread too
    assert len(idents) > warmups and set(idents) == {ident}
    assert out["text"] == expected
