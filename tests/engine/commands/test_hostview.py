"""The host view every gateway-host run starts in: the state dir an empty tmpfs, the operator's trusted
configs read-only, the terminal's signals the command's, and a refusal naming the fix without bwrap."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from engine.commands import hostkeeper, hostoutside, hostroots, hosttrust, hostview, pinned
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap


def _kept(state: Path) -> hostkeeper.Keeper:
    """The keeper of a state dir (one slot per agent: the only one these tests make)."""
    (keeper,) = [k for n, k in hostkeeper._keepers.items() if n.split("\0")[0] == str(state)]
    return keeper


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
    # A missing one stays missing: the home is read-only as a whole, so nothing makes it.
    assert not (home / ".config" / "git" / "config").exists()


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
    with pytest.raises(hostoutside.HostViewError, match="inside the state dir"):
        hostroots.refuse_hidden_cwd(str(state_dir / "w"), str(state_dir))
    hostroots.refuse_hidden_cwd(str(state_dir.parent), str(state_dir))


def test_without_bwrap_the_run_is_refused_naming_the_install_and_the_opt_out(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pinned, "bwrap_path", lambda: None)
    with pytest.raises(hostoutside.HostViewError) as err:
        pinned_view(None, host=True)
    assert "apt-get install bubblewrap" in str(err.value) and 'hostView = "none"' in str(err.value)
    assert pinned_view(None, host=False).prefix == ()  # opted out: the run starts as before


def test_the_session_host_reads_a_wrapped_exit_as_the_view_does() -> None:
    from engine.sessions import host_io

    assert tuple(hostview.head("/usr/bin/bwrap")[:2]) == host_io.VIEW_HEAD
    assert hostview.STATUS_WORDS == host_io.STATUS_WORDS
    argv = [*hostview.head("/usr/bin/bwrap"), "--", "/bin/sh"]
    for code in (0, 3, 130, 131, 143, -9):
        assert host_io.exit_of(argv, code) == hostview.exit_status(argv, code)


@needs_bwrap
def test_a_linked_config_keeps_its_link_and_only_host_writable_is_writable(
    state_dir: Path, tmp_path: Path
) -> None:
    """~/.gitconfig -> dotfiles/gitconfig: the link cannot be re-pointed or removed, the file it names is
    read-only, and git reads it; the home is read-only as a whole but for the hostWritable dirs."""
    home = Path.home()
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "gitconfig").write_text("[user]\n\tname = op\n")
    (home / ".gitconfig").symlink_to("dotfiles/gitconfig")
    (home / "notes").write_text("a\n")
    (home / "proj").mkdir()
    outside = hostoutside.Outside(writable=(str(home / "proj"),), workdir=str(home / "proj"))
    view = pinned_view(None, host=True, outside=outside)
    script = (
        f"cd {home}; git config --global user.name; echo b >> notes || echo notes-ro; "
        "echo c > dotfiles/new || echo dotfiles-ro; rm -f .gitconfig || echo rm-refused; "
        f"ln -sfn {tmp_path}/g .gitconfig || echo ln-refused; echo x >> .gitconfig || echo config-ro; "
        "echo d > proj/made && echo proj-ok"
    )
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    out = done.stdout.split()
    assert out == ["op", "notes-ro", "dotfiles-ro", "rm-refused", "ln-refused", "config-ro", "proj-ok"], done
    assert os.readlink(home / ".gitconfig") == "dotfiles/gitconfig"
    assert (home / "notes").read_text() == "a\n" and not (home / "dotfiles" / "new").exists()
    assert (home / "proj" / "made").read_text() == "d\n"


@needs_bwrap
def test_a_missing_cargo_home_is_a_scratch_one_its_config_unwritable(state_dir: Path, tmp_path: Path) -> None:
    home = Path.home()
    script = (
        f"mkdir -p {home}/.cargo/registry && echo cache-ok; "
        f"echo x > {home}/.cargo/config.toml || echo config-ro; echo x > {home}/.cargo/config || echo ro"
    )
    for _ in range(2):  # the first view leaves an empty mountpoint: the second is the same view
        done = _run(script, tmp_path)
        assert done.stdout.split() == ["cache-ok", "config-ro", "ro"], done.stderr
        assert not list((home / ".cargo").iterdir())
    # the operator's own cargo home, once it holds something: its missing config is bound read-only
    (home / ".cargo" / "bin").mkdir()
    assert (str(home / ".cargo" / "config.toml"), True) in hosttrust.trusted_configs()


@needs_bwrap
def test_what_the_gateway_holds_outside_the_state_dir_is_hidden_or_read_only(
    state_dir: Path, tmp_path: Path
) -> None:
    key, sockets = tmp_path / "id_node", tmp_path / "sock"
    key.write_text("PRIVATE KEY\n")
    sockets.mkdir()
    (sockets / "agents.sock").write_text("")
    outside = hostoutside.Outside(hidden=(str(key),), readonly=(str(sockets),))
    script = f"cat {key}; rm -f {sockets}/agents.sock || echo rm-refused; echo end"
    for helper in (hostkeeper.helper_path(), None):  # the kept view and a bwrap of its own
        with pytest.MonkeyPatch.context() as m:
            m.setattr(hostkeeper, "helper_path", lambda h=helper: h)
            view = pinned_view(None, host=True, outside=outside)
            try:
                argv = view.wrap(["/bin/sh", "-c", script])
                done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
            finally:
                view.close()
        assert done.stdout.split() == ["rm-refused", "end"], done.stdout + done.stderr
    assert key.read_text() == "PRIVATE KEY\n" and (sockets / "agents.sock").exists()


@needs_bwrap
def test_the_kept_view_is_remade_when_what_it_hides_outside_changes(state_dir: Path, tmp_path: Path) -> None:
    if hostkeeper.helper_path() is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    key = tmp_path / "id_node"
    key.write_text("PRIVATE KEY\n")

    def read(outside: hostoutside.Outside) -> tuple[str, hostkeeper.Keeper]:
        view = pinned_view(None, host=True, outside=outside)
        try:
            argv = view.wrap(["/bin/cat", str(key)])
            done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
        finally:
            view.close()
        return done.stdout, _kept(state_dir)

    seen, first = read(hostoutside.Outside())
    assert seen == "PRIVATE KEY\n"
    hidden = hostoutside.Outside(hidden=(str(key),))
    seen, second = read(hidden)
    assert seen == "" and second is not first
    # the key replaced on the host (renamed over): its directory is covered by a copy of its entries
    # (engine.commands.dirshadow), so the kept view needs no remaking to keep the new key out
    (tmp_path / "new").write_text("PRIVATE KEY 2\n")
    os.replace(tmp_path / "new", key)
    seen, _third = read(hidden)
    assert seen == ""


@needs_bwrap
@pytest.mark.parametrize("in_host", [False, True], ids=["gateway", "session-host"])
async def test_a_pinned_run_reports_its_commands_own_exit_and_signal_exactly(
    state_dir: Path, tmp_path: Path, in_host: bool
) -> None:
    """bwrap tells a signal n as exit 128+n, so decoding its code cannot tell `exit 130` from ^C: the
    helper hands the command's own wait status to the spawner through a pipe (gateway or session host)."""
    from engine.sessions import LocalLauncher, RunSpec, SessionManager
    from engine.sessions.host import HOLDERS_DIR, HostLauncher

    launcher = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher()) if in_host else None
    if launcher is not None:
        assert await launcher.connect() is not None, launcher.problem
    manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=launcher)
    view = pinned_view(None, [(str(tmp_path / "pinned.txt"), b"copy\n")], host=True)
    try:
        assert view.prefix[:2] == tuple(hostview.head("")[:2])  # a bwrap of its own
        cases = (
            ("cat pinned.txt; exit 3", 3, None),  # first: the copy's fd is read once, by the first bwrap
            ("exit 130", 130, None),
            ("exit 131", 131, None),
            ("kill -INT $$", None, "SIGINT"),
            ("kill -QUIT $$", None, "SIGQUIT"),
            ("kill -TERM $$", None, "SIGTERM"),
            ("exit 0", 0, None),
        )
        for script, code, sig in cases:
            argv = view.wrap(["/bin/sh", "-c", script])
            spec = RunSpec(command=script, argv=argv, cwd=str(tmp_path), pass_fds=view.fds, scope_key="s")
            res = await manager.run(spec)
            assert (res.details.get("exitCode"), res.details.get("exitSignal")) == (code, sig), script
            assert "copy" in res.text or not script.startswith("cat")
        for script, code, sig in (("exit 130", 130, None), ("kill -INT $$", None, "SIGINT")):  # on a terminal
            argv = view.wrap(["/bin/sh", "-c", script])
            spec = RunSpec(
                command=script, argv=argv, cwd=str(tmp_path), pty=True, pass_fds=view.fds, scope_key="s"
            )
            res = await manager.run(spec)
            assert (res.details.get("exitCode"), res.details.get("exitSignal")) == (code, sig), script
    finally:
        view.close()
        await manager.close()
        if launcher is not None:
            await launcher.close()


