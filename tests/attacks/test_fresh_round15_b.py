"""Fresh round 15 b, issue 27 §1 (ambient authority): what a run reaches without the operator granting it,
from inside a run: state another exechost keeps where no view covers it (a node service's, another
gateway's, an old workspace root), the operator's own runs filed as the agent's, a FUSE vault the modes
call public, and a root gateway's bubblewrap sandbox reading as root."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import stat
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs
from engine.protocol.frames import OPERATOR_TOKEN_NAME, RemoteError, read_token
from tests.attacks.harness import attempt
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.sshd import SshdNode

SECRET = "tok-15b-9f3e1c"

# Two agents of one gateway: main may use the node (its own policy, full there), ops is allowed only `cat`.
TWO_AGENTS = (
    '[tools.exec]\nhost = "auto"\nsecurity = "allowlist"\nask = "on-miss"\n'
    '[[agents.list]]\nid = "main"\ntools.exec.security = "full"\ntools.exec.ask = "off"\n'
    '[[agents.list]]\nid = "ops"\n'
)
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
BWRAP_FULL = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
)


async def _exec(state: Path, agent: str, command: str, **params: Any) -> dict[str, Any]:
    client = await connect(state)
    try:
        result = await client.request("exec", {"command": command, "agentId": agent, **params})
    finally:
        await client.close()
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


def _serve_from(node: SshdNode, state: Path) -> None:
    """The node's sshd again, its `node serve` now with its state dir at `state`: outside every home, as a
    node operator's `/srv/exechost-node` (the fixture's is in the node's own root, beside the gateway's
    ssh key, which host views keep read-only)."""
    state.mkdir(mode=0o700)
    # the node's operator claims it before writing its config there (`exechost state claim`, on the node,
    # as the node's account: recorded in that account's home, the node's root here)
    gatewaydirs.claim_state(str(node.root), str(state))
    node.stop()
    node.state_dir = state
    node.start()


def _found(root: Path, name: str) -> Path:
    hits = [p for p in root.rglob(name) if p.is_file()]
    assert len(hits) == 1, hits
    return hits[0]


async def test_class1_a_node_services_state_dir_is_a_host_runs(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """The machine is a node (sshd, `node serve`) for a gateway as the same account, its state dir outside
    the home (`srv-node` here, `/srv/exechost-node` on a real machine). Agent
    main's node run keeps a note in its /tmp, which on the node is main's private copy under the node's
    state dir; agent ops, allowed only `cat`, reads it from a gateway host run."""
    alpha = sshd_nodes[0]
    _serve_from(alpha, state_dir.parent / "srv-node")
    write_config(state_dir, TWO_AGENTS + "".join(n.config_toml() for n in sshd_nodes))
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("ops", "/usr/bin/cat")
    tmp = os.environ["EXECHOST_HOST_PRIVATE"]  # the /tmp stand-in, private per agent on the node too
    async with gateway(state_dir):
        wrote = await _exec(
            state_dir, "main", f"echo {SECRET} > {tmp}/main-notes.txt", host="node", node="alpha"
        )
        assert wrote["exitCode"] == 0, wrote
        # main's copy of /tmp on the node, where the node keeps it (the operator's look, for the path)
        copy = _found(alpha.state_dir / "hostprivate", "main-notes.txt")
        assert SECRET in copy.read_text()
        # the machine's /tmp itself does not hold it: only main's copy does
        assert not (Path(tmp) / "main-notes.txt").exists()
        read = await _exec(state_dir, "ops", f"/usr/bin/cat {copy}", host="gateway")
    assert SECRET not in read["_text"], read


async def test_class1_a_host_run_drives_another_agents_node_sandbox(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Agent main's sandbox on node alpha (bwrap, the node's choice) holds its workspace file. Agent ops's
    gateway host run finds the sandbox's control dir under the node's state dir and asks its supervisor to
    run a spec of ops's: the spec copies main's file out to where ops reads it."""
    alpha = sshd_nodes[0]
    _serve_from(alpha, state_dir.parent / "srv-node")
    write_config(
        state_dir,
        TWO_AGENTS.replace(
            'id = "main"\n', 'id = "main"\nsandbox.mode = "all"\nsandbox.node = "alpha"\n'
        ).replace('id = "ops"\n', 'id = "ops"\ntools.exec.security = "full"\ntools.exec.ask = "off"\n')
        + "".join(n.config_toml() for n in sshd_nodes),
    )
    (alpha.state_dir / "config.toml").write_text(NODE_FULL + '[agents.defaults.sandbox]\nbackend = "bwrap"\n')
    async with gateway(state_dir):
        wrote = await _exec(state_dir, "main", f"echo {SECRET} > notes.txt; pwd", host="sandbox")
        assert wrote["exitCode"] == 0, wrote
        ctl = [p for p in (alpha.state_dir / "sandbox-ctl").iterdir() if (p / "ctl").exists()]
        assert len(ctl) == 1, ctl
        ctl_dir = ctl[0]
        slot = ctl_dir / "x" / "15b0c0ffee"
        attack = (
            f"mkdir {slot} && "
            f"printf 'cat /workspace/notes.txt > /.exechost/x/15b0c0ffee/leak\\n' > {slot}/spec && "
            f"echo 'run 15b0c0ffee' > {ctl_dir}/ctl && "
            f"while [ ! -s {slot}/leak ]; do sleep 0.05; done; cat {slot}/leak"
        )
        read = await _exec(state_dir, "ops", attack, host="gateway", timeout=30)
    assert SECRET not in read["_text"], read


