"""The ask record's text check (engine.ostext via ApprovalRequest.__post_init__): what it adds per ask.

Every ask (and its coalescing key, `question()`) walks its decision for lone surrogates. This times building
an ApprovalRequest with the check and with it bypassed (the raw baseline), for a typical decision and for
the largest the analysis admits, in the same run, three repeats; and one `json.dumps` of the ask's view
(what every ask already pays to be sized, journaled and shown) for scale.
Usage: .venv/bin/python bench/bench_ask_text.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.approvals.request import ApprovalRequest  # noqa: E402


def _segment(n: int) -> dict[str, Any]:
    return {
        "argv": ["grep", "-rn", f"pattern{n}", "src/"],
        "resolvedPath": "/usr/bin/grep",
        "namedPath": "/usr/bin/grep",
        "satisfiedBy": None,
        "matchedPattern": None,
        "entryId": None,
        "reason": "not on the allowlist",
    }


def _decision(segments: int) -> dict[str, Any]:
    return {
        "verdict": "ask",
        "analysisOk": True,
        "analysisReason": None,
        "segments": [_segment(n) for n in range(segments)],
        "allowAlwaysPatterns": ["/usr/bin/grep"],
        "contentDigests": [{"role": "executable", "path": "/usr/bin/grep", "sha256": "0" * 64}],
        "warnings": ["Warning: a café ☕ path — non-ASCII text"],
    }


def _time(make: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        make()
    return (time.perf_counter() - start) / n * 1e6  # µs


def main() -> None:
    check = ApprovalRequest.__post_init__
    for segments, n in ((3, 20_000), (5400, 20)):
        decision = _decision(segments)

        def make(decision: dict[str, Any] = decision) -> ApprovalRequest:
            return ApprovalRequest(
                command="grep -rn x src/ | head", cwd="/home/u/proj", decision_json=decision
            )

        view = json.dumps(make().to_json(), ensure_ascii=False)
        for run in range(3):
            ApprovalRequest.__post_init__ = lambda self: None  # type: ignore[method-assign]
            raw = _time(make, n)
            ApprovalRequest.__post_init__ = check  # type: ignore[method-assign]
            checked = _time(make, n)
            dumps = _time(lambda: json.dumps(make().to_json(), ensure_ascii=False).encode(), n)
            print(
                f"segments={segments} run={run + 1}: raw {raw:.1f} µs, checked {checked:.1f} µs "
                f"(+{checked - raw:.1f} µs, {checked / raw:.2f}x); build+view dumps {dumps:.1f} µs; "
                f"view {len(view)} chars"
            )


if __name__ == "__main__":
    main()
