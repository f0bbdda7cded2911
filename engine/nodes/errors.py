"""The one error a node link raises: a node could not be reached, refused, or answered with an error."""

from __future__ import annotations

from engine.errors import ExecHostError


class NodeError(ExecHostError):
    """A node could not be reached or answered with an error; the text says what to do."""

    code = "tool_error"

    def __init__(self, message: str, error_code: str = "UNAVAILABLE") -> None:
        super().__init__(message)
        self.error_code = error_code
