"""The demo's world without any UI: a throw-away root (state dir + workspace), its config and allowlist, and
the scripted agent that keeps working while the user watches (the terminal console and `--web` share it)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import principals, statefs
from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs, hostoutside, privatefs
from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable, RemoteError
from engine.protocol.requests import ExecRequest, SandboxRecreate, Shutdown, Status

ROOT_PREFIX = "ehdemo-"
GRANT_COMMAND = "df -h /"
GRANT_EVERY_SEC = 4.0  # slow enough to watch a grant's uses count down in Policy
STALE_SCRIPT = "release.sh"

DEMO_CONFIG = """\
# exechost demo profile: commands run on this machine (host=gateway) under an allowlist;
# anything not on it is asked in the console.
[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"
askFallback = "deny"
backgroundMs = 2000
# The demo's own two scripts take no code from the tree they run in (checked: they read nothing there).
treeSafe = ["build-job", "dashboard"]
"""

# The sandboxed step, present once a daemonless backend exists (bwrap28): an agent whose every command runs
# in a bubblewrap sandbox, no Docker engine and no network needed.
BWRAP_CONFIG = """
[agents.defaults.sandbox]
backend = "bwrap"

[[agents.list]]
id = "sandboxed"
sandbox.mode = "all"
tools.exec.host = "sandbox"
tools.exec.security = "full"
tools.exec.ask = "off"
"""

# The egress step: the sandboxed agent's only way out is the gateway's proxy; the demo's own package mirror
# (on loopback, so no network is needed) is an allowed name, any other name is asked in the inbox.
MIRROR = "pypi.demo.lan"
OTHER_MIRROR = "mirror.example.lan"
EGRESS_CONFIG = """sandbox.egress.mode = "allowlist"
sandbox.egress.allow = ["{mirror}:{port}"]
sandbox.egress.ask = true
sandbox.egress.resolve = {{ "{mirror}" = "127.0.0.1", "{other}" = "127.0.0.1" }}
"""
PIP = "python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --timeout 600 -d /tmp/dl"

BUILD_JOB = """\
#!/usr/bin/env python3
# demo: a background build that streams coloured progress for a while
import sys, time
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
for i in range(1, steps + 1):
    colour = 32 if i % 10 else 33
    print(f"\\x1b[{colour}m[build]\\x1b[0m step {i:3d}/{steps}  compiling module_{i:03d}.py", flush=True)
    if i % 25 == 0:
        print(f"\\x1b[36m[test]\\x1b[0m  {i} tests passed", flush=True)
    time.sleep(0.3)
print("\\x1b[1;32mBUILD OK\\x1b[0m")
"""

DASHBOARD = """\
#!/usr/bin/env python3
# demo: a full-screen PTY program (cursor moves, colours, redraws); q quits, Ctrl-C stops it
import os, select, signal, sys, termios, tty
fd = sys.stdin.fileno()
old = termios.tcgetattr(fd) if os.isatty(fd) else None
if old:
    tty.setcbreak(fd)  # Ctrl-C still raises SIGINT: cbreak keeps ISIG
bars = [0, 15, 30, 45, 60]
names = ["cpu0", "cpu1", "disk", "net ", "mem "]
try:
    sys.stdout.write("\\x1b[2J\\x1b[?25l")
    tick = 0
    while True:
        sys.stdout.write("\\x1b[H\\x1b[1;36m exechost demo dashboard \\x1b[0m  (q or Ctrl-C)\\r\\n\\r\\n")
        for i, name in enumerate(names):
            bars[i] = (bars[i] + 3 + i) % 101
            filled = bars[i] * 40 // 100
            colour = 32 if bars[i] < 60 else 33 if bars[i] < 85 else 31
            bar = "\\x1b[" + str(colour) + "m" + "#" * filled + "\\x1b[0m" + "." * (40 - filled)
            sys.stdout.write(f" {name} {bar} {bars[i]:3d}%\\x1b[K\\r\\n")
        sys.stdout.write(f"\\r\\n tick {tick}\\x1b[K")
        sys.stdout.flush()
        tick += 1
        ready, _, _ = select.select([fd], [], [], 0.25)
        if ready and os.read(fd, 64).strip().lower().startswith(b"q"):
            break
except KeyboardInterrupt:
    sys.stdout.write("\\r\\ninterrupted (Ctrl-C)")
finally:
    sys.stdout.write("\\x1b[?25h\\r\\nbye\\r\\n")
    if old:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
"""

RELEASE_V1 = "#!/bin/sh\n# demo: the script you are asked about\necho 'releasing v1.0'\n"
RELEASE_V2 = "#!/bin/sh\n# demo: rewritten by the agent after the ask\necho 'releasing v2'\nrm -rf ./dist\n"

HEREDOC = "python3 - <<'EOF'\nimport platform\nprint('python', platform.python_version())\nEOF"


@dataclass(frozen=True)
class Demo:
    """One demo run: everything it writes is under `root` (a fresh /tmp dir: short Unix socket paths).
    `mirror_port`: the loopback port of the demo's package mirror (0: no egress step)."""

    root: Path
    mirror_port: int = 0

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def work(self) -> Path:
        """The agent's workspace: a git repository, never the state dir."""
        return self.root / "work"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def config(self) -> Path:
        return self.state / "config.toml"


def sandbox_backend() -> str | None:
    """The sandbox the tour can show on this machine: bubblewrap once the backend exists (no daemon, no
    network needed), else None. (Docker needs an image no registry here can give a fresh machine.)"""
    if importlib.util.find_spec("engine.sandbox.bwrap") is not None and shutil.which("bwrap"):
        return "bwrap"
    return None


def egress_available() -> bool:
    """The egress proxy (runner/egress.py) exists and the sandbox step runs: pip goes through it."""
    return sandbox_backend() is not None and importlib.util.find_spec("runner.egress") is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_root() -> Path:
    return Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir="/tmp"))


