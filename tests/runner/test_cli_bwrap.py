"""Issue 28's done-when: `exechost exec` with backend = "bwrap" works where no Docker engine answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.sandbox import bwrap, landlock
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import cli, write_config

pytestmark = [pytest.mark.bwrap, needs_bwrap]

CONFIG = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
)


def test_exec_in_a_bwrap_sandbox_with_no_docker_engine(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # the daemon inherits it
    write_config(state_dir, CONFIG)
    try:
        ok = cli(
            state_dir, "exec", "--json", "--", "echo hi; cat /proc/self/status | grep NoNewPrivs; hostname"
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        got = json.loads(ok.stdout)
        assert got["text"].splitlines()[:3] == ["hi", "NoNewPrivs:\t1", "sandbox"], got
        assert got["details"]["ranOn"].startswith("sandbox"), got["details"]
        listed = cli(state_dir, "sandbox", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = json.loads(listed.stdout)["containers"]
        assert row["backend"] == "bwrap" and row["running"]
        explained = cli(state_dir, "sandbox", "explain")
        assert explained.returncode == 0 and "backend: bwrap" in explained.stdout
        if landlock.status(True, build=False).active:
            assert "landlock: on (kernel ABI" in explained.stdout and "execute /usr" in explained.stdout
    finally:
        cli(state_dir, "gateway", "stop")
        bwrap.remove_all()
