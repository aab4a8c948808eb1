"""RPC workers and llama.cpp's device list: real `ggufspec rpc-server` workers on 127.0.0.1 with tiny models.

A worker serves one client process at a time, so every client here is a subprocess run to its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ggufspec.errors import UserError
from ggufspec.ggufinfo import read_model_info
from ggufspec.plan import GpuBudget, plan_offload
from ggufspec.plan.split import layer_devices
from ggufspec.rpc import Endpoint, hello, parse_endpoints

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)


# the frozen-worker tests' stall watchdog (ggufspec.llama.stall): 3 s instead of the default 20 s (a tiny
# model's call to a worker on 127.0.0.1 answers in milliseconds)
STALL_S = 3


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ggufspec.cli", *args], capture_output=True, text=True, env=_env())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_worker() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ggufspec.cli", "rpc-server", "--port", str(port), "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    assert proc.stderr is not None
    assert b"RPC worker on" in proc.stderr.readline()
    for _ in range(400):  # until it answers the protocol's HELLO
        try:
            hello(Endpoint(host="127.0.0.1", port=port), timeout_s=1.0)
            return proc, f"127.0.0.1:{port}"
        except UserError:
            assert proc.poll() is None, "the worker exited"
            time.sleep(0.05)
    raise AssertionError("the worker never answered")


@pytest.fixture(scope="module")
def workers():
    started = [_start_worker() for _ in range(2)]
    yield ",".join(ep for _, ep in started)
    for proc, _ in started:
        proc.kill()
        proc.wait()


# ---- pure --------------------------------------------------------------------------------------


def test_parse_endpoints() -> None:
    assert [str(e) for e in parse_endpoints("127.0.0.1:50052, 10.0.0.2:1")] == ["127.0.0.1:50052", "10.0.0.2:1"]
    for bad in ("127.0.0.1", "host:0", ":5", "a:1,a:1", "a:x", ""):
        with pytest.raises(UserError):
            parse_endpoints(bad)


def test_layer_devices_is_llama_cpp_split() -> None:
    # 4 blocks + output over two equal devices: cum = [0.5, 1]; slot j/5 < 0.5 -> device 0
    assert layer_devices(n_layer=4, n_gpu_layers=-1, split=[1, 1]) == (0, 0, 0, 1, 1)
    assert layer_devices(n_layer=4, n_gpu_layers=2, split=[1, 1]) == (-1, -1, -1, 0, 1)
    assert layer_devices(n_layer=4, n_gpu_layers=0, split=[1, 1]) == (-1,) * 5
    assert layer_devices(n_layer=4, n_gpu_layers=5, split=[4, 1]) == (0, 0, 0, 0, 1)


def test_planner_keeps_the_draft_off_rpc_workers(tiny_target: Path, tiny_draft: Path) -> None:
    t, d = read_model_info(tiny_target), read_model_info(tiny_draft)
    big = 64 << 30
    workers = [GpuBudget(index=i, name=f"RPC{i}", free_bytes=big, total_bytes=big, kind="rpc") for i in range(2)]
    plan = plan_offload(target=t, draft=d, gpus=workers, margin_bytes=0)
    assert plan.draft is not None and plan.draft.n_gpu_layers == 0  # only workers: the draft on the CPU
    assert plan.target.whole_on_gpu and plan.fits
    gpu = GpuBudget(index=2, name="GPU", free_bytes=big // 4, total_bytes=big // 4)
    plan = plan_offload(target=t, draft=d, gpus=[*workers, gpu], margin_bytes=0)
    assert plan.draft is not None and plan.draft.whole_on_gpu and plan.draft.main_gpu == 2  # a local GPU first
    assert {u.kind for u in plan.devices} == {"rpc", "gpu", "cpu"}


# ---- real workers ------------------------------------------------------------------------------


def test_devices_lists_workers(workers: str) -> None:
    r = _cli("devices", "--rpc", workers, "--json")
    assert r.returncode == 0, r.stderr
    devs = json.loads(r.stdout)["devices"]
    rpc = [d for d in devs if d["kind"] == "rpc"]
    assert [d["description"] for d in rpc] == workers.split(",")
    assert all(d["total_bytes"] > 0 and 0 < d["free_bytes"] <= d["total_bytes"] for d in rpc)
    assert devs[-1]["kind"] == "cpu"


def test_a_worker_makes_decodes_wait_for_the_device(workers: str) -> None:
    # llama_synchronize after each decode is skipped only where every device is the CPU's
    # (devices.cpu_only); a registered RPC worker brings it back
    code = ("from ggufspec.llama import devices; from ggufspec.rpc import parse_endpoints; "
            "before = devices.cpu_only(); devices.add_workers(tuple(parse_endpoints(%r))); "
            "print(before, devices.cpu_only())" % workers)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


def test_split_over_two_workers_is_greedy_identical_to_local(workers: str, tiny_target: Path, tiny_draft: Path) -> None:
    common = ("run", "--target", str(tiny_target), "--draft", str(tiny_draft), "-p", "Once upon a time", "-n", "40",
              "--json")
    local = _cli(*common)
    split = _cli(*common, "--rpc", workers, "--ngl", "all", "--compare")
    assert local.returncode == 0 and split.returncode == 0, local.stderr + split.stderr
    lo, sp = json.loads(local.stdout), json.loads(split.stdout)
    assert sp["text"] == lo["text"] and sp["identical"] is True
    by_name = {d["name"]: d for d in sp["devices"]}
    n = read_model_info(tiny_target).n_layer + 1
    assert by_name["RPC0"]["target_layers"] > 0 and by_name["RPC1"]["target_layers"] > 0
    assert by_name["RPC0"]["target_layers"] + by_name["RPC1"]["target_layers"] == n
    assert by_name["CPU"]["draft_layers"] == read_model_info(tiny_draft).n_layer + 1  # the draft local
    assert lo["devices"] == [{"name": "CPU", "kind": "cpu", "target_layers": n,
                              "draft_layers": read_model_info(tiny_draft).n_layer + 1}]


_PIPELINE = """
import json, sys
from ggufspec import ContextSettings, DraftController, PairSettings, load_pair
from ggufspec.loop import round_runner
from ggufspec.loop.engine import generate
from ggufspec.loop.lookup import LookupDrafter
landed = [0]
land = round_runner.RoundRunner._land
def counted(self, *a, **k):
    landed[0] += 1
    return land(self, *a, **k)
