"""Fresh round 8 q: a hostWritable dir (and before round 7 n a home workdir) was checked by realpath, then
bound by path (`bwrap --bind W W`); a run that may write W's parent exchanges W for a relative link to
../.config in a loop, and the next view got ~/.config bound writable. Every bind's source is now an fd
opened along the path as it was resolved, no link followed, and checked on the fd
(engine.commands.bindsource); a root below another root of the same agent is not bound again (it is
writable with it), and one below another agent's is refused (bwrap finds a bind's place by name). The
racer thread here stands for a run of an agent whose own hostWritable holds W's parent"""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import hostkeeper, hostoutside, hostview
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap

_libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


@pytest.fixture
def proj() -> Path:
    """~/proj/sub a directory and ~/proj/lnk a relative link to the home's ~/.config."""
    home = Path.home()
    (home / ".config" / "git").mkdir(parents=True)
    proj = home / "proj"
    (proj / "sub").mkdir(parents=True)
    os.symlink("../.config", proj / "lnk")
    return proj


@pytest.fixture
def racer(proj: Path) -> Iterator[threading.Thread]:
    """Started by the test: ~/proj/sub and ~/proj/lnk exchanged in a loop until the test ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            _exchange(proj / "sub", proj / "lnk")

    thread = threading.Thread(target=loop, daemon=True)
    yield thread
    stop.set()
    if thread.is_alive():
        thread.join()
    if (proj / "sub").is_symlink():
        _exchange(proj / "sub", proj / "lnk")


def _write_in_view(outside: hostoutside.Outside, target: Path) -> str:
    """A run in a view of its own (no keeper: every try makes the view again) writing `target`."""
    bwrap = hostview.bwrap_path()
    assert bwrap is not None
    try:
        ops, fds = hostview.view_by_fd(os.environ["OPENCLAW_STATE_DIR"], outside=outside)
    except hostoutside.HostViewError as exc:
        return f"refused: {exc}"
    try:
        done = subprocess.run(
            [bwrap, *ops, "--", "/bin/sh", "-c", f"echo '[core] fsmonitor = x' > {target} 2>&1"],
            capture_output=True,
            text=True,
            check=False,
            pass_fds=fds,
        )
    finally:
        for fd in fds:
            os.close(fd)
    return done.stdout + done.stderr


@needs_bwrap
def test_a_writable_root_exchanged_for_a_link_after_its_check_is_refused(
    state_dir: Path, proj: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic: the racer wins right after the check (the view's operations are made). The source
    is opened as it was resolved, with no link followed: the link is refused, nothing is bound there."""
    outside = hostoutside.Outside(writable=(str(proj / "sub"),))
    made = hostview.view_args

    def raced(*args: object, **kwargs: object) -> list[str]:
        ops = made(*args, **kwargs)  # type: ignore[arg-type]
        _exchange(proj / "sub", proj / "lnk")  # now ~/proj/sub is the link to ../.config
        return ops

    monkeypatch.setattr(hostview, "view_args", raced)
    with pytest.raises(hostoutside.HostViewError, match="exchanged for a link"):
        hostview.view_by_fd(str(state_dir), outside=outside)
    _exchange(proj / "sub", proj / "lnk")
    # The kept view too: its keeper is not made (its source is a link by then), and the run's own view
    # is refused (its check sees the link: the root holds the home's config).
    hostkeeper.stop()
    with pytest.raises(hostoutside.HostViewError, match=r"exchanged for a link|hostWritable names"):
        pinned_view(None, host=True, outside=outside).close()
    assert not (Path.home() / ".config" / "git" / "config").exists()


def test_a_host_writable_root_inside_another_agents_is_refused(state_dir: Path, proj: Path) -> None:
    """bwrap finds a bind's place by name: a root in a directory another agent's runs may write (its own
    hostWritable holds it) could be exchanged for a link while this view is made, and the mount would land
    where the link points. Refused, naming both; the same root under one of this agent's is not bound."""
    inner = hostoutside.Outside(
        writable=(str(proj / "sub"),), writable_anywhere=(str(proj), str(proj / "sub"))
    )
    with pytest.raises(hostoutside.HostViewError, match="inside another agent's hostWritable"):
        hostview.view_args(str(state_dir), outside=inner)
    both = hostoutside.Outside(writable=(str(proj), str(proj / "sub")), writable_anywhere=(str(proj),))
    assert str(proj / "sub") not in hostview.view_args(str(state_dir), outside=both)


