"""make's argv read by make's grammar, a make handed its vetted makefiles as sealed copies, and a git
status or diff told at the spawn never to enter a submodule."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.makefiles import parse_make, reads
from engine.commands.pinned import view_for
from engine.commands.rendering import pinned_command
from engine.commands.treecode import tree_vet
from engine.commands.treesafe import is_tree_safe
from engine.commands.verified import VerifiedRun


@pytest.mark.parametrize(
    ("argv", "dirs", "files"),
    [
        (["make"], [], []),
        (["make", "-f", "a.mk", "t"], [], [(2, "", "a.mk")]),
        (["make", "-fa.mk"], [], [(1, "-f", "a.mk")]),
        (["make", "-kfa.mk"], [], [(1, "-kf", "a.mk")]),
        (["make", "-kf", "a.mk"], [], [(2, "", "a.mk")]),
        (["make", "--file=a.mk"], [], [(1, "--file=", "a.mk")]),
        (["make", "--makef=a.mk"], [], [(1, "--makef=", "a.mk")]),
        (["make", "--fil", "a.mk"], [], [(2, "", "a.mk")]),
        (["make", "t", "-C", "x", "-Cy"], ["x", "y"], []),
        (["make", "--dir=x"], ["x"], []),
        (["make", "-j4", "-sf", "a.mk"], [], [(3, "", "a.mk")]),
        (["make", "-j", "4", "t"], [], []),
        (["make", "--", "-f", "a.mk"], [], []),  # after `--`: targets
        (["make", "V=1", "CFLAGS=-O2 -g", "x:=1", "y ?= 2", "-f", "a.mk"], [], [(6, "", "a.mk")]),
    ],
)
def test_make_options_as_make_reads_them(
    argv: list[str], dirs: list[str], files: list[tuple[int, str, str]]
) -> None:
    args = parse_make(argv)
    assert args.problem is None
    assert (args.dirs, args.files) == (dirs, files)


@pytest.mark.parametrize(
    "argv",
    [
        ["make", "--m=x"],
        ["make", "--bogus"],
        ["make", "-Z"],
        ["make", "t", "MAKEFILES=x.mk"],
        ["make", "--help=x"],
        ["make", "-E", "x:=1"],  # --eval: make code in the argv
        ["make", "-sEall:;@echo x"],
        ["make", "--ev=all:;@echo x"],
        ["make", "x:=$(shell touch p)"],  # expanded as make reads it
        ["make", "x!=touch p"],
        ["make", "x=$(shell touch p)"],  # expanded wherever the makefile uses it
        ["make", "SHELL=./evil"],
        ["make", "GNUMAKEFLAGS=--eval=x"],
        ["make", "MAKEFLAGS=-f evil.mk"],
        ["make", "override x=1"],
        ["make", "a/b=1"],
    ],
)
def test_what_make_reads_that_is_not_modelled_is_a_problem(argv: list[str]) -> None:
    assert parse_make(argv).problem is not None


def test_reads_follow_the_last_directory_and_the_default_order(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "makefile").write_text("x:\n")
    (tmp_path / "a" / "b" / "Makefile").write_text("x:\n")
    (read,) = reads(parse_make(["make", "-C", "a", "-C", "b"]), str(tmp_path))
    assert (read.name, read.present, read.slot) == ("makefile", True, None)
    (read,) = reads(parse_make(["make", "-C", "a", "-f", "x.mk"]), str(tmp_path))
    assert read.path == os.path.join(str(tmp_path), "a", "x.mk") and not read.present


def _decide(command: str, cwd: str) -> tuple[VerifiedRun, object]:
    analysis = analyze_command(command)
    entries = [AllowlistEntry(f"/usr/bin/{name}") for name in ("make", "timeout", "echo", "git")]
    result = evaluate_allowlist(analysis, entries, cwd=cwd, env={"PATH": "/usr/bin:/bin"})
    vet = tree_vet(analysis, result, cwd, [])
    run = VerifiedRun(pinned_command(analysis, result) or command)
    return run, vet


@pytest.mark.parametrize(
    "command", ["make -s test", "timeout 60 make -s test", "echo a; make -s test && echo b"]
)
def test_a_make_runs_its_sealed_copy_wherever_it_sits_in_the_command(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "Makefile").write_text("test:\n\t@echo approved $(notdir $(MAKEFILE_LIST))\n")
    run, vet = _decide(command, str(work))
    view = view_for(vet, run)  # type: ignore[arg-type]
    try:
        assert "/proc/self/fd/" in run.command, run.command
        (work / "Makefile").write_text("test:\n\t@echo rewritten\n")  # after the re-vet: not what runs
        argv = view.wrap(["/bin/sh", "-c", run.command])
        out = subprocess.run(argv, cwd=work, pass_fds=view.fds, capture_output=True, text=True, check=True)
    finally:
        view.close()
    assert "approved Makefile" in out.stdout and "rewritten" not in out.stdout, out


def test_no_makefile_is_read_as_none(state_dir: Path, tmp_path: Path) -> None:
    run, vet = _decide("make test", str(tmp_path))
    view = view_for(vet, run)  # type: ignore[arg-type]
    view.close()
    assert "'-f' '/dev/null'" in run.command, run.command


def test_tree_safe_refuses_the_options_that_run_programs() -> None:
    assert is_tree_safe(["find", ".", "-name", "x"], "/usr/bin/find")
    assert not is_tree_safe(["find", ".", "-exec", "mypy", "{}", ";"], "/usr/bin/find")
    assert not is_tree_safe(["sort", "--compress=./x"], "/usr/bin/sort")
    assert not is_tree_safe(["rg", "--pre", "./x", "y"], "/usr/bin/rg")
    assert is_tree_safe(["base64", "x"], "/usr/bin/base64")
    assert not is_tree_safe(["python3", "x.py"], "/usr/bin/python3.11")
    assert is_tree_safe(["mytool"], "/opt/bin/mytool", extra=("mytool",))


@pytest.mark.parametrize("command", ["git status --short", "git -C . diff --stat", "echo x && git status"])
def test_git_status_and_diff_are_told_not_to_enter_submodules(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    """A submodule's `ignore = none` in .gitmodules (read after the spawn) beats the forced config default;
    the command-line option beats both (hostenv.GIT_FORCED_CONFIG, pinned.IGNORE_SUBMODULES)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    run, vet = _decide(command, str(tmp_path))
    view = view_for(vet, run)  # type: ignore[arg-type]
    view.close()
    assert "'--ignore-submodules=dirty'" in run.command, run.command