round_runner.RoundRunner._land = counted
target, draft, workers = sys.argv[1:4]
with load_pair(target=target, draft=draft, settings=PairSettings(context=ContextSettings(n_ctx=512, n_threads=1),
               rpc=tuple(workers.split(",")), n_gpu_layers="all", n_gpu_layers_draft="all")) as pair:
    ctx = pair.target_ctx
    out = {"asynchronous": ctx.asynchronous}
    for asynchronous in (True, False):
        ctx.asynchronous, landed[0] = asynchronous, 0
        # counted, not timed: a timed controller's choices follow this machine's load, and where a
        # stop string lands inside a drafting round the cache keeps that round's tokens
        ctl, runs = DraftController(timed=False, settings=pair.controller.settings), []
        for drafters in ((*pair.drafters, LookupDrafter()), ()):
            for prompt, stop in (([1, 2, 3, 4, 5], ()), ([9, 8, 7, 6], ("e",)), ([5, 5, 5], ())):
                gen = generate(target=ctx, prompt=prompt, drafters=drafters, max_tokens=48, stop=stop,
                               controller=ctl if drafters else None).run()
                runs.append([gen.tokens, gen.stats.stop_reason, list(ctx.tokens)])
        out[str(asynchronous)] = {"runs": runs, "landed": landed[0]}
    print(json.dumps(out))