async def test_attacker_qs_workdir_exchanged_for_a_link_makes_nothing_of_the_home_writable(
    state_dir: Path,
) -> None:
    """attackQ's test_class6_a_workdir_exchanged_for_a_link_by_the_agents_own_run_makes_the_homes_config_
    writable (fresh round 8 q), its tries bounded: the agent's own background run in ~/proj exchanges
    ~/proj/sub with a link to ../.config in a loop while its runs use ~/proj/sub as their workdir. The home
    is read-only but for hostWritable, whose sources are bound by fd: the XDG git config is never made."""
    import contextlib

    from engine.protocol.frames import RemoteError
    from tests.helpers.gateway import FULL, connect, gateway, write_config
    from tests.helpers.race import tries

    home = Path.home()
    (home / ".config" / "git").mkdir(parents=True)
    proj = home / "proj"
    (proj / "sub").mkdir(parents=True)
    os.symlink("../.config", proj / "lnk")
    (proj / "racer.py").write_text(RACER)
    write_config(state_dir, FULL + f'hostWritable = ["{proj}"]\n')
    target = home / ".config" / "git" / "config"
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            racer = await client.request(
                "exec",
                {"command": "python3 racer.py", "agentId": "main", "workdir": str(proj), "background": True},
            )
            assert racer["details"]["status"] == "running", racer["text"]
            try:
                for _ in tries(300, budget_s=30):
                    with contextlib.suppress(RemoteError):
                        await client.request(
                            "exec",
                            {
                                "command": f"printf '[core]\\n\\tfsmonitor = x\\n' > {target} 2>/dev/null",
                                "agentId": "main",
                                "workdir": str(proj / "sub"),
                            },
                        )
                    if target.exists():
                        break
            finally:
                (proj / "stop").write_text("")
                with contextlib.suppress(RemoteError):
                    await client.request(
                        "process", {"action": "kill", "sessionId": racer["details"]["sessionId"]}
                    )
        finally:
            await client.close()
    assert not target.exists(), "a run wrote the operator's global git config through a raced bind"


RACER = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while not os.path.exists("stop") and n < 20_000_000:
    libc.renameat2(-100, b"sub", -100, b"lnk", 2)  # RENAME_EXCHANGE
    n += 1
"""


@needs_bwrap
def test_a_host_writable_root_nested_in_another_exchanged_in_a_loop_binds_nothing_of_the_home(
    state_dir: Path, proj: Path, racer: threading.Thread
) -> None:
    """hostWritable ~/proj and ~/proj/sub, the inner one exchanged in a loop (a run in ~/proj can): the
    inner root is writable with the outer one and not bound again, so there is no bind to race."""
    outside = hostoutside.Outside(writable=(str(proj), str(proj / "sub")))
    ops = hostview.view_args(str(state_dir), outside=outside)
    assert str(proj / "sub") not in ops and str(proj) in ops
    racer.start()
    target = Path.home() / ".config" / "git" / "config"
    for _ in range(200):
        out = _write_in_view(outside, proj / "sub" / "git" / "config")
        assert not target.exists(), out


def test_a_bind_source_is_opened_exactly_or_refused(tmp_path: Path) -> None:
    """bindsource.open_checked: a link anywhere on the way (even one to the same place) is refused; the
    fd of a plain path is that path."""
    from engine.commands import bindsource

    (tmp_path / "d").mkdir()
    os.symlink("d", tmp_path / "l")
    fd = bindsource.open_checked(str(tmp_path / "d"))
    try:
        assert os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "d")
    finally:
        os.close(fd)
    for bad in (tmp_path / "l", tmp_path / "l" / "."):
        with pytest.raises(OSError):
            bindsource.open_checked(str(bad))
    ops, fds = bindsource.by_fd(["--dev-bind", "/", "/", "--ro-bind", str(tmp_path / "d"), "/x"])
    try:
        assert ops[:3] == ["--dev-bind", "/", "/"] and ops[3] == "--ro-bind-fd" and ops[5] == "/x"
    finally:
        bindsource.close(fds)
    with pytest.raises(OSError):
        bindsource.by_fd(["--bind", str(tmp_path / "l"), "/x"])


def test_a_host_writable_name_through_a_link_in_a_listed_dir_is_refused(state_dir: Path) -> None:
    """attackR's test_a_nested_host_writable_dir_cannot_be_pointed_elsewhere_in_the_home (fresh round 8 r),
    at the view's level: ~/work/cache is listed but missing, a run in ~/work makes it a link to ~/.bashrc.d
    (sourced by many ~/.bashrc): the next view would resolve it and bind ~/.bashrc.d writable. A name
    reached through a link in a dir some agent may write is refused, whichever agent lists that dir."""
    home = Path.home()
    (home / "work").mkdir()
    rcd = home / ".bashrc.d"
    rcd.mkdir()
    (home / "work" / "cache").symlink_to(rcd)
    both = hostoutside.Outside(writable=(str(home / "work"), str(home / "work" / "cache")))
    with pytest.raises(hostoutside.HostViewError, match="reached through the link"):
        hostview.view_args(str(state_dir), outside=both)
    other = hostoutside.Outside(
        writable=(str(home / "work" / "cache"),), writable_anywhere=(str(home / "work"),)
    )
    with pytest.raises(hostoutside.HostViewError, match="reached through the link"):
        hostview.view_args(str(state_dir), outside=other)


def test_a_host_writable_name_through_a_link_outside_the_home_a_run_may_change_is_refused(
    state_dir: Path, tmp_path: Path
) -> None:
    """attackR's variant (fresh round 8 r): hostWritable named through a link outside the home, in a dir
    host runs may write (a `/tmp/work -> ~/work` shortcut): a run re-points it to ~/.bashrc.d."""
    home = Path.home()
    (home / "work").mkdir()
    shortcut = tmp_path / "work"
    shortcut.symlink_to(home / "work")
    with pytest.raises(hostoutside.HostViewError, match="reached through the link"):
        hostview.view_args(str(state_dir), outside=hostoutside.Outside(writable=(str(shortcut),)))
