"""What the console's parts ask of the app (the palette's directives): a protocol of its own, so the
command palette provider reaches the app without importing it and the app imports the provider."""

from __future__ import annotations

from typing import Any, Protocol


class DirectiveHost(Protocol):
    """The app as the command palette sees it: examples and typed directives run there."""

    def palette_example(self, text: str) -> None: ...

    def run_directive(self, text: str) -> Any: ...
