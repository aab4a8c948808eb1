"""`ggufspec run` as users call it: a real subprocess, stdout/stderr, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggufspec.ggufinfo import read_vocab
from tiny_models import write_not_gguf, write_truncated, write_tiny_llama


def ggufspec(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "ggufspec.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_json_with_compare_reports_every_stat(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "-p", "Once upon a time",
                    "-n", "24", "--threads", "1", "--ctx", "256", "--json", "--compare")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["stats"]) >= {
        "prompt_tokens", "generated_tokens", "prompt_tps", "gen_tps", "drafted", "accepted", "accept_rate",
        "mean_accepted_len", "draft_s", "verify_s", "overhead_s",
    }
    assert out["stats"]["generated_tokens"] == 24
    assert out["stats"]["drafted"] > 0
    assert set(out["baseline"]) == {"text", "gen_tps"}
    assert out["identical"] is True and out["text"] == out["baseline"]["text"]
    assert out["speedup"] > 0


def test_streams_text_and_colours_by_provenance(tiny_target_q8: Path) -> None:
    # the target as its own draft: every drafted token is accepted (green) or a bonus (blue)
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", str(tiny_target_q8), "-p", "hello",
                    "-n", "16", "--threads", "1", "--ctx", "256", "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"accepted from {tiny_target_q8.stem}" in proc.stdout  # the legend names the drafter
    assert "accept rate" in proc.stderr and "100.0%" in proc.stderr


def test_lookup_chat_and_sampling_flags(tiny_target_q8: Path) -> None:
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", "lookup", "-p", "hi there", "--chat",
                    "-n", "12", "--threads", "1", "--ctx", "256", "--temp", "0.8", "--top-k", "40", "--top-p", "0.95",
                    "--min-p", "0.05", "--seed", "3", "--accept", "match", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stats"]["generated_tokens"] == 12


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, tiny_target_q8: Path) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    return {
        "not_gguf": write_not_gguf(d / "notes.gguf"),
        "truncated": write_truncated(tiny_target_q8, d / "cut.gguf"),
        "bytes_vocab": write_tiny_llama(d / "bytes.gguf", vocab="bytes"),
    }


@pytest.mark.parametrize(
    "case, extra, fragments",
    [
        ("missing file", ["--target", "/nonexistent/model.gguf"], ["/nonexistent/model.gguf"]),
        ("not gguf", ["--target", "{not_gguf}"], ["notes.gguf", "GGUF"]),
        ("truncated", ["--target", "{truncated}"], ["cut.gguf"]),
        ("vocab differs", ["--target", "{target}", "--draft", "{bytes_vocab}"], ["vocabular", "token"]),
        ("prompt longer than context", ["--target", "{target}", "--ctx", "256", "-p", "word " * 400], ["context holds 256"]),
        ("negative temperature", ["--temp", "-0.5"], ["temperature must be >= 0"]),
        ("top-p zero", ["--top-p", "0"], ["top-p must be in (0, 1]"]),
        ("top-p above one", ["--top-p", "1.5"], ["top-p must be in (0, 1]"]),
        ("draft-max zero", ["--draft-max", "0"], ["draft-max must be in [1, 64], got 0"]),
        ("draft-max above the limit", ["--draft-max", "100000"], ["draft-max must be in [1, 64], got 100000"]),
        ("seed above 2^63", ["--temp", "0.8", "--seed", str(2**64)], ["seed must be in [0, 9223372036854775807]"]),
        ("draft-max too large", ["--draft-max", "65"], ["draft-max must be in [1, 64], got 65"]),
        ("unknown rule", ["--accept", "typical"], ["unknown acceptance rule 'typical'"]),
        ("unknown variant", ["--temp", "1", "--variant", "google"], ["leviathan or chen"]),
        ("greedy rule when sampling", ["--temp", "1", "--accept", "greedy"], ["--accept greedy needs --temp 0"]),
        ("bad flag value", ["-n", "many"], ["-n"]),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(case, extra, fragments, bad_files, tiny_target_q8) -> None:
    names = {k: str(v) for k, v in bad_files.items()} | {"target": str(tiny_target_q8)}
    args = [a.format(**names) for a in extra]
    if "-p" not in args:
        args += ["-p", "hello"]
    if "--target" not in args:
        args += ["--target", str(tiny_target_q8)]
    proc = ggufspec("run", "--threads", "1", *args)
    assert_one_line_error(proc, *fragments)


def test_vocab_error_names_the_first_differing_token(tiny_target_q8: Path, tiny_models_dir: Path) -> None:
    other = write_tiny_llama(tiny_models_dir / "renamed_many.gguf", rename_last_tokens=49000)
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", str(other), "-p", "hi", "--threads", "1")
    first = 49152 - 49000  # the draft renames its last 49,000 tokens ("text" -> "text_x")
    target_text = read_vocab(tiny_target_q8).tokens[first]
    assert_one_line_error(proc, f"first differing token id {first}: target {target_text!r}, draft {target_text + '_x'!r}")


def test_seed_minus_one_is_random_and_other_negative_seeds_are_one_error_line(tiny_target_q8: Path) -> None:
    common = ["run", "--target", str(tiny_target_q8), "--draft", "lookup", "-p", "hi", "-n", "4", "--threads", "1",
              "--ctx", "256", "--temp", "0.8", "--json"]
    proc = ggufspec(*common, "--seed", "-1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stats"]["generated_tokens"] == 4
    assert_one_line_error(ggufspec(*common, "--seed", "-5"), "seed must be in [0, 9223372036854775807] (2^63 - 1), or -1 for a random seed, got -5")


def test_a_reply_that_fills_the_context_says_so_in_text_mode(tiny_target_q8: Path) -> None:
    """It stopped without a word (issue 42); --json has stats.stop_reason."""
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", "none", "-p", "word " * 200, "-n", "200",
                    "--ctx", "256", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    note = [line for line in proc.stderr.splitlines() if line.startswith("note: stopped after")]
    assert len(note) == 1 and "filled the context of 256 tokens; raise --ctx" in note[0], proc.stderr


def test_unknown_command_and_help() -> None:
    assert_one_line_error(ggufspec("fly"), "unknown command 'fly'")
    help_text = ggufspec("run", "--help").stdout
    assert "--draft-p-min" in help_text and "embedded default pair" in help_text


def test_the_controller_pauses_a_draft_that_does_not_pay_and_always_draft_turns_it_off(
    tiny_target_q8: Path, tiny_draft_q8: Path
) -> None:
    # the tiny draft costs what its target does: drafting can never pay, so after a try the
    # controller runs the target alone (retrying the draft every 32 rounds); --always-draft drafts
    # every round. Same text either way.
    common = ["run", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "-p", "Once upon a time",
              "-n", "40", "--threads", "1", "--ctx", "256", "--json"]
    paced = json.loads(ggufspec(*common).stdout)["stats"]
    eager_proc = ggufspec(*common, "--always-draft")
    assert eager_proc.returncode == 0, eager_proc.stderr
    eager = json.loads(eager_proc.stdout)
    assert paced["paused_rounds"] >= paced["rounds"] // 2 and paced["k_hist"]["0"] >= paced["paused_rounds"]
    assert eager["stats"]["paused_rounds"] == 0 and eager["stats"]["drafted"] > paced["drafted"]
    assert json.loads(ggufspec(*common).stdout)["text"] == eager["text"]


def test_several_drafts_are_named_in_stats_and_in_the_verbose_legend(
    tiny_target_q8: Path, tiny_draft_q8: Path
) -> None:
    common = ["run", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--draft", "lookup",
              "-p", "one two three one two three one two", "-n", "24", "--threads", "1", "--ctx", "256"]
    proc = ggufspec(*common, "--json", "--compare")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["draft"] == f"{tiny_draft_q8}+lookup" and out["identical"] is True
    stats = out["stats"]
    assert set(stats["drafter_rounds"]) <= {tiny_draft_q8.stem, "lookup", "none"}
    assert sum(stats["drafter_rounds"].values()) == sum(stats["k_hist"].values()) == stats["rounds"]
    assert all(k.isdigit() for k in stats["k_hist"])
    # Theorem 3.8 at this run's own costs (the target alone's run gives the step)
    drafting = stats["rounds"] - stats["k_hist"].get("0", 0)
    if stats["drafted"]:
        b = out["bound"]
        assert b["k"] == pytest.approx(stats["drafted"] / drafting, abs=1e-3)
        assert b["share"] == pytest.approx(drafting / stats["rounds"], abs=1e-3)
        assert 0.0 <= b["alpha"] <= 1.0 and b["c"] >= 0.0 and b["speedup"] > 0.0
    else:
        assert "bound" not in out
    table = ggufspec(*common, "--compare", "--always-draft")
    assert table.returncode == 0, table.stderr
    assert "Theorem 3.8 bound" in table.stderr and "its alpha K c v share" in table.stderr
    # piped (not a terminal): no cell folded at rich's 80 columns, the title on one line
    lines = table.stderr.splitlines()
    assert any(line.startswith("target ") and line.endswith(f"drafts {tiny_draft_q8.stem}+lookup") for line in lines)
    row = next(line for line in lines if "rounds / paused" in line)
    assert "rounds / paused (drafting did not pay)" in row and row.count("│") == 4, row
    verbose = ggufspec(*common, "-v", "--always-draft")
    assert verbose.returncode == 0, verbose.stderr
    assert f"accepted from {tiny_draft_q8.stem}" in verbose.stdout and "accepted from lookup" in verbose.stdout


def test_pair_errors_name_the_fix(tmp_path: Path) -> None:
    assert_one_line_error(ggufspec("run", "--pair", "nosuch", "-p", "hi"), "unknown pair 'nosuch'", "qwen3-8b")
    assert_one_line_error(ggufspec("run", "--pair", "default", "--target", "x.gguf", "-p", "hi"), "drop --target")
    for command in ("plan", "serve"):
        assert_one_line_error(ggufspec(command, "--pair", "default", "--draft", "lookup"), "--pair names both")
    # a hub pair with nothing cached and --offline: one line that says to pull it first
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"))
    proc = subprocess.run([sys.executable, "-m", "ggufspec.cli", "plan", "--pair", "qwen3-8b", "--offline"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert_one_line_error(proc, "Qwen/Qwen3-8B-GGUF", "ggufspec pull")


def test_quantized_models_run_on_any_cpu_and_a_bad_repack_setting_is_one_error_line() -> None:
    """llama.cpp's AMX matmul segfaults on quantized weights (llama.cpp #20824): where the build
    has AMX_INT8, weight repacking is off by default (GGUFSPEC_REPACK=auto), so the shipped Q4_1
    draft runs as a target of its own on such a CPU as on any other; on/off are honoured and
    anything else is refused before a model loads."""
    env = {k: v for k, v in os.environ.items() if k != "GGUFSPEC_REPACK"}
    args = [sys.executable, "-m", "ggufspec.cli", "run", "--target", "embedded:smollm2:Q4_1", "--draft", "none",
            "-p", "Hi", "--chat", "-n", "4", "--threads", "2", "--json"]
    for value in ("auto", "off"):
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**env, "GGUFSPEC_REPACK": value})
        assert proc.returncode == 0, (value, proc.returncode, proc.stderr[-500:])
        assert json.loads(proc.stdout)["stats"]["generated_tokens"] >= 1
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**env, "GGUFSPEC_REPACK": "maybe"})
    assert_one_line_error(proc, "GGUFSPEC_REPACK", "auto, on or off")


def test_a_context_that_cannot_fit_says_how_much_it_needs(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    """issue 42: an absurd --ctx said "quantized V cache needs flash attention" (a guess made
    when llama.cpp cannot make a context). 2e9 tokens of the tiny pair's KV cache need about 500 GiB
    (the planner's arithmetic); the error names that, the trained context and a --ctx that fits."""
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "-p", "hi", "-n", "4",
                    "--threads", "1", "--ctx", "2000000000")
    assert_one_line_error(proc, "a context of 2,000,000,000 tokens (the model was trained on 512)",
                          "of KV cache", "more than this machine's", "use a smaller --ctx (at most about")
    assert "flash attention" not in proc.stderr


def test_a_context_beyond_the_trained_length_runs_when_it_fits(tiny_target_q8: Path) -> None:
    proc = ggufspec("run", "--target", str(tiny_target_q8), "--draft", "none", "-p", "hi", "-n", "4",
                    "--threads", "1", "--ctx", "2048")  # the tiny model was trained on 512
    assert proc.returncode == 0, proc.stderr
