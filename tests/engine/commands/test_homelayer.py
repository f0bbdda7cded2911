"""engine.commands.homelayer and exechost-hostenter's layers: every run sees the home (and where its links
lead) through an overlay made for it alone, where no socket connects and every file reads as it is, with
the kept view's mounts below it (hostWritable dirs, covers) on top as they were; in the kept view and in a
bwrap of its own alike, as root and as a non-root gateway."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import homelayer, hostkeeper, hostoutside, hostroots, hostview
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(hostkeeper.helper_path() is None, reason="exechost-hostenter is not built (setup.sh)"),
]


def test_the_layers_are_the_home_and_the_dirs_its_links_lead_to_outside_it(tmp_path: Path) -> None:
    home, disk, state = tmp_path / "h", tmp_path / "disk", tmp_path / "s"
    for d in (home, disk / "cache", disk / "cfg" / "sub", disk / "share", state / "x", tmp_path / "pub"):
        d.mkdir(parents=True)
    (tmp_path / "pub").chmod(0o1777)
    (home / ".local").mkdir()
    (home / ".cache").symlink_to(disk / "cache")  # an XDG dir on another disk
    (home / "work").symlink_to(disk / "cfg")  # a top-level entry
    (home / "inner").symlink_to(disk / "cfg" / "sub")  # inside another layer: that one's
    (home / ".local" / "share").symlink_to(disk / "share")  # an XDG dir below the top
    (home / "state").symlink_to(state / "x")  # skipped: the state dir's
    (home / "pub").symlink_to(tmp_path / "pub")  # every user's to write: never read-only
    (home / "up").symlink_to(tmp_path)  # holds the home
    (home / "file").symlink_to(home / ".local")  # inside the home already
    got = homelayer.layers(str(home), [str(state)], mounts=[])
    # innermost first: each one's lower layer is the directory as the view has it, never another layer
    assert got == [str(disk / "cache"), str(disk / "cfg"), str(disk / "share"), str(home)]
    assert homelayer.layers("/") == []
    # a filesystem mounted below the home or a linked dir: a layer of its own, outer first; not one a
    # hostWritable root is, nor one gone or elsewhere
    for d in ("vault/inner", "wdir", "nas"):
        (home / d).mkdir(parents=True)
    mounts = [
        "/",
        str(home / "vault" / "inner"),
        str(home / "vault"),
        str(home / "work"),
        str(disk / "cache"),
    ]
    mounts += [str(home / "gone"), str(state / "x"), str(disk / "cfg" / "sub")]
    got = homelayer.layers(str(home), [str(state)], [str(home / "wdir")], mounts)
    assert set(got) == {
        *(str(home / d) for d in ("vault", "vault/inner", "")),
        *(str(disk / d) for d in ("cache", "cfg", "cfg/sub", "share")),
    }, got
    assert all(not got[j].startswith(got[i] + os.sep) for i in range(len(got)) for j in range(i, len(got)))
    # hostWritable names a linked dir (or one in it): writable as before, not layered
    got = homelayer.layers(str(home), [str(state)], [str(disk / "cfg" / "sub" / "p")], [])
    assert str(disk / "cfg") not in got and str(disk / "cache") in got
    # a link in a hostWritable dir is the agent's to point: never followed
    got = homelayer.layers(str(home), [str(state)], [str(home / ".local")], [])
    assert str(disk / "share") not in got and str(disk / "cache") in got


def test_the_mount_points_are_read_as_the_kernel_escapes_them(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 0:21 / / rw - ext4 /dev/vda rw\n30 22 0:30 / /home/op/my\\040vault rw,nosuid - tmpfs tmpfs rw\n"
    )
    assert homelayer.mount_points(str(table)) == ["/", "/home/op/my vault"]


def test_every_tree_of_the_machine_is_a_layer_but_the_writable_roots_and_what_holds_no_socket(
    tmp_path: Path,
) -> None:
    """system=True (fresh round 14 c): each top-level directory of `/` and every filesystem below one, but
    /dev (the view's own), a world-writable dir (/tmp), a kernel filesystem, a read-only superblock, a
    writable root and what is skipped; innermost first."""
    home = tmp_path / "h"
    home.mkdir()
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
        "23 22 0:22 / /proc rw,nosuid - proc proc rw\n"
        "24 22 0:23 / /sys rw - sysfs sysfs rw\n"
        "25 22 0:24 / /usr/lib/snap\\040x ro - squashfs /dev/loop0 ro\n"
        "26 22 0:25 / /var/lib/docker rw - ext4 /dev/vdb rw\n"
        "27 22 0:26 / /var/lib/w rw - ext4 /dev/vdb rw\n"
        "28 22 0:27 / /boot/efi rw - vfat /dev/vda1 rw\n"
    )
    assert homelayer.mount_table(str(table))[3] == ("/usr/lib/snap x", "squashfs", False)
    got = homelayer.layers(str(home), [], ["/var/lib/w"], system=True, table=str(table))
    tops = {str(p) for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink()}
    for kept in ("/usr", "/etc", "/var", str(home)):
        assert kept in got, got
    for left in ("/dev", "/proc", "/sys", "/tmp", "/var/lib/w", "/usr/lib/snap x", "/boot/efi"):
        assert left not in got, got
    if os.path.isdir("/var/lib/docker"):
        assert got.index("/var/lib/docker") < got.index("/var"), got
    assert set(got) <= tops | {str(home), "/var/lib/docker"}, got
    # without system, only the home's
    assert homelayer.layers(str(home), [], [], mounts=[]) == [str(home)]


def test_a_hidden_sockets_directory_is_a_layer_in_whatever_tree_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sockets` (fresh round 9 y, a regression of stop 12): the directory of a socket the views hide is a
    layer of its own when no layer holds it, in a world-writable tree too (the tree is not layered), and
    kept past MOST; not one a layer holds already, nor `/`, a world-writable one, one skipped or in a
    writable root, the view's /dev or a filesystem no socket can be bound in."""
    home, state, pub = tmp_path / "h", tmp_path / "s", tmp_path / "pub"
    agent, shared, rw = pub / "ssh-AbC", pub / "drop", pub / "w" / "ssh"
    for d in (home / "ssh", state / "a", agent, shared, rw):
        d.mkdir(parents=True)
    pub.chmod(0o1777)
    shared.chmod(0o1777)
    sockets = [str(agent), str(agent), str(home / "ssh"), str(state / "a"), str(shared), str(rw), "/", "/dev"]
    sockets.append("/proc/sys")
    got = homelayer.layers(str(home), [str(state)], [str(pub / "w")], system=True, sockets=sockets)
    assert got.count(str(agent)) == 1 and str(home) in got, got
    for left in (home / "ssh", state / "a", shared, rw, pub, "/", "/dev", "/proc/sys"):
        assert str(left) not in got, got
    assert "/usr" in got and got.index(str(agent)) < got.index("/usr"), got  # innermost first
    # in a tree's layer already (/var): none of its own, unless a mount not layered is between (a
    # world-writable filesystem mounted in /var: an overlay reaches no mount below its directory)
    spot = Path(tempfile.mkdtemp(prefix="eh9y-", dir="/var/tmp"))
    try:
        (spot / "ssh-X").mkdir(mode=0o700)
        spot.chmod(0o1777)
        inner = [str(spot / "ssh-X")]
        plain = homelayer.layers(str(home), [], [], ["/"], system=True, sockets=inner)
        assert "/var" in plain and inner[0] not in plain, plain
        between = homelayer.layers(str(home), [], [], ["/", str(spot)], system=True, sockets=inner)
        assert inner[0] in between and str(spot) not in between, between
    finally:
        shutil.rmtree(spot)
    # past MOST the innermost are left out, never a hidden socket's directory
    monkeypatch.setattr(homelayer, "MOST", 2)
    few = homelayer.layers(str(home), [str(state)], [], system=True, sockets=[str(agent)])
    assert len(few) == 2 and str(agent) in few, few
    # without system (the home's layers alone), none
    assert homelayer.layers(str(home), [], [], mounts=[], sockets=[str(agent)]) == [str(home)]


def test_the_hidden_sockets_directories_are_those_of_sockets_and_names_not_there_yet(tmp_path: Path) -> None:
    """hostroots.socket_dirs: a hidden socket's directory, and a hidden name's with nothing there yet (an
    agent started later binds it); not a hidden key's (copied: dirshadow), nor one that is not there."""
    sock_dir, later, keys, gone = tmp_path / "sock", tmp_path / "later", tmp_path / "keys", tmp_path / "gone"
    for d in (sock_dir, later, keys):
        d.mkdir()
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sock_dir / "agent.1"))
        (keys / "id_node").write_text("key")
        server2 = socket.socket(socket.AF_UNIX)
        server2.bind(str(keys / "agent.2"))  # beside a hidden key: its directory is copied
        hidden = (sock_dir / "agent.1", later / "agent.1", keys / "id_node", keys / "agent.2", gone / "x")
        outside = hostoutside.Outside(hidden=tuple(map(str, hidden)))
        assert hostroots.socket_dirs(outside) == [str(sock_dir), str(later)]
        server2.close()
    finally:
        server.close()


