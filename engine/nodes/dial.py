"""How the gateway reaches a node's sshd: host keys always checked, the node's own credentials and proxyJump
hops only, the remote command quoted, and what to say when any of it fails."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import stat
from typing import TYPE_CHECKING, Any

from engine import pathtrust
from engine.config import nodekeys
from engine.config.model import NodeConfig
from engine.lazymod import lazy
from engine.nodes.errors import NodeError

if TYPE_CHECKING:
    import asyncssh
else:  # ~0.1 s of the gateway's start, for a library only a configured node needs
    asyncssh = lazy("asyncssh")


def known_hosts_file(cfg: NodeConfig) -> str:
    return os.path.expanduser(cfg.known_hosts or "~/.ssh/known_hosts")


def judged_known_hosts(cfg: NodeConfig) -> str:
    """The node's known_hosts, judged as named and read once from the fd judged (engine.pathtrust.named_hold,
    the config's own rule): a file another account may write, or one in a dir (or behind a link in a dir)
    another account may write, is refused, since that account would put its own server's key under the
    node's address (fresh round 18 c). What the connection checks is these bytes, never the path again."""
    file = known_hosts_file(cfg)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        raise NodeError(host_key_refusal(cfg)) from None
    with os.fdopen(fd, "rb") as fh:
        opened = os.fstat(fh.fileno())
        why = "not a regular file" if not stat.S_ISREG(opened.st_mode) else ""
        why = why or pathtrust.named_hold(file, os.geteuid(), opened)
        if why:
            raise NodeError(
                f"node {cfg.name}: nodes.{cfg.name}.knownHosts {file}: another account may change it "
                f"({why}); refused, nothing was run. Keep it, and every link to it, in dirs only this "
                "account or root may write (chmod 600 the file)",
                "HOST_KEY_REFUSED",
            )
        data = fh.read(4 << 20)
    return data.decode("utf-8", "replace")


def judged_identity(cfg: NodeConfig) -> bytes | None:
    """The node's identityFile (its ssh private key), judged as named (engine.pathtrust.named_hold) and read
    once from the fd judged; None when it names none. A key in a dir (or behind a link in a dir) another
    account may write is refused: that account would swap in a key it holds, and the gateway would then
    prove itself with it to that account's relay. The connection gets these bytes, never the path."""
    file = nodekeys.identity_path(cfg)
    if file is None:
        return None
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise NodeError(f"node {cfg.name}: nodes.{cfg.name}.identityFile {file}: {why(exc)}") from None
    with os.fdopen(fd, "rb") as fh:
        opened = os.fstat(fh.fileno())
        problem = "not a regular file" if not stat.S_ISREG(opened.st_mode) else ""
        problem = problem or pathtrust.named_hold(file, os.geteuid(), opened)
        if problem:
            raise NodeError(_held("identityFile", cfg, file, problem, "chmod 600 the key"))
        return fh.read(1 << 20)


def import_identity(cfg: NodeConfig, data: bytes) -> asyncssh.SSHKey:
    """The judged key's bytes as asyncssh's key (on the loop's thread: asyncssh's lazy import is not
    thread-safe); one it cannot read (say, a passphrase-protected key) named as such."""
    try:
        return asyncssh.import_private_key(data)
    except (ValueError, asyncssh.Error) as exc:
        text = f"node {cfg.name}: nodes.{cfg.name}.identityFile {nodekeys.identity_path(cfg)}: {why(exc)}"
        raise NodeError(text) from None


def judged_agent_path(cfg: NodeConfig) -> str | None:
    """The ssh-agent socket the node's identityAgent names, judged as named before it is dialled (a socket
    cannot be opened and then judged): refused when another account may change what that path names (a
    dir on the way, or the socket, it may write), since the gateway would then ask that account's agent
    to sign. With every dir on the way held by root or this account, nothing can swap it in between."""
    path = nodekeys.agent_path(cfg)
    if path is None:
        return None
    problem = pathtrust.named_hold(path, os.geteuid())
    if problem:
        raise NodeError(_held("identityAgent", cfg, path, problem, "start the agent with ssh-agent -a there"))
    return path


def _held(key: str, cfg: NodeConfig, path: str, problem: str, hint: str) -> str:
    return (
        f"node {cfg.name}: nodes.{cfg.name}.{key} {path}: another account may change it ({problem}); "
        f"refused, nothing was run. Keep it, and every link to it, in dirs only this account or root may "
        f"write ({hint})"
    )


def host_key_refusal(cfg: NodeConfig) -> str:
    file = known_hosts_file(cfg)
    return (
        f"node {cfg.name}: the host key of {cfg.host}:{cfg.port or 22} is not trusted by {file} (unknown or "
        f"changed); connection refused, nothing was run. Check the key with the node's administrator, "
        f"then run: ssh-keyscan -p {cfg.port or 22} {cfg.host} >> {file}"
    )