def test_the_status_pipe_fills_only_a_views_slot_above_the_passed_numbers() -> None:
    from engine.sessions import host_io

    plain = ["/bin/sh", "-c", "status - --"]
    assert host_io.status_pipe(plain) == (plain, None, None)
    # (a helper's own `--` before bwrap's, as own-pts has)
    argv = [*host_io.VIEW_HEAD, "/h", "own-pts", "-", "--", "/usr/bin/bwrap", "--dev-bind", "/", "/"]
    argv += ["--", "/h", "status", "-", "--", "/h", "check-cwd", "-", "--", "x"]
    filled, read, write = host_io.status_pipe(argv, above=200)
    assert read is not None and write is not None
    try:
        assert write > 200 and filled == [*argv[:13], str(write), *argv[14:]]
        os.write(write, b"%d\n" % (130 << 8))  # `exit 130`, as waitpid says it
        os.close(write)
        assert host_io.status_exit(read, filled, 130) == (130, None)
    finally:
        with contextlib.suppress(OSError):
            os.close(write)
    # Nothing told (the helper got no further): bwrap's code as it is, never 128+n read as a signal.
    _, read, write = host_io.status_pipe(argv)
    assert read is not None and write is not None
    os.close(write)
    assert host_io.status_exit(read, argv, 130) == (130, None)
    assert host_io.exit_of(argv, 130) == (None, "SIGINT")  # no pipe at all: the old guess


