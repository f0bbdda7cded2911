"""What charging a request what it holds costs (fresh round 17 b): each request frame is decoded into its
typed request as it is read and measured (`typedreq.typed_request` + `Message.held_bytes`), against the raw
baseline in the same run: the frame decoded and typed as before (`decode_frame` + `Message.decode`), for a
typical exec, a typical poll, and the worst 1 MiB frames (a list of `{}`s the verb drops; a `keys` list it
keeps).

Usage: .venv/bin/python bench/bench_request_held.py [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import per_call_us, ratio, record  # noqa: E402
from engine.protocol.frames import Request, decode_frame  # noqa: E402
from engine.protocol.requests import REQUESTS  # noqa: E402
from runner.gateway.typedreq import typed_request  # noqa: E402


def _line(method: str, params: dict[str, Any]) -> bytes:
    frame = {"type": "req", "id": 7, "method": method, "params": params}
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


CASES: dict[str, tuple[bytes, int]] = {
    "exec (220 B)": (
        _line(
            "exec",
            {
                "command": "git status --short && ls -la src",
                "workdir": "/home/me/project",
                "env": {"LANG": "C.UTF-8"},
                "timeout": 30,
                "sessionKey": "agent:main:main",
            },
        ),
        2000,
    ),
    "poll (110 B)": (_line("process", {"action": "poll", "sessionId": "calm-gulf", "timeout": 120000}), 2000),
    "poll + 1 MiB of {} (dropped)": (
        _line("process", {"action": "poll", "sessionId": "s", "pad": [{} for _ in range(340_000)]}),
        3,
    ),
    "poll + 1 MiB keys (kept)": (
        _line("process", {"action": "poll", "sessionId": "s", "keys": ["ab"] * 200_000}),
        3,
    ),
}


def _before(line: bytes) -> None:
    frame = decode_frame(line)
    assert isinstance(frame, Request)
    REQUESTS[frame.method].decode(frame.params)


def _now(line: bytes) -> None:
    typed = typed_request(line)
    assert isinstance(typed, tuple)
    max(len(line), typed[2].held_bytes())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name, (line, calls) in CASES.items():
        base = per_call_us(lambda line=line: _before(line), calls, args.repeats)
        now = per_call_us(lambda line=line: _now(line), calls, args.repeats)
        record(
            f"request typed and measured as read: {name}", f"{now:.1f} µs", f"{base:.1f} µs", ratio(now, base)
        )


if __name__ == "__main__":
    main()
