"""The approvals inbox model: gateway and socket asks in one list, oldest first, identical ones coalesced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.approvals.decisions import DECISIONS

# Fields that make two pending requests "identical" for the operator (DESIGN §7: coalesce).
_IDENTITY = ("command", "cwd", "host", "nodeId", "agentId", "security", "ask", "resolvedPath")


def clock_ms() -> int:
    """Wall clock in ms; the one place every countdown and runtime reads (snapshot tests pin it)."""
    return int(time.time() * 1000)


def fingerprint(source: str, view: dict[str, Any]) -> tuple[Any, ...]:
    return (source, *(view.get(k) for k in _IDENTITY))


@dataclass
class InboxItem:
    """One row of the inbox: one or more identical pending approvals resolved together."""

    key: str
    source: str  # "gateway" (control socket) | "socket" (exec-approvals.sock)
    view: dict[str, Any]
    ids: list[str] = field(default_factory=list)
    futures: list[asyncio.Future[str]] = field(default_factory=list)
    received_at: float = field(default_factory=time.monotonic)

    @property
    def count(self) -> int:
        return max(len(self.ids), int(self.view.get("count") or 1))

    @property
    def created_ms(self) -> int:
        return int(self.view.get("createdAtMs") or 0)

    @property
    def allowed(self) -> tuple[str, ...]:
        allowed = self.view.get("allowedDecisions")
        if isinstance(allowed, list) and allowed:
            return tuple(d for d in DECISIONS if d in allowed)
        if self.view.get("ask") == "always":
            return ("allow-once", "deny")
        return DECISIONS

    def seconds_left(self, at_ms: int | None = None) -> float | None:
        expires = self.view.get("expiresAtMs")
        if not isinstance(expires, int | float):
            return None
        return max(0.0, (expires - (clock_ms() if at_ms is None else at_ms)) / 1000)


class Inbox:
    """Pending asks keyed by approval id; a resolve by any id removes the whole coalesced row."""

    def __init__(self) -> None:
        self._items: dict[str, InboxItem] = {}
        self._by_id: dict[str, str] = {}

    def __len__(self) -> int:
        return sum(item.count for item in self._items.values())

    def rows(self) -> list[InboxItem]:
        """Oldest first (creation time, then arrival)."""
        return sorted(self._items.values(), key=lambda i: (i.created_ms or 0, i.received_at))

    def get(self, key: str) -> InboxItem | None:
        return self._items.get(key)

    def find(self, approval_id: str) -> InboxItem | None:
        key = self._by_id.get(approval_id)
        return self._items.get(key) if key else None

    def add(
        self, source: str, approval_id: str, view: dict[str, Any], future: asyncio.Future[str] | None = None
    ) -> tuple[InboxItem, bool]:
        """Add one pending approval; returns (row, is_new_row)."""
        if approval_id in self._by_id:
            item = self._items[self._by_id[approval_id]]
            item.view = {**item.view, **view}
            return item, False
        fp = fingerprint(source, view)
        for item in self._items.values():
            if fingerprint(item.source, item.view) == fp:
                item.ids.append(approval_id)
                if future is not None:
                    item.futures.append(future)
                self._by_id[approval_id] = item.key
                return item, False
        item = InboxItem(key=approval_id, source=source, view=dict(view), ids=[approval_id])
        if future is not None:
            item.futures.append(future)
        self._items[item.key] = item
        self._by_id[approval_id] = item.key
        return item, True

    def discard(self, approval_id: str) -> InboxItem | None:
        """One approval resolved elsewhere (or its socket peer left): drop it; the row goes when empty."""
        key = self._by_id.pop(approval_id, None)
        item = self._items.get(key) if key else None
        if item is None:
            return None
        if approval_id in item.ids:
            idx = item.ids.index(approval_id)
            item.ids.pop(idx)
            if item.source == "socket" and idx < len(item.futures):
                item.futures.pop(idx)
        if not item.ids:
            del self._items[item.key]
        return item

    def pop(self, key: str) -> InboxItem | None:
        item = self._items.pop(key, None)
        if item is not None:
            for approval_id in item.ids:
                self._by_id.pop(approval_id, None)
        return item

    def replace_gateway(self, views: Iterable[dict[str, Any]]) -> None:
        """Resync with `approvals.pending` after (re)connecting: gateway rows become exactly these."""
        for item in [i for i in self._items.values() if i.source == "gateway"]:
            self.pop(item.key)
        for view in views:
            if isinstance(view.get("id"), str):
                self.add("gateway", view["id"], view)
