"""Fresh round 17 a: attacks from inside runs (a bwrap or Docker sandbox, a gateway-host run), by a
fresh attacker who read the docs and the code, not the other attack tests."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox import bwrap, docker_ops
from tests.attacks.harness import attempt
from tests.helpers.browser import browser_image
from tests.helpers.sandbox import build_test_image, sys_probe

ALLOWLIST_HOST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'

__all__ = ["browser_image"]  # fixtures

SANDBOXED = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nscope = "agent"\n'
)


@contextlib.contextmanager
def small_state_dir(state: Path, mib: int = 16, inodes: int = 0) -> Iterator[None]:
    """The state dir on a filesystem of `mib` MiB (a tmpfs; `inodes` of them when given), as a small disk
    would hold it; the config the fixture wrote is carried over."""
    kept = {p.name: p.read_bytes() for p in state.iterdir() if p.is_file()}
    subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={mib}m,mode=0700" + (f",nr_inodes={inodes}" if inodes else ""),
            "eh-r17a",
            str(state),
        ],
        check=True,
    )
    for name, data in kept.items():
        (state / name).write_bytes(data)
        os.chmod(state / name, 0o600)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            bwrap.remove_all()
        with contextlib.suppress(Exception):
            for c in docker_ops.list_sandboxes():
                docker_ops.remove(c["Id"])
        libc = ctypes.CDLL(None, use_errno=True)
        libc.umount2(os.fsencode(str(state)), 2)  # MNT_DETACH: the workspace's loop mount goes with it


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's sandbox (a capped workspace of its own)")
@pytest.mark.parametrize("what", ["bytes", "inodes"])
@pytest.mark.parametrize("backend", ["bwrap", "docker"])
async def test_class3_a_sandbox_fills_the_state_dirs_disk_through_its_control_dir(
    state_dir: Path, backend: str, what: str
) -> None:
    """Agent main's sandbox writes 64 MiB (or 6,000 empty files) into its control dir; the state dir
    (16 MiB and 4,096 inodes here, as a small disk) is left full. The same into /workspace stops at the
    workspace's own filesystem."""
    config = SANDBOXED
    if backend == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("needs bwrap")
    if backend == "docker":
        config = config.replace('backend = "bwrap"', 'backend = "docker"') + (
            f'[agents.defaults.sandbox.docker]\nimage = "{build_test_image()}"\n'
        )
    fill = (
        "dd if=/dev/zero of=/.exechost/fill bs=1M count=64 2>/dev/null; echo wrote"
        if what == "bytes"
        else "i=0; while [ $i -lt 6000 ]; do { true > /.exechost/f$i; } 2>/dev/null || break; i=$((i+1)); "
        "done; echo wrote"
    )
    with small_state_dir(state_dir, inodes=4096 if what == "inodes" else 0):
        details = await attempt(state_dir, fill, config=config)
        assert "wrote" in details["_text"], details["_text"]
        st = os.statvfs(state_dir)
        left = st.f_bavail * st.f_frsize if what == "bytes" else st.f_favail
        assert left > (1 << 20 if what == "bytes" else 256), (
            f"one agent's sandbox left the state dir {what} {left}"
        )


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's browser sandbox")
async def test_class3_a_browser_sandbox_fills_the_state_dirs_disk_through_its_socket_dir(
    state_dir: Path, browser_image: str
) -> None:
    """The browser's own processes (as a compromised chromium would) write 64 MiB into its socket dir."""
    from tests.helpers.browser import CONFIG
    from tests.helpers.gateway import connect, gateway, write_config

    with small_state_dir(state_dir):
        write_config(state_dir, CONFIG)
        (state_dir / "sandboxes").mkdir(mode=0o700)
        try:
            async with gateway(state_dir):
                op = await connect(state_dir, "op")
                try:
                    started = await op.request("browser.start", {"agentId": "main"})
                finally:
                    await op.close()
                done = (
                    docker_ops.client()
                    .containers.get(started["containerName"])
                    .exec_run(
                        [
                            "/bin/sh",
                            "-c",
                            "dd if=/dev/zero of=/.exechost-browser/fill bs=1M count=64; echo wrote",
                        ]
                    )
                )
                st = os.statvfs(state_dir)
        finally:
            from engine.sandbox.browser import list_browsers

            for c in list_browsers():
                docker_ops.remove(c["Id"])
    assert b"wrote" in done.output, done.output
    left = st.f_bavail * st.f_frsize
    assert left > 1 << 20, f"one agent's browser sandbox left the state dir {left} bytes"