def test_a_run_of_its_own_carries_what_bwrap_binds_from_inside_a_layer() -> None:
    """bwrap binds by path and checks the fd: a source inside a layer is put back over it by own-pts; a
    layer holding a source bound elsewhere (or bound whole) is left out."""
    ops = [
        "--dev-bind", "/", "/",
        "--bind", "/t", "/t",  # holds the layers: bound with them in it
        "--bind", "/t/h/work", "/t/h/work",
        "--ro-bind", "/t/h/.ssh/config", "/t/h/.ssh/config",
        "--ro-bind", "/t/h", "/t/h",  # nothing left out here: the home is not bound by a layered view
        "--tmpfs", "/t/s",
    ]  # fmt: skip
    assert homelayer.own_words(ops[:-4] + ops[-2:], ["/t/h", "/d"]) == (
        ["/t/h", "/d"],
        ["/t/h/work", "/t/h/.ssh/config"],
    )
    assert homelayer.own_words(ops, ["/t/h", "/d"]) == (["/d"], [])
    elsewhere = ["--ro-bind", "/d/cfg", "/t/h/.config"]  # the operator's XDG_CONFIG_HOME, named by a link
    assert homelayer.own_words(elsewhere, ["/t/h", "/d"]) == (["/t/h"], [])
    # a state dir in the home: its empty file and private copies are bound elsewhere, their place covered
    state = [
        "--tmpfs",
        "/t/h/.st",
        "--ro-bind",
        "/t/h/.st/empty",
        "/t/h/.npmrc",
        "--bind",
        "/t/h/.st/p",
        "/tmp",
    ]
    assert homelayer.own_words(state, ["/t/h"]) == (["/t/h"], ["/t/h/.st/empty", "/t/h/.st/p"])


