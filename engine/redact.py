"""The secrets this process holds, and the one scrubber that takes them out of text handed to an agent.

Errors are written by libraries that do not know what is secret (Playwright quotes the URL it failed to
reach, and a browser door's URL carries its token). So the places that hold a secret register it here when
they make or read it, and every boundary where text leaves for an agent scrubs it: what is registered
can never be echoed, whichever library quoted it.
"""

from __future__ import annotations

import threading

MASK = "<redacted>"
MIN_LEN = 12  # shorter strings would mask ordinary words; every token we mint is 32+ characters

_lock = threading.Lock()
_known: dict[str, str] = {}  # secret → what stands in for it


def register(secret: str, mask: str = MASK) -> None:
    """Remember `secret` (a token, a credential) so scrub() replaces it by `mask` from now on."""
    if isinstance(secret, str) and len(secret) >= MIN_LEN:
        with _lock:
            _known[secret] = mask


def forget(secret: str) -> None:
    """A secret that is no longer valid (a renewed door token) need not be masked any more."""
    with _lock:
        _known.pop(secret, None)


def scrub(text: str, *extra: str) -> str:
    """`text` with every registered secret, and each of `extra`, replaced by its mask."""
    with _lock:
        pairs = dict(_known)
    for secret in extra:
        if isinstance(secret, str) and len(secret) >= MIN_LEN:
            pairs.setdefault(secret, MASK)
    for secret in sorted(pairs, key=len, reverse=True):  # a URL before the token inside it
        if secret in text:
            text = text.replace(secret, pairs[secret])
    return text
