"""What the web console's one-use keys cost per request (console.webkeys: a SHA-256 of what the request
shows and a lookup among the live keys, expired ones pruned first), against the check they replace in the
same run: one constant-time comparison with a fixed token. Fresh round 10 a: the printed URL is a ticket
spent by its page's trade, so the URL the browser keeps opens nothing.

Usage: .venv/bin/python bench/bench_webkeys.py [--repeats R]
"""

from __future__ import annotations

import argparse
import hmac
import secrets
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import ratio, record  # noqa: E402
from console.webkeys import OneUseKeys  # noqa: E402


def _per_call(fn: Any, n: int) -> float:
    """Seconds per call, the best of 5 batches of n."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    token = secrets.token_urlsafe(24)
    shown = token[:-1] + ("A" if token[-1] != "A" else "B")

    def fixed_token() -> None:  # the check before: one token, compared in constant time
        hmac.compare_digest(shown.encode(), token.encode())

    for r in range(args.repeats):
        baseline = _per_call(fixed_token, 20_000)
        for live in (1, 64):
            keys = OneUseKeys(60)
            made = [keys.make() for _ in range(live)]
            check = _per_call(lambda keys=keys, key=made[-1]: keys.valid(key), 20_000)
            record(
                f"web console key check (a live key, {live} live), run {r + 1}",
                f"{check * 1e6:.2f} µs",
                f"{baseline * 1e6:.2f} µs fixed-token compare",
                ratio(check, baseline),
            )

        def trade() -> None:  # the page's trade and its websocket: a ticket made, spent, a secret made, spent
            tickets, secret_keys = OneUseKeys(60), OneUseKeys(60)
            ticket = tickets.make()
            assert tickets.valid(ticket) and tickets.redeem(ticket)
            secret = secret_keys.make()
            assert secret_keys.valid(secret) and secret_keys.redeem(secret)

        whole = _per_call(trade, 5_000)
        record(
            f"web console tab opened: ticket and secret made, checked, spent, run {r + 1}",
            f"{whole * 1e6:.2f} µs",
            f"{baseline * 1e6:.2f} µs fixed-token compare",
            ratio(whole, baseline),
        )


if __name__ == "__main__":
    main()
