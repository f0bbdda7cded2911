"""Fresh round 8, attacker q: class 6 (check, then use) and the confinement boundaries — the gateway-host
view, the bwrap and Docker sandboxes, the egress proxy. Each xfail is an attack that works today; the other
`test_class6_*` tests are attacks closed on this branch (their docstrings say how); the rest are attempts that
failed, kept as regression tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import stat
from pathlib import Path

import pytest

from engine.commands import hostview
from tests.attacks.harness import attempt
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.sshd import SshdNode

# --- the gateway-host view: the install is read-only -------------------------------------------------


def _checkout_root() -> Path:
    """The checkout the gateway runs from (runner/, console/ and engine/ side by side)."""
    return Path(hostview.__file__).resolve().parents[2]


async def test_class6_an_allowlisted_tee_writes_the_gateways_runner_package(state_dir: Path) -> None:
    """Closed (branch view28): the view bound only engine/ and the venv read-only (two dirnames up from
    hostview.py), so an allowlisted `tee` wrote runner/, console/ and the checkout root. Everything the
    gateway's Python imports from is read-only now, read from the interpreter (engine.commands.
    importroots; variants in tests/attacks/test_host_view_install.py)."""
    runner_dir = _checkout_root() / "runner"
    assert (runner_dir / "__main__.py").is_file()
    planted = runner_dir / f"zz_round8_q_{secrets.token_hex(6)}.py"
    try:
        details = await attempt(
            state_dir,
            f"echo 'import os  # agent code in the gateway' | tee {planted}",
            allow=[("/usr/bin/tee", None), ("/usr/bin/echo", None)],
            workdir="/tmp",
        )
        assert details["status"] in ("completed", "failed", "approval-pending", "denied"), details
        assert not planted.exists(), "an allowlisted command wrote into the gateway's own code"
    finally:
        planted.unlink(missing_ok=True)


# --- the Docker sandbox: no set-id file left on the host -----------------------------------------------

DOCKER_SANDBOX = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "{backend}"\nworkspaceRoot = "{root}"\n'
    '[agents.defaults.sandbox.docker]\nimage = "{image}"\n'
)


def _set_id_files(top: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(st.st_mode):
                found.append(f"{os.path.join(dirpath, name)} {oct(st.st_mode)} uid={st.st_uid}")
    return found


@pytest.mark.docker
async def test_class_confinement_a_docker_sandbox_leaves_a_setuid_root_binary_on_the_host(
    state_dir: Path,
) -> None:
    """Closed: a Docker sandbox runs as the workspace's owner (root under a root gateway), and an owner may
    set S_ISUID with no capability, so `chmod 4755` under Docker's default profile left a setuid-root
    binary in the host's workspace. Containers get our profile (engine/sandbox/dockerseccomp.py): the
    bwrap filter's rule, no set-id bit in any mode a call gives."""
    from engine.sandbox import docker_ops
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()
    root = state_dir.parent / "ws"  # an operator's workspaceRoot, e.g. /srv/sandboxes made 0755
    root.mkdir(mode=0o755)
    write_config(state_dir, DOCKER_SANDBOX.format(backend="docker", root=root, image=image))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                result = await client.request(
                    "exec",
                    {
                        "command": "cp /bin/busybox ./sh4 && chmod 4755 ./sh4 && chmod 755 . && ls -ln sh4",
                        "agentId": "main",
                    },
                )
            finally:
                await client.close()
        assert result["details"]["status"] in ("completed", "failed"), result["text"]
        assert _set_id_files(root) == [], "the sandbox left a set-id file where host users can run it"
    finally:
        for container in docker_ops.list_sandboxes():
            docker_ops.remove(container["Id"])


# --- the web console's tabs: `python -m runner` from the operator's cwd ---------------------------------