def test_a_state_dir_in_the_home_keeps_a_run_of_its_own_layered(
    state_dir: Path, tmp_path: Path, socks: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path.home()
    inside = home / ".exechost"
    inside.mkdir(mode=0o700)
    (inside / "operator.json").write_text("tok-home-state")
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(inside))
    monkeypatch.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
    (home / "d").mkdir()
    _serve(home / "d" / "op.sock", socks)
    private = tmp_path / "private"
    private.mkdir()
    outside = hostoutside.Outside(private=((str(inside / "copy"), str(private)),))
    (inside / "copy").mkdir()
    view = pinned_view(None, host=True, outside=outside)
    try:
        assert str(home) in view.prefix[: view.prefix.index("--")], view.prefix
        script = (
            f'P={shlex.quote(_PROBE)}; python3 -c "$P" {home}/d/op.sock; ls -A {inside}; touch {private}/x'
        )
        done = subprocess.run(
            view.wrap(["/bin/sh", "-c", script]), cwd=tmp_path, capture_output=True, text=True,
            pass_fds=view.fds, check=False,
        )  # fmt: skip
    finally:
        view.close()
    assert "['d', 'op.sock'] Connection refused" in done.stdout, done.stdout + done.stderr
    assert "operator.json" not in done.stdout and (inside / "copy" / "x").exists(), done.stdout + done.stderr


def _serve(path: Path, socks: list[socket.socket]) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(4)
    socks.append(s)


@pytest.fixture
def socks() -> Iterator[list[socket.socket]]:
    found: list[socket.socket] = []
    yield found
    for s in found:
        s.close()


_PROBE = (
    "import socket,sys\n"
    "for p in sys.argv[1:]:\n"
    " s=socket.socket(socket.AF_UNIX)\n"
    " try: s.connect(p); print(p.rsplit('/',2)[-2:], 'connected')\n"
    " except OSError as e: print(p.rsplit('/',2)[-2:], e.strerror)\n"
)


