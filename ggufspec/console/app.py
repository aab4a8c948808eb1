"""The interactive console: read a line, run a command or a turn, stream the reply, repeat.

A turn renders the whole conversation with the GGUF chat template and generates from it; the
pair's KV caches keep the previous turn, so only the new messages are decoded (prefix reuse).
Ctrl-C during a reply stops it at the next token (the part already shown stays in the
conversation, as in llama.cpp's console) and the console goes on; Ctrl-D (or the end of a pipe)
quits, saving the session first when --session names one.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ggufspec.console import library
from ggufspec.console.conversation import Conversation, fit
from ggufspec.console.lines import PROMPT, LineReader
from ggufspec.console.slash import ChatSettings, Command, help_text, parse_command
from ggufspec.errors import UserError
from ggufspec.loop.rounds import Source
from ggufspec.loop.stats import RunStats

STYLES = {Source.DRAFT: "green", Source.CORRECTION: "red", Source.BONUS: "blue", Source.TARGET: "default"}
SESSION_FORMAT = "ggufspec-chat/1"


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One reply as it ran: for /stats and /compare."""

    tokens: list[int]  # the prompt
    output: list[int]
    stats: RunStats
    first_token_s: float  # wall time from the start of the turn to its first token
    draft: str
    interrupted: bool