async def _two_agents(state: Path, config: str, calls: list[tuple[str, str, dict]]) -> list[dict]:
    """One gateway; each call (agent, command, params) in turn; each result's details (with `_text`)."""
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state, config)
    store = ApprovalsStore(state / "exec-approvals.json")
    for program in ("grep", "cat", "ls"):
        store.add_allowlist("main", f"/usr/bin/{program}", arg_pattern=None)
    out = []
    async with gateway(state):
        client = await connect(state)
        try:
            for agent, command, params in calls:
                result = await client.request("exec", {"command": command, "agentId": agent, **params})
                details = result["details"]
                details["_text"] = result["text"]
                out.append(details)
        finally:
            await client.close()
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway: its host runs may search the engine's dirs")
async def test_class1_the_engines_records_under_a_second_name_are_a_host_runs(state_dir: Path) -> None:
    image = build_test_image()
    secret = "ops-sandbox-key-5b0c13"
    config = (
        ALLOWLIST_HOST + '\n[[agents.list]]\nid = "ops"\ntools.exec.host = "sandbox"\n'
        'tools.exec.security = "full"\ntools.exec.ask = "off"\nsandbox.mode = "all"\n'
        'sandbox.backend = "docker"\nsandbox.scope = "agent"\n'
        f'sandbox.docker.image = "{image}"\nsandbox.docker.env = {{ OPS_KEY = "{secret}" }}\n'
    )
    data = docker_ops.client().info().get("DockerRootDir") or "/var/lib/docker"
    alias = Path(f"/srv/eh-r17a-{os.getpid()}")  # the operator's own name for the engine's disk
    alias.mkdir(mode=0o700)
    subprocess.run(["mount", "--bind", "-o", "ro", data, str(alias)], check=True)
    try:
        ops, main = await _two_agents(
            state_dir,
            config,
            [
                ("ops", "echo up", {}),
                ("main", f"grep -rho --include=config.v2.json 'OPS_KEY=[a-z0-9-]*' {alias}/containers", {}),
            ],
        )
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
        ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(str(alias)), 2)
        with contextlib.suppress(OSError):
            alias.rmdir()
    assert "up" in ops["_text"], ops
    assert main["status"] == "completed", main["_text"]
    assert secret not in main["_text"], (
        "agent main read ops's sandbox key through the engine disk's other name"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway: its host runs may search /var/lib/docker")
@pytest.mark.parametrize(
    "records",
    [
        "--include=config.v2.json /var/lib/docker/containers",
        "--include=config.json --exclude-dir=rootfs /run/docker/containerd/daemon",
    ],
    ids=["docker", "containerd"],
)
async def test_class1_another_agents_docker_sandbox_env_is_a_root_gateways_host_runs(
    state_dir: Path, records: str
) -> None:
    """The operator gives agent ops's Docker sandbox a key in its `docker.env` (meant for that sandbox
    only: never in argv, redacted in `sandbox explain`). Docker keeps every container's environment in
    /var/lib/docker/containers/<id>/config.v2.json, and containerd its OCI spec (the env with it) under
    /run/docker/containerd/daemon while it runs; agent main's allowlisted `grep -r` reads it there."""
    image = build_test_image()
    secret = "ops-sandbox-key-7d2e91"
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        '\n[[agents.list]]\nid = "ops"\ntools.exec.host = "sandbox"\ntools.exec.security = "full"\n'
        'tools.exec.ask = "off"\nsandbox.mode = "all"\nsandbox.backend = "docker"\nsandbox.scope = "agent"\n'
        f'sandbox.docker.image = "{image}"\nsandbox.docker.env = {{ OPS_KEY = "{secret}" }}\n'
    )
    try:
        ops, main = await _two_agents(
            state_dir,
            config,
            [
                ("ops", "echo up", {}),
                ("main", f"grep -rho 'OPS_KEY=[a-z0-9-]*' {records}", {}),
            ],
        )
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    assert "up" in ops["_text"], ops
    assert main["status"] == "completed", main
    assert secret not in main["_text"], "agent main read ops's sandbox key from Docker's own records"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway: its host runs may read the engine's dirs")