def is_demo_root(root: Path) -> bool:
    return root.name.startswith(ROOT_PREFIX) and root.parent == Path("/tmp")


def _git(work: Path, *args: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True)


def _workspace(demo: Demo) -> None:
    """A small project under git with an inert repository config (names, no programs)."""
    work = statefs.ensure_private_dir(demo.work)
    (work / "README.md").write_text("# demo project\n\nA throw-away workspace for the exechost demo.\n")
    (work / "app.py").write_text("print('hello from the demo project')\n")
    (work / STALE_SCRIPT).write_text(RELEASE_V1)
    (work / STALE_SCRIPT).chmod(0o700)
    if shutil.which("git"):
        _git(work, "init", "-q", "-b", "main")
        _git(work, "config", "user.name", "demo agent")
        _git(work, "config", "user.email", "agent@demo.invalid")
        _git(work, "add", ".")
        _git(work, "commit", "-q", "-m", "initial commit")
        (work / "app.py").write_text("print('hello from the demo project, edited')\n")


def prepare_demo(root: Path | None = None) -> Demo:
    """Create the demo root, config, workspace and allowlist; point this process at its state dir."""
    demo = Demo(root or new_root(), free_port() if egress_available() else 0)
    statefs.ensure_private_dir(demo.root)
    statefs.ensure_private_dir(demo.state)
    # made here, as a gateway of this account would make it: recorded before anything is written in it
    # (engine.commands.gatewaydirs.adopt refuses an unrecorded state dir holding a gateway's files)
    gatewaydirs.record(hostoutside.home_dir(), str(demo.state))
    config = DEMO_CONFIG
    if sandbox_backend() == "bwrap":
        config += BWRAP_CONFIG
        if demo.mirror_port:
            config += EGRESS_CONFIG.format(mirror=MIRROR, other=OTHER_MIRROR, port=demo.mirror_port)
    statefs.atomic_write(demo.config, config)
    prepare_env(demo)
    statefs.ensure_private_dir(demo.bin)
    for name, body in (("build-job", BUILD_JOB), ("dashboard", DASHBOARD)):
        statefs.atomic_write(demo.bin / name, body, mode=stat.S_IRWXU)
    _workspace(demo)
    store = ApprovalsStore(demo.state / "exec-approvals.json")
    store.ensure()
    wanted = [str(demo.bin / "build-job"), str(demo.bin / "dashboard")]
    for exe in ("ls", "uname", "date", "echo", "cat", "git"):
        path = shutil.which(exe)
        if path:
            wanted.append(os.path.realpath(path))
    existing = {r.pattern for r in store.agent("main").allowlist}
    for pattern in wanted:
        if pattern not in existing:
            store.add_allowlist("*", pattern, source="demo")
    return demo


def prepare_env(demo: Demo) -> None:
    """Every engine module finds the state dir and config through these variables."""
    os.environ["OPENCLAW_STATE_DIR"] = str(demo.state)
    os.environ["EXECHOST_CONFIG"] = str(demo.config)