def jump_hops(spec: str) -> list[tuple[str | None, str, int]]:
    """`proxyJump` as ssh takes it: `[user@]host[:port]`, `[v6]:port`, several hops comma-separated."""
    hops: list[tuple[str | None, str, int]] = []
    for part in spec.split(","):
        user, _, hostport = part.strip().rpartition("@")
        host, port = hostport, "22"
        if hostport.startswith("["):
            host, _, rest = hostport[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else "22"
        elif hostport.count(":") == 1:
            host, port = hostport.split(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"invalid proxyJump hop {part.strip()!r} (expected [user@]host[:port])")
        hops.append((user or None, host, int(port)))
    return hops


def jump_key_refusal(cfg: NodeConfig, host: str, port: int) -> str:
    file = known_hosts_file(cfg)
    return (
        f"node {cfg.name}: the host key of jump host {host}:{port} (proxyJump) is not trusted by {file} "
        f"(unknown or changed); connection refused, nothing was run. Check the key with its administrator, "
        f"then run: ssh-keyscan -p {port} {host} >> {file}"
    )


def remote_command(cfg: NodeConfig) -> str:
    """The command line sshd hands the node's login shell: `exechost node serve --stdio`, behind `env` with
    the node's environment (stateDir as OPENCLAW_STATE_DIR) when it has one. Every word is quoted: a path
    or value with spaces or shell syntax stays one word, and names were checked to be identifiers."""
    env = dict(cfg.env)
    if cfg.state_dir:
        env["OPENCLAW_STATE_DIR"] = cfg.state_dir
    words = [shlex.quote(cfg.exechost), "node", "serve", "--stdio"]
    if env:
        words = ["env", *(shlex.quote(f"{k}={v}") for k, v in sorted(env.items())), *words]
    return " ".join(words)


async def open_agent(cfg: NodeConfig) -> asyncssh.SSHAgentClient | None:
    """The ssh-agent the node's identityAgent names, open for this login; None when it names none."""
    path = await asyncio.to_thread(judged_agent_path, cfg)
    if path is None:
        return None
    try:
        return await asyncssh.connect_agent(path)  # never empty: asyncssh would take $SSH_AUTH_SOCK
    except (OSError, asyncssh.Error) as exc:
        text = f"node {cfg.name}: cannot reach the ssh-agent at {path} (identityAgent): {why(exc)}"
        raise NodeError(text) from None


async def refuse_ssh_config_proxy(cfg: NodeConfig) -> None:
    """A ProxyJump or ProxyCommand ~/.ssh/config gives this host is refused by name, not dropped in
    silence: its hop would log in with credentials the host view does not hide."""

    # Loaded here, on the loop's thread: importlib's LazyLoader (engine.lazymod) is not thread-safe, and
    # a first use from the worker would race the loop's own (asyncssh.Error half-made)
    options_class = asyncssh.SSHClientConnectionOptions

    def probe() -> tuple[object, object]:
        opts = options_class(
            config=(),  # ~/.ssh/config, as asyncssh.connect reads it (the class alone reads none)
            host=cfg.host,
            port=cfg.port or (),
            username=cfg.user or (),
            client_keys=None,
            known_hosts=known_hosts_file(cfg),  # the node's own file, as the connection checks it
        )
        return opts.tunnel, opts.proxy_command

    tunnel, command = await asyncio.to_thread(probe)
    if tunnel or command:
        what = f"ProxyJump {tunnel}" if tunnel else "a ProxyCommand"
        raise NodeError(
            f"node {cfg.name}: ~/.ssh/config gives {cfg.host} {what}; exechost does not use it (the hop "
            "would log in with ssh's own keys, which gateway-host commands can read). Set "
            f'nodes.{cfg.name}.proxyJump = "[user@]host[:port]" instead: its hops log in with the '
            "node's identityFile or identityAgent"
        )


async def open_jumps(
    cfg: NodeConfig, options: dict[str, Any], timeout: float, hops_out: list[asyncssh.SSHClientConnection]
) -> asyncssh.SSHClientConnection:
    """The proxyJump hops, each its own connection with the node's known_hosts and credentials, appended
    to `hops_out` as each is made (closed with the link, even when a later hop fails)."""
    try:
        hops = jump_hops(cfg.proxy_jump or "")
    except ValueError as exc:
        raise NodeError(f"node {cfg.name}: {exc}") from None
    tunnel: asyncssh.SSHClientConnection | None = None
    for user, host, port in hops:
        hop = {**options, "port": port, **({"username": user} if user else {})}
        if tunnel is not None:
            hop["tunnel"] = tunnel
        try:
            tunnel = await asyncio.wait_for(asyncssh.connect(host, **hop), timeout)
        except asyncssh.HostKeyNotVerifiable:
            raise NodeError(jump_key_refusal(cfg, host, port), "HOST_KEY_REFUSED") from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise NodeError(f"node {cfg.name}: jump host {host}:{port}: {why(exc)}") from None
        hops_out.append(tunnel)
    assert tunnel is not None
    return tunnel


async def no_hello(cfg: NodeConfig, proc: asyncssh.SSHClientProcess[bytes], command: str) -> str:
    """Why the node sent no hello, said so the operator knows what to fix."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5)
    err = b""
    with contextlib.suppress(Exception):
        err = await asyncio.wait_for(proc.stderr.read(4096), 1)
    status = proc.exit_status
    detail = err.decode(errors="replace").strip()[:300]
    if status == 127 and any(c.isspace() for c in cfg.exechost):
        return (
            f"node {cfg.name}: `{cfg.exechost}` was not found on the node: "
            f"nodes.{cfg.name}.exechost is one path (quoted, never split); set the node's environment "
            f'with nodes.{cfg.name}.env = {{NAME = "value"}} or its state dir with '
            f"nodes.{cfg.name}.stateDir"
        )
    if status == 127:
        return (
            f"node {cfg.name}: `{cfg.exechost}` was not found on the node: install exechost there "
            f"(pip install exechost, or this repository's scripts/setup.sh) or set "
            f"nodes.{cfg.name}.exechost to its full path"
        )
    return f"node {cfg.name}: `{command}` exited ({status}) before its hello: {detail or 'no output'}"


def why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:300]
