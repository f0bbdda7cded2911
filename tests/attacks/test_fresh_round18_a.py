"""Fresh round 18 a: a hostile agent's commands from inside its runs (gateway host, bwrap, Docker)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import ctypes.util
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import rootcaps
from engine.sandbox import docker_ops, hostcpu
from tests.attacks.harness import attempt

# The agent's command runs unasked (security = "full"): what its run can reach is the view's business.
FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
BWRAP = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
)
DOCKER_IMAGE = "exechost-debian-test:bookworm"  # the tests' Debian image (python3 in it)
DOCKER = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "docker"\n'
    f'[agents.defaults.sandbox.docker]\nimage = "{DOCKER_IMAGE}"\n'
)


def _where(where: str) -> str:
    """The config of a run `where` the probe runs (skipped when that backend is not here)."""
    if where == "bwrap-sandbox":
        if shutil.which("bwrap") is None:
            pytest.skip("bubblewrap is not installed")
        return BWRAP
    if where == "docker-sandbox":
        try:
            docker_ops.client().images.get(DOCKER_IMAGE)
        except Exception as exc:  # no engine, or no test image
            pytest.skip(f"no Docker engine with {DOCKER_IMAGE}: {exc}")
        return DOCKER
    return FULL


@pytest.fixture
def no_containers_left(state_dir: Path) -> Iterator[None]:
    """This install's Docker sandboxes removed after the test (the gateway leaves them for reuse)."""
    yield
    with contextlib.suppress(Exception):
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])


