"""`ggufspec chat` as its users drive it: a real process reading a pipe (one message or command a
line), on the tiny Q8_0 target and its noised draft; and the console's pure parts (commands,
settings, fitting a conversation into the context) on their own.

Greedy replies must be the target alone's: switching drafts and K between turns, or resuming a
saved session in a new process, must never change them. Each comparison keeps the KV cache's
history the same on both sides (the same script with no draft; a live process against a resumed
one), so it checks the console and the drafts, not whether a prefix reused from the cache decodes
bit-identically to a cold prefill (the engine's tests, and the server's, check that). The
conversations stay under 256 tokens, where the tiny target's f16 KV cache is batch-invariant
(ggufspec.loop.exactness).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ggufspec.console.conversation import Conversation, fit
from ggufspec.console.slash import ChatSettings, Command, help_text, parse_command
from ggufspec.errors import UserError
from ggufspec.runtime import load_pair
from ggufspec.settings import ContextSettings, PairSettings

N_CTX = 1024
N_NEW = 16
FOOTER = re.compile(r"^\[(?:stopped, )?(\d+) tokens, .* prompt (\d+) \((\d+) cached\), draft (\S+?)[:\]]", re.M)


def _chat(target: Path, draft: Path | str, lines: list[str], *extra: str, n: int = N_NEW, ctx: int = N_CTX,
          cwd: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ggufspec.cli", "chat", "--target", str(target), "--draft", str(draft),
           "--threads", "1", "--ctx", str(ctx), "-n", str(n), *extra]
    # the timeout only guards against a hang; nothing here depends on speed
    return subprocess.run(cmd, input="".join(f"{x}\n" for x in lines), capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def _replies(out: str, messages: list[str]) -> list[tuple[str, re.Match]]:
    """Each message's reply as printed (between its echoed line and its footer) and the footer."""
    found = []
    for msg in messages:
        start = out.index(f"> {msg}\n") + len(f"> {msg}\n")
        footer = FOOTER.search(out, start)
        assert footer is not None, out[start:]
        found.append((out[start:footer.start() - 1], footer))
    return found


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("note: ")]


@pytest.fixture(scope="module")
def alone(tiny_target_q8: Path):
    """The target alone, cold cache every time: what a greedy reply to `messages` must be."""
    pair = load_pair(target=tiny_target_q8, draft="none",
                     settings=PairSettings(context=ContextSettings(n_ctx=N_CTX, n_threads=1)))

    def reply(messages: list[dict]) -> str:
        gen = pair.generate(messages=messages, max_tokens=N_NEW, drafters=(), cache_prompt=False).run()
        return gen.text

    yield reply
    pair.close()


# ---- scripted sessions ---------------------------------------------------------------------------


def test_scripted_session_switches_draft_k_and_sampling(tiny_target_q8: Path, tiny_draft_q8: Path, alone) -> None:
    said = ["Hello there", "Tell me about the sea.", "Another one, please.", "And one more.", "The last one."]
    lines = [said[0], "/k 4", said[1], "/compare",
             "/draft lookup", said[2], "/compare",
             "/draft none", said[3],
             f"/draft {tiny_draft_q8}", "/k auto", "/temp 0.7", "/top-p 0.9", said[4], "/compare",
             "/accept match", "/stats"]
    r = _chat(tiny_target_q8, tiny_draft_q8, lines, "--seed", "7", "--always-draft")
    assert r.returncode == 0, r.stderr
    assert _errors(r.stderr) == []
    out = r.stdout
    got = _replies(out, said)
    # The greedy replies are the target alone's: the same script with no draft at all, so both
    # runs reuse their KV caches at the same places. The first has no cache to reuse: it is
    # also the target alone's from a cold cache.
    plain = _chat(tiny_target_q8, "none", [x for x in lines if not x.startswith("/draft")], "--seed", "7")
    assert plain.returncode == 0, plain.stderr
    want = _replies(plain.stdout, said)
    assert [text for text, _ in got[:4]] == [text for text, _ in want[:4]]
    assert got[0][0] == alone([{"role": "user", "content": said[0]}])
    for i, (text, footer) in enumerate(got):
        assert int(footer.group(1)) == N_NEW
        if i:  # the previous turn's KV cache is reused
            assert int(footer.group(3)) > 0
    assert [f.group(4) for _, f in got] == ["tiny_draft.Q8_0.gguf", "tiny_draft.Q8_0.gguf", "lookup", "none",
                                           "tiny_draft.Q8_0.gguf"]
    assert "[K 4 (fixed), temp 0, top-p 1, accept greedy" in out
    assert "[K auto (up to 4), temp 0.7, top-p 0.9, accept rejection" in out
    compares = re.findall(r"^speedup \S+x; (.*)$", out, re.M)
    assert compares == ["the same text as the target alone", "the same text as the target alone",
                        "sampled: the texts differ by chance, their distribution is the same"]
    assert re.search(r"^\s+tokens/s\s+[\d.]+\s+[\d.]+$", out, re.M)
    assert "draft tiny_draft.Q8_0.gguf; K auto (up to 4), temp 0.7, top-p 0.9, accept match" in out


