"""Fresh round 9 (w): emulating another program (class 5) and self-reference (class 8)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.attacks.harness import attempt, refused

GIT = "/usr/bin/git"


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _pushable(root: Path) -> tuple[Path, Path, Path]:
    """A work repository with one commit, and a bare repository beside it whose pre-receive hook (the
    agent's code) leaves a mark when receive-pack runs there."""
    work, dest, mark = root / "w", root / "dest", root / "PWNED"
    _git("init", "-q", str(work))
    _git(
        "-C",
        str(work),
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@b",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    _git("init", "-q", "--bare", str(dest))
    hook = dest / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {mark}\n")
    hook.chmod(0o755)
    return work, dest, mark


def _percent_last(path: Path) -> str:
    """`path` with its last character percent-encoded: git url-decodes a `scheme://` URL before it
    splits it, so `file:///x/des%74` is the repository /x/dest."""
    text = str(path)
    return text[:-1] + "%" + format(ord(text[-1]), "02x")


async def test_plain_push_to_a_local_repository_asks(state_dir: Path, tmp_path: Path) -> None:
    """Regression: the local destination by its path (and by a plain file:// URL) asks, once only."""
    work, dest, mark = _pushable(tmp_path)
    for url in (str(dest), f"file://{dest}"):
        details = await attempt(
            state_dir, f"git push {url} HEAD:refs/heads/x", allow=[(GIT, None)], workdir=str(work)
        )
        assert refused(details), details
        assert "receive-pack" in (details.get("warningText") or "")
    assert not mark.exists()


@pytest.mark.xfail(
    strict=True,
    reason="open: gitargv.local_destinations reads a file:// URL undecoded; git url-decodes it "
    "(file:///x/des%74 is /x/dest), so an allowlisted `git push` runs the destination's hooks unasked",
)
async def test_class5_push_to_a_percent_encoded_file_url_runs_the_destinations_hook(
    state_dir: Path, tmp_path: Path
) -> None:
    work, dest, mark = _pushable(tmp_path)
    url = "file://" + _percent_last(dest)
    details = await attempt(
        state_dir, f"git push {url} HEAD:refs/heads/x", allow=[(GIT, None)], workdir=str(work)
    )
    assert refused(details) and not mark.exists(), (details["status"], details["_text"])
