"""Property tests are deterministic unless a local run asks to explore (issue 30 item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# A property with an explicit @settings, as most of ours have: it must still inherit the profile.
seen: list[int] = []


@settings(max_examples=25)
@given(st.integers())
def _record(value: int) -> None:
    seen.append(value)


def test_property_tests_are_derandomized_by_default() -> None:
    if os.environ.get("EXECHOST_HYPOTHESIS_RANDOM") == "1" and "CI" not in os.environ:
        pytest.skip("a local exploring run (EXECHOST_HYPOTHESIS_RANDOM=1)")
    assert settings.default is not None and settings.default.derandomize
    assert settings.default.database is None  # no replay of another run's failures either
    runs = []
    for _ in range(2):
        seen.clear()
        _record()
        runs.append(list(seen))
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def _derandomized_under(**extra: str) -> bool:
    """Whether our conftest selects derandomised examples in a fresh interpreter with this environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "EXECHOST_HYPOTHESIS_RANDOM")} | extra
    code = "import tests.conftest\nfrom hypothesis import settings\nprint(settings.default.derandomize)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    return out.stdout.split()[-1] == "True"


def test_random_only_when_a_local_run_asks() -> None:
    assert _derandomized_under()  # the README command, with or without CI set
    assert _derandomized_under(CI="true")
    assert not _derandomized_under(EXECHOST_HYPOTHESIS_RANDOM="1")
    assert _derandomized_under(EXECHOST_HYPOTHESIS_RANDOM="1", CI="1")  # CI wins
