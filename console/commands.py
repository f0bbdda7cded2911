"""Command palette provider: typed `/exec …`, `/elevated …` and `/approve <id> <decision>` run as written."""

from __future__ import annotations

from functools import partial
from typing import cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from console.apphost import DirectiveHost

EXAMPLES = [
    ("/exec host=gateway security=allowlist ask=on-miss", "session overrides for the selected agent/session"),
    ("/exec reset", "clear this session's /exec overrides"),
    ("/elevated on", "host=gateway, security=full (approvals still asked)"),
    ("/elevated off", "back to the configured policy"),
    ("/approve <id> allow-once", "resolve an approval by id or prefix: allow-once | allow-always | deny"),
]


def is_directive(text: str) -> bool:
    head = text.strip().lstrip("/").split(" ", 1)[0].lower()
    return head in ("exec", "elevated", "approve")


class DirectiveCommands(Provider):
    """Anything starting with a directive word is offered verbatim as the top hit."""

    @property
    def console_app(self) -> DirectiveHost:
        return cast(DirectiveHost, self.app)

    async def discover(self) -> Hits:
        for text, help_text in EXAMPLES:
            yield DiscoveryHit(text, partial(self.console_app.palette_example, text), help=help_text)

    async def search(self, query: str) -> Hits:
        if is_directive(query):
            yield Hit(
                1.0,
                f"run: {query.strip()}",
                partial(self.console_app.run_directive, query.strip()),
                help="exechost directive",
            )
            return
        matcher = self.matcher(query)
        for text, help_text in EXAMPLES:
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(text),
                    partial(self.console_app.palette_example, text),
                    help=help_text,
                )