async def test_class1_no_engine_state_dir_shows_in_a_host_view(state_dir: Path) -> None:
    """The neighbours of Docker's records: every engine state dir present here (its data-root and
    exec-root, containerd's state and sockets: /run/containerd/containerd.sock is root's API too) is an
    empty dir in the host view, whichever file or socket of it a run names."""
    from engine.tools import enginestate

    present = enginestate.state_dirs()
    if not present:
        pytest.skip("no container engine's state dir on this host")
    details = await attempt(
        state_dir,
        "ls -A " + " ".join(present),
        allow=[("/usr/bin/ls", None)],
    )
    assert details["status"] == "completed", details["_text"]
    shown = [line for line in details["_text"].splitlines() if line and not line.endswith(":")]
    assert shown == [], f"the host view shows the engine's records: {shown}"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's Docker sandbox (uid 0, as its init)")
@pytest.mark.parametrize(
    "way",
    [
        "engine-log",
        "engine-log-stderr-lines",  # (the neighbour: stderr, in lines: one JSON record each)
        pytest.param(
            "writable-layer",
            marks=pytest.mark.xfail(
                strict=True,
                reason="open: with readOnlyRoot = false (not the default) a Docker sandbox's writable layer "
                "has no size (no storage_opt), unlike its capped workspace: the operator's choice",
            ),
        ),
    ],
)
async def test_class3_a_docker_sandbox_writes_the_engines_disk_uncapped(state_dir: Path, way: str) -> None:
    """What a Docker sandbox writes lands on the engine's disk capped: its init (and supervisor) keep the
    engine's log pipe as stdout, which a command of the same uid reopens through /proc/1/fd/1 (the log is
    json-file capped at 64k, fix17sbx); with readOnlyRoot = false its writable layer is the operator's."""
    image = build_test_image()
    config = (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "docker"\nscope = "agent"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\n'
    )
    if way == "writable-layer":
        config += "readOnlyRoot = false\n"
    command = {
        "engine-log": 'head -c 8388608 /dev/zero | tr "\\0" x > /proc/1/fd/1 && echo flooded',
        "engine-log-stderr-lines": 'head -c 8388608 /dev/zero | tr "\\0" x | fold -w 4096 > /proc/1/fd/2 '
        "&& echo flooded",
        "writable-layer": "head -c 8388608 /dev/zero > /fill && echo flooded",
    }[way]
    try:
        details = await attempt(state_dir, command, config=config)
        api = docker_ops.client().api
        ids = [c["Id"] for c in docker_ops.list_sandboxes()]
        if way.startswith("engine-log"):
            logs = [api.inspect_container(i)["LogPath"] for i in ids]
            # (a pool spare's is empty; a capped log being rotated is briefly absent)
            size = max((os.stat(log).st_size for log in logs if log and os.path.exists(log)), default=0)
        else:
            rows = [row for i in ids for row in api.containers(all=True, size=True, filters={"id": i})]
            size = max((row.get("SizeRw") or 0 for row in rows), default=0)
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    assert "flooded" in details["_text"], details["_text"]
    assert size < 1 << 20, f"the sandbox wrote {size} bytes to the engine's disk ({way})"


def _memory_cap(cgroup_lines: str, limits: str) -> int:
    """The least of a run's RLIMIT_AS and every v1 memory cgroup limit from its group up to the root."""
    caps = []
    for line in limits.splitlines():
        if line.startswith("Max address space"):
            soft = line.split()[3]
            caps.append(int(soft) if soft.isdigit() else 1 << 63)
    for line in cgroup_lines.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            here = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            while True:
                with contextlib.suppress(OSError, ValueError):
                    caps.append(int((here / "memory.limit_in_bytes").read_text()))
                if here == Path("/sys/fs/cgroup/memory"):
                    break
                here = here.parent
    return min(caps, default=1 << 63)


