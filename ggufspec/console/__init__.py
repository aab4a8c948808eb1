"""`ggufspec chat`: an interactive multi-turn console over a loaded pair.

slash (pure: the slash commands and the run settings they change), conversation (pure: the messages and
how they are fitted into the context), lines (terminal or pipe input), library (the one door into
ggufspec's runtime), app (the loop: turns, streaming, /compare, sessions, Ctrl-C).
"""

from ggufspec.console.app import Console
from ggufspec.console.conversation import Conversation
from ggufspec.console.slash import ChatSettings

__all__ = ["ChatSettings", "Console", "Conversation"]
