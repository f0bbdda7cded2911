"""The host view every gateway-host run starts in: the state dir an empty tmpfs, the operator's trusted
configs read-only, the terminal's signals the command's, and a refusal naming the fix without bwrap."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from engine.commands import hostkeeper, hostview, pinned
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    view = pinned_view(None, host=True)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()


@needs_bwrap
def test_the_state_dir_is_empty_and_unwritable_in_the_view(state_dir: Path, tmp_path: Path) -> None:
    (state_dir / "operator.json").write_text('{"token": "secret"}')
    link = tmp_path / "l"
    link.symlink_to(state_dir / "operator.json")
    done = _run(
        f"ls -A {state_dir}; cat l /proc/self/cwd/l; grep -r secret {state_dir.parent}; "
        f"echo forged > {state_dir}/exec-approvals.json; echo end",
        tmp_path,
    )
    assert "secret" not in done.stdout + done.stderr
    assert done.stdout.strip().endswith("end")
    assert not (state_dir / "exec-approvals.json").exists()  # written into the view's tmpfs, gone with it


@needs_bwrap
def test_trusted_configs_are_read_only_present_or_not(state_dir: Path, tmp_path: Path) -> None:
    home = Path.home()  # the fixture's
    (home / ".gitconfig").write_text("[user]\n\tname = op\n")
    done = _run(
        f"echo '[alias]' >> {home}/.gitconfig; git config --global alias.x '!touch pwned'; "
        f"mkdir -p {home}/.config/git; echo x > {home}/.config/git/config; cat {home}/.gitconfig",
        tmp_path,
    )
    assert (home / ".gitconfig").read_text() == "[user]\n\tname = op\n"
    assert "name = op" in done.stdout
    # A missing one is an empty read-only file in the view: git reads nothing from it, nothing writes it.
    assert not (home / ".config" / "git" / "config").read_text()


@needs_bwrap
def test_a_run_in_the_kept_view_reports_its_exit_and_its_signal_exactly(
    state_dir: Path, tmp_path: Path
) -> None:
    view = pinned_view(None, host=True)
    assert view.prefix[0] == hostkeeper.helper_path()  # entered, not a bwrap of its own
    try:
        for script, code in (("exit 3", 3), ("exit 130", 130), ("exit 131", 131), ("kill -INT $$", -2)):
            argv = view.wrap(["/bin/sh", "-c", script])
            raw = subprocess.run(argv, check=False, pass_fds=view.fds).returncode
            assert raw == code
            expected = (code, None) if code >= 0 else (None, "SIGINT")
            assert hostview.exit_status(argv, raw) == expected  # a command's own 130 is not a SIGINT
        _group_interrupt(view.wrap, view.fds)
    finally:
        view.close()


@needs_bwrap
def test_a_run_in_a_bwrap_of_its_own_reports_its_exit_and_its_signal(state_dir: Path, tmp_path: Path) -> None:
    """A run with pinned copies (or no helper) takes its own bwrap, which says 128+n for signal n."""
    pin = tmp_path / "pinned.txt"
    view = pinned_view(None, [(str(pin), b"copy\n")], host=True)
    try:
        assert view.prefix[:2] == tuple(hostview.head("")[:2])
        argv = view.wrap(["/bin/sh", "-c", "exit 3"])
        run = subprocess.run(argv, check=False, pass_fds=view.fds)
        assert hostview.exit_status(argv, run.returncode) == (3, None)
        argv = view.wrap(["/bin/sh", "-c", "kill -INT $$"])
        code = subprocess.run(argv, check=False, pass_fds=view.fds).returncode
        assert code == 128 + signal.SIGINT  # bwrap's report, read back as the signal
        assert hostview.exit_status(argv, code) == (None, "SIGINT")
        assert hostview.exit_status(["/bin/sh", "-c", "exit 130"], 130) == (130, None)  # not wrapped
        _group_interrupt(lambda a: view.wrap(a), view.fds)
    finally:
        view.close()


def _group_interrupt(wrap: Callable[[list[str]], list[str]], fds: Sequence[int] = ()) -> None:
    """The view's own processes ignore ^C: a SIGINT to the whole group ends the command, not the wait."""
    script = "sleep 60 >/dev/null & trap 'kill $!; exit 7' INT; echo up; wait"
    proc = subprocess.Popen(
        wrap(["/bin/sh", "-c", script]), stdout=subprocess.PIPE, start_new_session=True, pass_fds=fds
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait() == 7
    proc.stdout.close()


def test_a_cwd_inside_the_state_dir_is_refused(state_dir: Path) -> None:
    (state_dir / "w").mkdir()
    with pytest.raises(hostview.HostViewError, match="inside the state dir"):
        hostview.refuse_hidden_cwd(str(state_dir / "w"), str(state_dir))
    hostview.refuse_hidden_cwd(str(state_dir.parent), str(state_dir))


def test_without_bwrap_the_run_is_refused_naming_the_install_and_the_opt_out(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pinned, "bwrap_path", lambda: None)
    with pytest.raises(hostview.HostViewError) as err:
        pinned_view(None, host=True)
    assert "apt-get install bubblewrap" in str(err.value) and 'hostView = "none"' in str(err.value)
    assert pinned_view(None, host=False).prefix == ()  # opted out: the run starts as before


def test_the_session_host_reads_a_wrapped_exit_as_the_view_does() -> None:
    from engine.sessions import host_io

    assert tuple(hostview.head("/usr/bin/bwrap")[:2]) == host_io.VIEW_HEAD
    argv = [*hostview.head("/usr/bin/bwrap"), "--", "/bin/sh"]
    for code in (0, 3, 130, 131, 143, -9):
        assert host_io.exit_of(argv, code) == hostview.exit_status(argv, code)