@pytest.mark.skipif(not Path("/sys/fs/cgroup/memory").is_dir(), reason="a v1 memory hierarchy")
@pytest.mark.parametrize("view", ["", 'hostView = "none"\n'], ids=["view", "no-view"])
async def test_class3_a_host_runs_memory_is_no_agents_share(state_dir: Path, view: str) -> None:
    """An agent's host run must be charged to a memory group of its agent's (not the gateway's own: the
    gateway is this process), capped at a share (a quarter, as its sandboxes' RAM and its pids are).
    The control is the gateway's own memory cap (this process's: the gateway is in-process): an
    agent's host run must be held to less, a share of its own, as its pids are; with the host view or
    without it (hostView = "none": the operator's to drop, the agent's share is not). The run's group is
    read while the gateway runs (at its stop, it drops its emptied host-run groups)."""
    from tests.helpers.gateway import connect, gateway, write_config

    # (full, to read its own /proc entries without an ask: every host run is the same process-wise)
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n' + view)
    async with gateway(state_dir):
        client = await connect(state_dir, operator=False)  # agent main, by the gateway token
        try:
            result = await client.request("exec", {"command": "cat /proc/self/cgroup /proc/self/limits"})
        finally:
            await client.close()
        text = result["text"]
        assert result["details"]["status"] == "completed", result
        cgroups = "\n".join(line for line in text.splitlines() if line[:1].isdigit() and line.count(":") >= 2)
        run_cap = _memory_cap(cgroups, text)
    mine = Path("/proc/self/cgroup").read_text()
    group = [line for line in cgroups.splitlines() if "memory" in line.split(":")[1].split(",")]
    own_group = [line for line in mine.splitlines() if "memory" in line.split(":")[1].split(",")]
    assert group != own_group, f"agent main's host run is in the gateway's own memory group {own_group}"
    own = _memory_cap(mine, Path("/proc/self/limits").read_text())
    assert run_cap < own, "agent main's host run may take all the RAM the gateway may"
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert run_cap <= ram // 4, "agent main's host run may take more than its quarter"


def test_class5_tree_dash_r_is_decided_to_run_no_program() -> None:
    """The decision, as the allowlist takes it (engine.commands.treesafe.is_tree_safe): tree's -R is a
    program-running option on the versions most LTS hosts ship, as find's -exec is."""
    from engine.commands.treesafe import is_tree_safe

    argv = ["tree", "-R", "-H", ".", "-L", "1", "-o", "index.html"]
    assert not is_tree_safe(argv, "/usr/bin/tree"), "`tree -R -H . -L 1` is decided to run no program"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
@pytest.mark.skipif(os.geteuid() != 0, reason="a root node's sandboxes (a uid of their own)")
async def test_class3_two_gateways_shared_scopes_on_a_node_are_one_owner(state_dir: Path) -> None:
    """The node side, as runner/node/sysrun.py calls it: prepare_exec with each link's namespace."""
    from engine.sandbox import SandboxManager, bwraprecords, prepare_exec
    from tests.helpers.bwrap import bwrap_config

    config = bwrap_config('scope = "shared"')
    manager = SandboxManager()
    try:
        a = await prepare_exec(config, "main", "", None, manager=manager, namespace="a" * 32 + "/")
        b = await prepare_exec(config, "main", "", None, manager=manager, namespace="b" * 32 + "/")
        ra, rb = bwraprecords.read_record(a.container), bwraprecords.read_record(b.container)
    finally:
        bwrap.remove_all()
    assert a.container != b.container  # (each gateway's shared scope is a sandbox of its own)
    assert ra is not None and rb is not None
    assert (ra["uid"], ra["owner"]) != (rb["uid"], rb["owner"]), (
        f"both gateways' shared sandboxes are host uid {ra['uid']}, owner {ra['owner']!r}"
    )


async def test_class1_a_host_run_leaves_a_setuid_program_of_the_gateways_uid(state_dir: Path) -> None:
    """Closed on main (51bccef1: exechost-hostenter's filter is built from the sandboxes' rule set): agent
    main's allowlisted cp and chmod 4755 leave no set-id copy of a program in its hostWritable dir."""
    work = state_dir.parent / "w"
    work.mkdir(mode=0o755)
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'hostWritable = ["{work}"]\n'
    )
    details = await attempt(
        state_dir,
        "cp /usr/bin/id ./id && chmod 4755 ./id",
        allow=[("/usr/bin/cp", None), ("/usr/bin/chmod", None)],
        config=config,
        workdir=str(work),
    )
    assert details["status"] == "completed", details["_text"]
    planted = work / "id"
    mode = os.stat(planted).st_mode if planted.exists() else 0
    assert not mode & (stat.S_ISUID | stat.S_ISGID), (
        f"{planted} is {stat.filemode(mode)}, uid {os.stat(planted).st_uid}, on the host"
    )


