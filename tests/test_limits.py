"""One limit, one message, in every command that takes the setting (issue 42): a value past what
the machine can run, or past what another entry point accepts, is one `error:` line and exit 2,
before anything loads."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

DRAFT_MAX_LIMIT = 64  # the server's and the console's cap, now everyone's
MAX_SEED = 2**63 - 1  # the server's, now everyone's


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ggufspec.cli", *args], input="", capture_output=True,
                          text=True, timeout=120)


def _one_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


COMMANDS = {
    "run": ["run", "-p", "hi", "-n", "4"],
    "serve": ["serve", "--port", "0"],
    "chat": ["chat"],
    "bench": ["bench", "--quick"],
    "rpc-server": ["rpc-server", "--port", "50999"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_threads_are_bounded_by_the_cpus(command: str) -> None:
    """--threads 100000 segfaulted llama.cpp (32768: libgomp could not create the threads)."""
    _one_error(_cli(*COMMANDS[command], "--threads", "100000"),
               f"--threads must be between 1 and {len(psutil.Process().cpu_affinity())}", "got 100000")


@pytest.mark.parametrize("command", ["run", "chat", "serve", "bench"])
def test_draft_max_has_one_limit(command: str) -> None:
    """The CLI took --draft-max 100000 where the console and the server cap the draft length at 64."""
    _one_error(_cli(*COMMANDS[command], "--draft-max", "100000"), f"[1, {DRAFT_MAX_LIMIT}]", "got 100000")


@pytest.mark.parametrize("command", ["run", "chat"])
def test_seed_has_one_limit(command: str) -> None:
    """A request's seed must be < 2^63; the CLI took any."""
    _one_error(_cli(*COMMANDS[command], "--temp", "0.8", "--seed", str(MAX_SEED + 1)),
               f"seed must be in [0, {MAX_SEED}]", f"got {MAX_SEED + 1}")


# ---- issue 41: one door for the speculation settings ----------------------------------------------

SPECULATING = ["run", "chat", "serve", "bench"]
FULL_FLAGS = ["--draft-max", "5", "--draft-min", "2", "--draft-p-min", "0.25", "--draft-extend", "3", "--fixed",
              "--always-draft", "--accept", "match", "--variant", "chen"]


def _parsed(command: str, *argv: str):
    from ggufspec.cli import _build_parser

    parser, _ = _build_parser(command)
    return parser.parse_args([*COMMANDS[command], *argv])


@pytest.mark.parametrize("command", SPECULATING)
def test_every_generating_command_takes_every_speculation_flag(command: str) -> None:
    """run had 8 speculation flags, chat 4, serve 3, bench 1; now each has the same 8, parsed alike."""
    from ggufspec.commands.speculation_args import speculative_settings
    from ggufspec.loop.acceptance import AcceptRule, Variant
    from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

    assert speculative_settings(_parsed(command, *FULL_FLAGS)) == SpeculativeSettings(
        accept=AcceptRule.MATCH, variant=Variant.CHEN,
        length=DraftLengthSettings(draft_max=5, draft_min=2, draft_p_min=0.25, draft_extend=3, fixed=True,
                                   always_draft=True))
    assert speculative_settings(_parsed(command)) == SpeculativeSettings()  # the same defaults everywhere


def test_the_speculation_flags_have_one_definition() -> None:
    """The same help, defaults and metavars in every command's --help."""
    from ggufspec.cli import _build_parser

    def actions(command: str) -> dict:
        parser, _ = _build_parser(command)
        sub = next(a for a in parser._actions if a.dest == "command").choices[command]
        return {a.dest: (a.option_strings, a.default, a.metavar, a.help, a.type) for a in sub._actions
                if a.dest in ("draft_max", "draft_min", "draft_p_min", "draft_extend", "fixed", "always_draft",
                              "accept", "variant")}

    first = actions("run")
    assert len(first) == 8
    for command in SPECULATING[1:]:
        assert actions(command) == first, command


@pytest.mark.parametrize("value", ["100000", "0", "65"])
def test_a_bad_draft_max_is_the_same_error_line_everywhere(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """run, chat, serve and bench refuse it with the console's and the server's message, before loading."""
    from ggufspec.cli import main
    from ggufspec.console.slash import ChatSettings, Command
    from ggufspec.errors import UserError
    from ggufspec.loop.speculation import SpeculativeSettings

    lines = set()
    for command in SPECULATING:
        assert main([*COMMANDS[command], "--draft-max", value]) == 2, command
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (command, err)
        lines.add(err[0].removeprefix("error: "))
    assert len(lines) == 1, lines
    message = lines.pop()
    assert message.startswith(f"draft-max must be in [1, {DRAFT_MAX_LIMIT}], got {value}; ")
    with pytest.raises(UserError) as request:  # a server request's draft_max (a 400 with this message)
        SpeculativeSettings.from_request({"draft_max": int(value)}, server=SpeculativeSettings())
    assert str(request.value) == message
    if value != "0":  # /k 0 has its own message: /draft none runs the target alone
        with pytest.raises(UserError) as slash:
            ChatSettings().apply(Command("k", value))
        assert str(slash.value) == message


def test_a_request_narrows_the_servers_settings_and_keeps_what_it_does_not_name() -> None:
    from ggufspec.loop.acceptance import AcceptRule, Variant
    from ggufspec.loop.speculation import SpeculativeSettings

    server = SpeculativeSettings.from_options(draft_max=6, draft_p_min=0.5, draft_extend=2, variant="chen",
                                              always_draft=True)
    assert SpeculativeSettings.from_request({}, server=server) == server
    assert SpeculativeSettings.from_request({"draft_max": None, "accept": None}, server=server) == server
    chosen = SpeculativeSettings.from_request({"draft_max": 3, "fixed": True, "always_draft": False,
                                               "accept": "match", "draft_min": 1}, server=server)
    assert (chosen.length.draft_max, chosen.length.fixed, chosen.length.always_draft, chosen.length.draft_min) == \
        (3, True, False, 1)
    # what a request cannot name stays the server's
    assert (chosen.length.draft_p_min, chosen.length.draft_extend, chosen.variant, chosen.accept) == \
        (0.5, 2, Variant.CHEN, AcceptRule.MATCH)


def test_slash_k_keeps_the_flags_it_does_not_set() -> None:
    from ggufspec.loop.speculation import SpeculativeSettings

    flags = SpeculativeSettings.from_options(draft_max=8, draft_min=4, draft_p_min=0.3, always_draft=True)
    k2 = flags.after_slash("k", "2")
    assert (k2.length.draft_max, k2.length.fixed, k2.length.draft_min) == (2, True, 2)  # draft_min follows down
    assert (k2.length.draft_p_min, k2.length.always_draft) == (0.3, True)
    assert k2.after_slash("k", "auto").length.fixed is False
    assert k2.after_slash("accept", "rejection").accept.value == "rejection"


def test_serve_refuses_accept_greedy_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    from ggufspec.cli import main

    pytest.importorskip("fastapi")
    assert main([*COMMANDS["serve"], "--accept", "greedy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "serve --accept greedy would refuse every request that samples" in err[0]