def test_the_empty_file_is_made_by_many_threads_at_once(tmp_path: Path) -> None:
    """Views are built in several threads at once (the fair pool): each first builder makes the empty file
    under a temp name of its own, so none renames another's away (a chance failure of concurrent runs)."""
    import threading

    from engine.commands import hostview

    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    empty = state / "hostview-empty"
    # Each round: the file is gone (one thread removes it), then all eight make it at once.
    barrier = threading.Barrier(8, action=lambda: empty.unlink(missing_ok=True))
    errors: list[BaseException] = []

    def build() -> None:
        try:
            for _ in range(40):
                barrier.wait()
                hostview._empty_file(str(state))
        except BaseException as exc:  # collected: a thread's exception would vanish
            errors.append(exc)
            barrier.abort()  # the others stop too, never wait for a round that cannot come

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert hostview._empty_file(str(state)) == str(state / "hostview-empty")
    assert (state / "hostview-empty").stat().st_size == 0
    assert [p.name for p in state.iterdir()] == ["hostview-empty"]


def test_a_key_file_where_no_cover_can_be_made_refuses_the_view(state_dir: Path) -> None:
    """A key directly in the home (or a directory holding it) could only have a bind of its own, which a
    rotation by rename leaves behind (fresh round 9 y): the view is refused, naming what to change. A key
    in a directory of its own (~/.ssh) is covered, and a socket named there is not a key to refuse."""
    home = Path(os.environ["HOME"])
    in_home, above = home / "node.key", home.parent / "node.key"
    for key in (in_home, above):
        key.write_text("KEY\n")
        with pytest.raises(hostoutside.HostViewError, match="move it into a directory of its own"):
            hostview.view_args(str(state_dir), outside=hostoutside.Outside(hidden=(str(key),)))
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_node").write_text("KEY\n")
    ops = hostview.view_args(
        str(state_dir), outside=hostoutside.Outside(hidden=(str(home / ".ssh" / "id_node"),))
    )
    assert "--remount-ro" in ops
    missing = hostoutside.Outside(hidden=(str(home / "gone.key"),))  # a key not there yet: nothing to read
    hostview.view_args(str(state_dir), outside=missing)
