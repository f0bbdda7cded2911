"""The per-decision context cache (issue 19): change each thing it holds and the next decision sees it."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import statefs
from engine.commands import allowlist
from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command

ENV = {"PATH": "/usr/bin:/bin"}


def decide(command: str, entries: list[AllowlistEntry], cwd: str, **kw: object) -> allowlist.AllowlistResult:
    return evaluate_allowlist(analyze_command(command), entries, cwd=cwd, env=ENV, **kw)  # type: ignore[arg-type]


def test_home_from_the_passwd_file_is_read_again_when_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/bin/*` means the account's home: a passwd change that moves the home moves what the entry allows."""
    monkeypatch.delenv("OPENCLAW_HOME", raising=False)
    passwd = tmp_path / "passwd"
    passwd.write_text("v1\n")
    monkeypatch.setattr(statefs, "PASSWD_FILE", str(passwd))
    homes = {"now": str(tmp_path / "a")}
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: SimpleNamespace(pw_dir=homes["now"]))
    for home in ("a", "b"):
        (tmp_path / home / "bin").mkdir(parents=True)
        tool = tmp_path / home / "bin" / "tool"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    entries = [AllowlistEntry("~/bin/*")]
    run_a = str(tmp_path / "a" / "bin" / "tool")
    assert decide(run_a, entries, str(tmp_path)).satisfied
    assert decide(run_a, entries, str(tmp_path)).satisfied  # from the cached context
    homes["now"] = str(tmp_path / "b")
    passwd.write_text("v2\n")  # in place: a write to the watched file
    assert not decide(run_a, entries, str(tmp_path)).satisfied
    assert decide(str(tmp_path / "b" / "bin" / "tool"), entries, str(tmp_path)).satisfied
    homes["now"] = str(tmp_path / "a")
    replacement = tmp_path / "passwd.new"
    replacement.write_text("v3\n")
    os.replace(replacement, passwd)  # renamed over it, as useradd and vipw do
    assert decide(run_a, entries, str(tmp_path)).satisfied


def test_the_state_dir_is_resolved_again_when_its_link_is_retargeted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The protected root is kept resolved: point the state dir's link elsewhere and the operands it now
    covers are refused at once, the ones it left are allowed."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "state").symlink_to(tmp_path / "one")
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "state"))
    entries = [AllowlistEntry("/usr/bin/cat")]
    cwd = str(tmp_path)
    assert not decide("cat one/token", entries, cwd).satisfied
    assert decide("cat two/token", entries, cwd).satisfied
    tmp = tmp_path / "state.new"
    tmp.symlink_to(tmp_path / "two")
    os.replace(tmp, tmp_path / "state")
    assert decide("cat one/token", entries, cwd).satisfied
    assert not decide("cat two/token", entries, cwd).satisfied
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "one"))  # the env is part of the key
    assert not decide("cat one/token", entries, cwd).satisfied


def test_trusted_dirs_are_resolved_again_when_their_link_is_retargeted(tmp_path: Path) -> None:
    """A safe bin must resolve inside a trusted dir, resolved: retarget a trusted dir's link and it stops
    (or starts) covering the bins there."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "trusted").symlink_to("/usr/bin")
    trusted = (str(tmp_path / "trusted"),)
    cwd = str(tmp_path)
    assert decide("head -n 1", [], cwd, trusted_dirs=trusted).satisfied
    tmp = tmp_path / "trusted.new"
    tmp.symlink_to(tmp_path / "empty")
    os.replace(tmp, tmp_path / "trusted")
    result = decide("head -n 1", [], cwd, trusted_dirs=trusted)
    assert not result.satisfied
    assert "outside the trusted dirs" in (result.segments[0].reason or "")


def test_entries_are_part_of_the_key(tmp_path: Path) -> None:
    cwd = str(tmp_path)
    assert decide("ls", [AllowlistEntry("/usr/bin/ls")], cwd).satisfied
    assert not decide("ls", [AllowlistEntry("/usr/bin/cat")], cwd).satisfied
    assert not decide("ls", [AllowlistEntry("/usr/bin/ls", arg_pattern="-l")], cwd).satisfied


def test_the_cwd_is_resolved_again_when_its_link_is_retargeted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context keeps the cwd resolved: a cwd link retargeted into the state dir is refused at once."""
    (tmp_path / "work").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "here").symlink_to(tmp_path / "work")
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "state"))
    entries = [AllowlistEntry("/usr/bin/cat")]
    cwd = str(tmp_path / "here")
    assert decide("cat notes", entries, cwd).satisfied
    assert decide("cat notes", entries, cwd).satisfied  # from the cached context
    tmp = tmp_path / "here.new"
    tmp.symlink_to(tmp_path / "state")
    os.replace(tmp, tmp_path / "here")
    result = decide("cat notes", entries, cwd)
    assert not result.satisfied
    assert "inside exechost's state dir" in (result.segments[0].reason or "")


def test_executable_facts_follow_a_program_planted_earlier_on_path(tmp_path: Path) -> None:
    """What the context memoises per argv[0] (resolution, path matches, safe-bin facts) is dropped when a
    PATH directory changes: a `head` planted ahead of /usr/bin is no longer a trusted safe bin."""
    (tmp_path / "bin").mkdir()
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    cwd = str(tmp_path)

    def run(command: str) -> allowlist.AllowlistResult:
        return evaluate_allowlist(analyze_command(command), [AllowlistEntry("/usr/bin/*")], cwd=cwd, env=env)

    assert run("head -n 1").segments[0].satisfied_by == "allowlist"
    assert run("head -n 2").segments[0].satisfied_by == "allowlist"  # memoised facts
    planted = tmp_path / "bin" / "head"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    result = run("head -n 3")
    assert not result.satisfied
    assert result.segments[0].resolved_path == str(planted)
    planted.unlink()
    assert run("head -n 4").satisfied


def test_executable_facts_are_not_kept_for_a_lookup_no_watch_covers(tmp_path: Path) -> None:
    """A PATH entry that does not exist yet cannot be watched (the lookup is re-validated by stat each
    time): facts resting on it are never memoised, so a directory created there later is seen."""
    later = tmp_path / "later"
    env = {"PATH": f"{later}:/usr/bin:/bin"}

    def run(command: str) -> allowlist.AllowlistResult:
        return evaluate_allowlist(analyze_command(command), [AllowlistEntry("/usr/bin/*")], cwd="/", env=env)

    assert run("head -n 1").satisfied
    assert run("head -n 2").satisfied
    later.mkdir()
    (later / "head").write_text("#!/bin/sh\n")
    (later / "head").chmod(0o755)
    assert run("head -n 3").segments[0].resolved_path == str(later / "head")


def test_sandbox_roots_follow_a_retargeted_workspace_link(tmp_path: Path) -> None:
    """sandbox_roots() answers from the watched path cache: a workspace root's link retargeted moves it."""
    from engine.commands.treecode import sandbox_roots

    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "ws").symlink_to(tmp_path / "one")
    assert sandbox_roots(str(tmp_path / "ws"))[-1] == str(tmp_path / "one")
    assert sandbox_roots(str(tmp_path / "ws"))[-1] == str(tmp_path / "one")
    tmp = tmp_path / "ws.new"
    tmp.symlink_to(tmp_path / "two")
    os.replace(tmp, tmp_path / "ws")
    assert sandbox_roots(str(tmp_path / "ws"))[-1] == str(tmp_path / "two")
