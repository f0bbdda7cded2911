"""Real OpenSSH `sshd` nodes for tests: loopback addresses, throwaway keys, one state dir per node."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
EXECHOST = str(Path(sys.executable).parent / "exechost")
# The venv's `exechost` may be an editable install of another checkout: the node runs this tree's code.
REPO = str(Path(__file__).resolve().parents[2])


# The test's stand-in for the host view's private /tmp (tests/conftest.py): the node's host runs use it too,
# so a test's marker files in the machine's /tmp are where the test looks for them.
PRIVATE_ENV = "EXECHOST_HOST_PRIVATE"


def _private_env(sep: str) -> str:
    value = os.environ.get(PRIVATE_ENV)
    return f"{sep}{PRIVATE_ENV}={value}" if value is not None and value and " " not in value else ""


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "exechost-test", "-f", str(path)], check=True
    )


@dataclass
class SshdNode:
    """One sshd serving one node: its address, port, keys and the node's own state dir."""

    name: str
    addr: str
    port: int
    root: Path
    state_dir: Path
    client_key: Path
    known_hosts: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host_key(self) -> Path:
        return self.root / "host_ed25519"

    @property
    def marks(self) -> Path:
        """Where a test's "it ran" markers go: outside the node's HOME (its root), which the node's host
        view makes read-only to its commands, so a command that ran could write them there."""
        path = self.root.parent / f"{self.name}-marks"
        path.mkdir(exist_ok=True)
        return path

    def config_toml(self) -> str:
        """The gateway's `[nodes.<name>]` table for this node."""
        return (
            f'[nodes.{self.name}]\nhost = "{self.addr}"\nport = {self.port}\nuser = "{_user()}"\n'
            f'identityFile = "{self.client_key}"\nknownHosts = "{self.known_hosts}"\n'
            f'exechost = "{EXECHOST}"\n'
        )

    def start(self) -> None:
        # sshd refuses to start without its privilege-separation dir (normally made by the service unit).
        with contextlib.suppress(OSError):  # not root: sshd's own error says what is missing
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        conf = self.root / "sshd_config"
        conf.write_text(
            f"ListenAddress {self.addr}:{self.port}\n"
            f"HostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.root}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPidFile none\n"
            f"AllowUsers {_user()}\nMaxSessions 50\nMaxStartups 100\nLogLevel ERROR\n"
            # HOME is the node's root: the login shell must not read the real user's rc files (a pyenv
            # rehash there can hold a lock for a minute), and nothing on the node may touch the real HOME.
            f"SetEnv OPENCLAW_STATE_DIR={self.state_dir} EXECHOST_TEST_RUN={os.getpid()} "
            f"HOME={self.root} EXECHOST_HOST_HOME={self.root} PYTHONPATH={REPO}{_private_env(' ')}\n"
        )
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"sshd exited: {err}")
            with contextlib.suppress(OSError), socket.create_connection((self.addr, self.port), 0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen")

    def stop(self) -> None:
        """Kill sshd and every session it started (the node serve processes with them)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        self.proc = None
        _kill_sessions(self.state_dir)

    def drop_connections(self) -> None:
        """Kill sshd and everything it started (the links' relays), but nothing else: a `node run` service
        started by the test, and its sessions, stay up. `start()` brings sshd back on the same port."""
        if self.proc is None:
            return
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def run_service(self) -> subprocess.Popen[bytes]:
        """`exechost node run` as the node's operator would start it: the node's user, state dir and HOME;
        returns once its socket answers."""
        env = {
            "OPENCLAW_STATE_DIR": str(self.state_dir),
            "HOME": str(self.root),
            "EXECHOST_HOST_HOME": str(self.root),  # the node's HOME is its root, not its passwd entry's
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": REPO,
            "EXECHOST_TEST_RUN": str(os.getpid()),
        }
        if PRIVATE_ENV in os.environ:
            env[PRIVATE_ENV] = os.environ[PRIVATE_ENV]
        log = self.root / "node-run.log"
        with log.open("ab") as err:
            proc = subprocess.Popen([EXECHOST, "node", "run"], env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"node run exited: {log.read_text()}")
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
                s.connect(str(self.state_dir / "node.sock"))
                return proc
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError("node run did not listen")

    def trust(self) -> None:
        """known_hosts line for this node's host key (what `ssh-keyscan` would add)."""
        pub = (self.root / "host_ed25519.pub").read_text().split()
        with self.known_hosts.open("a") as f:
            f.write(f"[{self.addr}]:{self.port} {pub[0]} {pub[1]}\n")


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill_sessions(state_dir: Path) -> None:
    """Processes whose environment names this node's state dir (serve processes, their children)."""
    needle = f"OPENCLAW_STATE_DIR={state_dir}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def make_node(root: Path, name: str, addr: str, client_key: Path, known_hosts: Path) -> SshdNode:
    node_root = root / name
    node_root.mkdir(mode=0o700)
    state = node_root / "state"
    state.mkdir(mode=0o700)
    node = SshdNode(name, addr, _free_port(addr), node_root, state, client_key, known_hosts)
    _keygen(node.host_key)
    shutil.copy(f"{client_key}.pub", node_root / "authorized_keys")
    return node


@pytest.fixture
def sshd_nodes(state_dir: Path) -> Iterator[list[SshdNode]]:
    """Two nodes (127.0.0.2, 127.0.0.3), trusted in the test's known_hosts, listed in its config.toml."""
    if not os.path.exists(SSHD):
        pytest.fail("sshd missing: scripts/setup.sh installs openssh-server")
    root = state_dir.parent / "ssh"
    root.mkdir(mode=0o700)
    client_key = root / "id_ed25519"
    _keygen(client_key)
    known_hosts = root / "known_hosts"
    known_hosts.touch(mode=0o600)
    nodes = [
        make_node(root, "alpha", "127.0.0.2", client_key, known_hosts),
        make_node(root, "beta", "127.0.0.3", client_key, known_hosts),
    ]
    try:
        for node in nodes:
            node.start()
            node.trust()
        (state_dir / "config.toml").write_text("".join(n.config_toml() for n in nodes))
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@contextlib.contextmanager
def ssh_agent(sock: Path, *keys: Path) -> Iterator[Path]:
    """A real ssh-agent listening on `sock` with `keys` added. Started as ssh-agent starts itself: it binds
    the socket before it forks and prints its pid, so it is ready when the call returns; stopped by pid."""
    out = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], check=True, capture_output=True, text=True)
    pid = int(out.stdout.split("SSH_AGENT_PID=", 1)[1].split(";", 1)[0])
    try:
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        for key in keys:
            subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True, capture_output=True)
        yield sock
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
