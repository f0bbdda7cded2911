"""The warnings a decision carries, capped: one ask fits the operator's pending page however much it finds."""

from __future__ import annotations

from collections.abc import Sequence

from engine.commands.allowlist import AllowlistResult
from engine.commands.boundfiles import ContentBinding

# One ask must fit the operator's pending page (issue 27 §3: one warning per git config key not known inert
# made a 780 KB .git/config a 13 MB ask). The first ones are kept whole enough to act on; the rest counted.
# Each unbounded source (the tree's findings, the content binder's notes) keeps FOUND_WARNINGS lines; every
# decision then keeps MAX_WARNINGS lines, WARNINGS_CHARS in all.
FOUND_WARNINGS = 24
MAX_WARNINGS = 64
WARNING_CHARS = 2000
WARNINGS_CHARS = 48_000


def capped_warnings(
    warnings: Sequence[str], limit: int = MAX_WARNINGS, chars: int = WARNINGS_CHARS
) -> list[str]:
    """At most `limit` lines of at most WARNING_CHARS (`chars` in all), the rest summed up in one last
    line: what every decision carries, so every path that shows it (an ask, a pending page, a decision
    record) stays small however much the tree holds."""
    kept: list[str] = []
    size = 0
    for line in warnings:
        if len(line) > WARNING_CHARS:
            line = line[: WARNING_CHARS - 1] + "…"
        if len(kept) == limit or size + len(line) > chars:
            break
        kept.append(line)
        size += len(line)
    more = len(warnings) - len(kept)
    if more:
        kept.append(f"… {more} more warning{'s' if more != 1 else ''} (not shown)")
    return kept


def content_warnings(content: ContentBinding, result: AllowlistResult) -> list[str]:
    """What the operator should know about the bound files: allowlist entries naming a file the agent can
    write, and files that could not be bound."""
    out = [f"Warning: not bound to content: {p}" for p in content.problems]
    if content.unbound:
        out.append(
            "Warning: the program comes from stdin or a search path, not a file: it cannot be bound, so "
            "allow-always is not offered."
        )
    out += content.notes
    if content.refuse:
        out.append(
            f"Warning: the text cannot be bound to the files it runs ({content.refuse}): an approval of it "
            "is refused at the run; write it without that, or name the script plainly."
        )
    if not content.proven:
        out.append(
            "Warning: allow-always is not offered, allow-once only: exechost cannot prove it bound every "
            f"code source ({'; '.join(content.unproven[:3]) or 'no proof'})."
        )
    writable = content.writable_paths
    for match in result.segments:
        if match.satisfied_by == "allowlist" and match.matched_pattern and match.resolved_path in writable:
            out.append(
                f"Warning: allowlist entry {match.matched_pattern} names {match.resolved_path}, a file the "
                "agent can write: each run executes whatever it holds when the run is decided."
            )
    return out
