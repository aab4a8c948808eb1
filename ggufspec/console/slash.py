"""The console's slash commands, parsed, and the run settings they change (pure: no model, no terminal).

A command line is `/name [argument]`; `parse_command` splits and checks it, `ChatSettings.apply`
turns a setting command into new settings (refused, settings unchanged, when the result would be
inconsistent: greedy acceptance while sampling, say). Every refusal is a one-line UserError. The
speculation settings (/k, /accept) change through `SpeculativeSettings.after_slash`, the one door
the flags and the server's requests go through too (ggufspec.loop.speculation).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ggufspec.errors import UserError
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings


@dataclass(frozen=True)
class Command:
    name: str  # without the slash
    arg: str  # the rest of the line, stripped ("" when none)


# name -> (argument shown in /help, what it does); the order is /help's
COMMANDS: dict[str, tuple[str, str]] = {
    "draft": ("REF|lookup|none", "switch the drafter: a draft model, prompt lookup, or the target alone"),
    "k": ("N|auto", "draft N tokens a round (fixed), or the adaptive, paced length"),
    "temp": ("T", "temperature; 0 is greedy"),
    "top-p": ("P", "top-p in (0, 1]; 1 is off"),
    "accept": ("greedy|rejection|match", "how drafts are judged (greedy needs /temp 0)"),
    "compare": ("", "the last turn again with the target alone: speeds side by side"),
    "stats": ("", "the last turn's numbers and the settings in force"),
    "verbose": ("", "colour each token by where it came from (on/off)"),
    "system": ("TEXT", "set the system prompt (no TEXT: remove it)"),
    "save": ("FILE", "save the conversation and the KV caches (resume with --session FILE)"),
    "reset": ("", "forget the conversation (the system prompt stays)"),
    "help": ("", "this list"),
    "quit": ("", "leave (Ctrl-D too)"),
}
_NEEDS_ARG = {"draft", "k", "temp", "top-p", "accept", "save"}


def help_text() -> str:
    width = max(len(f"/{n} {a}".rstrip()) for n, (a, _) in COMMANDS.items())
    lines = [f"  {f'/{n} {a}'.rstrip():<{width}}  {what}" for n, (a, what) in COMMANDS.items()]
    keys = "  Ctrl-C stops a reply (the console stays); Ctrl-D quits; Up/Down recall earlier lines."
    return "\n".join(["commands:", *lines, keys])


def parse_command(line: str) -> Command:
    """'/k 4' -> Command('k', '4'); an unknown name or a missing argument is a UserError."""
    name, _, arg = line.strip().removeprefix("/").partition(" ")
    name, arg = name.lower(), arg.strip()
    if name == "exit":
        name = "quit"
    if name not in COMMANDS:
        raise UserError(f"unknown command /{name}; /help lists the commands")
    if name in _NEEDS_ARG and not arg:
        raise UserError(f"/{name} needs an argument: /{name} {COMMANDS[name][0]}")
    if name not in _NEEDS_ARG and name != "system" and arg:
        raise UserError(f"/{name} takes no argument, got {arg!r}")
    return Command(name, arg)


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{what} must be a number, got {text!r}") from None


@dataclass(frozen=True, kw_only=True)
class ChatSettings:
    """What the next turn runs with; every field is changed live by a command."""

    max_tokens: int = 512  # most tokens one reply generates
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    verbose: bool = False
    # the speculation flags (ggufspec.commands.speculation_args), changed live by /k and /accept
    speculative: SpeculativeSettings = field(default_factory=SpeculativeSettings)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise UserError(f"max tokens must be >= 1, got {self.max_tokens}")
        self.speculative.rule_for(self.sampling())  # greedy acceptance while sampling: refused

    def sampling(self) -> SamplingSettings:
        return SamplingSettings(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                                min_p=self.min_p, seed=self.seed)

    @property
    def draft_max(self) -> int:
        """The most tokens one round drafts (/k N sets it, and fixed)."""
        return self.speculative.length.draft_max

    @property
    def fixed(self) -> bool:
        """Always draft draft_max (/k N) instead of the adaptive, paced length (/k auto)."""
        return self.speculative.length.fixed

    @property
    def draft_max_text(self) -> str:
        return f"{self.draft_max} (fixed)" if self.fixed else f"auto (up to {self.draft_max})"

    def apply(self, cmd: Command) -> ChatSettings:
        """New settings for a setting command (k, temp, top-p, accept, verbose); UserError if bad."""
        if cmd.name in ("k", "accept"):
            return replace(self, speculative=self.speculative.after_slash(cmd.name, cmd.arg))
        if cmd.name == "temp":
            return replace(self, temperature=_number(cmd.arg, "/temp"))
        if cmd.name == "top-p":
            return replace(self, top_p=_number(cmd.arg, "/top-p"))
        if cmd.name == "verbose":
            return replace(self, verbose=not self.verbose)
        raise ValueError(f"/{cmd.name} is not a setting")  # a bug in the caller, not user input

    def describe(self) -> str:
        rule = self.speculative.rule_for(self.sampling()).value
        return (f"K {self.draft_max_text}, temp {self.temperature:g}, top-p {self.top_p:g}, accept {rule}, "
                f"max {self.max_tokens} tokens a reply")
