"""Decision-history id index (round 6 k): what `approvals.status` of an id nobody decided costs with the
index against the whole read it used to be (the raw baseline), what the index adds to each append, what
building it at start costs, and a restore's credential check per ask.
Usage: .venv/bin/python bench/bench_history_index.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine import principals  # noqa: E402
from engine.approvals.history import DecisionLog, encode_entry  # noqa: E402


def _line(command_bytes: int) -> bytes:
    entry = {"kind": "decision", "v": 1, "id": str(uuid.uuid4()), "status": "deny", "agentId": "main"}
    return encode_entry(entry | {"command": "x" * command_bytes})


def per_call_us(call: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bhi", dir="/tmp"))
    try:
        log = DecisionLog(root / "h")
        for _ in range(5):
            log.write_lines([_line(60_000) for _ in range(8)])  # 2.4 MB, as the attack's history
        size = sum(p.stat().st_size for p in log.files())
        print(f"history: {size / 1e6:.1f} MB, 40 decisions")
        for run in range(3):
            scan = per_call_us(lambda: [e for e in log.entries() if e.id.startswith("zz")], 5)  # the old find
            build = per_call_us(log.index, 5)
            hit = per_call_us(lambda: log.find("zz0001"), 2000)
            bare = DecisionLog(root / f"bare{run}")  # no index built (the egress log, a log never looked up)
            plain = per_call_us(lambda b=bare: b.write_lines([_line(200)]), 200)  # type: ignore[misc]
            indexed = per_call_us(lambda: log.write_lines([_line(200)]), 200)
            print(
                f"run {run + 1}: unknown id: whole read {scan / 1000:.1f} ms (baseline), index {hit:.2f} us; "
                f"index build {build / 1000:.1f} ms; "
                f"append (fsync) {plain:.0f} us bare, {indexed:.0f} us indexed"
            )
        state = root / "state"
        token = principals.mint(state, "ops")
        for n in range(20):
            principals.mint(state, f"a{n}")
        cred = principals.credential_id(token)
        for run in range(3):
            check = per_call_us(lambda: principals.still_holds(state, "ops", cred), 200)
            print(f"run {run + 1}: restore credential check (21 credentials): {check:.0f} us per ask")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
