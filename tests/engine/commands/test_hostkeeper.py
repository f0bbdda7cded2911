"""The kept host view (engine.commands.hostkeeper): a run entering it sees exactly what a run in a bwrap
of its own sees, the keeper is made once and re-made when what it hides changes or when it dies, and one
state dir's keeper never serves another."""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from engine.commands import hostkeeper, hostoutside, hostroots, hostview
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(hostkeeper.helper_path() is None, reason="exechost-hostenter is not built (setup.sh)"),
]


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


def _keeper(state: Path) -> hostkeeper.Keeper:
    return _kept(state)


# mountinfo's point, options and source (fields 5, 6, 9) of each mount that is the topmost at its point
_TOPMOST = (
    "import os,re\n"
    "for line in open('/proc/self/mountinfo'):\n"
    " f=line.split();p=re.sub(r'\\\\([0-7]{3})',lambda m:chr(int(m[1],8)),f[4])\n"
    " try: fd=os.open(p,os.O_PATH|os.O_NOFOLLOW)\n"
    " except OSError: continue\n"
    " top=[l.split()[1] for l in open(f'/proc/self/fdinfo/{fd}') if l.startswith('mnt_id:')];os.close(fd)\n"
    " if top==[f[0]]: print(f[4],f[5],f[8])\n"
)


def _probe(state: Path) -> str:
    """What a host command can see and do: the state dir, every trusted config (readable, writable), its
    privileges, its namespaces relative to the host's, its PID namespace and /proc, every mount (point,
    type, ro/rw) with the ids and sources that differ between any two namespaces left out."""
    home = Path.home()
    configs = [
        home / ".gitconfig",
        home / ".config/git/config",
        home / ".npmrc",
        home / ".bashrc",
        "/etc/gitconfig",
    ]
    host_ns = {
        kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("user", "mnt", "pid", "net", "ipc", "uts")
    }
    checks = [
        f"echo state: $(ls -A {state}); echo x > {state}/new && echo state-writable; ls -A {state}",
        *(
            f"echo {c}: $(cat {c} 2>&1 | head -c 80); (echo y >> {c}) 2>/dev/null && echo {c} writable"
            for c in configs
        ),
        "grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status",
        *(
            f'[ "$(readlink /proc/self/ns/{kind})" = "{ns}" ] && echo {kind}: the hosts || echo {kind}: own'
            for kind, ns in host_ns.items()
        ),
        f"echo pid $$; echo parent $PPID; ls -d /proc/1 /proc/2 /proc/{os.getpid()} 2>&1",
        # (other engineers' containers come and go under /run/docker and /var/lib/docker: not compared;
        # /dev/pts is the run's own devpts over the host's, whose covered copies' flags differ between a
        # kept namespace and a bwrap's: what the run can reach there is listed instead)
        # only the mounts a run reaches (the topmost at each point): a kept view's runs have the home's
        # layer put over the kept mounts (engine.commands.homelayer), which stay listed below it; and
        # none of another suite's test dirs (/tmp/eh-*: its sandboxes and private dirs come and go)
        f"python3 -c {shlex.quote(_TOPMOST)} | grep -Ev '^/(run/docker/|var/lib/docker/|dev/pts )' "
        f"| awk -v own={shlex.quote(str(state.parent))} "
        "'index($1, \"/tmp/eh-\") != 1 || index($1, own) == 1' "
        "| sort",
        "echo pts: $(ls -A /dev/pts); grep ' /dev/pts ' /proc/self/mountinfo | tail -1 | cut -d' ' -f6,9-",
        "pwd -P; id; ulimit -a | md5sum",
    ]
    return "; ".join(checks)


