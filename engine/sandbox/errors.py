"""The sandbox layer's one error: a sandbox could not be provided, said to the agent as is."""

from __future__ import annotations

from engine.errors import ExecHostError


class SandboxError(ExecHostError):
    """A sandbox could not be provided; the message is shown to the agent as is."""

    code = "tool_error"