# io_setup(2) on x86_64 / aarch64: one AIO context of the host-wide fs.aio-max-nr, then io_destroy(2).
_AIO_PROBE = (
    "import ctypes,os\n"
    "libc=ctypes.CDLL(None,use_errno=True)\n"
    "nr={'x86_64':(206,207),'aarch64':(0,1)}[os.uname().machine]\n"
    "ctx=ctypes.c_ulong(0)\n"
    "r=libc.syscall(nr[0],1,ctypes.byref(ctx))\n"
    "print('aio', 'made' if r==0 else 'refused %d' % ctypes.get_errno())\n"
    "r==0 and libc.syscall(nr[1],ctx)\n"
)


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="syscall numbers")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the probe runs /usr/bin/python3")
async def test_class3_a_host_run_may_take_the_hosts_aio_contexts(state_dir: Path) -> None:
    """Closed on main (6bac013c): a host run's io_setup fails as the sandboxes' does."""
    script = state_dir.parent / "h" / "aio.py"  # (in the home: read-only in the view, and shown)
    script.write_text(_AIO_PROBE)
    script.chmod(0o644)
    details = await attempt(
        state_dir,
        f"/usr/bin/python3 {script}",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
    )
    assert "aio " in details["_text"], details["_text"]
    assert "aio made" not in details["_text"], "a host run made an AIO context of the host's count"


@pytest.mark.skipif(not Path("/sys/fs/cgroup/cpu").is_dir(), reason="a v1 cpu hierarchy")
@pytest.mark.parametrize("view", ["", 'hostView = "none"\n'], ids=["view", "no-view"])
async def test_class3_a_host_runs_cpu_is_no_agents_share(state_dir: Path, view: str) -> None:
    """With the host view or without it (hostView = "none": the operator's to drop, the agent's share is
    not); and the operator's own run is in a group of its own too, not agent main's."""
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n' + view)
    async with gateway(state_dir):
        client = await connect(state_dir, operator=False)  # agent main, by the gateway token
        op = await connect(state_dir)
        try:
            result = await client.request("exec", {"command": "cat /proc/self/cgroup"})
            operators = await op.request("exec", {"command": "cat /proc/self/cgroup"})
        finally:
            await client.close()
            await op.close()

    def cpu_group(text: str) -> str:
        for line in text.splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3 and "cpu" in parts[1].split(","):
                return parts[2].strip()
        return ""

    run, own = cpu_group(result["text"]), cpu_group(Path("/proc/self/cgroup").read_text())
    assert run and run != own, f"agent main's host run shares the gateway's own cpu group {own!r}"
    theirs = cpu_group(operators["text"])
    assert theirs and theirs not in (own, run), f"the operator's run is in {theirs!r}"


