"""No merge's conflict markers are ever committed: a doc or source with one says two things at once."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<" * 7 + " ", ">" * 7 + " ")


def test_no_tracked_file_holds_a_conflict_marker() -> None:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=False
    ).stdout.split(b"\0")
    found = []
    for name in filter(None, listed):
        path = ROOT / name.decode()
        if not path.is_file() or path.suffix not in (".py", ".md", ".toml", ".sh", ".c", ".tcss", ".txt"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.startswith(MARKERS):
                found.append(f"{name.decode()}:{number}")
    assert not found, found
