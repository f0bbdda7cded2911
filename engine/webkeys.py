"""One-use keys with a short life: tickets in a URL the operator opens (the web console, the browser door)
secret each ticket is traded for (held by the page's script, proved by its one websocket).

A URL a browser opened stays in the profile (History, Sessions, the cache), in the operator's home, which
host runs can read; so the URL's key must be worth nothing once used. Each key here is good for one use,
within `ttl` seconds of its making, and is kept only as its SHA-256 (a lookup by digest: no key is
compared byte by byte against what a prober sends).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

TICKET_TTL_S = 60.0  # from printing the URL to opening it
SECRET_TTL_S = 60.0  # from the page's trade to its websocket


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode(errors="surrogateescape")).digest()


class OneUseKeys:
    """Keys made here, each redeemable once before it expires."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._live: dict[bytes, float] = {}  # digest -> expiry

    def make(self) -> str:
        key = secrets.token_urlsafe(24)
        self._prune()
        self._live[_digest(key)] = self._clock() + self.ttl
        return key

    def valid(self, given: str) -> bool:
        """Made here, not redeemed, not expired (uses nothing)."""
        self._prune()
        return _digest(given) in self._live

    def redeem(self, given: str) -> bool:
        """True exactly once per key made, and only before it expires."""
        self._prune()
        return self._live.pop(_digest(given), None) is not None

    def __len__(self) -> int:
        self._prune()
        return len(self._live)

    def _prune(self) -> None:
        now = self._clock()
        for digest in [d for d, expiry in self._live.items() if expiry <= now]:
            del self._live[digest]