async def test_class1_a_host_run_lifts_the_node_operators_policy(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Node alpha's operator allows nothing unasked (`security = "allowlist"`, ask off: a miss is denied).
    Agent ops (full on the gateway) is refused `id` there; its gateway host run rewrites the node's config,
    and the same node run then runs."""
    alpha = sshd_nodes[0]
    _serve_from(alpha, state_dir.parent / "srv-node")
    ops_full = 'id = "ops"\ntools.exec.security = "full"\ntools.exec.ask = "off"\n'
    write_config(
        state_dir,
        TWO_AGENTS.replace('id = "ops"\n', ops_full) + "".join(n.config_toml() for n in sshd_nodes),
    )
    node_config = alpha.state_dir / "config.toml"
    node_config.write_text('[tools.exec]\nsecurity = "allowlist"\nask = "off"\n')
    async with gateway(state_dir):
        with pytest.raises(RemoteError, match="SYSTEM_RUN_DENIED"):
            await _exec(state_dir, "ops", "/usr/bin/id -u", host="node", node="alpha")
        rewrote = await _exec(state_dir, "ops", f"printf '{NODE_FULL}' > {node_config}", host="gateway")
        if rewrote["exitCode"] != 0:
            return  # the node's config is not the run's to write
        try:
            ran = await _exec(state_dir, "ops", "/usr/bin/id -u", host="node", node="alpha")
        except RemoteError:
            return  # still the node operator's policy
    assert ran["exitCode"] != 0, ran


async def test_class1_the_node_service_on_an_open_state_dir_still_refuses_a_host_run(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Held (runner/node/peerns.py): with the node service's state dir open to host runs as above, its
    node.sock is a socket any of them connects to, and the kernel says the peer is the service's own uid;
    the service still refuses it, since the peer runs in other mount, PID and user namespaces (a view),
    and a gateway link never does. The node never says hello to it."""
    alpha = sshd_nodes[0]
    _serve_from(alpha, state_dir.parent / "srv-node")
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    service = alpha.run_service()
    try:
        probe = (
            "python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            'print("connected", flush=True); f = s.makefile()\n'
            'try: print(f.readline() or "closed")\n'
            'except OSError as e: print("closed", e)\' '
            f"{alpha.state_dir / 'node.sock'}"
        )
        read = await attempt(state_dir, probe, config=FULL)
    finally:
        service.kill()
        service.wait()
    assert "connected" in read["_text"], read  # the socket itself is reachable
    assert "nodeId" not in read["_text"] and "closed" in read["_text"], read


async def test_class1_the_operators_exec_leaves_its_tmp_files_to_agent_main(state_dir: Path) -> None:
    """The operator runs a command of its own through exechost (no agent named: main's policy). It writes
    a file in /tmp, as commands do. Agent main, on the gateway token alone, reads it from its host run."""
    write_config(state_dir, FULL)
    tmp = os.environ["EXECHOST_HOST_PRIVATE"]  # the /tmp stand-in: each agent's own copy in its view
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            done = await operator.request("exec", {"command": f"echo {SECRET} > {tmp}/op-export.txt"})
        finally:
            await operator.close()
        assert done["details"]["exitCode"] == 0, done
        # (the machine's /tmp stand-in holds no such file: the write went to a private copy)
        agent = await connect(state_dir, "agent", operator=False)
        try:
            read = await agent.request("exec", {"command": f"cat {tmp}/op-export.txt"})
        finally:
            await agent.close()
    assert SECRET not in read["text"], read


async def test_class1_a_moved_workspace_root_leaves_the_old_workspaces_to_host_runs(state_dir: Path) -> None:
    """Agent ops keeps notes in its bwrap sandbox's workspace under `workspaceRoot = <old>`. The operator
    moves the root to <new> (a bigger disk) and restarts; agent main's host run reads ops's notes where
    they still are."""
    old, new = state_dir.parent / "sbx-old", state_dir.parent / "sbx-new"
    ops_sandboxed = (
        '[[agents.list]]\nid = "ops"\ntools.exec.host = "sandbox"\nsandbox.mode = "all"\n'
        'sandbox.backend = "bwrap"\n'
    )
    write_config(state_dir, FULL + f'[agents.defaults.sandbox]\nworkspaceRoot = "{old}"\n' + ops_sandboxed)
    async with gateway(state_dir):
        wrote = await _exec(state_dir, "ops", f"echo {SECRET} > notes.txt", host="sandbox")
    assert wrote["exitCode"] == 0 and wrote["ranOn"].startswith("sandbox"), wrote
    notes = _found(old, "notes.txt")
    write_config(state_dir, FULL + f'[agents.defaults.sandbox]\nworkspaceRoot = "{new}"\n' + ops_sandboxed)
    async with gateway(state_dir):
        read = await _exec(state_dir, "main", f"cat {notes}")
    assert SECRET not in read["_text"], read


async def test_class1_agent_main_types_into_the_operators_shell_session(state_dir: Path) -> None:
    """The operator opens a shell through exechost (a background `sh` reading its input: the console's
    way to keep one). Agent main, on the gateway token alone, finds it in its own session list and writes
    a line to it; the line runs in the operator's shell."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        agent = await connect(state_dir, "agent", operator=False)
        try:
            opened = await operator.request("exec", {"command": "sh", "background": True})
            shell = opened["details"]["sessionId"]
            listed = await agent.request("process", {"action": "list"})
            if shell not in {s["sessionId"] for s in listed["details"].get("sessions", [])}:
                return  # not main's to see
            try:
                await agent.request(
                    "process", {"action": "write", "sessionId": shell, "data": "cat /proc/self/cgroup\n"}
                )
            except RemoteError:
                return  # refused: the operator's session is not main's to write

            async def shown() -> str | None:  # the shell's output, read by main as its own session's
                log = await agent.request("process", {"action": "log", "sessionId": shell})
                return log["text"] if "pids:" in log["text"] else None

            ran = await wait_until(shown)
            await operator.request("process", {"action": "kill", "sessionId": shell})
        finally:
            await agent.close()
            await operator.close()
    assert "pids:/exechost-operator-" not in ran, ran


async def test_class1_another_gateways_node_login_key_is_a_host_runs(state_dir: Path) -> None:
    """Gateway B (the same account, its state dir and its node's key in /srv-like dirs outside the home)
    runs beside this one. Agent main of this gateway, allowed only `cat`, reads B's node login key:
    the key B hides from its own host runs, which logs in to B's node as its account."""
    root = state_dir.parent
    keys = root / "b-keys"
    keys.mkdir(mode=0o700)
    key = keys / "build_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "b-build", "-f", str(key)], check=True
    )
    (keys / "known_hosts").touch(mode=0o600)
    other = root / "sb"
    other.mkdir(mode=0o700)
    write_config(
        other,
        f'[nodes.build]\nhost = "127.0.0.9"\nport = 22\nuser = "ci"\nidentityFile = "{key}"\n'
        f'knownHosts = "{keys / "known_hosts"}"\n',
    )
    b = Daemon(other).start()
    try:
        read = await attempt(state_dir, f"/usr/bin/cat {key}", allow=[("/usr/bin/cat", None)])
    finally:
        b.kill(signal.SIGTERM)
    assert "PRIVATE KEY" not in read["_text"], read


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="a root gateway's bwrap sandbox"
)
async def test_class1_a_root_gateways_bwrap_sandbox_reads_root_only_files_under_usr(state_dir: Path) -> None:
    """The operator (root) keeps a backup credential in /usr/local/etc, 0600 in a 0700 dir: no other
    account reads it. The agent's bwrap sandbox does."""
    secret_dir = Path("/usr/local/etc") / f"exechost-15b-{os.getpid()}"
    secret_dir.mkdir(mode=0o700)
    try:
        key = secret_dir / "backup.key"
        key.write_text(SECRET + "\n")
        key.chmod(0o600)
        read = await attempt(state_dir, f"cat {key}", config=BWRAP_FULL)
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
    assert read.get("ranOn", "").startswith("sandbox"), read
    assert SECRET not in read["_text"], read