def _run(script: str, cwd: Path, fd: int | None = None) -> str:
    view = pinned_view(None, host=True)
    if fd is not None:
        assert view.check_cwd(fd)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        fds = (*view.fds, *(() if fd is None else (fd,)))
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, pass_fds=fds)
    finally:
        view.close()
        if fd is not None:
            os.close(fd)
    return done.stdout + done.stderr


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "own-bwrap"])
def test_no_socket_of_the_home_or_a_linked_dir_connects_and_every_file_reads(
    state_dir: Path, tmp_path: Path, socks: list[socket.socket], monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    if not kept:
        monkeypatch.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
    home = Path.home()
    disk = state_dir.parent / "disk"
    (disk / "git").mkdir(parents=True)
    (home / ".cache").symlink_to(disk)
    (home / "deep" / "er").mkdir(parents=True)
    (home / "deep" / "er" / "note").write_text("NOTE-r11a\n")
    names = [home / "deep" / "er" / "a.sock", disk / "git" / "b.sock"]
    for name in names:
        _serve(name, socks)
    probe = f'python3 -c "$P" {" ".join(map(str, names))}; cat {home}/deep/er/note; echo x > {disk}/new'
    out = _run(f"P={shlex.quote(_PROBE)}; {probe}", tmp_path)
    assert "['er', 'a.sock'] Connection refused" in out, out
    assert "['git', 'b.sock'] Connection refused" in out, out
    assert "NOTE-r11a" in out and "Read-only file system" in out, out
    # the same sockets from outside the view: there
    for name in names:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(name))


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "own-bwrap"])
def test_a_file_made_after_a_run_looked_for_it_is_there_in_the_next_run(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """An overlay keeps what it looked up: a kept one would show a name missing once as missing for good.
    Each run's is its own."""
    if not kept:
        monkeypatch.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
    later = Path.home() / "later.txt"
    assert "No such file" in _run(f"cat {later}", tmp_path)
    later.write_text("LATER-r11a\n")
    assert "LATER-r11a" in _run(f"cat {later}; ls {later.parent}", tmp_path)


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "own-bwrap"])
def test_a_cwd_in_the_layer_is_checked_against_the_decided_directory(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """The overlay's directory has a device (and inode) of its own: the decided directory is compared with
    the path just before the layer is made, and the run's cwd with that path's identity in the layer."""
    if not kept:
        monkeypatch.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
    home = Path.home()
    (home / "proj").mkdir()
    (home / "other").mkdir()
    # and no process of the run holds the host's fd of it (a way back to the host's mounts)
    listing = "pwd; for f in /proc/[0-9]*/fd/*; do [ -d $f ] && echo DIR $f; done; echo ran"
    ran = _run(listing, home / "proj", os.open(home / "proj", os.O_RDONLY))
    assert ran.split() == [str(home / "proj"), "ran"], ran
    stale = _run("echo ran", home / "proj", os.open(home / "other", os.O_RDONLY))
    assert "approval-stale" in stale and "ran" not in stale.split()


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "own-bwrap"])
def test_the_views_mounts_below_the_home_stay_on_top_of_its_layer(
    state_dir: Path, tmp_path: Path, socks: list[socket.socket], monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """A hostWritable dir is the agent's (written, its sockets connect)."""
    if not kept:
        monkeypatch.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
    home = Path.home()
    work = home / "work"
    work.mkdir()
    _serve(work / "mine.sock", socks)
    (state_dir / "config.toml").write_text(f'[tools.exec]\nhostWritable = ["{work}"]\n')
    outside = hostoutside.Outside(writable=(str(work),))
    view = pinned_view(None, host=True, outside=outside)
    try:
        assert ("enter" if kept else "own-pts") in view.prefix and str(home) in view.prefix
        script = (
            f'P={shlex.quote(_PROBE)}; python3 -c "$P" {work}/mine.sock; '
            f"echo w > {work}/w && cat {work}/w; ls {home}"
        )
        done = subprocess.run(
            view.wrap(["/bin/sh", "-c", script]), cwd=tmp_path, capture_output=True, text=True,
            pass_fds=view.fds, check=False,
        )  # fmt: skip
    finally:
        view.close()
    assert "['work', 'mine.sock'] connected" in done.stdout, done.stdout + done.stderr
    assert "w\n" in done.stdout and (work / "w").read_text() == "w\n"


_NESTED = r"""
import os, socket, subprocess, sys
helper, home = sys.argv[1:3]
vault = home + "/vault"
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "vault", vault], check=True)
open(vault + "/note", "w").write("VAULT-r11a\n")
s = socket.socket(socket.AF_UNIX); s.bind(vault + "/op.sock"); s.listen(4)
view = ["--dev-bind", "/", "/", "--ro-bind", home, home]
keeper = subprocess.Popen(["bwrap", *view, "--", helper, "keep"], stdin=-1, stdout=-1)
pid = int(keeper.stdout.readline())
fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
probe = sys.stdin.read()
enter = [helper, "enter", str(fd), "-", "-", "-", home, vault, "--"]
kept = subprocess.run([*enter, "/bin/sh", "-c", probe], capture_output=True, text=True, pass_fds=[fd])
own = subprocess.run([helper, "own-pts", "-", home, vault, "--", "bwrap", "--dev-bind", "/", "/",
                      "--unshare-pid", "--proc", "/proc", "--", "/bin/sh", "-c", probe],
                     capture_output=True, text=True)
keeper.stdin.close()
keeper.wait()
print(kept.stdout + kept.stderr + "\0" + own.stdout + own.stderr, end="")
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a filesystem (root)")
def test_a_filesystem_mounted_below_the_home_is_a_layer_of_its_own(tmp_path: Path) -> None:
    """An overlay does not reach into a mount below its layer: the host's vault under the home is layered
    too (in a mount namespace of the test's own: no other test sees the vault)."""
    home = tmp_path / "h"
    (home / "vault").mkdir(parents=True)
    probe = (
        f'P={shlex.quote(_PROBE)}; python3 -c "$P" {home}/vault/op.sock; cat {home}/vault/note; '
        f"echo x > {home}/vault/x || echo refused"
    )
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", _NESTED,
         str(hostkeeper.helper_path()), str(home)],
        input=probe, capture_output=True, text=True, check=False,
    )  # fmt: skip
    kept, _, own = done.stdout.partition("\0")
    assert kept == own, done.stdout + done.stderr
    assert "['vault', 'op.sock'] Connection refused" in kept, kept + done.stderr
    assert "VAULT-r11a" in kept and "refused" in kept, kept