async def test_class6_a_web_console_tab_runs_the_runner_package_an_agent_planted_in_its_cwd(
    state_dir: Path,
) -> None:
    """Closed: each tab ran `python -m runner console --web-tab` in the web server's cwd (textual-serve
    sets none), and `-m` put that cwd first on sys.path, so a runner/ package an agent's allowlisted host run
    wrote into the operator's project dir ran as the operator, outside the host view. The tab runs `-P`."""
    import asyncio
    import socket
    import sys
    import urllib.parse

    import aiohttp

    from tests.helpers.gateway import REPO
    from tests.helpers.webconsole import BANNER

    work = state_dir.parent / "proj"  # the operator's project dir, where the agent works too
    work.mkdir()
    marker = work / "ran-as-operator"
    plant = (
        f'mkdir -p runner && echo \'open("{marker}", "w").write("agent code")\' '
        "| tee runner/__init__.py runner/__main__.py"
    )
    details = await attempt(
        state_dir,
        plant,
        allow=[("/usr/bin/mkdir", None), ("/usr/bin/tee", None), ("/usr/bin/echo", None)],
        workdir=str(work),
    )
    assert details["status"] == "completed", details["_text"]
    assert (work / "runner" / "__main__.py").is_file()

    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    # Started from the project dir, as an operator does (`cd proj && exechost console --web`).
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(REPO / "runner" / "__main__.py"), "console", "--web", env=env, cwd=str(work),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line.startswith(BANNER), line
        url = line.split(": ", 1)[1].strip()
        port = urllib.parse.urlsplit(url).port
        origin = f"http://127.0.0.1:{port}"

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port or 0)) == 0

        await wait_until(listening, timeout=60)
        async with aiohttp.ClientSession() as session:
            # the tab's page trades the URL's one-use ticket for its websocket (console/web_boot.js)
            async with session.post(url + "session", headers={"Origin": origin}) as traded:
                assert traded.status == 200, await traded.text()
                websocket = (await traded.json())["websocket"]
            ws = await session.ws_connect(websocket, headers={"Origin": origin})

            # The tab's process started: either the console answered, or the planted code ran and exited.
            async def first() -> None:
                while not marker.exists():
                    try:
                        msg = await asyncio.wait_for(ws.receive(), 0.2)
                    except TimeoutError:
                        continue
                    if msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        return
                    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                        return

            await asyncio.wait_for(first(), 120)
            await ws.close()
        assert not marker.exists(), "a web console tab ran the agent's runner/ package as the operator"
    finally:
        proc.terminate()
        await proc.wait()


# --- the gateway-host view: a writable workdir bound by path -------------------------------------------

RACER = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while not os.path.exists("stop") and n < 20_000_000:
    libc.renameat2(-100, b"sub", -100, b"lnk", 2)  # RENAME_EXCHANGE
    n += 1
"""


async def test_class6_a_workdir_exchanged_for_a_link_by_the_agents_own_run_makes_the_homes_config_writable(
    state_dir: Path,
) -> None:
    """Closed (branch view28): every bind's source is an fd opened along its resolved path with no link
    followed and checked on the fd (engine.commands.bindsource); a root under another of the agent's is not
    bound again, under another agent's is refused (variants in tests/attacks/test_host_view_bindfd.py)."""
    from engine.protocol.frames import RemoteError
    from tests.helpers.gateway import FULL
    from tests.helpers.race import tries

    home = Path(os.environ["HOME"])
    (home / ".config" / "git").mkdir(parents=True)
    proj = home / "proj"
    (proj / "sub").mkdir(parents=True)
    os.symlink("../.config", proj / "lnk")
    (proj / "racer.py").write_text(RACER)
    write_config(state_dir, FULL)
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
                for _ in tries(200, budget_s=30):  # the deterministic swaps: test_host_view_bindfd.py
                    # RemoteError: the check saw the link, or a name mid-exchange
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


# --- the sandbox helpers: built in a directory every host run can write ---------------------------------

SWAPPER = r"""
import glob, os, sys, time
payload = b"#!/bin/sh\\necho agent code, first in every agent's sandbox\\n"
name = sys.argv[1]
end = time.monotonic() + 120
open("ready", "w").close()
while time.monotonic() < end and not os.path.exists("stop"):
    for path in glob.glob(f"/tmp/exechost-{name}-*/{name}"):
        try:
            own = f"/tmp/.swap-{os.getpid()}"  # beside, not in, the build dir: its cleanup finds it as made
            with open(own, "wb") as out:
                out.write(payload)
            os.chmod(own, 0o755)
            os.replace(own, path)
        except OSError:
            pass
"""


