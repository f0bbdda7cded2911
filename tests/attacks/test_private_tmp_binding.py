"""A path under a private dir (the agent's own /tmp: engine.commands.hostprivate) is bound where the run's
view has it, in every spelling the binder reads (a script operand, a file fed to a shell, the words of a
text that could not be parsed): the ask's digest is the agent's copy's, and a rewrite of that copy after
the ask never runs (engine.commands.viewpaths.reader, the one translation)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from engine.commands import hostprivate
from tests.attacks.test_fresh_round10_e import approved_run, workdir

needs_bwrap = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap")

_SPELLINGS = ["sh {T}/s.sh", "cat {T}/s.sh | sh", "(sh {T}/s.sh)", "sh < {T}/s.sh", "cd {T} && sh s.sh"]
APPROVED = "echo APPROVED\n"


def _agents_copy(state: Path) -> tuple[Path, Path]:
    shared = Path(os.environ["EXECHOST_HOST_PRIVATE"])  # the conftest's stand-in for the machine's /tmp
    ((source, _dest),) = hostprivate.binds(str(state), "main", (os.path.realpath(shared),))
    return shared, Path(source)


@needs_bwrap
@pytest.mark.parametrize("command", _SPELLINGS)
def test_the_agents_copy_is_bound_and_a_rewrite_after_the_ask_never_runs(
    state_dir: Path, command: str
) -> None:
    shared, copy = _agents_copy(state_dir)
    (copy / "s.sh").write_text(APPROVED)
    (shared / "s.sh").write_text("echo MACHINE\n")  # the machine's file at that name: not what runs
    work = workdir(state_dir, {})

    def rewrite() -> None:
        (copy / "s.sh").write_text("echo PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, command.format(T=shared), work, rewrite))
    rows = ask.get("contentDigests") or []
    bound = {row["sha256"] for row in rows if row["path"].endswith("/s.sh") and row["sha256"] is not None}
    assert bound == {hashlib.sha256(APPROVED.encode()).hexdigest()}, ask.get("contentDigests")
    assert "PAYLOAD" not in result["text"] and "MACHINE" not in result["text"], result["text"]


@needs_bwrap
@pytest.mark.parametrize("command", _SPELLINGS)
def test_the_agents_copy_runs_as_approved(state_dir: Path, command: str) -> None:
    """Control: unchanged after the ask, the agent's copy is what runs (never the machine's file)."""
    shared, copy = _agents_copy(state_dir)
    (copy / "s.sh").write_text(APPROVED)
    (shared / "s.sh").write_text("echo MACHINE\n")
    work = workdir(state_dir, {})
    _ask, result = asyncio.run(approved_run(state_dir, command.format(T=shared), work, lambda: None))
    assert "APPROVED" in result["text"] and "MACHINE" not in result["text"], result["text"]