async def test_class1_another_gateways_sandbox_workspaces_are_a_host_runs(state_dir: Path) -> None:
    """Gateway B runs beside this one, its sandboxes' workspaces under /srv-like `sbx-b`. B's agent keeps
    notes in its bwrap sandbox; agent main of this gateway, allowed only `cat`, reads them."""
    root = state_dir.parent
    other, workspaces = root / "sb", root / "sbx-b"
    other.mkdir(mode=0o700)
    write_config(other, BWRAP_FULL + f'workspaceRoot = "{workspaces}"\n')
    b = Daemon(other).start()
    try:
        client = await connect(other)
        try:
            wrote = await client.request("exec", {"command": f"echo {SECRET} > notes.txt"})
        finally:
            await client.close()
        assert wrote["details"]["exitCode"] == 0, wrote
        notes = _found(workspaces, "notes.txt")
        read = await attempt(state_dir, f"/usr/bin/cat {notes}", allow=[("/usr/bin/cat", None)])
    finally:
        b.kill(signal.SIGTERM)
    assert SECRET not in read["_text"], read


MINTED = "agent-minted-operator-15b-0001"


async def test_class1_a_host_run_mints_the_operator_token_of_a_gateway_not_started_yet(
    state_dir: Path,
) -> None:
    """The operator keeps service dirs in `srv/` (its own, outside the home: /srv/op on a real machine) and
    will start a second gateway there. Agent main's host run gets there first: it makes the state dir with
    an operator.json whose token it chose. The operator starts gateway B on that path."""
    srv = state_dir.parent / "srv"
    srv.mkdir(mode=0o755)
    planned = srv / "exechost-b"
    plant = (
        f'mkdir -m 700 {planned} && (umask 077; printf \'{{"token": "{MINTED}"}}\' '
        f"> {planned}/{OPERATOR_TOKEN_NAME}) && echo planted"
    )
    done = await attempt(state_dir, plant, config=FULL)
    if "planted" not in done["_text"]:
        return  # the path was not the run's to make
    b = Daemon(planned, operators=False)  # the run made it, not the operator
    try:
        b.start()
    except AssertionError as exc:  # refused at start, saying what to do: no token of the agent's is used
        assert str(planned) in str(exc) and "no gateway of this account recorded it" in str(exc), exc
        assert read_token(planned, OPERATOR_TOKEN_NAME) == MINTED  # left for the operator to inspect
        return
    try:
        client = await connect(planned)  # the operator's own CLI, with the operator.json it finds there
        try:
            await client.request("sessions.list", {})
        finally:
            await client.close()
    finally:
        b.kill(signal.SIGTERM)
    assert read_token(planned, OPERATOR_TOKEN_NAME) != MINTED  # B's operator token is not the agent's