async def test_class6_a_host_run_replaces_the_landlock_helper_while_the_gateway_builds_it(
    state_dir: Path,
) -> None:
    """Closed: staticbuild compiled the sandbox's landlock helper (and the egress forwarder) in a
    TemporaryDirectory under /tmp, which every gateway-host run sees and, as the gateway's uid, may write:
    a background run replaced the linker's output before _install copied it, and the agent's program became
    the first program of every agent's bwrap sandbox (before landlock). It builds in the state dir now."""
    from engine.protocol.frames import RemoteError
    from engine.sandbox import landlock, staticbuild
    from engine.sandbox import supervisor as sv
    from tests.helpers.gateway import FULL

    compiler = landlock._compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    real = staticbuild._build_locked  # the production builder (tests wrap it in a per-session cache)
    for cell in getattr(real, "__closure__", None) or ():
        if getattr(cell.cell_contents, "__name__", "") == "_build_locked":
            real = cell.cell_contents
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "swap.py").write_text(SWAPPER)
    write_config(state_dir, FULL)
    sv.ensure_bin_dir()
    target = landlock.binary_path()
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            racer = await client.request(
                "exec",
                {
                    "command": f"python3 swap.py {target.name}",
                    "agentId": "main",
                    "workdir": str(work),
                    "background": True,
                },
            )
            assert racer["details"]["status"] == "running", racer["text"]
            try:
                await wait_until(lambda: (work / "ready").exists(), timeout=60)
                problem = await asyncio.to_thread(
                    real, compiler, landlock.SOURCE, target, landlock._stamp(), landlock.source_digest()
                )
                assert problem is None, problem
            finally:
                (work / "stop").write_text("")
                with contextlib.suppress(RemoteError):
                    await client.request(
                        "process", {"action": "kill", "sessionId": racer["details"]["sessionId"]}
                    )
        finally:
            await client.close()
    assert target.read_bytes()[:4] == b"\x7fELF", "the sandbox helper installed is the agent's file"


# --- the sandbox image: its build context under /tmp -------------------------------------------------

CONTEXT_SWAPPER = r"""
import glob, os, time
evil = b'FROM scratch\\nLABEL exechost.image="busybox" round8q.agent="planted"\\nCOPY busybox /bin/busybox\\n'
end = time.monotonic() + 120
open("ready", "w").close()
while time.monotonic() < end and not os.path.exists("stop"):
    for ctx in glob.glob("/tmp/exechost-image-*"):
        own = f"/tmp/.ctx-{os.getpid()}"
        try:
            with open(own, "wb") as out:
                out.write(evil)
            os.replace(own, os.path.join(ctx, "Dockerfile"))
        except OSError:
            pass
"""


@pytest.mark.docker
async def test_class6_a_host_run_rewrites_the_sandbox_images_dockerfile_while_setup_builds_it(
    state_dir: Path,
) -> None:
    """Closed: `exechost sandbox setup` (docker_ops.build_image) wrote the image's build context to a
    TemporaryDirectory under /tmp, which every gateway-host run sees and, as the same uid, may write: a
    background run could replace the Dockerfile (or busybox) before docker-py tarred it, and every agent's
    Docker sandbox would run that image (the race won now and then here). The context is in the state dir."""
    from engine.protocol.frames import RemoteError
    from engine.sandbox import docker_ops
    from engine.sandbox import supervisor as sv
    from tests.helpers.gateway import FULL

    try:
        docker_ops.client()
    except docker_ops.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    if sv.find_static_busybox() is None:
        pytest.skip("no static busybox")
    tag = f"exechost-round8q-{secrets.token_hex(4)}:latest"
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "swap.py").write_text(CONTEXT_SWAPPER)
    write_config(state_dir, FULL)
    labels: dict[str, str] = {}
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            racer = await client.request(
                "exec",
                {"command": "python3 swap.py", "agentId": "main", "workdir": str(work), "background": True},
            )
            assert racer["details"]["status"] == "running", racer["text"]
            try:
                await wait_until(lambda: (work / "ready").exists(), timeout=60)
                await asyncio.to_thread(docker_ops.build_image, [tag], lambda _line: None)
                labels = dict(docker_ops.client().images.get(tag).labels or {})
            finally:
                (work / "stop").write_text("")
                with contextlib.suppress(RemoteError):
                    await client.request(
                        "process", {"action": "kill", "sessionId": racer["details"]["sessionId"]}
                    )
                with contextlib.suppress(Exception):
                    docker_ops.client().images.remove(tag, force=True)
        finally:
            await client.close()
    assert "round8q.agent" not in labels, "the sandbox image was built from the agent's Dockerfile"


# --- attempts that failed: kept as regression tests -----------------------------------------------------

SET_ID_PROBE = r"""
import ctypes, os, shutil
libc = ctypes.CDLL(None, use_errno=True)
shutil.copy("/bin/true", "t1")
calls = {
    "fchmodat2": lambda: libc.syscall(452, -100, b"t1", 0o4755, 0),
    "chmod-high-bits": lambda: libc.syscall(90, b"t1", ctypes.c_uint64(0x100000000 | 0o4755)),
    "fchmodat-high-bits": lambda: libc.syscall(268, -100, b"t1", ctypes.c_uint64(0xFFFF00000000 | 0o2755), 0),
}
for name, call in calls.items():
    call()
    print(name, oct(os.stat("t1").st_mode))
"""


