"""Test isolation: every test gets its own short state dir and HOME, never the user's."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def state_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Short paths under /tmp: Unix socket paths must stay under 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="eh-", dir="/tmp"))
    state = root / "s"
    home = root / "h"
    state.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("EXECHOST_CONFIG", raising=False)
    yield state
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def venv_bin(name: str) -> str:
    """Path of a console script next to the running interpreter (the project's venv)."""
    import sys

    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
