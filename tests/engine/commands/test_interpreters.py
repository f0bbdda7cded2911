"""Which program names are interpreters or run other programs, whatever their version suffix."""

from __future__ import annotations

import pytest

from engine.commands.interpreters import is_interpreter, name_of, runs_others


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("/usr/bin/python3.11", "python"),
        ("python3.7m", "python"),
        ("python3.11-dbg", "python"),
        ("node18", "node"),
        ("perl5.36.0", "perl"),
        ("PYTHON3.EXE", "python"),
        ("rm", "rm"),
        ("pm", "pm"),
    ],
)
def test_name_of_drops_only_a_version(given: str, name: str) -> None:
    assert name_of(given) == name


@pytest.mark.parametrize("program", ["rbash", "/bin/rbash", "lksh", "python3.11-dbg", "python3.7m", "xonsh"])
def test_restricted_and_versioned_shells_are_interpreters(program: str) -> None:
    """`rbash` and `python3.11-dbg` were unknown: allow-always saved their path, which allows any code."""
    assert is_interpreter(program) and runs_others(program)


@pytest.mark.parametrize("program", ["split", "/usr/bin/split", "gsplit", "rlwrap"])
def test_programs_that_run_a_command_they_are_given_run_others(program: str) -> None:
    """`split --filter='sh -c …'` and `rlwrap CMD` run any command."""
    assert runs_others(program)


@pytest.mark.parametrize("program", ["ls", "wc", "base64", "sha256sum"])
def test_plain_tools_run_nothing(program: str) -> None:
    assert not runs_others(program)


@pytest.mark.parametrize(
    "program",
    [
        "editor",  # Debian's alternative: a vim or a nano, each with a shell escape
        "/usr/bin/vim.basic",
        "vim.tiny",
        "sensible-editor",
        "ssh-agent",  # `ssh-agent CMD` runs CMD
        "run-parts",  # runs every program in the directory it is given
        "fakeroot",
        "dbus-run-session",
        "perf",  # `perf record CMD`, `perf trace CMD`
        "x86_64-linux-gnu-gcc-12",  # `-wrapper CMD`, `-B dir`, `-fplugin=`: as gcc's own
        "aarch64-linux-gnu-g++",
        "c++",
        "clang++",
    ],
)
def test_editors_alternatives_and_command_runners_run_others(program: str) -> None:
    """These were unknown: allow-always saved their path, and that path then allowed whatever command,
    directory or escape the next call hands them."""
    assert runs_others(program)
