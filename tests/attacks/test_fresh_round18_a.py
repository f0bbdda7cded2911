"""Fresh round 18 a: a hostile agent's commands from inside its runs (gateway host, bwrap, Docker)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.mark.xfail(
    strict=True,
    reason="open (the limit docs/SECURITY.md states for a root gateway: its runs keep root's capabilities): "
    "CAP_SYS_ADMIN and no `umount` refusal let a root gateway's host run detach the empty tmpfs over the "
    "state dir (`umount -l <state>`) and read the gateway's own files (its config, its socket, any token "
    "in it); round 17's construction dropped CAP_SETFCAP and CAP_MKNOD only. Closing the class: a short "
    "list of the capabilities a root run keeps (CAP_SYS_ADMIN not among them), not a list dropped",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
async def test_class1_a_root_host_run_unmounts_the_state_dirs_cover(state_dir: Path) -> None:
    (state_dir / "operator-token").write_text("TOKEN-OF-THE-OPERATOR\n")
    os.chmod(state_dir / "operator-token", 0o600)
    script = f"umount -l {state_dir} 2>/dev/null; cat {state_dir}/operator-token 2>/dev/null; echo done"
    details = await attempt(state_dir, script, config=FULL)
    assert details["status"] == "completed", details
    assert "TOKEN-OF-THE-OPERATOR" not in details["_text"]


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


@pytest.mark.xfail(
    strict=True,
    reason="open: a root gateway's host run is in the host's UTS namespace (enter unshares mount, PID and "
    "IPC only) with CAP_SYS_ADMIN and CAP_SYS_TIME, and its seccomp filter refuses neither sethostname nor "
    "settimeofday/clock_settime (Docker's profile refuses the clock's): an agent's run renames the "
    "machine or sets its clock (grants' expiry, TLS, every log's times). "
    "Closing the class: a UTS namespace of its own, and the capabilities a root run keeps listed",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs /usr/bin/python3")
@pytest.mark.parametrize("what", sorted(_MACHINE_WIDE))
async def test_class1_a_root_host_run_acts_on_the_whole_machine(state_dir: Path, what: str) -> None:
    probe = state_dir.parent / "probe.py"
    probe.write_text(_MACHINE_WIDE[what])
    details = await attempt(state_dir, f"{PY} {probe}", config=FULL)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]


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


def _inotify_errno() -> int:
    """0 when this process (the gateway's account, root) can make an inotify instance, else its errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd >= 0:
        os.close(fd)
        return 0
    return ctypes.get_errno()


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
    err = _inotify_errno()  # the gateway's own account, while the sandbox holds them
    await asyncio.to_thread(lambda: os.close(os.open(held.parent / "release", os.O_WRONLY)))
    details = await run
    assert details["status"] == "completed", details
    assert err == 0, f"the gateway's inotify_init: {os.strerror(err)}; {details['_text']}"


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
print("REACHED" if nr + 1 >= top else "SAFE")  # (devpts refuses the one that would reach the top)
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