def _ls_columns(where: Path, columns: str | None) -> subprocess.CompletedProcess[bytes]:
    """GNU ls -C over `where`, held to 512 MiB of address space, with COLUMNS as given."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    env = {"PATH": "/usr/bin:/bin", **({"COLUMNS": columns} if columns else {})}
    return subprocess.run(
        ["ls", "-C", str(where)],
        env=env,
        capture_output=True,
        preexec_fn=cap,
        check=False,
    )


async def test_class4_an_inert_columns_value_makes_ls_take_the_hosts_ram(state_dir: Path) -> None:
    many = state_dir.parent / "tmp" / "many"
    many.mkdir()
    for i in range(10_000):
        (many / f"f{i}").touch()
    # the program itself, as it behaves: bounded without the key, past 512 MiB with it
    assert _ls_columns(many, None).returncode == 0
    assert _ls_columns(many, "999999").returncode != 0  # ("ls: memory exhausted")
    # the widest value that stays inert is bounded (fixed: COLUMNS/LINES are inert up to 999)
    assert _ls_columns(many, "999").returncode == 0
    # and the agent may not set the wide value on an allowlisted ls without an ask
    details = await attempt(
        state_dir,
        "ls -d /",
        allow=[("/usr/bin/ls", None)],
        env={"COLUMNS": "999999"},
    )
    assert details["status"] == "approval-pending", "an allowlisted ls runs unasked with COLUMNS=999999"


@pytest.mark.xfail(
    strict=True,
    reason="open: a `hostWritable` dir has no share of the disk it is on, and by default it is the state "
    "dir's (the home: ~/work beside ~/.openclaw): one agent's allowlisted `cp /dev/zero` into its own "
    "project dir fills the filesystem the gateway's journal, approvals and every agent's logs need "
    "(round 10 b capped /tmp, /workspace and the logs for exactly this; the hostWritable dirs were left)",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small filesystem for the home")
async def test_class3_an_agents_hostwritable_dir_fills_the_state_dirs_disk(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.commands import gatewaydirs

    root = state_dir.parent
    kept = {p.name: p.read_bytes() for p in state_dir.iterdir() if p.is_file()}
    # the home and the state dir in it on one 16 MiB filesystem, as ~/.openclaw and ~/work share one disk
    home = root / "h"
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "eh-r17a-home", str(home)], check=True
    )
    try:
        state = home / ".openclaw"
        state.mkdir(mode=0o700)
        for name, data in kept.items():
            (state / name).write_bytes(data)
        work = home / "work"
        work.mkdir(mode=0o755)
        gatewaydirs.record(str(home), str(state))
        config = ALLOWLIST_HOST + 'hostWritable = ["~/work"]\n'
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        details = await attempt(
            state, "cp /dev/zero fill", allow=[("/usr/bin/cp", None)], config=config, workdir=str(work)
        )
        assert details["status"] in ("completed", "failed"), details["_text"]
        st = os.statvfs(state)
        left = st.f_bavail * st.f_frsize
    finally:
        ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(str(home)), 2)
    assert left > 1 << 20, f"agent main's project dir left the state dir's filesystem {left} bytes"
    assert "No space left" in details["_text"], details["_text"]  # (cp ran until the disk was full)


DEBIAN_IMAGE = "exechost-debian-test:bookworm"  # (a Debian sandbox image, as the default one is: util-linux)


def _has_image(name: str) -> bool:
    try:
        docker_ops.client().images.get(name)
    except Exception:  # (no engine, or no such image: the test is skipped)
        return False
    return True


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap (its landlock helper makes the lock)")
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's Docker sandbox (uid 0)")
async def test_class3_a_sandbox_holds_the_helpers_build_lock(state_dir: Path) -> None:
    """The helpers' build lock was <state>/sandbox-bin/.exechost-landlock.lock, 0600, the gateway's, in the
    bin dir every sandbox mounts at /.exechost-bin, and flock needs only a read fd: a Docker sandbox (uid 0
    under a root gateway, the file's owner by DAC) or a non-root gateway's bwrap sandbox held it, and the
    next build (an upgrade's, a missing helper's) blocked every agent's sandbox start. Here the sandbox
    locks every file it sees there; the locks the gateway's builds take stay free."""
    import fcntl

    from engine.sandbox import landlock, staticbuild
    from engine.sandbox.egress import forwarder
    from tests.helpers.gateway import connect, gateway, wait_until, write_config

    if not _has_image(DEBIAN_IMAGE):
        pytest.skip(f"no {DEBIAN_IMAGE} image here")
    config = (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nscope = "agent"\n'
        '\n[[agents.list]]\nid = "ops"\nsandbox.backend = "docker"\n'
        f'sandbox.docker.image = "{DEBIAN_IMAGE}"\n'
    )
    write_config(state_dir, config)
    every = (
        'n=0; for f in /.exechost-bin/* /.exechost-bin/.[!.]*; do [ -f "$f" ] || continue; n=$((n+1)); '
        '(flock -x 9 && echo "held $f" && exec sleep 600) 9<"$f" & done; echo "files $n"; wait'
    )
    try:
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                await client.request("exec", {"command": "true", "agentId": "main"})  # (builds the helper)
                locks = [staticbuild.lock_path(landlock.binary_path())]
                locks += [staticbuild.lock_path(forwarder.binary_path())]
                assert locks[0].exists()
                started = await client.request(
                    "exec", {"command": every, "agentId": "ops", "background": True}
                )
                session = started["details"]["sessionId"]

                async def held() -> bool:
                    log = await client.request(
                        "process", {"action": "log", "sessionId": session, "agentId": "ops"}
                    )
                    text = str(log.get("text", ""))
                    files = [w.split()[1] for w in text.splitlines() if w.startswith("files ")]
                    return bool(files) and text.count("held ") == int(files[0]) > 0

                await wait_until(held, timeout=30)
                free = []
                for path in locks:
                    if not path.exists():
                        continue
                    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the gateway's next build takes
                        free.append(True)
                    except BlockingIOError:
                        free.append(False)
                    finally:
                        os.close(fd)
            finally:
                await client.close()
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
        bwrap.remove_all()
    assert free and all(free), "agent ops's sandbox holds a lock every helper build of the gateway waits on"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
@pytest.mark.skipif(os.geteuid() != 0, reason="the private dirs and workspaces are mounts of a root gateway")
async def test_class1_the_home_layer_puts_no_mount_of_the_state_dir_above_its_cover(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: with the state dir in the home (~/.openclaw, the default), the home is a layer and every mount
    the kept view has below it is put back on top of the overlay, among them agent ops's private /tmp
    (a tmpfs at ~/.openclaw/hostprivate/ops) and agent sb's sandbox workspace (a loop mount under
    ~/.openclaw/sandboxes): they stay below the state dir's empty cover, so agent main reads neither."""
    from engine.commands import gatewaydirs
    from tests.helpers.gateway import connect, gateway, write_config

    home = state_dir.parent / "h"
    state = home / ".openclaw"
    state.mkdir(mode=0o700)
    gatewaydirs.record(str(home), str(state))
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
    write_config(
        state,
        '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
        '\n[[agents.list]]\nid = "ops"\n'
        '\n[[agents.list]]\nid = "sb"\ntools.exec.host = "sandbox"\nsandbox.mode = "all"\n'
        'sandbox.backend = "bwrap"\nsandbox.scope = "agent"\n',
    )
    private = state_dir.parent / "tmp"  # (this test's stand-in for /tmp: each agent's own copy)
    try:
        async with gateway(state):
            client = await connect(state)
            try:
                for agent, command in (
                    ("ops", f"echo ops-secret-77 > {private}/s.txt"),
                    ("sb", "echo sb-secret-88 > /workspace/w.txt"),
                ):
                    await client.request("exec", {"command": command, "agentId": agent})
                # the control: both are there on the host, under the state dir
                found = {
                    word
                    for path in state.rglob("*.txt")
                    for word in ("ops-secret", "sb-secret")
                    if word in path.read_text(errors="replace")
                }
                assert found == {"ops-secret", "sb-secret"}, found
                seen = await client.request(
                    "exec",
                    {"command": f"grep -rs -e ops-secret -e sb-secret {state} /proc/self/root{state}; true"},
                )
            finally:
                await client.close()
    finally:
        bwrap.remove_all()
    assert "ops-secret" not in seen["text"] and "sb-secret" not in seen["text"], seen["text"]


async def test_class1_a_retired_agents_project_dir_is_every_agents_to_read(state_dir: Path) -> None:
    home = state_dir.parent / "h"
    work = home / "ops-work"
    work.mkdir(mode=0o755)
    (work / "notes.txt").write_text("ops-private-4471\n")  # what ops's runs wrote there
    (work / "notes.txt").chmod(0o644)
    with_ops = ALLOWLIST_HOST + '\n[[agents.list]]\nid = "ops"\ntools.exec.hostWritable = ["~/ops-work"]\n'
    control = await attempt(
        state_dir, f"cat {work}/notes.txt", allow=[("/usr/bin/cat", None)], config=with_ops
    )
    assert control["status"] != "approval-pending" and "ops-private" not in control["_text"], control
    retired = await attempt(state_dir, f"cat {work}/notes.txt", allow=[("/usr/bin/cat", None)])
    assert retired["status"] != "approval-pending", retired["_text"]
    assert "ops-private" not in retired["_text"], "agent main reads what retired agent ops left in its dir"


async def test_class1_a_retired_agents_dir_outside_the_home_is_every_agents_to_read(state_dir: Path) -> None:
    """The neighbour outside the home (a project under /srv, shown read-only to every run but for the
    covers): retired, it stays covered, as in the home; the agent still listed keeps its own."""
    work = state_dir.parent / "ops-out"
    mine = state_dir.parent / "main-out"
    for d, text in ((work, "ops-private-5582\n"), (mine, "main-own-5583\n")):
        d.mkdir(mode=0o755)
        (d / "notes.txt").write_text(text)
        (d / "notes.txt").chmod(0o644)
    base = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'\n[[agents.list]]\nid = "main"\ntools.exec.hostWritable = ["{mine}"]\n'
    )
    with_ops = base + f'\n[[agents.list]]\nid = "ops"\ntools.exec.hostWritable = ["{work}"]\n'
    allow = [("/usr/bin/cat", None)]
    control = await attempt(state_dir, f"cat {work}/notes.txt", allow=allow, config=with_ops)
    assert control["status"] != "approval-pending" and "ops-private" not in control["_text"], control
    retired = await attempt(state_dir, f"cat {work}/notes.txt {mine}/notes.txt", allow=allow, config=base)
    assert retired["status"] != "approval-pending", retired["_text"]
    assert "ops-private" not in retired["_text"], "agent main reads what retired agent ops left in its dir"
    assert "main-own-5583" in retired["_text"], retired["_text"]


