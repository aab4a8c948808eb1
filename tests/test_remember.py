"""The draft controller kept between runs (ggufspec.remember): the same decisions after a round
trip through its file, a file per pair and machine, bad files ignored, and the CLI's and the
library's paths (conftest gives each test its own GGUFSPEC_STATE)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ggufspec import remember
from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.rounds import Candidate, Round
from ggufspec.plan.split import DeviceLayers
from ggufspec.settings import ContextSettings, PairSettings
from test_control import A, run_prompt


def _taught(seed: int = 0, prompts: int = 3) -> DraftController:
    rng = np.random.default_rng(seed)
    ctrl = DraftController()
    for alpha in (0.9, 0.8, 0.2)[:prompts]:  # (the last: the target alone held, its rounds queued)
        run_prompt(ctrl, alpha, rng)
    return ctrl


def _choices(ctrl: DraftController, seed: int) -> list[tuple]:
    """The choices of three more prompts, and the prefill asks before them."""
    rng = np.random.default_rng(seed)
    out: list[tuple] = []
    for alpha in (0.5, 0.95, 0.2):
        out.append(("wants", ctrl.wants("m")))
        run_prompt(ctrl, alpha, rng)
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8, remaining=64)
        out.append((c.drafter, c.draft_len, c.retry))
    return out


def test_a_controller_read_back_decides_as_the_one_written() -> None:
    ctrl = _taught()
    ctrl.begin()
    for _ in range(40):  # a prompt whose drafts are all rejected, up to a round a hold covers (queued)
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8, remaining=100)
        k = c.draft_len
        ctrl.observe(Round(choice=c, drafted=k, accepted=0, emitted=1, round_s=A + k * 0.42 * A, draft_s=k * 0.42 * A))
        if ctrl._pending:
            break
    assert ctrl._pending  # held rounds not yet observed: the file holds the state they lead to
    copy = pickle.loads(pickle.dumps(ctrl))
    assert not ctrl._pending and not copy._pending and copy.round == ctrl.round > 100
    assert _choices(copy, seed=7) == _choices(ctrl, seed=7)


def _ident(tmp_path: Path, **changes) -> dict:
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    for p in (target, draft):
        if not p.exists():
            p.write_bytes(b"GGUF")
    kw = {"target": target, "drafts": [draft, None], "settings": PairSettings(remember=True),
          "control": ControlSettings(), "llama_version": "0.3.36"} | changes
    return remember.identity(**kw)


def test_one_file_per_pair_settings_and_code(tmp_path: Path) -> None:
    base = remember.state_path(_ident(tmp_path))
    assert base.parent == Path(os.environ["GGUFSPEC_STATE"]) / "controller"
    assert remember.state_path(_ident(tmp_path)) == base
    # what does not change the costs does not change the file: --offline, the flag itself
    assert remember.state_path(_ident(tmp_path, settings=PairSettings(remember=True, offline=True))) == base
    others = [
        _ident(tmp_path, drafts=[None]),
        _ident(tmp_path, settings=PairSettings(remember=True, context=ContextSettings(n_threads=1))),
        _ident(tmp_path, control=ControlSettings(switch_cost=True)),
        _ident(tmp_path, llama_version="0.3.37"),
        _ident(tmp_path, placement=[DeviceLayers(name="CUDA0", kind="gpu", target_layers=30, draft_layers=31),
                                    DeviceLayers(name="CPU", kind="cpu", target_layers=1, draft_layers=0)]),
    ]
    os.utime(tmp_path / "t.gguf", ns=(1, 1))  # the target file rewritten
    others.append(_ident(tmp_path))
    paths = {remember.state_path(i) for i in others}
    assert base not in paths and len(paths) == len(others)


def test_a_saved_controller_loads_only_for_its_identity(tmp_path: Path) -> None:
    ident = _ident(tmp_path)
    assert remember.load(ident) is None  # never run so
    ctrl = _taught(prompts=1)
    path = remember.save(ident, ctrl)
    assert path == remember.state_path(ident) and path.is_file()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left beside it
    back = remember.load(ident)
    assert back is not None and back.round == ctrl.round
    other = _ident(tmp_path, llama_version="0.3.37")
    remember.state_path(other).write_bytes(path.read_bytes())  # a file under another identity's name
    assert remember.load(other) is None


@pytest.mark.parametrize("blob", [b"", b"not a pickle", pickle.dumps({"identity": None})[:-3],
                                  pickle.dumps(["a list"])], ids=["empty", "garbage", "cut-short", "not-ours"])
def test_a_file_that_does_not_load_means_a_fresh_start(tmp_path: Path, blob: bytes) -> None:
    ident = _ident(tmp_path)
    path = remember.state_path(ident)
    path.parent.mkdir(parents=True)
    path.write_bytes(blob)
    assert remember.load(ident) is None


def test_a_file_another_user_owns_is_not_read(tmp_path: Path, monkeypatch) -> None:
    ident = _ident(tmp_path)
    remember.save(ident, _taught(prompts=1))
    assert remember.load(ident) is not None
    monkeypatch.setattr(os, "getuid", lambda: os.stat(remember.state_path(ident)).st_uid + 1)
    assert remember.load(ident) is None


def test_a_controller_of_other_settings_is_not_taken(tmp_path: Path) -> None:
    ident = _ident(tmp_path)
    remember.save(ident, DraftController(settings=ControlSettings(switch_cost=True)))
    assert remember.load(ident) is None


def test_an_unwritable_state_folder_is_one_line_and_the_run_goes_on(tmp_path: Path, monkeypatch,
                                                                     capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GGUFSPEC_STATE", str(blocker / "state"))  # under a file: cannot be made
    assert remember.save(_ident(tmp_path), _taught(prompts=1)) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GGUFSPEC_STATE" in err[0] and "--no-remember" in err[0]


def _run(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "ggufspec.cli", "run", *args, "--json"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_run_starts_from_what_the_last_run_learnt(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    args = ("--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--draft", "lookup", "-p", "Once upon",
            "-n", "24", "--threads", "1", "--ctx", "256")
    state = Path(os.environ["GGUFSPEC_STATE"])
    assert _run(*args, "--no-remember")["remembered_rounds"] == 0
    assert not state.exists()  # --no-remember keeps nothing
    first = _run(*args)
    assert first["remembered_rounds"] == 0
    files = list((state / "controller").iterdir())
    assert len(files) == 1
    second = _run(*args)
    assert second["remembered_rounds"] >= first["stats"]["rounds"] > 0
    assert second["text"] == first["text"]  # greedy: the same text, whatever the controller knew
    assert _run(*args, "--no-remember")["remembered_rounds"] == 0
    assert _run(*args, "--threads", "2")["remembered_rounds"] == 0  # other settings: another file
    assert len(list((state / "controller").iterdir())) == 2


def test_the_library_remembers_only_when_asked(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    from ggufspec import load_pair

    state = Path(os.environ["GGUFSPEC_STATE"])
    settings = PairSettings(context=ContextSettings(n_ctx=256, n_threads=1))

    def one_run(remembered: bool) -> tuple[int, int]:
        with load_pair(target=tiny_target_q8, draft=str(tiny_draft_q8),
                       settings=replace(settings, remember=remembered)) as pair:
            before = pair.remembered_rounds
            pair.generate(prompt="Once upon", max_tokens=16).run()
            return before, pair.controller.round

    assert one_run(False)[0] == 0 and not state.exists()  # the library's default: nothing kept
    before, after = one_run(True)
    assert before == 0 and after > 0 and len(list((state / "controller").iterdir())) == 1
    before, kept = one_run(True)
    assert before == after
    with pytest.raises(KeyboardInterrupt):  # a run cut short keeps nothing of it
        with load_pair(target=tiny_target_q8, draft=str(tiny_draft_q8), settings=replace(settings, remember=True)) as pair:
            pair.generate(prompt="Once upon", max_tokens=16).run()
            assert pair.controller.round > kept
            raise KeyboardInterrupt
    assert one_run(True)[0] == kept


@pytest.mark.parametrize("parallel", [1, 2])
def test_serve_keeps_what_it_learnt_when_it_stops(tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path: Path,
                                                  parallel: int) -> None:
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    import signal

    import web_serve

    state = Path(os.environ["GGUFSPEC_STATE"]) / "controller"
    srv = web_serve.start(["--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--threads", "1",
                           "--ctx", "256", "--parallel", str(parallel)], log=tmp_path / "serve.log", timeout_s=120)
    try:
        def ask(prompt: str) -> None:
            r = httpx.post(f"{srv.url}/v1/completions", json={"prompt": prompt, "max_tokens": 24, "temperature": 0},
                           timeout=60)
            assert r.status_code == 200, r.text

        ask("Once upon")
        first = _written(state, srv.log)  # once idle after the first generation
        ask("The quick brown")  # (within a minute of the last write: not written again until the stop)
        assert pickle.loads(next(state.glob("*.pickle")).read_bytes())["controller"].round == first
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(timeout=30)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
    files = list(state.iterdir())
    assert len(files) == 1, srv.log.read_text()[-2000:]
    assert "earlier runs" not in srv.log.read_text()  # (a fresh controller: the start line says nothing)
    data = pickle.loads(files[0].read_bytes())
    assert data["identity"]["drafts"][0][0] == str(tiny_draft_q8.resolve()) and data["controller"].round > first > 0
    again = web_serve.start(["--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--threads", "1",
                             "--ctx", "256", "--parallel", str(parallel)], log=tmp_path / "serve2.log", timeout_s=120)
    again.proc.send_signal(signal.SIGTERM)
    again.proc.wait(timeout=30)
    assert f"the controller from {data['controller'].round} rounds of earlier runs" in again.log.read_text()


def _written(state: Path, log: Path, *, timeout_s: float = 30.0) -> int:
    """The rounds in the one controller file under `state`, once a server has written it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = list(state.glob("*.pickle"))  # (not the temporary file of a write under way)
        if files:
            return pickle.loads(files[0].read_bytes())["controller"].round
        time.sleep(0.1)
    raise AssertionError(f"no controller file written: {log.read_text()[-2000:]}")