"""


def test_on_a_worker_the_next_round_of_the_target_alone_is_launched_early_and_greedy_stays_identical(
        workers: str, tiny_target: Path, tiny_draft: Path) -> None:
    # an RPC worker computes while the caller goes on (llama.cpp sends the graph and returns):
    # rounds of the target alone are launched at the end of the round before, with and without
    # a draft (ggufspec.loop.round_runner); tokens, stops and the target's cache are the same as
    # with every decode waited for
    r = subprocess.run([sys.executable, "-c", _PIPELINE, str(tiny_target), str(tiny_draft), workers],
                       capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["asynchronous"] is True
    assert out["True"]["runs"] == out["False"]["runs"]
    assert out["False"]["landed"] == 0 and out["True"]["landed"] > 100, out["True"]["landed"]


def test_plan_measure_per_worker_within_5_percent(workers: str, tiny_target: Path, tiny_draft: Path) -> None:
    r = _cli("plan", "--target", str(tiny_target), "--draft", str(tiny_draft), "--rpc", workers, "--margin", "0",
             "--measure", "--json")
    assert r.returncode == 0, r.stderr
    devs = [d for d in json.loads(r.stdout)["devices"] if d["kind"] == "rpc"]
    assert len(devs) == 2 and sum(d["target_layers"] for d in devs) == read_model_info(tiny_target).n_layer + 1
    for d in devs:
        assert d["draft_layers"] == 0 and d["measured"] is not None
        for key in ("weights_bytes", "kv_bytes"):
            est, got = d["estimate"][key], d["measured"][key]
            assert abs(est - got) <= 0.05 * max(got, 1), (d["name"], key, est, got)


def test_worker_down_is_one_line_exit_2(tiny_target: Path) -> None:
    port = _free_port()  # nothing listens there
    r = _cli("run", "--target", str(tiny_target), "--draft", "none", "--rpc", f"127.0.0.1:{port}", "-p", "hi", "-n", "4")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("error: no RPC worker at")


def test_not_a_worker_is_one_line_exit_2(tiny_target: Path) -> None:
    with socket.socket() as srv:  # listens, accepts, never answers the HELLO: closes at once
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "ggufspec.cli", "devices", "--rpc", f"127.0.0.1:{port}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        conn, _ = srv.accept()
        conn.close()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and err.startswith("error: 127.0.0.1:") and "RPC worker" in err
    assert len(err.strip().splitlines()) == 1


_KILL_MID_RUN = """
import subprocess, sys
from ggufspec import load_pair
from ggufspec.settings import PairSettings
pid, endpoint, target = int(sys.argv[1]), sys.argv[2], sys.argv[3]
pair = load_pair(target=target, draft="none", settings=PairSettings(rpc=(endpoint,), n_gpu_layers="all"))
gen = pair.generate(prompt="Once upon a time", max_tokens=200)
for i, step in enumerate(gen):
    if i == 2:
        import os, signal
        os.kill(pid, signal.SIGKILL)
