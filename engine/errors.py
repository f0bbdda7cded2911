"""One error base for the engine: every deliberate failure carries a code the control socket reports as is."""

from __future__ import annotations


class ExecHostError(Exception):
    """Base of every error exechost raises on purpose; anything else is a bug ("internal")."""

    code = "internal"


class InvalidInput(ExecHostError, ValueError):
    """The caller's input is wrong (a bad parameter, pattern, id or frame field); the message says how."""

    code = "bad_params"


class NotFound(ExecHostError, KeyError):
    """Something the caller named (a session, an approval) does not exist; reported like bad input."""

    code = "bad_params"

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""