def test_a_killed_server_keeps_what_it_learnt_before(tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path: Path) -> None:
    # SIGKILL: no clean stop, no last write; what it learnt up to its last idle moment stays
    httpx = pytest.importorskip("httpx")
    import web_serve

    state = Path(os.environ["GGUFSPEC_STATE"]) / "controller"
    args = ["--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--threads", "1", "--ctx", "256"]
    srv = web_serve.start(args, log=tmp_path / "serve.log", timeout_s=120)
    try:
        r = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "Once upon", "max_tokens": 24, "temperature": 0},
                       timeout=60)
        assert r.status_code == 200, r.text
        rounds = _written(state, srv.log)
    finally:
        srv.proc.kill()
        srv.proc.wait()
    assert rounds > 0
    again = web_serve.start(args, log=tmp_path / "serve2.log", timeout_s=120)
    again.proc.kill()
    again.proc.wait()
    assert f"the controller from {rounds} rounds of earlier runs" in again.log.read_text()


def test_files_no_run_wrote_for_90_days_go_at_the_next_write(tmp_path: Path) -> None:
    ident = _ident(tmp_path)
    folder = remember.state_path(ident).parent
    folder.mkdir(parents=True)
    old, recent = folder / "0123456789abcdef0123.pickle", folder / "fedcba9876543210fedc.pickle"
    other = folder / "notes.txt"  # (not a controller file: never touched)
    for p in (old, recent, other):
        p.write_bytes(b"x")
    long_ago = time.time() - (remember.FORGET_DAYS + 1) * 86400
    os.utime(old, (long_ago, long_ago))
    os.utime(other, (long_ago, long_ago))
    os.utime(recent, (time.time() - 86400, time.time() - 86400))
    path = remember.save(ident, _taught(prompts=1))
    assert path is not None and sorted(p.name for p in folder.iterdir()) == sorted([path.name, recent.name, other.name])
    # its own file, however old, is rewritten, never removed
    os.utime(path, (long_ago, long_ago))
    assert remember.forget_old(folder, keep=path) == [] and path.exists()


def test_chat_starts_from_what_the_last_chat_learnt(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    def chat() -> str:
        proc = subprocess.run([sys.executable, "-m", "ggufspec.cli", "chat", "--target", str(tiny_target_q8),
                               "--draft", str(tiny_draft_q8), "--threads", "1", "--ctx", "256", "-n", "16"],
                              input="Hello\n", capture_output=True, text=True, timeout=300, env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr
        return proc.stdout + proc.stderr

    assert "earlier runs" not in chat()
    assert "rounds of earlier runs" in chat()
