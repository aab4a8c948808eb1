"""The one exception users see: a one-line message naming the problem and the fix."""


class UserError(Exception):
    """Bad input or an unusable environment. The CLI prints ``error: <message>`` and exits 2."""

    def __init__(self, message: str) -> None:
        # One line, always: the CLI prints it as-is after "error: ".
        super().__init__(" ".join(message.split()))
