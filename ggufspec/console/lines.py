"""Where the console's lines come from: a terminal (prompt_toolkit: line editing, Up/Down history)
or a pipe (one line a turn, echoed so a transcript reads as a conversation)."""

from __future__ import annotations

import sys
from typing import Protocol, TextIO

PROMPT = "> "


class LineReader(Protocol):
    echo: bool  # print each line read (a pipe's lines are not on the screen)

    def read(self) -> str:
        """The next line, without its newline. EOFError at the end (Ctrl-D); KeyboardInterrupt
        when Ctrl-C is pressed at the prompt."""
        ...


class PipeReader:
    echo = True

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def read(self) -> str:
        line = self._stream.readline()
        if not line:
            raise EOFError
        return line.rstrip("\r\n")


class TerminalReader:
    """prompt_toolkit's line editor (Emacs keys, Up/Down through this session's lines)."""

    echo = False

    def __init__(self) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory

        self._session: PromptSession[str] = PromptSession(history=InMemoryHistory())

    def read(self) -> str:
        return self._session.prompt(PROMPT)


def open_reader(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> LineReader:
    """The terminal editor when both ends are a terminal, else plain lines from stdin."""
    if stdin.isatty() and stdout.isatty():
        try:
            return TerminalReader()
        except ImportError:  # an install without prompt_toolkit: the stdlib's readline editing
            import readline  # noqa: F401  (input() then edits and keeps history)

            return _InputReader()
    return PipeReader(stdin)


class _InputReader:
    echo = False

    def read(self) -> str:
        return input(PROMPT)
