"""config.toml: load and validate (errors name file, key and line), merged per-agent views."""

from __future__ import annotations

import grp
import os
import posixpath
import pwd
import re
import stat
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine import pathtrust, statefs
from engine.config.checker import Checker, type_name
from engine.config.lines import PathParts
from engine.config.lines import key_lines as key_lines  # re-exported: part of this module's API
from engine.config.lines import render_key as render_key
from engine.config.model import (
    AgentConfig,
    BrowserConfig,
    Config,
    ConfigError,
    DockerConfig,
    ExecConfig,
    GatewayConfig,
    NodeConfig,
    PruneConfig,
    SandboxConfig,
)
from engine.config.schema import (
    AGENT_KEYS,
    DEFAULT_ULIMITS,
    DEFAULT_WORKDIR,
    GATEWAY_KEYS,
    NODE_KEYS,
    SANDBOX_KEYS,
    TOOLS_KEYS,
    size_bytes,
)
from engine.config.schema import known_keys as known_keys
from engine.principals import LEGACY_MAIN, valid_name

# --------------------------------------------------------------------------- paths


def config_path(explicit: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """--config, else $EXECHOST_CONFIG, else <state dir>/config.toml."""
    source = os.environ if env is None else env
    raw = explicit or source.get("EXECHOST_CONFIG", "").strip()
    if raw:
        return Path(os.path.expanduser(raw))
    return statefs.state_dir(None if env is None else dict(env)) / "config.toml"  # no os.environ copy


def load_config(
    path: str | Path | None = None, *, required: bool = False, env: Mapping[str, str] | None = None
) -> Config:
    """Load and validate; a missing file means all defaults unless `required` (an explicitly named file)."""
    target = Path(path) if path is not None else config_path(env=env)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang us
    except FileNotFoundError:
        if required:
            raise ConfigError(target, "", None, "config file not found") from None
        return _build(target, {}, {}, exists=False, env=env)
    except OSError as exc:
        raise ConfigError(target, "", None, f"cannot read: {exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        opened = os.fstat(fh.fileno())
        _check_owner(target, opened)
        _check_dirs(target, opened)
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(target, "", None, f"not valid UTF-8 at byte {exc.start}") from None
    return load_config_text(text, target, env=env)


def _check_owner(target: Path, st: os.stat_result) -> None:
    """The config decides security and ask: one that another user wrote, or could write, is refused, as
    the approvals file is. Root's files are trusted (root could change ours anyway)."""
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(target, "", None, "not a regular file")
    if st.st_uid not in (os.geteuid(), 0):
        raise ConfigError(target, "", None, f"owned by uid {st.st_uid}, not by this user or root; refused")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise ConfigError(
            target, "", None, f"unsafe mode {mode:04o} (writable by group or others); run chmod 600 {target}"
        )


def _check_dirs(target: Path, opened: os.stat_result) -> None:
    """The config is judged as named, link by link (fresh rounds 17 c and 18 c, engine.pathtrust.named_hold):
    the dir holding every link on the way to it and the one holding the file, and every dir above each,
    must be root's or this account's and writable by no other account unless sticky. Else an account that
    may write one renames the file aside or re-points a link (team/cfg -> ~/cfg-op) to another file, root's
    or ours (another gateway's config, `security = "full"`), which the owner check takes; a running gateway
    keeps its last good config instead. The fd already open must be the file judged."""
    why = pathtrust.named_hold(str(target), os.geteuid(), opened)
    if why:
        raise ConfigError(
            target,
            "",
            None,
            f"in a dir another account may change ({why}): it could put another file in this one's "
            "place; refused. Keep the config, and every link to it, in dirs only this account or root may "
            "write",
        )


def load_config_text(
    text: str, path: str | Path = "<config>", *, env: Mapping[str, str] | None = None
) -> Config:
    target = Path(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        unclosed = _unclosed_header(text)
        if unclosed is not None:  # tomllib may blame what follows (`Cannot declare … twice`)
            number, line = unclosed
            closing = "]]" if line.lstrip().startswith("[[") else "]"
            why = f"invalid TOML: the table header {line.strip()!r} has no closing {closing!r} ({exc})"
            raise ConfigError(target, "", number, why) from exc
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise ConfigError(target, "", int(match.group(1)) if match else None, f"invalid TOML: {exc}") from exc
    return _build(target, data, key_lines(text), exists=True, env=env)


_HEADER_START = re.compile(r"^\s*\[")


def _unclosed_header(text: str) -> tuple[int, str] | None:
    """The first `[table` / `[[array` line with no closing bracket (before any comment), by line number.
    Only consulted once the text failed to parse: a value line never starts with `[`, but an array value
    continued over lines can, so a line is a header only outside an open multi-line array or string."""
    depth = 0
    in_string: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if in_string is None and depth == 0 and _HEADER_START.match(line):
            head = line.split("#", 1)[0]
            if ("]]" if head.lstrip().startswith("[[") else "]") not in head:
                return number, line
            continue
        for i, ch in enumerate(line):
            if in_string is not None:
                if line.startswith(in_string, i):
                    in_string = None
                continue
            if line.startswith(('"""', "'''"), i):
                in_string = line[i : i + 3]
            elif ch == "#":
                break
            elif ch == "[":
                depth += 1
            elif ch == "]":
                depth = max(0, depth - 1)
    return None


# --------------------------------------------------------------------------- validation


def _build(
    path: Path, data: dict[str, Any], lines: dict[str, int], *, exists: bool, env: Mapping[str, str] | None
) -> Config:
    check = Checker(path, lines)
    cfg = Config(path=path, exists=exists)
    for top in data:
        if top not in ("tools", "agents", "nodes", "gateway"):
            raise check.error([top], "unknown key (expected one of: tools, agents, nodes, gateway)")
    tools = check.table(data.get("tools", {}), TOOLS_KEYS, ["tools"])
    exec_set = tools.get("exec", {})
    cfg.exec = _exec_config(exec_set)
    cfg.elevated_enabled = bool(tools.get("elevated", {}).get("enabled", False))
    cfg.sandbox_tools = dict(tools.get("sandbox", {}).get("tools", {}))

    agents = data.get("agents", {})
    if not isinstance(agents, dict):
        raise check.error(["agents"], f"expected a table, got {type_name(agents)}")
    for key in agents:
        if key not in ("defaults", "list"):
            raise check.error(["agents", key], "unknown key (expected one of: defaults, list)")
    defaults = agents.get("defaults", {})
    if not isinstance(defaults, dict):
        raise check.error(["agents", "defaults"], f"expected a table, got {type_name(defaults)}")
    for key in defaults:
        if key != "sandbox":
            raise check.error(["agents", "defaults", key], "unknown key (expected: sandbox)")
    sandbox_set = check.table(defaults.get("sandbox", {}), SANDBOX_KEYS, ["agents", "defaults", "sandbox"])
    cfg.sandbox = _sandbox_config(sandbox_set, env)

    entries = agents.get("list", [])
    if not isinstance(entries, list):
        raise check.error(["agents", "list"], "expected [[agents.list]] entries (an array of tables)")
    for index, raw in enumerate(entries):
        here: PathParts = ["agents", "list", index]
        parsed = check.table(raw, AGENT_KEYS, here)
        agent_id = parsed.get("id")
        if agent_id is None:
            raise check.error(here, "missing required key 'id'")
        agent_id = agent_id.strip()
        if not valid_name(agent_id):
            raise check.error([*here, "id"], f"invalid agent id {agent_id!r} (letters, digits, _ . -)")
        if agent_id == LEGACY_MAIN:  # the approvals file reads it as main: never an agent of its own
            raise check.error(
                [*here, "id"],
                f"agent id {agent_id!r} is agent main's legacy name: "
                "exec-approvals.json files it as main's; "
                'use id = "main" to configure main, or another id for an agent of its own',
            )
        if agent_id in cfg.agents:
            raise check.error([*here, "id"], f"duplicate agent id {agent_id!r}")
        agent_tools = parsed.get("tools", {})
        elevated = agent_tools.get("elevated", {})
        cfg.agents[agent_id] = AgentConfig(
            id=agent_id,
            index=index,
            exec=dict(agent_tools.get("exec", {})),
            elevated_enabled=elevated.get("enabled"),
            sandbox_tools=dict(agent_tools.get("sandbox", {}).get("tools", {})),
            sandbox=dict(parsed.get("sandbox", {})),
            uid=_agent_uid(check, parsed, here, cfg),
            nodes=list(parsed["nodes"]) if "nodes" in parsed else None,
        )

    _check_docker(check, cfg.sandbox.docker)
    _check_egress(check, cfg.sandbox, ["agents", "defaults", "sandbox"])
    for agent in cfg.agents.values():
        if "egress" in agent.sandbox or "docker" in agent.sandbox:
            _check_egress(check, cfg.sandbox_for(agent.id), ["agents", "list", agent.index, "sandbox"])
    _check_browser(check, sandbox_set.get("browser", {}), ["agents", "defaults", "sandbox", "browser"])
    _check_rootfs(check, sandbox_set.get("bwrap", {}), ["agents", "defaults", "sandbox", "bwrap"])
    for agent in cfg.agents.values():
        agent_parts: PathParts = ["agents", "list", agent.index, "sandbox", "bwrap"]
        _check_rootfs(check, agent.sandbox.get("bwrap", {}), agent_parts)
    for agent in cfg.agents.values():
        browser_parts: PathParts = ["agents", "list", agent.index, "sandbox", "browser"]
        _check_browser(check, agent.sandbox.get("browser", {}), browser_parts)
    for agent in cfg.agents.values():
        own = agent.sandbox.get("docker", {})
        if own:
            docker_parts: PathParts = ["agents", "list", agent.index, "sandbox", "docker"]
            _check_docker(check, cfg.sandbox_for(agent.id).docker, docker_parts, set(own))

    nodes = data.get("nodes", {})
    if not isinstance(nodes, dict):
        raise check.error(["nodes"], f"expected a table of [nodes.<name>], got {type_name(nodes)}")
    for name, raw in nodes.items():
        here = ["nodes", name]
        parsed = check.table(raw, NODE_KEYS, here)
        if "host" not in parsed:
            raise check.error(here, "missing required key 'host'")
        if not valid_name(name):
            raise check.error(here, f"invalid node name {name!r} (letters, digits, _ . -)")
        _check_node_env(check, parsed, here)
        cfg.nodes[name] = NodeConfig(name=name, **parsed)
    for agent in cfg.agents.values():
        for node in agent.nodes or ():
            if node not in cfg.nodes:
                known = ", ".join(sorted(cfg.nodes)) or "none configured"
                raise check.error(
                    ["agents", "list", agent.index, "nodes"], f"unknown node {node!r} (known: {known})"
                )
    cfg.gateway = _gateway_config(check, data.get("gateway", {}))
    return cfg


def _agent_uid(check: Checker, parsed: Mapping[str, Any], here: PathParts, cfg: Config) -> int | None:
    """`uid` or `user` (never both): the Unix account whose connections on the agents' socket are this
    agent. Refused: an unknown user, an account two agents share, or the gateway's own account (that one
    is the operator's, whose connections prove who they are with tokens)."""
    uid, user = parsed.get("uid"), parsed.get("user")
    if uid is not None and user is not None:
        raise check.error([*here, "user"], "set uid or user, not both")
    if user is not None:
        try:
            uid = pwd.getpwnam(user.strip()).pw_uid
        except KeyError:
            raise check.error([*here, "user"], f"no such user {user!r}") from None
    if uid is None:
        return None
    key = "user" if user is not None else "uid"
    if uid == os.geteuid():
        raise check.error([*here, key], f"uid {uid} is the gateway's own account; give the agent its own")
    other = cfg.agent_for_uid(uid)
    if other is not None:
        raise check.error([*here, key], f"uid {uid} is already agent {other!r}'s")
    return int(uid)


def _gateway_config(check: Checker, raw: Any) -> GatewayConfig:
    parsed = check.table(raw, GATEWAY_KEYS, ["gateway"])
    gw = GatewayConfig(**parsed)
    if (gw.agent_group is None) != (gw.agent_socket is None):
        missing = "agentSocket" if gw.agent_socket is None else "agentGroup"
        raise check.error(["gateway"], f"agentGroup and agentSocket go together ({missing} is missing)")
    if gw.agent_group is not None:
        try:
            grp.getgrnam(gw.agent_group.strip())
        except KeyError:
            raise check.error(["gateway", "agentGroup"], f"no such group {gw.agent_group!r}") from None
    if gw.agent_socket is not None:
        path = gw.agent_socket.strip()
        if not path.startswith("/") or len(os.fsencode(path)) > 107 or "/../" in path + "/":
            raise check.error(
                ["gateway", "agentSocket"], "must be an absolute path of at most 107 bytes, without .."
            )
        gw.agent_socket = posixpath.normpath(path)
    return gw


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _check_node_env(check: Checker, parsed: dict[str, Any], here: PathParts) -> None:
    """A node's env names are plain identifiers and no value holds a NUL or a line break: they go on the
    remote command line (quoted), and `env` must never read a name as an option or an assignment."""
    for key, value in (parsed.get("env") or {}).items():
        if not _ENV_NAME.fullmatch(key):
            raise check.error([*here, "env", key], "environment names are letters, digits and '_'")
        if any(c in value for c in "\x00\r\n"):
            raise check.error([*here, "env", key], "must not contain NUL or line breaks")
    if "OPENCLAW_STATE_DIR" in (parsed.get("env") or {}) and parsed.get("state_dir"):
        raise check.error([*here, "stateDir"], "set stateDir or env.OPENCLAW_STATE_DIR, not both")
    state = parsed.get("state_dir")
    if state is not None and (not state.strip() or any(c in state for c in "\x00\r\n")):
        raise check.error([*here, "stateDir"], "must be a path (no NUL or line breaks)")


def _check_docker(
    check: Checker,
    docker: DockerConfig,
    agent_parts: PathParts | None = None,
    agent_keys: Collection[str] = (),
) -> None:
    """Checks across keys of one effective docker table, reported at the layer that set the key."""

    def at(attr: str, key: str) -> PathParts:
        if agent_parts is not None and attr in agent_keys:
            return [*agent_parts, key]
        return ["agents", "defaults", "sandbox", "docker", key]

    swap = docker.memory_swap
    # Docker refuses these only at `docker create`: say so at load time, at the key.
    if swap is not None and swap != -1:
        if docker.memory is None:
            raise check.error(
                at("memory_swap", "memorySwap"),
                "needs memory to be set too (memorySwap is memory + swap)",
            )
        if size_bytes(swap) < size_bytes(docker.memory):
            raise check.error(at("memory_swap", "memorySwap"), f"must be at least memory ({docker.memory})")
    # The workspace is mounted at workdir: a bind over it would replace the workspace the agent sees.
    # engine.sandbox.validate reserves the default /workspace (with the reference's text), not a custom one.
    if docker.dangerously_allow_reserved_container_targets or docker.workdir == DEFAULT_WORKDIR:
        return
    for bind in docker.binds:
        parts = bind.split(":")
        target = posixpath.normpath(parts[1]) if len(parts) > 1 and parts[1].startswith("/") else None
        if target is not None and (target == docker.workdir or target.startswith(docker.workdir + "/")):
            raise check.error(
                at("binds", "binds"),
                f'bind mount "{bind}" targets the sandbox workdir "{docker.workdir}"; set '
                "dangerouslyAllowReservedContainerTargets = true only when you fully trust this runtime",
            )


def _check_egress(check: Checker, sandbox: SandboxConfig, parts: PathParts) -> None:
    """Egress is the sandbox's only route out: a Docker network beside it would be another."""
    mode = sandbox.egress.get("mode", "none")
    if mode != "none" and sandbox.docker.network not in ("", "none"):
        raise check.error(
            [*parts, "egress", "mode"],
            f'egress mode {mode!r} needs docker.network = "none" (got {sandbox.docker.network!r}): the '
            "egress proxy must be the only way out",
        )


def _check_browser(check: Checker, values: Mapping[str, Any], parts: PathParts) -> None:
    if values.get("allow_host_control"):
        raise check.error(
            [*parts, "allowHostControl"],
            "exechost never drives a browser on the host; only the sandboxed browser exists (set false)",
        )


def _check_rootfs(check: Checker, bwrap: Mapping[str, Any], parts: PathParts) -> None:
    """A bubblewrap rootfs is a directory given by absolute path (`~` allowed): mounted read-only as /."""
    rootfs = bwrap.get("rootfs")
    if rootfs is not None and not os.path.isabs(os.path.expanduser(rootfs)):
        raise check.error([*parts, "rootfs"], f"must be an absolute path, got {rootfs!r}")


def _exec_config(values: Mapping[str, Any]) -> ExecConfig:
    return replace(ExecConfig(), **values)


def _sandbox_config(values: Mapping[str, Any], env: Mapping[str, str] | None) -> SandboxConfig:
    top = {k: v for k, v in values.items() if k not in ("docker", "browser", "prune")}
    sandbox = replace(SandboxConfig(), **top)
    sandbox.browser = replace(BrowserConfig(), **values.get("browser", {}))
    docker = dict(values.get("docker", {}))
    if "ulimits" in docker:  # merged over the defaults per name, like an agent's over the global
        docker["ulimits"] = {**DEFAULT_ULIMITS, **docker["ulimits"]}
    sandbox.docker = replace(DockerConfig(), **docker)
    sandbox.prune = replace(PruneConfig(), **values.get("prune", {}))
    if not sandbox.workspace_root:
        source = dict(os.environ if env is None else env)
        sandbox.workspace_root = str(statefs.state_dir(source) / "sandboxes")
    else:
        sandbox.workspace_root = os.path.expanduser(sandbox.workspace_root)
    return sandbox
