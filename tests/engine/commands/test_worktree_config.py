"""The view's one repository config: the vetted common config, the vetted config.worktree folded in, and
worktreeConfig turned off, so git opens no config.worktree by path."""

from __future__ import annotations

import subprocess

import pytest

from engine.commands.gitvet import git_bool
from engine.commands.pinned import folded_config


def _parsed(data: bytes) -> list[str]:
    done = subprocess.run(["git", "config", "--file", "-", "--list"], input=data, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().splitlines()


@pytest.mark.parametrize(
    ("common", "per_worktree", "keys"),
    [
        (b"[user]\n\tname = a", None, ["user.name=a"]),
        (b"[user]\n\tname = a\\", None, ["user.name=a"]),  # a continued last value ends
        (b"[user]\n\tname = a\n", b"[user]\n\tname = b\n", ["user.name=a", "user.name=b"]),
        # a key before any section in config.worktree never joins the common config's last section
        (
            b'[filter "x"]\n\tsmudge = cat',
            b"\tclean = x\n",
            ["filter.x.smudge=cat", "exechost-worktree-config.clean=x"],
        ),
    ],
)
def test_the_folded_config_is_what_git_parses(
    common: bytes, per_worktree: bytes | None, keys: list[str]
) -> None:
    assert _parsed(folded_config(common, per_worktree)) == [*keys, "extensions.worktreeconfig=false"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, True),
        ("true", True),
        ("Yes", True),
        ("on", True),
        ("1", True),
        ("0", False),
        ("false", False),
        ("", False),
    ],
)
def test_git_bool(value: str | None, expected: bool) -> None:
    assert git_bool(value) is expected