def test_save_then_resume_in_a_new_process(tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path: Path) -> None:
    said = ["One: name a colour.", "Two: name a fruit.", "Three: name a city."]
    live = _chat(tiny_target_q8, tiny_draft_q8, ["/system You are terse.", *said])
    assert live.returncode == 0, live.stderr
    want = _replies(live.stdout, said)[2][0]

    session = tmp_path / "talk.session"
    first = _chat(tiny_target_q8, tiny_draft_q8, ["/system You are terse.", *said[:2], f"/save {session}"])
    assert first.returncode == 0 and session.is_file(), first.stderr
    assert f"[saved 4 messages and the KV caches to {session}]" in first.stdout

    resumed = _chat(tiny_target_q8, tiny_draft_q8, [said[2]], "--session", str(session))
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(rf"^\[resumed 4 messages from {re.escape(str(session))} \(\d+ tokens in the cache\)\]$",
                     resumed.stdout, re.M)
    (text, footer), = _replies(resumed.stdout, said[2:])
    assert text == want  # the same reply as the process that never stopped
    # the history was not read again: at least the saved turn's whole prompt came from the file
    # (the saved reply's tokens may differ from its text tokenized again, as in any server)
    saved_prompt = int(_replies(first.stdout, said[:2])[1][1].group(2))
    assert int(footer.group(3)) >= saved_prompt
    # --session saved the grown conversation back on quit
    again = _chat(tiny_target_q8, tiny_draft_q8, ["/stats"], "--session", str(session))
    assert "[resumed 6 messages" in again.stdout

    # a session belongs to its target: another model is refused in one line
    other = _chat(tiny_draft_q8, "none", ["hi"], "--session", str(session))
    assert other.returncode == 2
    assert _errors(other.stderr) == [other.stderr.strip().splitlines()[-1]]
    assert "belongs to another target model" in other.stderr


def test_a_save_that_cannot_be_done_is_one_error_and_the_conversation_goes_on(
        tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path: Path) -> None:
    """/save onto a folder died with IsADirectoryError (conversation lost); onto a FIFO, a device or a
    symbolic link it replaced them; where this process may not write, PermissionError (issue 42). Each is one error line, nothing is replaced, and the console goes on."""
    fifo, link, target = tmp_path / "pipe", tmp_path / "link", tmp_path / "kept.txt"
    os.mkfifo(fifo)
    target.write_text("kept")
    link.symlink_to(target)
    bad = [f"/save {tmp_path}", f"/save {fifo}", f"/save {link}", "/save /dev/null", "/save /proc/talk.bin",
           f"/save {tmp_path / 'missing' / 'talk.bin'}"]
    r = _chat(tiny_target_q8, tiny_draft_q8, ["Hi", *bad, "Hello again", f"/save {tmp_path / 'talk.bin'}"])
    assert r.returncode == 0, r.stderr
    errors = _errors(r.stderr)
    assert len(errors) == len(bad) and all(e.startswith("error: cannot save the session to ") for e in errors), errors
    assert "it is a folder" in errors[0] and "not a regular file" in errors[1] and "symbolic link" in errors[2]
    assert errors[4].startswith("error: cannot save the session to /proc/talk.bin: ")  # not writable, even by root
    assert "does not exist" in errors[5]
    assert "Traceback" not in r.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and target.read_text() == "kept"
    assert Path("/dev/null").is_char_device()
    _replies(r.stdout, ["Hi", "Hello again"])  # the console went on talking
    assert f"[saved 4 messages and the KV caches to {tmp_path / 'talk.bin'}]" in r.stdout


def test_a_session_that_could_not_be_saved_is_refused_before_the_conversation(
        tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path: Path) -> None:
    """--session in a missing folder ran the whole conversation and failed at quit with exit 0."""
    for session, words in [(tmp_path / "missing" / "talk.bin", "does not exist"),
                           (tmp_path / "link", "symbolic link")]:
        if session.name == "link":
            session.symlink_to(tmp_path / "elsewhere.bin")
        r = _chat(tiny_target_q8, tiny_draft_q8, ["Hi"], "--session", str(session))
        assert r.returncode == 2 and "> Hi" not in r.stdout, (r.stdout, r.stderr)
        assert _errors(r.stderr) == [r.stderr.strip()] and words in r.stderr, r.stderr


