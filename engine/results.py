"""The one result shape every tool verb returns: text for the agent, details for programs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.errors import ExecHostError


@dataclass
class ToolResult:
    """`{text, details}` exactly as the CLI's --json prints it and the MCP tools return it."""

    text: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return cls(text=str(data.get("text", "")), details=dict(data.get("details") or {}))


class ToolError(ExecHostError):
    """A verb refused its input; the message is the exact text the agent sees."""

    code = "tool_error"