print("finished", flush=True)
"""


def test_worker_killed_mid_generation_exits_2_within_30s(tiny_target: Path) -> None:
    proc, endpoint = _start_worker()
    try:
        run = subprocess.Popen([sys.executable, "-c", _KILL_MID_RUN, str(proc.pid), endpoint, str(tiny_target)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        out, err = run.communicate(timeout=120)  # loading takes part of this; the error itself comes at once
    finally:
        proc.kill()
        proc.wait()
    assert run.returncode == 2, (out, err)
    assert "finished" not in out
    assert err.strip().startswith("error: an RPC worker stopped answering mid-run")
    assert len(err.strip().splitlines()) == 1


def test_the_stall_watchdog_waits_20_s_unless_the_tests_say_less() -> None:
    from ggufspec.llama import stall

    assert stall.STALL_TIMEOUT_S == 20.0  # what users get (the tests below run with STALL_S)


def test_the_stall_limit_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggufspec.errors import UserError
    from ggufspec.llama import stall

    monkeypatch.delenv("GGUFSPEC_RPC_STALL_S", raising=False)
    assert stall.stall_timeout_s() == stall.STALL_TIMEOUT_S
    monkeypatch.setenv("GGUFSPEC_RPC_STALL_S", "2.5")
    assert stall.stall_timeout_s() == 2.5
    for bad in ("soon", "0", "-3", "nan"):
        monkeypatch.setenv("GGUFSPEC_RPC_STALL_S", bad)
        with pytest.raises(UserError, match="GGUFSPEC_RPC_STALL_S must be a number of seconds > 0"):
            stall.stall_timeout_s()


def test_worker_frozen_mid_generation_exits_2_within_30s(workers: str, tiny_target: Path) -> None:
    """`kill -STOP` of one of two workers mid-generation: the kernel keeps its connection open and
    acknowledges what is sent, so nothing fails on its own (run hung for 100-300 s, issue 42); the
    stall watchdog names the worker and `run` exits 2 within 30 s of the stop."""
    frozen = _start_worker()
    try:
        endpoints = f"{workers.split(',')[0]},{frozen[1]}"
        run = subprocess.Popen([sys.executable, "-m", "ggufspec.cli", "run", "--target",
                                str(tiny_target), "--draft", "none", "--rpc", endpoints, "--ngl", "all", "-p",
                                "Once upon a time", "-n", "3000", "--threads", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_env(GGUFSPEC_RPC_STALL_S=str(STALL_S)))
        assert run.stdout is not None
        run.stdout.read(1)  # generating (3000 tokens: it runs for a while yet)
        os.kill(frozen[0].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            out, err = run.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            run.kill()
            run.communicate()
            pytest.fail("run still hung 60 s after its worker froze")
        waited = time.monotonic() - stopped
    finally:
        os.kill(frozen[0].pid, signal.SIGCONT)
        frozen[0].kill()
        frozen[0].wait()
    assert run.returncode == 2, (out, err)
    assert err.strip() == (f"error: RPC worker {frozen[1]} did not answer for {STALL_S} s (frozen, stopped or unreachable); "
                           "restart it (`ggufspec rpc-server`) and run again")
    assert waited < 30


@contextlib.contextmanager
def _serving(target: Path, draft: Path, endpoints: str, log: Path, **env: str):
    """`ggufspec serve --rpc endpoints` on a free port; yields its URL once /health answers, and
    checks that it stops within 5 s of SIGTERM (a lost worker's stuck thread is not waited for:
    that held SIGTERM for 10 s)."""
    import httpx

    with log.open("wb") as out:
        srv = subprocess.Popen([sys.executable, "-m", "ggufspec.cli", "serve", "--target", str(target), "--draft",
                                str(draft), "--rpc", endpoints, "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                                "--log-level", "warning"], stdout=out, stderr=subprocess.STDOUT, env=_env(**env))
    try:
        url = None
        for _ in range(1200):  # the port line, then /health
            assert srv.poll() is None, log.read_text()
            text = log.read_text()
            if "listening on http://" in text:
                url = text.split("listening on ")[1].split("/v1")[0]
                try:
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
        assert url is not None
        yield url
        assert srv.poll() is None  # still serving
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=5)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
            pytest.fail("the server did not stop within 5 s of SIGTERM after losing its worker")


def test_server_survives_a_dead_worker(tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    import httpx

    worker, endpoint = _start_worker()
    try:
        with _serving(tiny_target, tiny_draft, endpoint, tmp_path / "serve.log") as url:
            body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
            ok = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
            assert ok.status_code == 200, ok.text
            worker.kill()
            worker.wait()
            lost = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
            assert lost.status_code == 503 and "RPC worker" in lost.text, lost.text
            health = httpx.get(f"{url}/health", timeout=5)
            assert health.status_code == 503 and health.json()["status"] == "unavailable"
            again = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
            assert again.status_code == 503
    finally:
        worker.kill()


def test_server_reports_a_frozen_worker_within_30s(tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    """`kill -STOP` of the worker mid-stream: the stream stalled and /health said "ok" for good
    (issue 42). Now the stream ends with a device_lost error event and [DONE] within 30 s, /health
    says why it is unavailable, and later requests get 503."""
    import httpx

    worker, endpoint = _start_worker()
    try:
        with _serving(tiny_target, tiny_draft, endpoint, tmp_path / "serve.log",
                      GGUFSPEC_RPC_STALL_S=str(STALL_S)) as url:
            body = {"prompt": "Once upon a time", "max_tokens": 3000, "temperature": 0, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
                lines = r.iter_lines()
                assert next(lines).startswith("data: ")  # generating
                os.kill(worker.pid, signal.SIGSTOP)
                stopped = time.monotonic()
                tail = [line for line in lines if line][-2:]
                waited = time.monotonic() - stopped
            assert waited < 30
            error = json.loads(tail[0].removeprefix("data: "))["error"]
            assert error["code"] == "device_lost" and f"RPC worker {endpoint} did not answer" in error["message"]
            assert tail[1] == "data: [DONE]"
            health = httpx.get(f"{url}/health", timeout=5)
            assert health.status_code == 503 and health.json()["status"] == "unavailable"
            assert f"RPC worker {endpoint} did not answer for {STALL_S} s" in health.json()["reason"]
            again = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
            assert again.status_code == 503 and again.json()["error"]["code"] == "device_lost"
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        worker.kill()
        worker.wait()


def test_worker_of_another_version_is_one_line_exit_2() -> None:
    import struct
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def answer() -> None:  # a protocol 6 worker: reads the HELLO, answers version 6.1.0
        conn, _ = srv.accept()
        with conn:
            conn.recv(1 + 8 + 24)
            conn.sendall(struct.pack("<Q", 28) + bytes([6, 1, 0, 0]) + bytes(24))

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    r = _cli("devices", "--rpc", f"127.0.0.1:{port}")
    srv.close()
    assert r.returncode == 2
    assert r.stderr.strip() == (f"error: RPC worker 127.0.0.1:{port} speaks protocol 6.1.0, this llama.cpp 7.0.0; "
                                "run `ggufspec rpc-server` there with the same llama-cpp-python version as here")


def test_measured_buffers_go_to_their_devices() -> None:
    from types import SimpleNamespace

    from ggufspec.plan.measured import device_of, per_device

    devs = [SimpleNamespace(name="RPC 0 (RPC0 127.0.0.1:5)", kind="rpc"),
            SimpleNamespace(name="GPU 1 (CUDA0)", kind="gpu"), SimpleNamespace(name="RAM", kind="cpu")]
    assert device_of("RPC0[127.0.0.1:5]", devs) == devs[0].name
    assert device_of("CUDA0", devs) == "GPU 1 (CUDA0)"
    assert device_of("CPU_Mapped", devs) == device_of("CUDA_Host", devs) == "RAM"
    m = SimpleNamespace(buffers=(("model", "RPC0[127.0.0.1:5]", 10), ("kv", "RPC0[127.0.0.1:5]", 3),
                                 ("output", "CPU", 2), ("compute", "CPU", 5)))
    plan = SimpleNamespace(devices=devs)
    assert per_device(plan, {"target": {"measured": m, "same_placement": True}}) == {
        devs[0].name: {"weights_bytes": 10, "kv_bytes": 3, "compute_bytes": 0},
        "RAM": {"weights_bytes": 0, "kv_bytes": 0, "compute_bytes": 7}}


def test_vram_budgets_workers_first(workers: str, tiny_target: Path) -> None:
    info = read_model_info(tiny_target)
    small = info.output_layer_bytes // 2  # worker 0 can hold no output layer, and only a few blocks
    r = _cli("plan", "--target", str(tiny_target), "--draft", "none", "--rpc", workers, "--margin", "0",
             "--vram", f"{small}B,64GiB", "--json")
    assert r.returncode == 0, r.stderr
    rpc = [d for d in json.loads(r.stdout)["devices"] if d["kind"] == "rpc"]
    assert rpc[0]["free_bytes"] == small and rpc[0]["used_bytes"] <= small
    assert rpc[1]["target_layers"] >= 1


def test_bench_sweep_ngl_over_workers(workers: str, tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    r = _cli("bench", "--target", str(tiny_target), "--draft", str(tiny_draft), "--rpc", workers,
             "--sweep-ngl", "0,all", "--ngld", "all", "--limit", "1", "--repeats", "1", "-n", "8", "--no-peers",
             "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)["points"]
    n = read_model_info(tiny_target).n_layer + 1
    assert [p["ngl"] for p in points] == ["0", "all"]
    assert [p["target_layers_offloaded"] for p in points] == [0, n]
    # --ngld holds at every point (it was ignored: the draft stayed where "auto" put it, the CPU)
    assert [p["draft_layers_offloaded"] for p in points] == [read_model_info(tiny_draft).n_layer + 1] * 2
    assert all(p["identical"] and p["alone_tps"] > 0 and p["spec_tps"] > 0 and p["speedup"] > 0 for p in points)
    saved = json.loads((tmp_path / "sweep_ngl.json").read_text())
    assert saved["points"] == points and saved["meta"]["rpc"] == workers and saved["meta"]["ngld"] == "all"
    assert (tmp_path / "sweep_ngl.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "sweep_ngl.csv").read_text().splitlines()[0].startswith("ngl,target_layers_offloaded")


def test_sweep_ngl_refuses_bad_lists() -> None:
    from ggufspec.bench.sweep import parse_ngl_list

    assert parse_ngl_list("0, 8,all") == (0, 8, "all")
    for bad in ("", "x", "-1", "8,,all"):
        with pytest.raises(UserError):
            parse_ngl_list(bad)