# A tiny read-only FUSE filesystem spoken over /dev/fuse (no libfuse here): one directory of files, mounted
# as FUSE mounts are by default, without allow_other, so no other account (root included) may enter it
# whatever the modes say: the operator's decrypted vault (gocryptfs, cryfs), an sshfs of another machine.
_IN = struct.Struct("=IIQQIIII")  # len opcode unique nodeid uid gid pid padding
_OUT = struct.Struct("=IiQ")  # len error unique
_ATTR = struct.Struct("=QQQQQQIIIIIIIIII")


class _Vault:
    def __init__(self, mountpoint: Path, files: dict[str, bytes]) -> None:
        self.mountpoint, self.files, self.names = mountpoint, files, sorted(files)
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        libc = ctypes.CDLL(None, use_errno=True)
        opts = f"fd={self.fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}".encode()
        if libc.mount(b"vault", os.fsencode(mountpoint), b"fuse.vault", 6, opts) != 0:  # nosuid,nodev
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), "mount fuse")
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        from engine.commands import hostkeeper

        hostkeeper.stop()  # the kept views hold copies of the mount: the connection ends with the last
        ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(self.mountpoint), 2)  # MNT_DETACH
        self.thread.join(timeout=10)  # its read ends with the mount
        os.close(self.fd)

    def _attr(self, ino: int) -> bytes:
        uid, gid = os.getuid(), os.getgid()
        if ino == 1:
            return _ATTR.pack(1, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2, uid, gid, 0, 4096, 0)
        size = len(self.files[self.names[ino - 2]])
        return _ATTR.pack(ino, size, 1, 0, 0, 0, 0, 0, 0, stat.S_IFREG | 0o644, 1, uid, gid, 0, 4096, 0)

    def _reply(self, unique: int, body: bytes = b"", error: int = 0) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, _OUT.pack(_OUT.size + len(body), -error, unique) + body)

    def _serve(self) -> None:
        while True:
            try:
                msg = os.read(self.fd, 1 << 20)
            except OSError as exc:
                if exc.errno in (errno.EINTR, errno.ENOENT):
                    continue
                return  # unmounted
            if len(msg) < _IN.size:
                return  # unmounted
            length, op, unique, node, *_ = _IN.unpack_from(msg)
            arg = msg[_IN.size : length]
            if op == 26:  # INIT: protocol 7.19
                self._reply(
                    unique,
                    struct.pack("=IIIIHHI", 7, 19, struct.unpack_from("=III", arg)[2], 0, 16, 12, 65536),
                )
            elif op == 1:  # LOOKUP
                name = arg.split(b"\0", 1)[0].decode()
                if node == 1 and name in self.files:
                    ino = self.names.index(name) + 2
                    self._reply(unique, struct.pack("=QQQQII", ino, 0, 1, 1, 0, 0) + self._attr(ino))
                else:
                    self._reply(unique, error=errno.ENOENT)
            elif op == 3:  # GETATTR
                self._reply(unique, struct.pack("=QII", 1, 0, 0) + self._attr(node))
            elif op in (14, 27):  # OPEN, OPENDIR
                self._reply(unique, struct.pack("=QII", 0, 0, 0))
            elif op == 15:  # READ
                _fh, off, size = struct.unpack_from("=QQI", arg)
                self._reply(unique, self.files[self.names[node - 2]][off : off + size])
            elif op == 28:  # READDIR
                _fh, off, size = struct.unpack_from("=QQI", arg)
                entries = [(1, ".", 4), (1, "..", 4)] + [(i + 2, n, 8) for i, n in enumerate(self.names)]
                out = b""
                for i, (ino, name, kind) in list(enumerate(entries))[off:]:
                    ent = struct.pack("=QQII", ino, i + 1, len(name.encode()), kind) + name.encode()
                    ent += b"\0" * (-len(ent) % 8)
                    if len(out) + len(ent) > size:
                        break
                    out += ent
                self._reply(unique, out)
            elif op in (18, 29, 25, 38):  # RELEASE, RELEASEDIR, FLUSH, DESTROY
                self._reply(unique)
            elif op in (2, 42, 36):  # FORGET, BATCH_FORGET, INTERRUPT: never answered
                continue
            elif op == 17:  # STATFS (overlayfs asks its layers)
                self._reply(unique, struct.pack("=QQQQQIIII24x", 1024, 0, 0, 16, 0, 4096, 255, 4096, 0))
            elif op == 22:  # GETXATTR
                self._reply(unique, error=errno.ENODATA)
            elif op == 23:  # LISTXATTR: none
                self._reply(
                    unique, struct.pack("=II", 0, 0) if struct.unpack_from("=I", arg)[0] == 0 else b""
                )
            elif op == 34:  # ACCESS: the kernel's own checks decide (no allow_other)
                self._reply(unique)
            else:
                self._reply(unique, error=errno.ENOSYS)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="mounts a FUSE filesystem")
async def test_class1_the_operators_fuse_vault_in_the_home_is_a_host_runs(state_dir: Path) -> None:
    """The operator's vault is mounted at ~/Vault by the operator's account (FUSE, no allow_other): no
    other account can list or read it (checked as nobody). Agent main, allowed only `cat`, reads it."""
    vault_dir = Path(os.environ["HOME"]) / "Vault"
    vault_dir.mkdir()
    vault = _Vault(vault_dir, {"passwords.txt": f"bank: {SECRET}\n".encode()})
    try:
        nobody = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "cat",
                str(vault_dir / "passwords.txt"),
            ],
            capture_output=True,
            text=True,
        )
        assert nobody.returncode != 0 and SECRET not in nobody.stdout  # kept from every other account
        read = await attempt(
            state_dir, f"/usr/bin/cat {vault_dir}/passwords.txt", allow=[("/usr/bin/cat", None)]
        )
    finally:
        vault.close()
    assert SECRET not in read["_text"], read
