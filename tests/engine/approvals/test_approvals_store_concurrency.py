"""Two processes editing exec-approvals.json at once: the lock means no entry is ever lost."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore

N = 200

WRITER = """
import os, sys, time
from pathlib import Path
from engine.approvals.store import ApprovalsStore
tag, go = sys.argv[1], Path(sys.argv[2])
store = ApprovalsStore()
while not go.exists():  # start both writers together
    time.sleep(0.001)
for i in range({n}):
    store.add_allowlist("main", f"/opt/{{tag}}/bin/tool{{i}}")
    if i % 50 == 0:
        store.record_use("main", store.load().agents["main"].allowlist[0].id, f"{{tag}} {{i}}", None)
"""


@pytest.mark.slow
def test_two_processes_adding_200_entries_each_lose_nothing(state_dir: Path, repo_root: Path) -> None:
    go = state_dir.parent / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER.format(n=N), tag, str(go)],
            cwd=repo_root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    time.sleep(0.2)  # let both import; they wait for the go file either way
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    store = ApprovalsStore()
    raw = json.loads(store.path.read_text())  # valid JSON
    patterns = [e["pattern"] for e in raw["agents"]["main"]["allowlist"]]
    expected = {f"/opt/{tag}/bin/tool{i}" for tag in ("a", "b") for i in range(N)}
    assert set(patterns) == expected and len(patterns) == 2 * N
    ids = [e["id"] for e in raw["agents"]["main"]["allowlist"]]
    assert len(set(ids)) == 2 * N
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in state_dir.iterdir()) == ["exec-approvals.json", "exec-approvals.json.lock"]
