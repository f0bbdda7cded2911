"""Agent-supplied strings into Rich `Text`: never parsed as markup, control characters made visible."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from engine.display import ONE_LINE, visible


def plain(value: Any, style: str = "", *, newline: str = ONE_LINE) -> Text:
    """A cell or line the agent controls: `[b]` stays text, `\\x1b[30D` shows as itself."""
    return Text(visible("" if value is None else value, newline=newline), style=style)