@pytest.mark.parametrize(
    ("argv", "asks"),
    [
        (["git", "status", "--ignore-submodules=none"], True),
        (["git", "fetch", "--recurse-submodules"], True),
        (["git", "fetch", "--recurse-submodules=on-demand"], True),
        (["git", "diff", "--submodule=diff"], True),
        (["git", "fetch", "--recurse-submodules=no"], False),
        (["git", "status", "--ignore-submodules=all"], False),
        (["git", "diff", "--submodule=short"], False),
    ],
)
def test_an_argv_that_enters_submodules_asks(tmp_path: Path, argv: list[str], asks: bool) -> None:
    from engine.commands import gitvet

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    found = gitvet.vet("/usr/bin/git", argv, str(tmp_path))
    assert bool(found) == asks, found


def test_raw_text_that_runs_as_it_is_is_left_alone(state_dir: Path, tmp_path: Path) -> None:
    """Under security=full the raw text runs, not the rendering: nothing to put words into, and no refusal
    (a racer is moot where every command is allowed)."""
    (tmp_path / "Makefile").write_text("test:\n")
    _, vet = _decide("make test", str(tmp_path))
    run = VerifiedRun("make test")
    view = view_for(vet, run)  # type: ignore[arg-type]
    view.close()
    assert run.command == "make test"


def test_rg_options_are_read_as_an_allowlist() -> None:
    from engine.commands.treesafe import is_tree_safe

    rg = "/usr/bin/rg"
    for ok in (
        ["rg", "-n", "TODO"],
        ["rg", "-inw", "-e", "-x", "src"],  # -e's value starts with a dash: a known flag either way
        ["rg", "--type=py", "--max-count", "3", "-uu", "foo", "-"],
        ["rg", "-A3", "-C", "2", "--glob", "!*.lock", "--json", "x"],
        ["rg", "--", "--no-such-option"],  # after `--`: a pattern
    ):
        assert is_tree_safe(ok, rg), ok
    for asks in (
        ["rg", "--pre", "./x", "y"],
        ["rg", "--hostname-bin", "./x", "y"],
        ["rg", "--hostname", "y"],  # no abbreviations
        ["rg", "-nz", "y"],
        ["rg", "-e", "--pre", "./x", "y"],  # a value that looks like an option is checked as one
        ["rg", "--search-zip", "y"],
    ):
        assert not is_tree_safe(asks, rg), asks