# security.capability, VFS_CAP_REVISION_2 with the effective flag: CAP_SETUID (7) permitted and effective;
# and a device node (here /dev/null's 1:3, 0666: the root disk's numbers would hand every account the disk).
_FILE_CAP_PROBE = (
    "import os,stat,struct,sys\n"
    "p=os.path.join(sys.argv[1],'planted')\n"
    "if sys.argv[2]=='capability':\n"
    "    open(p,'w').close()\n"
    "    os.setxattr(p,'security.capability',struct.pack('<IIIII',0x02000001,1<<7,0,0,0))\n"
    "else:\n"
    "    os.mknod(p,stat.S_IFCHR|0o666,os.makedev(1,3))\n"
    "print('set')\n"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's runs hold CAP_SETFCAP")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the probe runs /usr/bin/python3")
@pytest.mark.parametrize("what", ["capability", "device"])
async def test_class1_a_root_host_run_leaves_a_program_with_file_capabilities(
    state_dir: Path, what: str
) -> None:
    work = state_dir.parent / "w"
    work.mkdir(mode=0o755)
    script = state_dir.parent / "h" / "cap.py"  # (in the home: read-only in the view, and shown)
    script.write_text(_FILE_CAP_PROBE)
    script.chmod(0o644)
    details = await attempt(
        state_dir,
        f"/usr/bin/python3 {script} {work} {what}",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
        + f'hostWritable = ["{work}"]\n',
        workdir=str(work),
    )
    assert details["status"] == "completed", details["_text"]
    planted = work / "planted"
    if what == "capability":
        names = os.listxattr(planted) if planted.exists() else []
        assert "security.capability" not in names, f"{planted} carries file capabilities on the host"
    else:
        mode = os.lstat(planted).st_mode if os.path.lexists(planted) else 0
        assert not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)), f"{planted} is a device node on the host"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's runs are root's")
