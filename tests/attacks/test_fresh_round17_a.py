"""Fresh round 17 a: attacks from inside runs (a bwrap or Docker sandbox, a gateway-host run), by a
fresh attacker who read the docs and the code, not the other attack tests."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from engine.sandbox import bwrap, docker_ops
from tests.attacks.harness import attempt
from tests.helpers.browser import browser_image
from tests.helpers.sandbox import build_test_image

__all__ = ["browser_image"]  # fixtures

SANDBOXED = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nscope = "agent"\n'
)


@contextlib.contextmanager
def small_state_dir(state: Path, mib: int = 16, inodes: int = 0):
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


@pytest.mark.xfail(
    strict=True,
    reason="open: Docker keeps each container's environment in /var/lib/docker/containers/<id>/"
    "config.v2.json, which a root gateway's host view shows (a read-only layer, readable): agent main's "
    "allowlisted grep reads the docker.env key the operator gave agent ops's sandbox alone; the views cover "
    "the workspace roots, not the engine's own records of the sandboxes",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway: its host runs may search /var/lib/docker")
@pytest.mark.parametrize("records", ["/var/lib/docker/containers", "/run/docker/containerd/daemon"])
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


@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's Docker sandbox (uid 0, as its init)")
@pytest.mark.parametrize(
    "flood",
    [
        'head -c 8388608 /dev/zero | tr "\\0" x > /proc/1/fd/1',
        # (the neighbour: stderr, in lines: one JSON record each)
        'head -c 8388608 /dev/zero | tr "\\0" x | fold -w 4096 > /proc/1/fd/2',
    ],
    ids=["stdout", "stderr-lines"],
)
async def test_class3_a_docker_sandbox_floods_the_engines_log_of_its_container(
    state_dir: Path, flood: str
) -> None:
    image = build_test_image()
    config = (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "docker"\nscope = "agent"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\n'
    )
    try:
        details = await attempt(
            state_dir,
            flood + " && echo flooded",
            config=config,
        )
        logs = [
            docker_ops.client().api.inspect_container(c["Id"])["LogPath"] for c in docker_ops.list_sandboxes()
        ]
        size = max((os.stat(log).st_size for log in logs if log), default=0)  # (a pool spare's is empty)
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    assert "flooded" in details["_text"], details
    assert size < 1 << 20, f"the sandbox wrote {size} bytes to its container's log on the host's disk"


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
    """The control is the gateway's own memory cap (this process's: the gateway is in-process): an
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
    own = _memory_cap(Path("/proc/self/cgroup").read_text(), Path("/proc/self/limits").read_text())
    assert run_cap < own, "agent main's host run may take all the RAM the gateway may"


@pytest.mark.xfail(
    strict=True,
    reason="open: treesafe lists `tree` with no option that runs a program, but `tree -R` (with -H and -L) "
    "re-runs tree for each directory at the depth limit, and tree up to 1.8.0 (Debian 11, Ubuntu 20.04) "
    'does it with system("tree -n -H \\"<dir name>\\" …"): a directory the agent named `$(cmd)` runs cmd '
    "in a shell, unasked, from an allowlisted `tree`",
)
def test_class5_tree_dash_r_is_decided_to_run_no_program() -> None:
    """The decision, as the allowlist takes it (engine.commands.treesafe.is_tree_safe): tree's -R is a
    program-running option on the versions most LTS hosts ship, as find's -exec is."""
    from engine.commands.treesafe import is_tree_safe

    argv = ["tree", "-R", "-H", ".", "-L", "1", "-o", "index.html"]
    assert not is_tree_safe(argv, "/usr/bin/tree"), "`tree -R -H . -L 1` is decided to run no program"


@pytest.mark.xfail(
    strict=True,
    reason="open: on a node two gateways serve, each gateway's shared scope is a sandbox of its own "
    "(`<fp>/shared`), but its owner is the plain name `shared` (dockercg.owner_of ignores the namespace for "
    "that scope): both run as one host uid (sandboxuid.for_owner) and draw on one pids and RAM share, so "
    "gateway A's agents take what gateway B's shared sandbox may use, and share files with it by DAC",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="open: a gateway-host run may give a file it writes set-id bits: the sandboxes' seccomp refuses "
    "a mode with 06000 (round 8 q), the host runs' filter does not, so agent main's allowlisted cp and "
    "chmod leave a setuid copy of a program, owned by the gateway's uid, in its hostWritable dir on the "
    "host: whoever reaches that dir outside the view (another local account, an agent's own Unix account, "
    "a tool the operator runs there) runs it as the gateway's account (root here)",
)
async def test_class1_a_host_run_leaves_a_setuid_program_of_the_gateways_uid(state_dir: Path) -> None:
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