_AS_NOBODY = r"""
import os, socket, subprocess, sys
helper, home = sys.argv[1:3]
work = home + "/work"
view = ["--dev-bind", "/", "/", "--ro-bind", home, home, "--bind", work, work]
keeper = subprocess.Popen(["bwrap", *view, "--", helper, "keep"], stdin=-1, stdout=-1)
pid = int(keeper.stdout.readline())
fds = [os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY) for kind in ("mnt", "user")]
socks = []
for name in (home + "/op.sock", work + "/mine.sock"):
    s = socket.socket(socket.AF_UNIX); s.bind(name); s.listen(4); socks.append(s)
probe = sys.stdin.read()
enter = [helper, "enter", *map(str, fds), "-", "-", home, "--"]
kept = subprocess.run([*enter, "/bin/sh", "-c", probe], capture_output=True, text=True, pass_fds=fds,
                      cwd=home)
own = subprocess.run([helper, "own-pts", "-", home, "+" + work, "--", "bwrap", "--dev-bind", "/", "/",
                      "--bind", work, work, "--unshare-pid", "--proc", "/proc", "--", "/bin/sh", "-c", probe],
                     capture_output=True, text=True, cwd=home)
keeper.stdin.close()
keeper.wait()
print(kept.stdout + kept.stderr + "\0" + own.stdout + own.stderr, end="")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"), reason="runs the view as nobody (needs root)"
)
def test_as_a_non_root_user_the_layer_is_made_in_its_user_namespace() -> None:
    root = Path(tempfile.mkdtemp(prefix="eh-nobody-", dir="/tmp"))
    try:
        root.chmod(0o755)
        home = root / "h"
        (home / "work").mkdir(parents=True)
        (home / "note").write_text("NOTE-nobody\n")
        helper = root / "hostenter"
        helper.write_bytes(Path(str(hostkeeper.helper_path())).read_bytes())
        helper.chmod(0o755)
        for path in (home, home / "work", home / "note"):
            os.chown(path, 65534, 65534)
        probe = (
            f'P={shlex.quote(_PROBE)}; /usr/bin/python3 -c "$P" {home}/op.sock {home}/work/mine.sock; '
            f"cat {home}/note; "
            f"echo x > {home}/x || echo refused; echo y > {home}/work/y && echo wrote; pwd"
        )
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
             _AS_NOBODY, str(helper), str(home)],
            input=probe, capture_output=True, text=True, check=False, cwd="/",
        )  # fmt: skip
        kept, _, own = done.stdout.partition("\0")
        assert kept == own, done.stdout + done.stderr
        assert "['h', 'op.sock'] Connection refused" in kept, kept + done.stderr
        assert "['work', 'mine.sock'] connected" in kept, kept
        assert "NOTE-nobody" in kept and "refused" in kept and "wrote" in kept, kept
    finally:
        shutil.rmtree(root)


def test_a_workdir_outside_the_home_in_a_read_only_tree_is_named_with_what_to_change(state_dir: Path) -> None:
    """Every tree outside the writable roots is a run's read-only layer (fresh round 14 c): a workdir there
    writes nothing, and the run says so; one named in hostWritable, or in a shared dir, gets no note."""
    work = Path(tempfile.mkdtemp(prefix="eh14c-work-", dir="/var/tmp"))
    try:
        note = hostroots.workdir_note(str(state_dir), hostoutside.Outside(workdir=str(work)))
        assert note is not None and "hostWritable" in note and str(work) in note, note
        listed = hostoutside.Outside(workdir=str(work / "."), writable=(str(work),))
        assert hostroots.workdir_note(str(state_dir), listed) is None
        shared = hostoutside.Outside(workdir=tempfile.gettempdir())  # /tmp: every user's, not layered
        assert hostroots.workdir_note(str(state_dir), shared) is None
    finally:
        work.rmdir()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="runs the layers as nobody (needs root)"
)
def test_as_a_non_root_user_every_tree_is_layered_around_the_hosts_locked_mounts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway that is not root makes its layers in a user namespace, where every host mount is locked
    and no overlay of a directory holding one can be made (a host mount below /var): such a directory is
    layered by its subdirectories instead (homelayer.locked), so the run starts, and a socket outside the
    writable roots is refused there too."""
    root = Path(tempfile.mkdtemp(prefix="eh-nobody-", dir="/tmp"))
    spot = Path(tempfile.mkdtemp(prefix="eh14c-nobody-", dir="/var/lib"))  # beside /var/lib/docker's mount
    server = socket.socket(socket.AF_UNIX)
    try:
        root.chmod(0o755)
        spot.chmod(0o755)
        home = root / "h"
        home.mkdir()
        os.chown(home, 65534, 65534)
        helper = root / "hostenter"
        helper.write_bytes(Path(str(hostkeeper.helper_path())).read_bytes())
        helper.chmod(0o755)
        server.bind(str(spot / "op.sock"))
        os.chmod(spot / "op.sock", 0o777)
        server.listen(4)
        (spot / "note").write_text("NOTE-var\n")
        monkeypatch.setattr(homelayer, "locked", lambda: True)
        layers = homelayer.layers(str(home), [], [], system=True)
        assert "/var" not in layers or not any(p.startswith("/var/") for p in homelayer.mount_points())
        # a subdirectory in place of its directory is judged as a top-level one: /var/tmp is every user's
        assert "/var/tmp" not in layers, layers
        probe = f'P={shlex.quote(_PROBE)}; /usr/bin/python3 -c "$P" {spot}/op.sock; cat {spot}/note'
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(helper), "own-pts", "-",
             *layers, "--", "/bin/sh", "-c", probe],
            capture_output=True, text=True, check=False, cwd="/",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Connection refused" in done.stdout and "NOTE-var" in done.stdout, done.stdout + done.stderr
    finally:
        server.close()
        shutil.rmtree(spot)
        shutil.rmtree(root)


def test_the_roots_holding_a_path_are_found_by_its_prefixes_as_by_trying_each() -> None:
    """homelayer._Under answers `_inside(path, root)` for every root by the path's prefixes: the same roots
    as trying each in turn, for roots and paths with `/`, trailing separators, doubled ones, alike names
    (/a, /ab, /a/b), relative ones and the empty string."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from engine.commands import homelayer

    names = st.lists(st.sampled_from(["a", "ab", "b", ""]), max_size=4).map("/".join)
    paths = st.one_of(names, names.map(lambda p: "/" + p), names.map(lambda p: "/" + p + "/"))

    @settings(max_examples=400, derandomize=True, deadline=None)
    @given(st.lists(paths, max_size=8), paths)
    def same(roots: list[str], path: str) -> None:
        expected = {r for r in roots if homelayer._inside(path, r)}
        assert set(homelayer._Under(roots).holders(path)) == expected

    same()