def test_a_save_killed_midway_leaves_a_temp_file_the_next_save_sweeps(
        tiny_target_q8: Path, tiny_draft_q8: Path, tmp_path: Path) -> None:
    """Temp files of a save killed midway were never swept (derivation temps are)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".talk.bin.{int(dead.stdout)}.abcd1234.session-tmp"
    stale.write_bytes(b"half a session")
    r = _chat(tiny_target_q8, tiny_draft_q8, ["Hi", f"/save {tmp_path / 'talk.bin'}"])
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and (tmp_path / "talk.bin").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["talk.bin"]


def test_bad_commands_get_one_line_errors_and_the_console_goes_on(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    bad = ["/bogus", "/k x", "/k 0", "/k 99", "/top-p 2", "/temp -1", "/temp hot", "/accept nope",
           "/draft /nonexistent/model.gguf", "/save", "/compare", "/stats now", "/accept greedy", "/temp 0.5"]
    r = _chat(tiny_target_q8, tiny_draft_q8, [*bad, "/help", "Hi", "/reset", "Hello again"])
    assert r.returncode == 0, r.stderr
    errors = _errors(r.stderr)
    # every bad line but "/accept greedy" (fine at temp 0) got exactly one line
    assert len(errors) == len(bad) - 1, errors
    assert all(e.startswith("error: ") for e in errors)
    assert errors[0] == "error: unknown command /bogus; /help lists the commands"
    assert "/temp 0.5" not in errors[-1] and "greedy" in errors[-1]  # greedy acceptance while sampling
    assert "/draft REF|lookup|none" in r.stdout  # /help
    (_, hi), (_, again) = _replies(r.stdout, ["Hi", "Hello again"])  # and the console still talks
    assert "[conversation cleared]" in r.stdout
    assert int(again.group(3)) == 0 and int(again.group(2)) < int(hi.group(2)) + N_NEW  # /reset: nothing kept


def test_a_conversation_that_outgrows_the_context(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    long = "Please tell me everything you know about lighthouses, storms, ships and the sea."
    said = [f"{i}: {long}" for i in range(8)]
    # 256 tokens of context (llama.cpp's least), 32 kept for a reply: the fourth or fifth turn no longer fits
    refused = _chat(tiny_target_q8, tiny_draft_q8, said, "--system", "Be brief.", n=32, ctx=256)
    assert refused.returncode == 0
    errors = _errors(refused.stderr)
    assert errors and all(re.fullmatch(
        r"error: the conversation is \d+ tokens and the context holds 256, with 32 kept for the reply; /reset to "
        r"start over, or restart with --context-shift \(drops the oldest turns\) or a larger --ctx", e)
        for e in errors)

    shifted = _chat(tiny_target_q8, tiny_draft_q8, said, "--system", "Be brief.", "--context-shift", n=32, ctx=256)
    assert shifted.returncode == 0, shifted.stderr
    assert _errors(shifted.stderr) == []
    assert re.search(r"^\[context shift: dropped the 2 oldest messages; the prompt is now \d+ tokens\]$",
                     shifted.stdout, re.M)
    replies = _replies(shifted.stdout, said)
    assert len(replies) == len(said)
    assert int(replies[-1][1].group(3)) > 0  # what still matched the cache (the system prompt) was reused

    # a reply that runs into the end of the context stops there, with the same advice
    full = _chat(tiny_target_q8, tiny_draft_q8, ["Hi"], n=1000, ctx=256)
    assert full.returncode == 0
    assert _errors(full.stderr) == ["error: the reply filled the context; /reset to start over, or restart with "
                                    "--context-shift or a larger --ctx"]


def test_ctrl_c_stops_the_reply_and_keeps_the_console(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    cmd = [sys.executable, "-m", "ggufspec.cli", "chat", "--target", str(tiny_target_q8), "--draft",
           str(tiny_draft_q8), "--threads", "1", "--ctx", "4096", "-n", "3000"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"Count to a thousand.\n")
    proc.stdin.flush()
    # wait for the reply to start streaming (no clock: read until its text shows)
    seen = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while b"> Count to a thousand.\n" not in seen or not seen.split(b"> Count to a thousand.\n", 1)[1].strip():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        sel.select()
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, "the console closed its output"
        seen += chunk
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(b"/stats\nWhat next?\n", timeout=600)
    out = (seen + out).decode()
    assert proc.returncode == 0, err.decode()
    stopped = FOOTER.search(out)
    assert stopped is not None and stopped.group(0).startswith("[stopped, ")
    assert int(stopped.group(1)) < 3000
    assert re.search(r"^last reply: \d+ tokens \(cancelled\)", out, re.M)
    (_, footer), = _replies(out, ["What next?"])
    assert int(footer.group(3)) > 0  # the stopped reply stays in the conversation and in the cache


# ---- the pure parts --------------------------------------------------------------------------------


def test_commands_parse_and_refuse_in_one_line() -> None:
    assert parse_command("/k 4") == Command("k", "4")
    assert parse_command("  /SYSTEM  Be kind.  ") == Command("system", "Be kind.")
    assert parse_command("/system") == Command("system", "")
    assert parse_command("/exit") == Command("quit", "")
    for line, message in [("/nope", "unknown command /nope; /help lists the commands"),
                          ("/temp", "/temp needs an argument: /temp T"),
                          ("/reset now", "/reset takes no argument, got 'now'")]:
        with pytest.raises(UserError) as exc:
            parse_command(line)
        assert str(exc.value) == message
    assert all(f"/{name}" in help_text() for name in ("draft", "k", "compare", "verbose", "save", "reset"))


def test_settings_change_live_and_stay_consistent() -> None:
    s = ChatSettings()
    assert not s.speculative.length.fixed and not s.speculative.length.always_draft and s.sampling().greedy
    k4 = s.apply(Command("k", "4"))
    assert (k4.draft_max, k4.fixed, k4.speculative.length.fixed) == (4, True, True)
    auto = k4.apply(Command("k", "auto"))
    assert (auto.draft_max, auto.fixed) == (4, False)
    hot = s.apply(Command("temp", "0.8")).apply(Command("top-p", "0.9"))
    assert hot.sampling().temperature == 0.8 and hot.sampling().top_p == 0.9
    assert hot.speculative.rule_for(hot.sampling()).value == "rejection"
    assert hot.apply(Command("accept", "match")).describe().endswith("accept match, max 512 tokens a reply")
    greedy = s.apply(Command("accept", "greedy"))
    for bad, words in [(Command("k", "0"), "/draft none"), (Command("k", "65"), "[1, 64]"),
                       (Command("top-p", "0"), "top-p must be in (0, 1]"), (Command("accept", "best"), "unknown")]:
        with pytest.raises(UserError, match=re.escape(words)):
            s.apply(bad)
    with pytest.raises(UserError, match="greedy"):
        greedy.apply(Command("temp", "0.5"))
    assert s.apply(Command("verbose", "")).verbose


def _words(messages: list[dict]) -> int:
    return sum(len(m["content"].split()) + 1 for m in messages)


def test_fit_refuses_or_drops_the_oldest_exchanges_keeping_the_system_prompt() -> None:
    conv = Conversation(system="be brief")
    for i in range(3):
        conv.ask(f"question {i} " + "word " * 8)
        conv.answer(f"answer {i} " + "word " * 8)
    conv.ask("last question")
    full = _words(conv.messages)
    assert fit(conv, count=_words, n_ctx=full + 10, room=10, shift=False) == (full, 0)
    with pytest.raises(UserError, match=rf"^the conversation is {full} tokens and the context holds {full + 9}"):
        fit(conv, count=_words, n_ctx=full + 9, room=10, shift=False)
    n, dropped = fit(conv, count=_words, n_ctx=full, room=12, shift=True)
    assert dropped == 2 and n <= full - 12
    assert conv.messages[0] == {"role": "system", "content": "be brief"}
    assert conv.turns[0]["content"].startswith("question 1")
    # even the last message alone does not fit: refused, nothing left to drop
    with pytest.raises(UserError):
        fit(conv, count=_words, n_ctx=5, room=2, shift=True)
    assert conv.turns[-1]["content"] == "last question"


def test_session_conversation_round_trips_and_bad_meta_is_refused() -> None:
    conv = Conversation(system="s", turns=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    again = Conversation.from_messages(conv.messages)
    assert again == conv and again.last_prompt() == conv.messages[:-1]
    assert Conversation.from_messages([{"role": "user", "content": "a"}]).system is None
    with pytest.raises(UserError, match="malformed"):
        Conversation.from_messages([{"role": "user"}])  # type: ignore[list-item]


def test_bad_flags_fail_in_one_line_before_loading(tmp_path: Path) -> None:
    for extra, words in [(["--temp", "-1"], "temperature must be >= 0"),
                         (["--accept", "greedy", "--temp", "0.5"], "needs --temp 0"),
                         (["--draft-max", "0"], "draft-max must be in [1, 64]"),
                         (["--draft-max", "100000"], "draft-max must be in [1, 64], got 100000; draft 1 to 64"),
                         (["--seed", str(2**63)], "seed must be in [0, 9223372036854775807]"),
                         (["--session", str(tmp_path)], "it is a folder, which saving would replace"),
                         (["--session", str(tmp_path / "missing" / "talk.bin")], "does not exist"),
                         (["--pair", "default", "--draft", "lookup"], "--pair names both")]:
        r = subprocess.run([sys.executable, "-m", "ggufspec.cli", "chat", *extra], input="", capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 2 and r.stdout == "", (extra, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (extra, r.stderr)