async def test_class1_a_root_host_runs_capabilities_make_no_file_more_than_its_mode(state_dir: Path) -> None:
    """The variant by any call or program (fsetxattr, setxattrat, tar, cp -a, a program's own file
    capabilities at exec): CAP_SETFCAP and CAP_MKNOD are in none of the run's sets, bounding included."""
    details = await attempt(
        state_dir,
        "grep ^Cap /proc/self/status",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
    )
    assert details["status"] == "completed", details["_text"]
    sets = dict(
        line.split(":", 1) for line in details["_text"].splitlines() if line.startswith("Cap") and ":" in line
    )
    assert {"CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"} <= set(sets), details["_text"]
    for name, value in sets.items():
        held = int(value.strip(), 16)
        assert not held & (1 << 31), f"{name} holds CAP_SETFCAP"
        assert not held & (1 << 27), f"{name} holds CAP_MKNOD"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.parametrize(
    "knob",
    [
        "/proc/sys/kernel/core_pattern",
        "/sys/power/state",  # (the view's /sys is read-only whole: hostview.SYSFS)
    ],
)
async def test_class1_a_root_host_run_opens_kernel_core_pattern_for_writing(
    state_dir: Path, knob: str
) -> None:
    """Opened and closed, nothing written: tee reads an empty stdin, so the host's core_pattern is left
    as it is; the exit says whether the open for writing was allowed (EROFS once /proc/sys is covered)."""
    if not os.path.exists(knob):
        pytest.skip(f"no {knob} here")
    before = Path(knob).read_text()
    details = await attempt(
        state_dir,
        f"tee -a {knob} </dev/null",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
    )
    assert Path(knob).read_text() == before  # (nothing was written)
    assert details["status"] == "completed", details["_text"]
    assert details.get("exitCode") != 0, f"a host run opened the host's {knob} for writing"


async def test_class1_a_host_views_sys_is_read_only_whole(state_dir: Path) -> None:
    """The variant by any other knob (a device's driver `bind`, /sys/kernel/*, a cgroup file): every
    mount at or under the view's /sys is read-only, for a root gateway's run and any other."""
    details = await attempt(
        state_dir,
        sys_probe(),
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
    )
    assert details["status"] == "completed", details["_text"]
    assert details["_text"].split() == ["END"], details["_text"]