def finish_demo(demo: Demo) -> None:
    """The demo's gateway stops with its sessions when the demo quits, and its root goes with it."""

    async def stop() -> None:
        try:
            client = await ControlClient.connect(demo.state, client="demo", autostart=False, operator=True)
        except (GatewayUnavailable, RemoteError, OSError):
            return
        with contextlib.suppress(RemoteError, ConnectionError, TimeoutError):
            pid = (await client.request(Status())).get("pid")
            with contextlib.suppress(RemoteError):  # sandboxes outlive a gateway: the demo's go first
                await client.request(SandboxRecreate(all_=True))
            await client.request(Shutdown(kill_sessions=True))
            await asyncio.wait_for(client.wait_closed(), 5)
            for _ in range(100):  # its sandboxes and sessions are gone once the daemon has exited
                if not isinstance(pid, int) or not _alive(pid):
                    break
                await asyncio.sleep(0.05)
        await client.close()

    asyncio.run(stop())
    if is_demo_root(demo.root):
        # its agents' capped /tmp and its sandboxes' workspaces are mounts: rmtree cannot remove them
        privatefs.detach_below(str(demo.root))
        shutil.rmtree(demo.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Running, not a zombie: the gateway the console started is its child, a zombie until reaped."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


Say = Callable[[str], None]


class DemoAgent:
    """The scripted agent: its own control connections (one credential per agent, as `exechost agents add`
    mints them), several lines of work at once, and it keeps working until the demo quits."""

    def __init__(self, demo: Demo, say: Say | None = None) -> None:
        self.demo = demo
        self.say = say or (lambda _text: None)
        self.clients: dict[str, ControlClient] = {}
        self.git_ran = asyncio.Event()

    async def client(self, agent: str) -> ControlClient:
        if agent not in self.clients:
            if agent != principals.MAIN_AGENT and principals.read_token(self.demo.state, agent) is None:
                principals.mint(self.demo.state, agent)
            self.clients[agent] = await ControlClient.connect(
                self.demo.state, client="demo-agent", name=f"demo agent {agent}", agent=agent
            )
        return self.clients[agent]

    async def exec(self, command: str, reason: str, agent: str = "main", **extra: Any) -> dict[str, Any]:
        # A sandboxed agent works in its sandbox's own workspace.
        workdir = str(self.demo.work) if agent == "main" else None
        call = ExecRequest(
            command=command,
            agent_id=agent,
            session_key=f"agent:{agent}",
            reason=reason,
            workdir=workdir,
            **extra,
        )
        try:
            result: dict[str, Any] = await (await self.client(agent)).request(call)
        except RemoteError as exc:
            return {"text": str(exc)}
        return result

    async def run(self) -> None:
        try:
            lines = (self._sessions(), self._asks(), self._grant(), self._stale(), self._sandboxed())
            await asyncio.gather(*lines)
        finally:
            for client in self.clients.values():
                await client.close()

    async def _sessions(self) -> None:
        """What runs at once: a build whose output scrolls, a PTY dashboard to take over, an allowlisted
        command, and git in a repository whose config is inert."""
        self.say("starts a background build")
        await self.exec(f"{self.demo.bin / 'build-job'} 400", "build the project", background=True)
        self.say("starts a PTY dashboard (Sessions: t takes it over)")
        await self.exec(str(self.demo.bin / "dashboard"), "watch the machine", pty=True, background=True)
        self.say("runs `uname -a` (allowlisted: no ask)")
        await self.exec("uname -a", "what machine is this?")
        self.say("runs `git status --short` (the repository's config is inert: no ask)")
        try:
            await self.exec("git status --short", "what did I change?")
        finally:
            self.git_ran.set()

    async def _asks(self) -> None:
        """Asks whose why is worth reading, each submitted while the others wait."""
        await asyncio.sleep(0.5)
        asks = [
            asyncio.ensure_future(self.exec(command, reason))
            for command, reason in (
                ("ps -eo pid,comm | head -n 5", "which processes run? (head is a safe bin; ps is not)"),
                (HEREDOC, "which Python is this? (a heredoc fed to an interpreter is code)"),
            )
        ]
        await self.git_ran.wait()  # `git status` ran while the config was inert; now the agent edits it
        await self._git_pager()
        pager = self.exec("git diff --stat", "what changed? (core.pager is set now)")
        asks.append(asyncio.ensure_future(pager))
        await asyncio.gather(*asks)

    async def _git_pager(self) -> None:
        """The agent writes a program into its repository's config: git would run it on the host."""
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            await asyncio.to_thread(_git, self.demo.work, "config", "core.pager", "less -R")

    async def _grant(self) -> None:
        """The same command every few seconds: a grant for 5 uses runs it 5 times, then it asks again.
        A deny stops it (an agent told no does not ask again and again)."""
        await asyncio.sleep(0.3)
        run = 0
        while True:
            run += 1
            self.say(f"runs `{GRANT_COMMAND}` (time {run})")
            result = await self.exec(GRANT_COMMAND, "how full is the disk? (I check every few seconds)")
            if (result.get("details") or {}).get("status") == "denied":
                self.say(f"stops running `{GRANT_COMMAND}`: denied")
                return
            await asyncio.sleep(GRANT_EVERY_SEC)

    async def _stale(self) -> None:
        """Asks to run a script, then rewrites it while the ask waits: the console shows the new digest,
        and an approval of the old bytes is refused as approval-stale."""
        await asyncio.sleep(1.0)
        task = asyncio.ensure_future(self.exec(f"sh ./{STALE_SCRIPT}", "ship the release"))
        await asyncio.sleep(3)
        if not task.done():
            self.say(f"rewrites {STALE_SCRIPT} while you decide")
            statefs.atomic_write(self.demo.work / STALE_SCRIPT, RELEASE_V2, mode=0o700)
        await task

    async def _sandboxed(self) -> None:
        """A command confined by the sandbox backend, then (with the egress proxy) `pip download` from the
        demo's allowed mirror name, and from another name: that connection waits for an ask."""
        if sandbox_backend() is None:
            return
        await asyncio.sleep(1.5)
        self.say("runs a command in a bubblewrap sandbox (no network, the workspace its only writable path)")
        await self.exec(
            "id; hostname; ls /; touch /usr/x 2>&1; echo sandboxed-ok",
            "look around inside my sandbox",
            agent="sandboxed",
        )
        if not self.demo.mirror_port:
            return
        async with PackageMirror(self.demo.mirror_port):
            base = f"http://{MIRROR}:{self.demo.mirror_port}/simple"
            self.say(f"runs pip download from {MIRROR} (an allowed name)")
            pip = f"{PIP} --trusted-host {MIRROR} --index-url {base} demo-hello"
            await self.exec(pip, "fetch a package", agent="sandboxed", background=True)
            other = f"http://{OTHER_MIRROR}:{self.demo.mirror_port}/simple"
            self.say(f"runs pip download from {OTHER_MIRROR} (not allowed: its connection asks)")
            pip = f"{PIP} --trusted-host {OTHER_MIRROR} --index-url {other} demo-hello"
            await self.exec(pip, "fetch it from another mirror", agent="sandboxed", background=True)
            await asyncio.Event().wait()  # the mirror serves until the demo quits


def demo_wheel() -> tuple[str, bytes]:
    """A tiny wheel (name, bytes) for the demo mirror to serve."""
    import base64
    import hashlib
    import io
    import zipfile

    name = "demo_hello-1.0-py3-none-any.whl"
    files = {
        "demo_hello/__init__.py": b"print('hello from the demo mirror')\n",
        "demo_hello-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-hello\nVersion: 1.0\n",
        "demo_hello-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: exechost-demo\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += "demo_hello-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in {**files, "demo_hello-1.0.dist-info/RECORD": record.encode()}.items():
            zf.writestr(path, data)
    return name, buf.getvalue()


class PackageMirror:
    """A PEP 503 index with one package on 127.0.0.1, reached from the sandbox only through the proxy
    (the `resolve` map sends the mirror names here): the egress step needs no network."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.runner: Any = None

    async def __aenter__(self) -> PackageMirror:
        import hashlib

        from aiohttp import web

        name, wheel = demo_wheel()
        sha = hashlib.sha256(wheel).hexdigest()

        async def index(_request: web.Request) -> web.Response:
            body = f'<html><body><a href="/files/{name}#sha256={sha}">{name}</a></body></html>'
            return web.Response(text=body, content_type="text/html")

        async def file(_request: web.Request) -> web.Response:
            return web.Response(body=wheel, content_type="application/octet-stream")

        app = web.Application()
        app.add_routes([web.get("/simple/demo-hello/", index), web.get(f"/files/{name}", file)])
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
