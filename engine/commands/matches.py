"""The shapes an allowlist match is told in (an entry, a segment's match, a command's result): their own
module, so the durable approvals and the rendering of what runs read them without importing the matcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["AllowlistEntry", "AllowlistResult", "SegmentMatch"]


@dataclass(frozen=True)
class AllowlistEntry:
    pattern: str
    arg_pattern: str | None = None
    id: str | None = None
    source: str | None = None  # "allow-always" when an approval decision wrote it (reference §3.3)


# SegmentMatch and AllowlistResult are named tuples: immutable, and built in a fraction of a frozen
# dataclass's time (one of each per segment and decision; issue 19).
class SegmentMatch(NamedTuple):
    argv: tuple[str, ...]
    resolved_path: str | None
    satisfied_by: str | None  # "allowlist" | "safeBins" | None (miss)
    matched_pattern: str | None
    entry_id: str | None
    reason: str | None  # reason for a miss
    wrapper_paths: tuple[str, ...] = ()  # real paths of the transparent wrappers, in order
    inner: AllowlistResult | None = None  # `sh -c` payload's own result
    # The path as named, before the last symlink hop (directories resolved): `/usr/bin/xzcat`, whose real
    # path is `/usr/bin/xz`. Patterns match this, and it is what a multi-call binary must see as argv[0].
    named_path: str | None = None


class AllowlistResult(NamedTuple):
    satisfied: bool
    segments: tuple[SegmentMatch, ...]