def test_the_kept_view_is_exactly_as_confining_as_a_bwrap_of_its_own(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (state_dir / "operator.json").write_text('{"token": "tok-5e3c7"}')
    home = Path.home()
    (home / ".gitconfig").write_text("[user]\n\tname = op\n")
    (home / ".bashrc").write_text("# rc\n")
    kept = _run(_probe(state_dir), tmp_path)
    assert _keeper(state_dir).alive()
    with monkeypatch.context() as m:
        # every run its own bwrap, as before issue 31 and as a run with pinned copies still is
        m.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
        view = pinned_view(None, host=True)
        assert "--unshare-pid" in view.prefix and "own-pts" in view.prefix
        own = _run(_probe(state_dir), tmp_path)
    assert kept.stdout.splitlines() == own.stdout.splitlines()
    assert "tok-5e3c7" not in kept.stdout and "state:\n" in kept.stdout and "writable" in kept.stdout
    assert ".gitconfig writable" not in kept.stdout and "name = op" in kept.stdout
    assert "pid 2\n" in kept.stdout and "pid: own" in kept.stdout and "mnt: own" in kept.stdout
    assert "pts: ptmx\n" in kept.stdout, kept.stdout
    assert "devpts rw,mode=620,ptmxmode=666,max=256\n" in kept.stdout, kept.stdout
    assert not (state_dir / "new").exists()


def test_the_keeper_is_made_once_and_remade_when_what_it_hides_changes(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Other engineers' containers come and go on this machine: the mount table's rule is tested below.
    monkeypatch.setattr(hostkeeper, "_mounts", lambda: b"")
    home = Path.home()
    gitconfig = home / ".gitconfig"
    read_and_write = f"cat {gitconfig}; echo forged >> {gitconfig} || echo refused"
    first = _run(read_and_write, tmp_path)
    assert "refused" in first.stdout
    # bwrap made the missing configs' mountpoints, empty, on the host: the next view binds those (one
    # re-make), and from then on the view is the same.
    _run("true", tmp_path)
    keeper = _keeper(state_dir)
    assert _run("true", tmp_path).returncode == 0 and _keeper(state_dir) is keeper  # kept: not re-made

    # Written in place: the bind is of that file, the same keeper shows the new bytes, read-only.
    gitconfig.write_text("[user]\n\tname = one\n")
    done = _run(read_and_write, tmp_path)
    assert "name = one" in done.stdout and "refused" in done.stdout
    assert _keeper(state_dir) is keeper

    # Renamed over on the host (an editor's save): a bind of the file itself would be detached in every
    # other namespace; the home's read-only bind holds the directory, so the new file is read-only too.
    (home / "new").write_text("[user]\n\tname = two\n")
    os.replace(home / "new", gitconfig)
    done = _run(read_and_write, tmp_path)
    assert "name = two" in done.stdout and "refused" in done.stdout, done.stdout
    assert gitconfig.read_text() == "[user]\n\tname = two\n"
    assert _keeper(state_dir) is keeper

    # Gone: it stays gone (the home is read-only as a whole: nothing makes it).
    gitconfig.unlink()
    done = _run(f"test -e {gitconfig} || echo absent; echo forged >> {gitconfig} || echo refused", tmp_path)
    assert done.stdout.split() == ["absent", "refused"] and not gitconfig.exists()


def test_a_keeper_that_died_is_remade_and_a_run_prepared_before_still_enters_its_view(
    state_dir: Path, tmp_path: Path
) -> None:
    (state_dir / "operator.json").write_text("tok-5e3c7")
    prepared = pinned_view(None, host=True)  # its words name fds of the view, not the keeper's pid
    keeper = _keeper(state_dir)
    try:
        os.kill(keeper.pid, signal.SIGKILL)
        keeper.popen.wait()
        argv = prepared.wrap(["/bin/sh", "-c", f"cat {state_dir}/operator.json; ls -A {state_dir}; echo ran"])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=prepared.fds)
    finally:
        prepared.close()
    assert done.stdout == "ran\n" and "tok-5e3c7" not in done.stdout
    assert _run(f"ls -A {state_dir}; echo two", tmp_path).stdout == "two\n"  # a new keeper, the same view
    assert _keeper(state_dir) is not keeper and _keeper(state_dir).alive()


def test_the_helper_enters_only_a_namespace(tmp_path: Path) -> None:
    helper = str(hostkeeper.helper_path())
    with open(tmp_path / "f", "w") as f:
        argv = [helper, "enter", str(f.fileno()), "-", "-", "-", "--", "/bin/sh", "-c", "echo ran"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=(f.fileno(),))
    assert done.returncode == 126 and "ran" not in done.stdout and "setns" in done.stderr
    done = subprocess.run(
        [helper, "enter", "x", "-", "-", "-", "--", "true"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 126 and "not a namespace fd" in done.stderr


def test_one_state_dirs_keeper_never_serves_another(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other-state"
    other.mkdir(mode=0o700)
    (state_dir / "a-secret").write_text("A")
    (other / "b-secret").write_text("B")
    in_a = _run(f"ls -A {state_dir} {other}", tmp_path)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(other))
    in_b = _run(f"ls -A {state_dir} {other}", tmp_path)
    assert "a-secret" not in in_a.stdout and "b-secret" in in_a.stdout  # A's view hides A only
    assert "b-secret" not in in_b.stdout and "a-secret" in in_b.stdout  # B's hides B
    assert _keeper(state_dir) is not _keeper(other) and _keeper(state_dir).alive()
    hostkeeper.stop(str(other))
    assert not [n for n in hostkeeper._keepers if n.split("\0")[0] == str(other)]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs on the host")
def test_a_mount_made_or_removed_on_the_host_remakes_the_keeper(state_dir: Path, tmp_path: Path) -> None:
    point = tmp_path / "mnt"
    point.mkdir()
    assert _run(f"ls -A {point}", tmp_path).stdout == ""
    keeper = _keeper(state_dir)
    subprocess.run(["mount", "-t", "tmpfs", "eh-test", str(point)], check=True)
    try:
        (point / "mounted").write_text("")
        assert _run(f"ls -A {point}", tmp_path).stdout == "mounted\n"  # as a bwrap made now would see it
        assert _keeper(state_dir) is not keeper
        keeper = _keeper(state_dir)
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert _run(f"ls -A {point}", tmp_path).stdout == ""
    assert _keeper(state_dir) is not keeper


_AS_NOBODY = r"""
import os, subprocess, sys
helper, state, config = sys.argv[1:4]
view = ["--dev-bind", "/", "/", "--tmpfs", state, "--ro-bind", config, config]
keeper = subprocess.Popen(["bwrap", *view, "--", helper, "keep"], stdin=-1, stdout=-1)
pid = int(keeper.stdout.readline())
fds = [os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY) for kind in ("mnt", "user")]
probe = sys.stdin.read()
enter = [helper, "enter", *map(str, fds), "-", "-", "--"]
kept = subprocess.run([*enter, "/bin/sh", "-c", probe], capture_output=True, text=True, pass_fds=fds)
own = subprocess.run([helper, "own-pts", "-", "--", "bwrap", *view, "--unshare-pid", "--proc", "/proc", "--",
                      "/bin/sh", "-c", probe], capture_output=True, text=True)
keeper.stdin.close()
keeper.wait()
print(kept.returncode, own.returncode, os.fstat(fds[1]).st_ino != os.stat("/proc/self/ns/user").st_ino)
print(kept.stdout + "\0" + own.stdout, end="")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"), reason="runs the view as nobody (needs root)"
)
def test_as_a_non_root_user_the_kept_view_is_a_bwrap_of_its_own() -> None:
    """A non-root gateway's view is in a user namespace: entered through it, the command holds no
    capability there and none in its bounding set, as in bwrap. (The helper and bwrap only: the test's
    own Python may not be reachable by `nobody`.)"""
    root = Path(tempfile.mkdtemp(prefix="eh-nobody-", dir="/tmp"))  # pytest's tmp dirs are root's alone
    try:
        _compare_as_nobody(root)
    finally:
        shutil.rmtree(root)


def _compare_as_nobody(root: Path) -> None:
    (root / "s").mkdir(mode=0o700)
    (root / "s" / "operator.json").write_text("tok-5e3c7")
    (root / "gitconfig").write_text("[user]\n\tname = nobody\n")
    helper = root / "hostenter"
    helper.write_bytes(Path(str(hostkeeper.helper_path())).read_bytes())
    helper.chmod(0o755)
    root.chmod(0o755)
    for path in (root / "s", root / "s" / "operator.json", root / "gitconfig"):
        os.chown(path, 65534, 65534)
    state, config = root / "s", root / "gitconfig"
    probe = (
        f"id -u; cat {state}/operator.json; ls -A {state}; cat {config}; echo x >> {config} || echo refused; "
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status; echo pid $$; "
        f"umount {state} || echo kept; "
        "cut -d' ' -f5,6 /proc/self/mountinfo | grep -Ev '^/(run/docker/|var/lib/docker/|dev/pts )' | sort; "
        "echo pts: $(ls -A /dev/pts); grep ' /dev/pts ' /proc/self/mountinfo | tail -1 | cut -d' ' -f9-; "
        "exit 131"
    )
    # Both views are made from a mount table of the test's own (a private copy of the host's): a mount
    # another suite makes or removes on the host between the kept view's probe and the bwrap's cannot
    # reach either, so the comparison is between the two views and nothing else.
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private",
         "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", _AS_NOBODY,
         str(helper), str(state), str(config)],
        input=probe, capture_output=True, text=True, check=False, cwd="/",
    )  # fmt: skip
    codes, _, outputs = done.stdout.partition("\n")
    kept, _, own = outputs.partition("\0")
    assert codes == "131 131 True", done.stderr
    assert kept == own
    assert "tok-5e3c7" not in kept and "refused" in kept and "kept" in kept
    assert "CapBnd:\t0000000000000000" in kept
    # its own devpts, in its user namespace
    assert "pts: ptmx\ndevpts rw,mode=620,ptmxmode=666,max=256\n" in kept


def test_the_cwd_is_checked_in_the_view_and_its_fd_never_reaches_the_command(
    state_dir: Path, tmp_path: Path
) -> None:
    """The decided directory's fd (opened in the host's namespace) is compared with the command's cwd and
    closed before it runs, in the kept view and after a bwrap of its own alike; no process of the run's
    namespace holds it."""
    (tmp_path / "other").mkdir()
    pin = tmp_path / "pinned.txt"
    # every process of the run's namespace: the command, and pid 1 (bwrap's, or the helper's)
    listing = "for f in /proc/[0-9]*/fd/*; do [ -d $f ] && echo DIR $f; done; echo ran"
    for pinned_copy in (False, True):
        for cwd, expect in ((tmp_path, "ran"), (tmp_path / "other", "approval-stale")):
            view = pinned_view(None, [(str(pin), b"x")] if pinned_copy else (), host=True)
            fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                assert view.check_cwd(fd)
                argv = view.wrap(["/bin/sh", "-c", listing])
                done = subprocess.run(
                    argv, cwd=cwd, capture_output=True, text=True, check=False, pass_fds=(*view.fds, fd)
                )
            finally:
                view.close()
                os.close(fd)
            assert expect in done.stdout + done.stderr, (pinned_copy, cwd, done)
            assert "DIR" not in done.stdout
            if expect != "ran":
                assert done.returncode == 126 and "ran" not in done.stdout


def test_a_reloaded_workspace_root_reaches_the_kept_view(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh round 6 k: every configured sandbox workspace root is covered in the host view, the global
    one and each agent's; the kept view is made once, and a config that moves a root re-makes it. A root
    the config named once stays covered after it moves (recorded as the view is made, session 15: what
    a retired agent's sandboxes left there is no other agent's to read)."""
    from engine.config.loader import load_config_text
    from engine.tools.exec_host import host_outside

    first, second, own = tmp_path / "ws1", tmp_path / "ws2", tmp_path / "ws-ops"
    for root in (first, second, own):
        (root / "agent-x").mkdir(parents=True)
        (root / "agent-x" / "secret").write_text(f"SECRET-{root.name}\n")

    def read_all(text: str) -> tuple[str, hostkeeper.Keeper]:
        outside = host_outside(load_config_text(text))
        view = pinned_view(None, host=True, outside=outside)
        try:
            script = "; ".join(f"cat {r}/agent-x/secret 2>&1" for r in (first, second, own))
            argv = view.wrap(["/bin/sh", "-c", script])
            done = subprocess.run(
                argv, cwd=tmp_path, capture_output=True, text=True, check=False, pass_fds=view.fds
            )
        finally:
            view.close()
        return done.stdout, _keeper(state_dir)

    monkeypatch.setattr(hostkeeper, "_mounts", lambda: b"")  # other engineers' containers come and go
    agent = f'[[agents.list]]\nid = "ops"\nsandbox.workspaceRoot = "{own}"\n'
    # (the first run makes the missing configs' mountpoints on the host: the next binds those)
    read_all(f'[agents.defaults.sandbox]\nworkspaceRoot = "{first}"\n' + agent)
    seen, keeper = read_all(f'[agents.defaults.sandbox]\nworkspaceRoot = "{first}"\n' + agent)
    assert "SECRET-ws1" not in seen and "SECRET-ws-ops" not in seen and "SECRET-ws2" in seen, seen
    again, same = read_all(f'[agents.defaults.sandbox]\nworkspaceRoot = "{first}"\n' + agent)
    assert again == seen and same is keeper  # kept while the config says the same
    moved, remade = read_all(f'[agents.defaults.sandbox]\nworkspaceRoot = "{second}"\n')
    assert not any(f"SECRET-{r.name}" in moved for r in (first, second, own)), moved
    assert remade is not keeper and not keeper.alive()


def test_a_cwd_in_a_covered_workspace_root_is_refused(state_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    outside = hostoutside.Outside(covered=(str(root),))
    hostroots.refuse_hidden_cwd(str(tmp_path), str(state_dir), outside)
    with pytest.raises(hostoutside.HostViewError, match="sandbox workspace root"):
        hostroots.refuse_hidden_cwd(str(root / "agent-x"), str(state_dir), outside)
    # a missing root is made (0700) before the view covers it: none can be planted as a link first
    assert "--tmpfs" in hostview.view_args(str(state_dir), outside=outside) and root.is_dir()
    assert root.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="keyctl syscall numbers of x86_64")
def test_a_host_run_makes_no_keyring_call(tmp_path: Path) -> None:
    """hostenter's seccomp filter refuses keyctl, add_key and request_key EPERM, whatever they name: the
    persistent keyring (round 11 a), the user keyrings @u/@us (round 14 c) and the run's own session keyring
    alike (the kernel's key store is the account's, in no namespace)."""
    script = (
        "import ctypes, os; c = ctypes.CDLL(None, use_errno=True)\n"
        "for name, call in (('persistent', (250, 22, -1, -3)), ('user', (250, 0, -4, 0)),\n"
        "                   ('user-session', (250, 0, -5, 0)), ('session', (250, 0, -3, 0)),\n"
        "                   ('link', (250, 8, -4, -3)), ('add_key', (248, b'user', b'k', b'v', 1, -3)),\n"
        "                   ('request_key', (249, b'user', b'k', None, 0))):\n"
        "    print(name, c.syscall(*call), ctypes.get_errno())\n"
    )
    done = _run(f"exec python3 -c {shlex.quote(script)}", tmp_path)
    assert done.returncode == 0, done.stderr
    results = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert len(results) == 7 and set(results.values()) == {f"-1 {errno.EPERM}"}, done.stdout


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="io_uring_setup's number on x86_64")
def test_a_host_run_opens_only_the_socket_families_a_namespace_confines(tmp_path: Path) -> None:
    """socket() of unix, inet, inet6 and netlink works in a host run; vsock (which no network namespace
    confines: the hypervisor's side) and any other family is refused EAFNOSUPPORT, and io_uring (whose
    socket operation no seccomp filter sees) EPERM."""
    script = (
        "import ctypes, socket\n"
        "for name in ('AF_UNIX', 'AF_INET', 'AF_INET6', 'AF_NETLINK', 'AF_VSOCK', 'AF_PACKET', 'AF_ALG'):\n"
        "    try:\n"
        "        socket.socket(getattr(socket, name), socket.SOCK_DGRAM if name != 'AF_ALG' else 5).close()\n"
        "        print(name, 'opened')\n"
        "    except OSError as e:\n"
        "        print(name, e.errno)\n"
        "c = ctypes.CDLL(None, use_errno=True)\n"
        "params = ctypes.create_string_buffer(120)\n"
        "print('io_uring', c.syscall(425, 4, params), ctypes.get_errno())\n"
    )
    done = _run(f"exec python3 -c {shlex.quote(script)}", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for name in ("AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"):
        assert lines[name] == "opened", done.stdout
    for name in ("AF_VSOCK", "AF_PACKET", "AF_ALG"):
        assert lines[name] == str(errno.EAFNOSUPPORT), done.stdout
    assert lines["io_uring"] == f"-1 {errno.EPERM}", done.stdout


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64")
def test_a_host_run_gives_no_file_a_set_id_bit(tmp_path: Path) -> None:
    """Fresh round 17 a: every call that gives a file its mode refuses one with S_ISUID or S_ISGID (EPERM),
    as the sandboxes' filters do (one rule set, engine.sandbox.seccomprules); openat2, whose mode no filter
    reads, is ENOSYS. Modes without them (0755, the sticky 01777) are given as before."""
    script = (
        "import ctypes, os, stat\n"
        "c = ctypes.CDLL(None, use_errno=True)\n"
        "def tried(name, call):\n"
        "    try:\n"
        "        call(); print(name, 'done')\n"
        "    except OSError as e:\n"
        "        print(name, e.errno)\n"
        "open('f', 'w').close()\n"
        "fd = os.open('f', os.O_RDONLY)\n"
        "tried('chmod', lambda: os.chmod('f', 0o4755))\n"
        "tried('chmod-setgid', lambda: os.chmod('f', 0o2755))\n"
        "tried('fchmod', lambda: os.fchmod(fd, 0o4755))\n"
        "tried('fchmodat', lambda: os.chmod('f', 0o6755, dir_fd=os.open('.', os.O_RDONLY)))\n"
        "tried('open', lambda: os.close(os.open('g', os.O_CREAT | os.O_WRONLY, 0o4755)))\n"
        "tried('mknod', lambda: os.mknod('h', stat.S_IFREG | 0o2755))\n"
        "r = c.syscall(452, -100, b'f', 0o4755, 0); print('fchmodat2', r, ctypes.get_errno())\n"
        "r = c.syscall(85, b'i', 0o4755); print('creat', r, ctypes.get_errno())\n"
        "how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)\n"
        "r = c.syscall(437, -100, b'j', how, 24); print('openat2', r, ctypes.get_errno())\n"
        "tried('plain', lambda: os.chmod('f', 0o755))\n"
        "tried('sticky', lambda: os.chmod('f', 0o1777))\n"
        "print('modes', *(oct(os.stat(n).st_mode & 0o7000) for n in os.listdir('.')))\n"
    )
    done = _run(f"exec python3 -c {shlex.quote(script)}", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for name in ("chmod", "chmod-setgid", "fchmod", "fchmodat", "open", "mknod"):
        assert lines[name] == str(errno.EPERM), done.stdout
    assert lines["fchmodat2"] in (f"-1 {errno.EPERM}", f"-1 {errno.ENOSYS}"), done.stdout  # (a kernel < 6.6)
    assert lines["creat"] == f"-1 {errno.EPERM}", done.stdout
    assert lines["openat2"] == f"-1 {errno.ENOSYS}", done.stdout
    assert lines["plain"] == lines["sticky"] == "done", done.stdout
    assert set(lines["modes"].split()) <= {"0o0", "0o1000"}, done.stdout  # no file got a set-id bit


def test_the_helpers_rules_are_the_sandboxes_rule_set() -> None:
    """exechost-hostenter is built with rules.h, which engine.sandbox.seccomphost writes from
    engine.sandbox.seccomprules: the header in the tree is exactly that (run `python -m
    engine.sandbox.seccomphost` after changing the rules), and its rules are a part of the sandboxes'."""
    from engine.sandbox import seccomphost, seccomprules

    assert seccomphost.HEADER.read_text() == seccomphost.header()
    assert set(seccomprules.HOST_REFUSED_SYSCALLS) <= set(seccomprules.REFUSED_SYSCALLS)
    assert set(seccomprules.HOST_UNSUPPORTED_SYSCALLS) <= set(seccomprules.UNSUPPORTED_SYSCALLS)


@pytest.mark.parametrize("kept", [True, False], ids=["kept view", "own bwrap"])
def test_a_host_runs_dev_holds_only_the_devices_a_command_needs(
    kept: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's /dev is bwrap's minimal one, not the host's devtmpfs (whose nodes the gateway's account
    opens by a group or a seat ACL: kvm, disks, the webcam), with the run's own capped devpts."""
    if not kept:
        monkeypatch.setattr(hostview, "kept_prefix", lambda *_a, **_k: None)
    done = _run("ls -A /dev; echo --; grep ' /dev/pts ' /proc/self/mountinfo | tail -n 1", tmp_path)
    assert done.returncode == 0, done.stderr
    listed, pts = done.stdout.split("--\n")
    names = set(listed.split())
    allowed = {"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout"}
    assert names <= allowed | {"tty", "urandom", "zero", "console"}, names
    assert {"null", "zero", "urandom", "tty", "pts", "shm", "fd"} <= names
    assert "max=256" in pts  # the run's own devpts, capped, not bwrap's


def test_a_keeper_whose_bwrap_failed_its_setup_is_started_again(state_dir: Path, tmp_path: Path) -> None:
    """bwrap's setup fails now and then while the host's mount table changes under it (a source's path
    resolved to another mount), before anything of a run has started: the keeper is started again, and its
    runs do not fall back to a bwrap of their own, which could meet the same change."""
    real = shutil.which("bwrap")
    assert real is not None
    tries = tmp_path / "tries"
    flaky = tmp_path / "bwrap"
    flaky.write_text(
        "#!/bin/sh\n"
        f"echo try >> {tries}\n"
        f'if [ "$(wc -l < {tries})" -eq 1 ]; then\n'
        '  echo "bwrap: Race condition binding dirfd" >&2; exit 1\n'
        "fi\n"
        f'exec {real} "$@"\n'
    )
    flaky.chmod(0o755)
    helper = hostkeeper.helper_path()
    assert helper is not None
    ops = hostview.view_args(str(state_dir))
    key = hostkeeper.view_key(str(flaky), helper, str(state_dir), ops)
    keeper = hostkeeper.ensure(key, str(state_dir), str(flaky), helper, ops)
    try:
        assert keeper is not None and keeper.alive()
        assert tries.read_text().split() == ["try", "try"]
    finally:
        if keeper is not None:
            hostkeeper._keepers.pop(str(state_dir), None)
            keeper.stop()