@pytest.mark.bwrap
async def test_a_bwrap_sandbox_sets_no_set_id_bit_through_fchmodat2_or_high_mode_bits(
    state_dir: Path,
) -> None:
    """fchmodat2 (Linux 6.6) and mode words with bits above 32 (the filter masks the whole argument) are
    refused like chmod: no set-id file reaches the host."""
    from engine.sandbox import bwrap

    if hostview.bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    root = state_dir.parent / "ws"
    write_config(state_dir, DOCKER_SANDBOX.format(backend="bwrap", root=root, image="unused"))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                result = await client.request(
                    "exec", {"command": f"python3 - <<'X'\n{SET_ID_PROBE}\nX", "agentId": "main"}
                )
            finally:
                await client.close()
    finally:
        bwrap.remove_all()
    assert "fchmodat2 0o100755" in result["text"], result["text"]
    assert _set_id_files(root) == []


async def test_a_host_run_and_its_pid_1_hold_no_directory_of_the_hosts_mounts(state_dir: Path) -> None:
    """No fd the run or its namespace's pid 1 holds is a directory (the decided cwd's fd was one: its
    `..` walked the host's mounts), and the state dir is empty through every path tried."""
    (state_dir / "secret.txt").write_text("operator token")
    probe = (
        'for f in /proc/self/fd/* /proc/1/fd/*; do [ -d "$f" ] && echo DIR $f; done; '
        f"cat {state_dir}/secret.txt /proc/1/root{state_dir}/secret.txt /proc/1/cwd/secret.txt 2>/dev/null; "
        "echo done"
    )
    details = await attempt(
        state_dir,
        probe,
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        workdir="/tmp",
    )
    assert details["status"] == "completed", details["_text"]
    assert "done" in details["_text"]
    assert "operator token" not in details["_text"]
    dirs = [
        line for line in details["_text"].splitlines() if line.startswith("DIR ") and "/proc/self/fd/" in line
    ]
    assert [d for d in dirs if not d.endswith(("/fd/3",))] == [], details["_text"]
    assert not [line for line in details["_text"].splitlines() if line.startswith("DIR /proc/1/")]


async def test_the_engine_package_and_the_venv_are_read_only_in_the_host_view(state_dir: Path) -> None:
    """What the view does cover of the install: engine/ and the venv (a full run cannot write either)."""
    import sys

    engine_dir = Path(hostview.__file__).resolve().parents[1]
    venv = Path(os.path.realpath(sys.prefix))
    name = f"zz_round8_q_{secrets.token_hex(6)}"
    details = await attempt(
        state_dir,
        f"touch {engine_dir}/{name} {venv}/{name} 2>&1; echo rc=$?",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        workdir="/tmp",
    )
    try:
        assert "Read-only file system" in details["_text"], details["_text"]
        assert not (engine_dir / name).exists() and not (venv / name).exists()
    finally:
        (engine_dir / name).unlink(missing_ok=True)
        (venv / name).unlink(missing_ok=True)


async def test_a_node_runs_allowlisted_recursive_grep_finds_nothing_of_the_nodes_state_dir(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """On a node, an allowlisted `grep -r` from the parent of the node's state dir walks into it by no
    word the checks model; the node's state (approvals file, its socket token) is hidden from its runs."""
    from engine.approvals.store import ApprovalsStore

    node = sshd_nodes[0]
    nodes = (state_dir / "config.toml").read_text()
    write_config(state_dir, '[tools.exec]\nhost = "auto"\nsecurity = "allowlist"\nask = "on-miss"\n' + nodes)
    (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    (node.state_dir / "config.toml").chmod(0o600)
    ApprovalsStore(node.state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/grep")
    assert "version" in (node.state_dir / "exec-approvals.json").read_text()
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            result = await client.request(
                "exec",
                {
                    "command": "grep -r -l version .",
                    "agentId": "main",
                    "host": "node",
                    "node": node.name,
                    "workdir": str(node.state_dir.parent),
                },
            )
        finally:
            await client.close()
    assert result["details"]["status"] in ("completed", "failed"), result["text"]
    assert "exec-approvals.json" not in result["text"] and "config.toml" not in result["text"]