class Console:
    def __init__(
        self,
        pair: library.Pair,
        *,
        settings: ChatSettings,
        conversation: Conversation | None = None,
        draft_ref: str = "none",
        context_shift: bool = False,
        session: Path | None = None,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
    ) -> None:
        from rich.console import Console as Rich

        self.pair, self.settings = pair, settings
        self.conv = conversation or Conversation()
        self.context_shift, self.session = context_shift, session
        self.out, self.err = out, err
        self.rich = Rich(file=out, highlight=False, soft_wrap=True)
        self.drafters: library.Drafters = library.own_drafters(pair)  # the next turn's
        self.loaded: dict[str, library.Drafters] = {"none": (), draft_ref: self.drafters}
        self.last: Turn | None = None
        self._stop = threading.Event()

    # ---- the loop ----------------------------------------------------------------------------

    def banner(self) -> None:
        learnt = self.pair.remembered_rounds  # (the controller kept between runs: ggufspec.remember)
        self.note(f"target {self.pair.target_path.name}, draft {self.draft_name}; {self.settings.describe()}; "
                  + (f"the controller from {learnt} rounds of earlier runs; " if learnt else "")
                  + "/help lists the commands")

    def run(self, reader: LineReader) -> int:
        """Read and handle lines until Ctrl-D, the end of the pipe or /quit."""
        while True:
            try:
                line = reader.read()
            except KeyboardInterrupt:  # Ctrl-C at the prompt: a fresh line, as a shell does
                if reader.echo:
                    break
                continue
            except EOFError:
                if not reader.echo:
                    self.out.write("\n")
                break
            if reader.echo:
                self.out.write(f"{PROMPT}{line}\n")
                self.out.flush()
            if not self.handle(line):
                break
        return 0 if self.quit() else 2

    def handle(self, line: str) -> bool:
        """One input line; False when the console should quit."""
        text = line.strip()
        if not text:
            return True
        try:
            if text.startswith("/"):
                return self.command(parse_command(text))
            self.turn(text)
        except UserError as exc:
            self.error(str(exc))
        return True

    def quit(self) -> bool:
        """Save the session when --session names one; False when that failed (said on stderr)."""
        if self.session is not None:
            try:
                self.save(self.session)
            except UserError as exc:
                self.error(str(exc))
                return False
        return True

    # ---- output ------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.rich.print(f"[{text}]", style="dim", markup=False)

    def error(self, text: str) -> None:
        self.out.flush()
        self.err.write(f"error: {text}\n")
        self.err.flush()

    @property
    def draft_name(self) -> str:
        return library.drafters_name(self.pair, self.drafters)

    # ---- commands ----------------------------------------------------------------------------

    def command(self, cmd: Command) -> bool:
        if cmd.name in ("k", "temp", "top-p", "accept", "verbose"):
            self.settings = self.settings.apply(cmd)
            if cmd.name != "verbose":
                self.note(self.settings.describe())
            elif self.settings.verbose:
                self.rich.print("[green]accepted draft[/] [red]target's correction[/] [blue]bonus token[/] "
                                "plain: the target alone", style="dim")
            else:
                self.note("colours off")
        elif cmd.name == "draft":
            self.switch_draft(cmd.arg)
        elif cmd.name == "compare":
            self.compare()
        elif cmd.name == "stats":
            self.stats()
        elif cmd.name == "system":
            self.conv.system = cmd.arg or None
            self.note("system prompt set" if cmd.arg else "system prompt removed")
        elif cmd.name == "save":
            self.save(Path(cmd.arg).expanduser())
        elif cmd.name == "reset":
            self.conv.turns.clear()
            library.reset(self.pair)
            self.last = None
            self.note("conversation cleared" + (" (the system prompt stays)" if self.conv.system else ""))
        elif cmd.name == "help":
            self.out.write(help_text() + "\n")
        elif cmd.name == "quit":
            return False
        return True

    def switch_draft(self, ref: str) -> None:
        if ref not in self.loaded:
            if ref != "lookup":
                self.note(f"loading {ref}")
            self.loaded[ref] = library.load_drafter(self.pair, ref)
        self.drafters = self.loaded[ref]
        self.note(f"draft {self.draft_name}")

    def save(self, path: Path) -> None:
        meta = {"format": SESSION_FORMAT, "messages": self.conv.messages}
        library.save_session(self.pair, path, meta)
        self.note(f"saved {len(self.conv.turns)} messages and the KV caches to {path}")

    def resume(self, path: Path) -> None:
        """Load a session saved by /save or --session: the conversation and its KV caches."""
        n_tokens, meta = library.load_session(self.pair, path)
        if meta.get("format") != SESSION_FORMAT:
            raise UserError(f"{path} was not saved by ggufspec chat (no conversation in it); start without --session")
        self.conv = Conversation.from_messages(meta.get("messages"))  # type: ignore[arg-type]
        self.note(f"resumed {len(self.conv.turns)} messages from {path} ({n_tokens} tokens in the cache)")

    def stats(self) -> None:
        lines = [f"draft {self.draft_name}; {self.settings.describe()}"]
        t = self.last
        if t is None:
            lines.append("no reply yet")
        else:
            s = t.stats
            lines += [
                f"last reply: {s.generated_tokens} tokens ({s.stop_reason}), {s.gen_tps:.1f} tokens/s after the first, "
                f"first token {t.first_token_s:.2f} s, draft {t.draft}",
                f"prompt: {s.prompt_tokens} tokens, {s.cached_tokens} reused from the cache, "
                f"{s.prompt_tokens - s.cached_tokens} decoded in {s.prompt_s:.2f} s",
                f"drafts: {s.accepted}/{s.drafted} accepted ({s.accept_rate:.0%}), {s.mean_accepted_len:.2f} tokens "
                f"per target call, {s.rounds} rounds ({s.paused_rounds} paused)",
                f"time: draft {s.draft_s:.2f} s, verify {s.verify_s:.2f} s, python {s.overhead_s:.2f} s",
                f"context: {s.prompt_tokens + s.generated_tokens} of {library.n_ctx(self.pair)} tokens",
            ]
        self.out.write("\n".join(lines) + "\n")

    # ---- turns -------------------------------------------------------------------------------

    def turn(self, text: str) -> None:
        self.conv.ask(text)
        n_ctx = library.n_ctx(self.pair)
        room = min(self.settings.max_tokens, n_ctx // 4)
        rendered: list[list[int]] = []

        def count(messages: list) -> int:
            rendered.append(library.encode(self.pair, messages))
            return len(rendered[-1])

        try:
            n, dropped = fit(self.conv, count=count, n_ctx=n_ctx, room=room, shift=self.context_shift)
        except UserError:
            self.conv.withdraw()
            raise
        if dropped:
            self.note(f"context shift: dropped the {dropped} oldest messages; the prompt is now {n} tokens")
        tokens = rendered[-1]  # the conversation as it now stands
        run = self._generate(tokens, self.drafters, show=True)
        self.conv.answer(run.text)
        self.last = run.turn
        self._footer(run.turn)

    def compare(self) -> None:
        t = self.last
        if t is None:
            raise UserError("/compare runs the last reply again; say something first")
        base = self._generate(t.tokens, (), show=False).turn
        a, b = t.stats, base.stats
        rows = [("", "speculative", "target alone"), ("draft", t.draft, "none"),
                ("tokens/s", f"{a.gen_tps:.1f}", f"{b.gen_tps:.1f}"),
                ("first token", f"{t.first_token_s:.2f} s", f"{base.first_token_s:.2f} s"),
                ("tokens", str(a.generated_tokens), str(b.generated_tokens))]
        w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        self.out.write("".join(f"  {r[0]:<{w0}}  {r[1]:>{w1}}  {r[2]:>12}\n" for r in rows))
        verdict = f"speedup {a.gen_tps / b.gen_tps:.2f}x" if b.gen_tps else "speedup n/a"
        if self.settings.sampling().greedy and not (t.interrupted or base.interrupted):
            n = min(len(t.output), len(base.output))
            same = t.output[:n] == base.output[:n]
            verdict += "; the same text as the target alone" if same else "; THE TEXT DIFFERS from the target alone"
        elif not self.settings.sampling().greedy:
            verdict += "; sampled: the texts differ by chance, their distribution is the same"
        self.out.write(verdict + "\n")

    def _footer(self, t: Turn) -> None:
        s = t.stats
        parts = [f"{s.generated_tokens} tokens", f"{s.gen_tps:.1f} tok/s", f"first token {t.first_token_s:.2f} s",
                 f"prompt {s.prompt_tokens} ({s.cached_tokens} cached)"]
        if s.drafted:
            parts.append(f"draft {t.draft}: {s.accept_rate:.0%} accepted, {s.mean_accepted_len:.2f} per round")
        else:
            parts.append(f"draft {t.draft}")
        if t.interrupted:
            parts.insert(0, "stopped")
        self.note(", ".join(parts))
        if s.stop_reason == "context":
            self.error("the reply filled the context; /reset to start over, or restart with --context-shift or a larger --ctx")

    def _generate(self, tokens: list[int], drafters: library.Drafters, *, show: bool) -> _Run:
        """Run one generation; Ctrl-C stops it at the next token (a SIGINT handler sets a flag the
        loop reads, so the engine is closed between steps, never interrupted inside one)."""
        self._stop.clear()
        draft = library.drafters_name(self.pair, drafters)
        t0 = time.perf_counter()
        first_s = 0.0
        gen = library.start_turn(self.pair, tokens=tokens, drafters=drafters, settings=self.settings)
        restore = self._catch_sigint()
        try:
            for step in gen:
                if not first_s:
                    first_s = time.perf_counter() - t0
                if show and step.text:
                    self._show(step.text, step.source)
                if self._stop.is_set():
                    break
        finally:
            gen.close()
            restore()
        if show:
            self.out.write("\n")
            self.out.flush()
        assert gen.stats is not None
        turn = Turn(tokens=tokens, output=list(gen.tokens), stats=gen.stats, first_token_s=first_s, draft=draft,
                    interrupted=self._stop.is_set())
        return _Run(turn=turn, text=gen.text)

    def _show(self, text: str, source: Source) -> None:
        if self.settings.verbose:
            self.rich.print(text, style=STYLES[source], end="", markup=False)
        else:
            self.out.write(text)
            self.out.flush()

    def _catch_sigint(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, lambda *_: self._stop.set())
        return lambda: signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class _Run:
    turn: Turn
    text: str