PY = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
async def test_class1_a_root_host_run_unmounts_the_state_dirs_cover(state_dir: Path) -> None:
    """Held: a root gateway's run keeps only engine.commands.rootcaps' list (no CAP_SYS_ADMIN to umount)."""
    (state_dir / "operator-token").write_text("TOKEN-OF-THE-OPERATOR\n")
    os.chmod(state_dir / "operator-token", 0o600)
    script = f"umount -l {state_dir} 2>/dev/null; cat {state_dir}/operator-token 2>/dev/null; echo done"
    details = await attempt(state_dir, script, config=FULL)
    assert details["status"] == "completed", details
    assert "TOKEN-OF-THE-OPERATOR" not in details["_text"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.skipif(shutil.which("unshare") is None, reason="the variant runs util-linux unshare")
async def test_class1_a_root_host_runs_own_user_namespace_does_not_lift_the_cover(state_dir: Path) -> None:
    """The variant by a user namespace of the run's own (the filter leaves `unshare` to host runs): every
    capability there, but the view's mounts are locked in it (the kernel refuses their unmount: EINVAL),
    and a map of uid 0 needs CAP_SETFCAP, which the run does not keep."""
    (state_dir / "operator-token").write_text("TOKEN-OF-THE-OPERATOR\n")
    os.chmod(state_dir / "operator-token", 0o600)
    inner = f"umount -l {state_dir}; cat {state_dir}/operator-token"
    script = f"unshare -Um sh -c '{inner}' 2>&1; unshare -Urm sh -c '{inner}' 2>&1; echo done"
    details = await attempt(state_dir, script, config=FULL)
    assert details["status"] == "completed", details
    assert "done" in details["_text"], details["_text"]
    assert "TOKEN-OF-THE-OPERATOR" not in details["_text"], details["_text"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="the run uses util-linux setpriv")
async def test_a_root_host_run_still_does_a_root_users_ordinary_work(state_dir: Path) -> None:
    """What the kept list is for: chown to another account, chmod of its file, and a drop to that account
    (setpriv, as su and a package manager's sandbox user do) still work in a root gateway's host run."""
    work = state_dir.parent / "w"
    work.mkdir(mode=0o755)
    script = (
        "touch f && chown 65534:65534 f && chmod 0640 f && stat -c '%u %a' f && "
        "setpriv --reuid=65534 --regid=65534 --clear-groups id -u"
    )
    config = FULL + f'hostWritable = ["{work}"]\n'
    details = await attempt(state_dir, script, config=config, workdir=str(work))
    assert details["status"] == "completed", details
    assert "65534 640\n65534" in details["_text"], details["_text"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs /usr/bin/python3")
async def test_class1_a_root_host_run_detaches_the_proc_sys_cover(state_dir: Path) -> None:
    probe = state_dir.parent / "core_pattern.py"
    probe.write_text(
        "import os\n"
        "try:\n"
        "    os.close(os.open('/proc/sys/kernel/core_pattern', os.O_WRONLY))\n"
        "    print('OPENED-FOR-WRITING')\n"
        "except OSError as e:\n"
        "    print('refused', e)\n"
    )
    details = await attempt(state_dir, f"umount -l /proc/sys; {PY} {probe}", config=FULL)
    assert details["status"] == "completed", details
    assert "OPENED-FOR-WRITING" not in details["_text"], details["_text"]


_MACHINE_WIDE = {
    # sethostname to the name the host already has: no change, but the call succeeds only with
    # CAP_SYS_ADMIN over the UTS namespace the run shares with the host (the run's own readlink says so)
    "hostname": (
        "import ctypes,socket,os\n"
        "c=ctypes.CDLL(None,use_errno=True)\n"
        "n=socket.gethostname().encode()\n"
        "r=c.sethostname(n,len(n))\n"
        "print(os.readlink('/proc/self/ns/uts'), 'REACHED' if r==0 else 'SAFE', ctypes.get_errno())\n"
    ),
    # settimeofday(NULL, NULL) (the raw call: glibc's wrapper reads tv) changes nothing but is refused
    # without CAP_SYS_TIME (security_settime64):
    # with it, the same call with a time sets the host's clock (grants' expiry, TLS, every log)
    "clock": (
        "import ctypes\n"
        "c=ctypes.CDLL(None,use_errno=True)\n"
        "import os\n"
        "nr={'x86_64': 164, 'aarch64': 170}[os.uname().machine]\n"
        "r=c.syscall(nr,None,None)\n"
        "print('REACHED' if r==0 else 'SAFE', ctypes.get_errno())\n"
    ),
}


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs /usr/bin/python3")
@pytest.mark.parametrize("what", sorted(_MACHINE_WIDE))
async def test_class1_a_root_host_run_acts_on_the_whole_machine(state_dir: Path, what: str) -> None:
    """Held: a UTS namespace of its own, no CAP_SYS_ADMIN nor CAP_SYS_TIME, and the host filter refuses
    settimeofday and clock_settime (a second layer)."""
    probe = state_dir.parent / "probe.py"
    probe.write_text(_MACHINE_WIDE[what])
    details = await attempt(state_dir, f"{PY} {probe}", config=FULL)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
async def test_class1_a_root_host_runs_capabilities_are_the_listed_ones(state_dir: Path) -> None:
    """The variant by any capability (CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_NET_ADMIN, CAP_BPF, one the kernel
    adds later): the run's bounding set is the kept list exactly, no other set holds more, none ambient; and
    its UTS namespace is not the host's."""
    details = await attempt(state_dir, "grep ^Cap /proc/self/status; readlink /proc/self/ns/uts", config=FULL)
    assert details["status"] == "completed", details["_text"]
    lines = details["_text"].splitlines()
    sets = {k: int(v.strip(), 16) for k, v in (ln.split(":", 1) for ln in lines if ln.startswith("Cap"))}
    assert {"CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"} <= set(sets), details["_text"]
    kept = rootcaps.kept_bits()
    for name in ("CapBnd", "CapEff", "CapPrm", "CapInh"):
        assert sets[name] & ~kept == 0, f"{name} {sets[name]:x}"
    assert sets["CapAmb"] == 0
    assert sets["CapEff"] & (1 << 0), "a root run still chowns (CAP_CHOWN kept)"
    assert os.readlink("/proc/self/ns/uts") not in details["_text"], details["_text"]


# Opens an eighth of the host's open-file table (fs.file-max, one count for the whole machine) and holds it:
# each child raises its soft nofile to the hard limit, opens /dev/null (a new struct file each time: dup
# would share one) up to it, reports, and holds until the parent has counted every child.
_FILE_TABLE = """
import os, resource
file_max = int(open("/proc/sys/fs/file-max").read())
want = file_max // 8 + 1
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ready_r, ready_w = os.pipe()
hold_r, hold_w = os.pipe()
kids, planned = [], 0
while planned < want:
    n = min(hard - 16, want - planned)
    try:
        pid = os.fork()
    except OSError:  # (the run's pids cap: what it made so far is what it holds)
        break
    if pid == 0:
        os.close(hold_w)
        os.close(ready_r)
        got = 0
        try:
            for _ in range(n):
                os.open("/dev/null", os.O_RDONLY)
                got += 1
        except OSError:
            pass
        os.write(ready_w, got.to_bytes(4, "little"))
        os.read(hold_r, 1)
        os._exit(0)
    kids.append(pid)
    planned += n
os.close(ready_w)
os.close(hold_r)
held = 0
for _ in kids:
    b = b""
    while len(b) < 4:
        b += os.read(ready_r, 4 - len(b))
    held += int.from_bytes(b, "little")
print("held", held, "of file-max", file_max, "in", len(kids), "processes")
print("REACHED" if held >= want else "SAFE")
os.close(hold_w)
for k in kids:
    os.waitpid(k, 0)
"""


_FILE_TABLE_HOST_OPEN = pytest.mark.xfail(
    strict=True,
    reason="open: a host run has no share of the host's open-file table (fs.file-max, one count for the "
    "whole machine, no namespace or cgroup divides it): its nofile is the gateway's, and its pids cap its "
    "agent's pid_max/4, whose product exceeds the whole table; one run held an eighth of it, after which "
    "every process without CAP_SYS_ADMIN gets ENFILE on each open. Sandboxes of both backends hold at most "
    "1/docker.fileTableShare (engine.sandbox.filetable: nofile x pidsLimit). Closing the class: host runs' "
    "nofile x their pids cap within the agent's share too (a lower nofile or a lower pids cap for them)",
)


@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs python3")
@pytest.mark.parametrize(
    "where",
    [
        "bwrap-sandbox",  # nofile x pidsLimit within 1/16 of fs.file-max (engine.sandbox.filetable)
        "docker-sandbox",
        pytest.param("host", marks=_FILE_TABLE_HOST_OPEN),
    ],
)
async def test_class3_one_agents_run_takes_the_hosts_open_file_table(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    config = _where(where)
    script = "cat > /tmp/filetable.py <<'PYEOF'\n" + _FILE_TABLE + "PYEOF\npython3 /tmp/filetable.py"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


# Holds an eighth of the host's TCP memory (net.ipv4.tcp_mem[2], in pages, one count for every network
# namespace; passed in: only the initial namespace shows it): loopback pairs in the run's own namespace
# whose receiver never reads, each side's buffer asked as large as net.core allows, the sender filled
# until it would block. /proc/net/sockstat's `mem` is the protocol's count for the whole machine.
_TCP_MEMORY = """
import resource, socket, sys
tcp_max = int(sys.argv[1])
want = tcp_max // 8 + 1
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
def mem():
    for line in open("/proc/net/sockstat"):
        if line.startswith("TCP:"):
            f = line.split()
            return int(f[f.index("mem") + 1])
    return 0
base = mem()
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(4096)
held, pairs = [], 0
while mem() - base < want and 2 * pairs + 32 < hard:
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
    c.connect(srv.getsockname())
    s, _ = srv.accept()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    c.setblocking(False)
    try:
        while True:
            c.send(b"x" * 65536)
    except BlockingIOError:
        pass
    held += [c, s]
    pairs += 1
got = mem() - base
print("pairs", pairs, "held", got, "pages of tcp_mem's", tcp_max)
print("REACHED" if got >= want else "SAFE")
"""


@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs python3")
@pytest.mark.skipif(not os.path.exists("/proc/sys/net/ipv4/tcp_mem"), reason="no IPv4 TCP")
@pytest.mark.parametrize("where", ["bwrap-sandbox", "docker-sandbox", "host"])
async def test_class3_one_agents_run_takes_the_hosts_tcp_memory(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    config = _where(where)
    if where == "bwrap-sandbox":  # a small memory cap: the buffers are held past it (no group charges them)
        config += '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
    elif where == "docker-sandbox":
        config = config.replace(
            "[agents.defaults.sandbox.docker]\n", '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
        )
    tcp_max = Path("/proc/sys/net/ipv4/tcp_mem").read_text().split()[2]
    script = f"cat > /tmp/tcpmem.py <<'PYEOF'\n{_TCP_MEMORY}PYEOF\npython3 /tmp/tcpmem.py {tcp_max}"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


# In a Docker sandbox: takes every inotify instance its uid may have, says how many in the workspace, and
# holds them until the test has looked (a FIFO there: opened for reading, it waits for the test's close).
_INOTIFY_HOLD = """
import ctypes, os
c = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = c.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
os.mkfifo("/workspace/release")
with open("/workspace/.held", "w") as f:
    f.write(str(len(fds)))
os.rename("/workspace/.held", "/workspace/inotify-held")
open("/workspace/release").read()
print("held", len(fds), "inotify instances")
"""


def _inotify_room(most: int = 16) -> int:
    """How many inotify instances this process (the gateway's account, root) can still make, up to `most`
    (all closed again): another root process closing one meanwhile adds one or two, never `most`."""
    libc = ctypes.CDLL(None, use_errno=True)
    made: list[int] = []
    try:
        while len(made) < most:
            fd = libc.inotify_init1(0)
            if fd < 0:
                break
            made.append(fd)
        return len(made)
    finally:
        for fd in made:
            os.close(fd)


@pytest.mark.xfail(
    strict=True,
    reason="open: a root gateway's Docker sandbox is host uid 0 in the initial user namespace (no userns, "
    "no --user: sandboxuid gives bwrap sandboxes a uid of their own, not Docker's), so the per-uid kernel "
    "counters it spends are root's: its command took every inotify instance root had left (of 128 per "
    "uid), and the gateway's own process (root) then got EMFILE from inotify_init, as would every root "
    "daemon on the host (systemd, dockerd) and every root host run. Closing the class: Docker sandboxes "
    "as a uid of their own too (the agent's sandboxuid, `--user` or a userns-remap), as bwrap's are",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's Docker sandbox")
async def test_class3_a_docker_sandbox_takes_roots_inotify_instances(
    state_dir: Path, no_containers_left: None
) -> None:
    config = _where("docker-sandbox")
    script = f"cat > /tmp/hold.py <<'PYEOF'\n{_INOTIFY_HOLD}PYEOF\npython3 /tmp/hold.py"
    run = asyncio.create_task(attempt(state_dir, script, config=config))
    held: Path | None = None
    for _ in range(6000):  # until the sandbox says it holds them (or its run ended without)
        held = next(iter(state_dir.rglob("inotify-held")), None)
        if held is not None or run.done():
            break
        await asyncio.sleep(0.02)
    assert held is not None, (await run) if run.done() else "the sandbox never said it held them"
    room = _inotify_room()  # the gateway's own account, while the sandbox holds them
    await asyncio.to_thread(lambda: os.close(os.open(held.parent / "release", os.O_WRONLY)))
    details = await run
    assert details["status"] == "completed", details
    assert room == 16, f"the gateway's account could make {room} inotify instances; {details['_text']}"


# In a Docker sandbox: POSIX message queues (default size) made until the kernel refuses one; they stay in
# the container's IPC namespace after the command ends (as long as the sandbox does).
_MQUEUES = """
import ctypes, os
rt = ctypes.CDLL("librt.so.1", use_errno=True)
made = 0
while made < 10000:
    if rt.mq_open(("/fill%d" % made).encode(), os.O_CREAT | os.O_RDWR, 0o600, None) < 0:
        break
    made += 1
print("made", made, "queues, then", os.strerror(ctypes.get_errno()))
"""


def _mqueue_errno() -> int:
    """0 when this process (the gateway's account, root) can make a POSIX message queue, else its errno."""
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
    name = f"/exechost-probe-{os.getpid()}".encode()
    fd = rt.mq_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, None)
    if fd >= 0:
        os.close(fd)
        rt.mq_unlink(name)
        return 0
    return ctypes.get_errno()


@pytest.mark.xfail(
    strict=True,
    reason="open: a root gateway's Docker sandbox is host uid 0 in the initial user namespace, so the "
    "bytes of its POSIX message queues count against root's one RLIMIT_MSGQUEUE total (per uid, in no "
    "IPC namespace: the container's own /dev/mqueue still charges root): the queues its command made "
    "(they outlive the command, in the sandbox's IPC namespace) left the gateway's own process unable "
    "to make one (EMFILE), as every root program on the host. Same construction as the inotify take",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's Docker sandbox")
async def test_class3_a_docker_sandbox_takes_roots_message_queue_bytes(
    state_dir: Path, no_containers_left: None
) -> None:
    config = _where("docker-sandbox")
    assert _mqueue_errno() == 0  # before: root may make one
    script = f"cat > /tmp/mq.py <<'PYEOF'\n{_MQUEUES}PYEOF\npython3 /tmp/mq.py"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    err = _mqueue_errno()
    assert err == 0, f"the gateway's mq_open: {os.strerror(err)}; {details['_text']}"


# Unix socket pairs whose reader never reads, each sender's buffer asked as large as net.core allows.
_UNIX_BUFFERS = """
import fcntl, resource, socket, struct, sys, termios
want = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, total = [], 0
while total < want and len(held) + 8 < hard:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
    a.setblocking(False)
    try:
        while True:
            a.send(b"x" * 65536)
    except BlockingIOError:
        pass
    total += struct.unpack("i", fcntl.ioctl(a, termios.TIOCOUTQ, b"\\0\\0\\0\\0"))[0]
    held += [a, b]
print("queued", total >> 20, "MiB")
print("REACHED" if total >= want else "SAFE")
"""


@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs python3")
async def test_class3_a_sandboxs_unix_socket_buffers_count_against_its_memory_cap(state_dir: Path) -> None:
    """Held: unlike TCP's, a unix socket's queued buffers are charged to the sandbox's memory group, so a
    bwrap sandbox capped at 128 MB holding 1 GiB in socket pairs it never reads is killed at its cap."""
    config = _where("bwrap-sandbox") + '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
    script = f"cat > /tmp/unixbuf.py <<'PYEOF'\n{_UNIX_BUFFERS}PYEOF\npython3 /tmp/unixbuf.py {1 << 30}"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "REACHED" not in details["_text"], details["_text"]


# Opens /dev/ptmx (a terminal each, the slave never opened) until the kernel refuses one, reads the host's
# one count of terminals outside its initial devpts (kernel.pty.nr against pty.max less pty.reserve), and
# lets them all go at once.
_PTYS = """
import os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds, why = [], "the fd limit"
while len(fds) + 16 < hard:
    try:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        why = os.strerror(e.errno)
        break
def k(name):
    return int(open("/proc/sys/kernel/pty/" + name).read())
nr, top = k("nr"), k("max") - k("reserve")
for fd in fds:
    os.close(fd)
print("opened", len(fds), "terminals, then", why, "; kernel.pty.nr", nr, "of", top)
print("REACHED" if len(fds) > top // 8 else "SAFE")  # more than an eighth of the one count
"""


async def test_class3_a_docker_sandbox_opens_every_terminal_outside_the_hosts_devpts(
    state_dir: Path, no_containers_left: None
) -> None:
    config = _where("docker-sandbox")
    script = f"cat > /tmp/ptys.py <<'PYEOF'\n{_PTYS}PYEOF\npython3 /tmp/ptys.py"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


async def test_class3_a_bwrap_sandbox_opens_at_most_its_share_of_terminals(state_dir: Path) -> None:
    """Held: a bwrap sandbox's /dev/pts is the helper's instance of 256: the same probe stops there."""
    config = _where("bwrap-sandbox")
    script = f"cat > /tmp/ptys.py <<'PYEOF'\n{_PTYS}PYEOF\npython3 /tmp/ptys.py"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


def _cpu_group(pid: int | str) -> str:
    """The v1 cpu hierarchy's group of a process (`/` at the root)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return ""


@pytest.mark.skipif(not hostcpu.usable(), reason="no writable v1 cpu hierarchy")
@pytest.mark.parametrize(
    "where",
    [
        "bwrap-sandbox",  # its keeper enters the sandbox's cpu group, in its owner's (hostcpu)
        "docker-sandbox",  # its cgroup_parent is the agent's group, in the cpu hierarchy too
    ],
)
async def test_class3_a_sandbox_shares_the_gateways_cpu_group(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    config = _where(where)
    marker = f"cpu-probe-{os.getpid()}-{id(state_dir):x}"
    # the command waits on a FIFO of its own /tmp until the test has found it and looked at its group
    script = f"mkfifo /tmp/go && exec python3 -c 'open(\"/tmp/go\").read()' {marker}"
    run = asyncio.create_task(attempt(state_dir, script, config=config))
    found: str | None = None
    for _ in range(6000):  # until the command runs (or the run ended without it)
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            with contextlib.suppress(OSError):
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found = pid
        if found is not None or run.done():
            break
        await asyncio.sleep(0.02)
    assert found is not None, (await run) if run.done() else "the sandbox's command never ran"
    theirs, ours = _cpu_group(found), _cpu_group("self")
    go = f"/proc/{found}/root/tmp/go"
    await asyncio.to_thread(lambda: os.close(os.open(go, os.O_WRONLY)))
    details = await run
    assert details["status"] == "completed", details
    assert theirs != ours, f"the sandbox's command is in the gateway's cpu group {ours!r}"


# A set-id bit by every call that gives a mode, raw (no libc wrapper to refuse first): fchmodat2 by name
# and on an O_PATH fd (AT_EMPTY_PATH), fchmodat, chmod with the mode's high word set, fchmod (setgid).
_SET_ID = """
import ctypes, os, stat
c = ctypes.CDLL(None, use_errno=True)
AT = -100
out = []
def probe(name, fn):
    p = f"/tmp/setid-{name}"
    with open(p, "w") as f: f.write("x")
    os.chmod(p, 0o755)
    r = fn(p.encode())
    e = ctypes.get_errno()
    m = os.stat(p).st_mode
    out.append(f"{name}: r={r} errno={e} mode={oct(m)} {'SETID' if m & 0o6000 else 'plain'}")
probe("fchmodat2", lambda p: c.syscall(452, AT, p, 0o4755, 0))
probe("fchmodat", lambda p: c.syscall(268, AT, p, 0o4755))
probe("chmod-hi", lambda p: c.syscall(90, p, 0o4755 | (1 << 32)))
def fchmod_path(p):
    fd = os.open(p, os.O_RDONLY)
    return c.syscall(91, fd, 0o2755)
probe("fchmod", fchmod_path)
def via_opath(p):
    fd = os.open(p, os.O_PATH)
    return c.syscall(452, fd, b"", 0o4755, 0x1000)  # AT_EMPTY_PATH
probe("fchmodat2-empty", via_opath)
print("\\n".join(out))
print("REACHED" if any("SETID" in o for o in out) else "SAFE")
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 syscall numbers")
@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs python3")
@pytest.mark.parametrize("where", ["bwrap-sandbox", "docker-sandbox", "host"])
async def test_class6_no_run_gives_a_file_a_set_id_bit_by_any_call(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    """Held: the one rule set (seccomprules.MODE_ARG) refuses each variant in all three places, the mode's
    low word read wherever the call has it (a high word set does not hide it)."""
    config = _where(where)
    script = f"cat > /tmp/setid.py <<'PYEOF'\n{_SET_ID}PYEOF\npython3 /tmp/setid.py"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


# The same take by UDP (net.ipv4.udp_mem, one count too): datagrams to bound sockets that never read, each
# receive buffer as large as net.core allows, until the count stops growing (the kernel drops the rest).
_UDP_MEMORY = """
import socket, sys, resource
udp_max = int(sys.argv[1])
want = udp_max // 8 + 1
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
def mem():
    for line in open("/proc/net/sockstat"):
        if line.startswith("UDP:"):
            f = line.split()
            return int(f[f.index("mem") + 1])
    return 0
base = mem()
held = []
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
while mem() - base < want and len(held) + 32 < hard:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    r.bind(("127.0.0.1", 0))
    held.append(r)
    n = 0
    while n < 100000:
        try:
            s.sendto(b"x" * 60000, r.getsockname())
        except BlockingIOError:
            continue
        n += 1
        if n % 16 == 0 and r.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) and mem() - base >= want:
            break
        # stop at the receiver's buffer: the kernel drops what does not fit (no error), so count by sockstat
        if n % 64 == 0:
            before = mem()
            for _ in range(64):
                try:
                    s.sendto(b"x" * 60000, r.getsockname())
                except BlockingIOError:
                    pass
            if mem() <= before:
                break
got = mem() - base
print("sockets", len(held), "held", got, "pages of udp_mem's", udp_max)
print("REACHED" if got >= want else "SAFE")
"""


@pytest.mark.skipif(not os.path.exists("/proc/sys/net/ipv4/udp_mem"), reason="no IPv4 UDP")
@pytest.mark.parametrize("where", ["bwrap-sandbox", "docker-sandbox"])
async def test_class3_one_agents_sandbox_takes_the_hosts_udp_memory(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    config = _where(where)
    if where == "bwrap-sandbox":
        config += '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
    else:
        config = config.replace(
            "[agents.defaults.sandbox.docker]\n", '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
        )
    udp_max = Path("/proc/sys/net/ipv4/udp_mem").read_text().split()[2]
    script = f"cat > /tmp/udpmem.py <<'PYEOF'\n{_UDP_MEMORY}PYEOF\npython3 /tmp/udpmem.py {udp_max}"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


# chmod(.., 04755) by the other ABIs an x86-64 kernel may take: i386 (`int $0x80`, nr 15), x32 (nr
# 0x40000000|90); no libc, so nothing but the filter decides. Built at the test with the host's cc.
_OTHER_ABI_C = r"""
/* chmod("/tmp/setid-arch", 04755) by the i386 ABI (int $0x80, nr 15) and the x32 ABI. */
static long sys3(long n, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}
static long int80(long n, long a, long b) {
    long r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(n), "b"(a), "c"(b) : "memory");
    return r;
}
static char path[] = "/tmp/setid-arch";
static void put(const char *s) {
    long n = 0;
    while (s[n]) n++;
    sys3(1, 1, (long)s, n);
}
static void num(long v) {
    char b[24];
    int i = 23, neg = v < 0;
    if (neg) v = -v;
    b[i] = 0;
    do { b[--i] = '0' + v % 10; v /= 10; } while (v);
    if (neg) b[--i] = '-';
    put(b + i);
}
void _start(void) {
    sys3(3, sys3(2, (long)path, 0101 | 01000, 0755), 0, 0); /* open(O_WRONLY|O_CREAT|O_TRUNC), close */
    put("i386 chmod: "); num(int80(15, (long)path, 04755)); put("\n");
    put("x32 chmod: "); num(sys3(0x40000000L | 90, (long)path, 04755, 0)); put("\n");
    char buf[256];
    sys3(4, (long)path, (long)buf, 0); /* stat: st_mode at 24 on x86-64 */
    unsigned int mode = *(unsigned int *)(buf + 24);
    put(mode & 06000 ? "REACHED\n" : "SAFE\n");
    sys3(60, 0, 0, 0);
}
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64's other ABIs")
@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("base64") is None, reason="needs cc")
@pytest.mark.parametrize("where", ["bwrap-sandbox", "docker-sandbox", "host"])
async def test_class6_a_set_id_bit_by_another_abi_is_refused(
    state_dir: Path, where: str, no_containers_left: None, tmp_path: Path
) -> None:
    """Held: i386's int 0x80 chmod (this kernel runs it: unconfined it sets the bit) dies of SIGSYS in
    both sandboxes (their filters' arch check) and fails with EPERM in a host run (exechost-hostenter's
    filter refuses any other arch, and x32's numbers)."""
    config = _where(where)
    (tmp_path / "arch.c").write_text(_OTHER_ABI_C)
    build = ["cc", "-O1", "-static", "-nostdlib", "-fno-stack-protector", "-o", "arch", "arch.c"]
    subprocess.run(build, cwd=tmp_path, check=True)
    b64 = base64.b64encode((tmp_path / "arch").read_bytes()).decode()
    script = (
        f"d=/workspace; [ -w $d ] || d=/tmp; echo {b64} | base64 -d > $d/arch && chmod 755 $d/arch && $d/arch"
    )
    details = await attempt(state_dir, script, config=config)
    assert "REACHED" not in details["_text"], details["_text"]


_NETLINK_HOST_OPEN = pytest.mark.xfail(
    strict=True,
    reason="open in host runs (closed in the sandboxes: their filters allow no AF_NETLINK, "
    "seccomprules.SANDBOX_SOCKET_FAMILIES): netlink sockets' queued buffers are charged to no memory group "
    "and counted by no limit of the host (TCP and UDP at least have tcp_mem/udp_mem): a sandbox capped at "
    "memory = 128m queued 518 MiB to NETLINK_USERSOCK sockets of its own it never reads, 4x its cap; a host "
    "run the same, by the same kernel path, though under its group's larger share; its fds allow "
    "~8 MiB each (8,192 of them: 64 GiB "
    "from one process), so one agent's command puts the host's kernel out of memory (unreclaimable: the "
    "OOM killer chooses among every process of the host). Not closed by keeping only NETLINK_ROUTE: "
    "its own replies to requests never read (RTM_GETLINK, 200,000 sends) fill 8 MiB per socket as well. "
    "Closing the class: the sockets a run may hold times net.core's largest buffer within its agent's "
    "RAM share (nofile x pids bounded); net.core.rmem_max cannot be lowered per run (read-only outside the "
    "host's network namespace on 6.18, even for root), and a host run's `ip`/`ss` need netlink",
)


# Netlink (NETLINK_USERSOCK: user sockets unicast to each other, no capability needed; AF_NETLINK was one
# of the families every filter allowed, a host run's still does) datagrams queued to sockets that never
# read, each receive buffer as large as net.core allows; /proc/net/netlink's Rmem is what each holds. At
# most 400 sockets: the probe stops at its target (4x the sandbox's memory cap), never near the host's RAM.
_NETLINK_MEMORY = """
import socket, sys, resource, os
want = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
NETLINK_USERSOCK = 2
def rmem():
    total = 0
    for line in open("/proc/net/netlink").readlines()[1:]:
        f = line.split()
        if f[1] == str(NETLINK_USERSOCK):
            total += int(f[4])
    return total
try:
    src = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_USERSOCK)
except OSError as e:  # the family refused: nothing can be queued
    print("no netlink socket:", os.strerror(e.errno))
    print("SAFE")
    sys.exit(0)
src.bind((0, 0))
src.setblocking(False)
held = []
why = ""
while rmem() < want and len(held) < 400:
    r = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_USERSOCK)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    r.bind((0, 0))
    held.append(r)
    port = r.getsockname()[0]
    while True:
        try:
            src.sendto(bytes(16) + b"x" * 60000, (port, 0))
        except OSError as e:
            why = os.strerror(e.errno)
            break
got = rmem()
print("sockets", len(held), "queued", got >> 20, "MiB, then", why)
print("REACHED" if got >= want else "SAFE")
"""


@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs python3")
@pytest.mark.parametrize(
    "where", ["bwrap-sandbox", "docker-sandbox", pytest.param("host", marks=_NETLINK_HOST_OPEN)]
)
async def test_class3_one_agents_run_queues_netlink_buffers_past_its_memory_cap(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    """Held in the sandboxes: their filters allow no AF_NETLINK (seccomprules.SANDBOX_SOCKET_FAMILIES), so
    no netlink buffer can be queued at all; open in a host run (see _NETLINK_HOST_OPEN)."""
    config = _where(where)
    if where == "bwrap-sandbox":
        config += '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
    elif where == "docker-sandbox":
        config = config.replace(
            "[agents.defaults.sandbox.docker]\n", '[agents.defaults.sandbox.docker]\nmemory = "128m"\n'
        )
    want = 512 << 20  # 4x the sandboxes' 128 MB cap
    script = f"cat > /tmp/nlmem.py <<'PYEOF'\n{_NETLINK_MEMORY}PYEOF\npython3 /tmp/nlmem.py {want}"
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


_RESOLVE = (
    "import socket\n"
    "try:\n"
    "    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n"
    "    print('netlink opened')\n"
    "except OSError as e:\n"
    "    print('netlink refused', e.errno)\n"
    "print(sorted({a[4][0] for a in socket.getaddrinfo('localhost', 80, flags=socket.AI_ADDRCONFIG)}))\n"
)


@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs python3")
@pytest.mark.parametrize("where", ["bwrap-sandbox", "docker-sandbox"])
async def test_a_sandbox_without_netlink_still_resolves_names(
    state_dir: Path, where: str, no_containers_left: None
) -> None:
    """What the sandboxes' missing AF_NETLINK costs: getaddrinfo(AI_ADDRCONFIG), which asks netlink for the
    interfaces' families, takes both as present when the socket is refused, and still resolves."""
    config = _where(where)
    script = f"python3 -c \"$(printf '%s' '{base64.b64encode(_RESOLVE.encode()).decode()}' | base64 -d)\""
    details = await attempt(state_dir, script, config=config)
    assert details["status"] == "completed", details
    assert "netlink refused" in details["_text"], details["_text"]
    assert "127.0.0.1" in details["_text"], details["_text"]


async def test_class3_a_docker_sandboxs_log_stays_capped(state_dir: Path, no_containers_left: None) -> None:
    """Held: 16 MiB written to the container's log pipe (its init's stdout, reopened by the command as
    the same uid) leave at most the json-file cap (64 KiB, one file) on the engine's disk."""
    config = _where("docker-sandbox")
    script = "head -c 16777216 /dev/zero | tr '\\0' 'x' | fold -w 1000 > /proc/1/fd/1 && echo wrote"
    details = await attempt(state_dir, script, config=config)
    assert "wrote" in details["_text"], details
    name = details["ranOn"].split()[-1]  # `sandbox <container name>` (a pool spare may stand beside it)
    path = docker_ops.client().api.inspect_container(name)["LogPath"]
    logs = [p for p in Path(path).parent.iterdir() if p.name.startswith(Path(path).name)]
    sizes = [(p.name, p.stat().st_size) for p in logs]
    assert 0 < sum(size for _, size in sizes) <= 256 * 1024, sizes  # written to, and capped
