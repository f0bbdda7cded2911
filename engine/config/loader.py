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
from engine.commands.hostenv import inert_env_problem, inherit_env_problem
from engine.commands.interpreters import is_interpreter, runs_others
from engine.commands.safebins import SafeBinProfile
from engine.config.egress import BadName, normalize, parse_pattern
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
    MAX_CONTAINER_PREFIX,
    NODE_KEYS,
    PROFILE_KEYS,
    SANDBOX_KEYS,
    TOOLS_KEYS,
    ULIMIT_NAMES,
    Spec,
    Table,
    container_path_problem,
    is_host_entry,
    is_ip,
    parse_ulimit,
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
        _check_owner(target, os.fstat(fh.fileno()))
        _check_dirs(target)
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


def _check_dirs(target: Path) -> None:
    """The dirs the config is read from are judged too (fresh round 17 c): the one that holds its name and
    the one that holds the file it resolves to, and every dir above each, must be root's or this
    account's and writable by no other account unless sticky (engine.pathtrust.foreign_hold, as a
    workspace root's holder). Else an account that may write there renames the file aside and puts a link
    to another file in its place, root's or ours (another gateway's config, `security = "full"`), which
    the owner check takes; a running gateway keeps its last good config instead."""
    own = os.geteuid()
    named = os.path.realpath(os.path.dirname(os.path.abspath(target)))  # the dir holding the name
    real = os.path.dirname(os.path.realpath(target))
    for where in dict.fromkeys((named, real)):
        chain = pathtrust.chain_to(where)
        why = chain if isinstance(chain, str) else pathtrust.foreign_hold(chain, own, holder=True)
        if why:
            raise ConfigError(
                target,
                "",
                None,
                f"in a dir another account may change ({why}): it could put another file in this one's "
                "place; refused. Keep the config in a dir only this account or root may write",
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


class _Checker:
    def __init__(self, file: Path, lines: dict[str, int]) -> None:
        self.file = file
        self.lines = lines

    def error(self, parts: PathParts, message: str) -> ConfigError:
        line = None
        for k in range(len(parts), 0, -1):
            line = self.lines.get(render_key(parts[:k]))
            if line is not None:
                break
        return ConfigError(self.file, render_key(parts), line, message)

    def table(self, raw: Any, keys: Mapping[str, Spec | Table], parts: PathParts) -> dict[str, Any]:
        """Validate a table; return {attr: value} for the keys it sets."""
        if not isinstance(raw, dict):
            raise self.error(parts, f"expected a table, got {_type_name(raw)}")
        out: dict[str, Any] = {}
        for name, value in raw.items():
            spec = keys.get(name)
            here = [*parts, name]
            if spec is None:
                raise self.error(here, f"unknown key{_suggest(name, keys)}")
            if isinstance(spec, Table):
                out[spec.attr] = self.table(value, spec.keys, here)
            else:
                out[spec.attr] = self.value(value, spec, here)
        return out

    def value(self, value: Any, spec: Spec, parts: PathParts) -> Any:
        kind = spec.kind
        if kind in ("str", "enum"):
            if not isinstance(value, str):
                raise self.error(parts, f"expected a string, got {_type_name(value)}")
            if kind == "enum":
                # Exact lowercase only: "FULL" would grant nothing in OpenClaw, so it grants nothing here.
                if value not in spec.choices:
                    raise self.error(parts, f"invalid value {value!r} (expected {'|'.join(spec.choices)})")
                return value
            if not value.strip():
                raise self.error(parts, "must not be empty")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.error(parts, f"expected true or false, got {_type_name(value)}")
            return value
        if kind in ("int", "number"):
            ok = isinstance(value, int) or (kind == "number" and isinstance(value, float))
            if isinstance(value, bool) or not ok:
                want = "an integer" if kind == "int" else "a number"
                raise self.error(parts, f"expected {want}, got {_type_name(value)}")
            if spec.clamp is not None:
                return min(max(value, spec.clamp[0]), spec.clamp[1])
            if spec.minimum is not None and value < spec.minimum:
                raise self.error(parts, f"must be at least {_number(spec.minimum)}")
            if spec.maximum is not None and value > spec.maximum:
                raise self.error(parts, f"must be at most {_number(spec.maximum)}")
            return value
        if kind == "size":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise self.error(parts, f'expected a size like "512m" or bytes, got {_type_name(value)}')
            if isinstance(value, str) and not re.fullmatch(r"\d+(\.\d+)?[bkmgBKMG]?", value.strip()):
                raise self.error(parts, f'invalid size {value!r} (expected e.g. "512m", "2g")')
            if isinstance(value, int) and value <= 0:
                raise self.error(parts, "must be positive")
            return value
        if kind == "swap":
            if value == -1 and not isinstance(value, bool):
                return -1
            return self.value(value, replace(spec, kind="size"), parts)
        if kind == "strlist":
            return self.strlist(value, parts)
        if kind == "portlist":
            ok = isinstance(value, list) and all(type(p) is int and 0 <= p <= 65535 for p in value)
            if not ok:
                raise self.error(parts, f"expected a list of TCP ports (0-65535), got {value!r}")
            return list(value)
        if kind == "envkeys":
            for item in self.strlist(value, parts):
                problem = inert_env_problem(item)
                if problem is not None:
                    raise self.error(parts, f"{problem} and can never be inert")
            return list(value)
        if kind == "inheritkeys":
            for item in self.strlist(value, parts):
                problem = inherit_env_problem(item)
                if problem is not None:
                    raise self.error(parts, problem)
            return list(value)
        if kind == "hostdirs":
            for item in self.strlist(value, parts):
                if not (item.startswith("/") or item == "~" or item.startswith("~/")):
                    raise self.error(parts, f"{item!r} is not an absolute directory (or one under ~/)")
                if any(word in ("..", ".") for word in item.split("/")) or "\x00" in item:
                    raise self.error(
                        parts, f"{item!r} holds a `.` or `..` component: name the directory itself"
                    )
                if item.rstrip("/") in ("~", ""):
                    raise self.error(
                        parts, f"{item!r} is the home directory or /: name a directory inside it"
                    )
            return list(value)
        if kind == "privatedirs":
            for item in self.strlist(value, parts):
                named = item.startswith("$") and item[1:].isidentifier()
                if not (named or item.startswith("/") or item.startswith("~/")):
                    raise self.error(
                        parts, f"{item!r} is not an absolute directory, one under ~/ or a $VARIABLE"
                    )
                if item.rstrip("/") in ("~", "") or any(w in ("..", ".") for w in item.split("/")):
                    raise self.error(parts, f"{item!r} is /, the home or holds `.` or `..`: name a directory")
            return list(value)
        if kind == "treesafe":
            for item in self.strlist(value, parts):
                if "/" in item or not item.strip() or is_interpreter(item) or runs_others(item):
                    raise self.error(
                        parts,
                        f"{item!r} is not a program name, or runs other programs or code (a shell, an "
                        "interpreter, a build tool): it can never be safe in a tree the agent can write",
                    )
            return list(value)
        if kind == "safebins":
            for item in self.strlist(value, parts):
                if is_interpreter(item.strip()):
                    raise self.error(
                        parts,
                        f"{item!r} runs code (a shell, an interpreter or a language such as jq) "
                        "and can never be a safe bin",
                    )
            return list(value)
        if kind == "ulimits":
            return self.ulimits(value, parts)
        if kind == "iplist":
            for item in self.strlist(value, parts):
                if not is_ip(item):
                    raise self.error(parts, f"invalid IP address {item!r}")
            return list(value)
        if kind == "hostlist":
            for item in self.strlist(value, parts):
                if not is_host_entry(item):
                    raise self.error(parts, f'invalid host entry {item!r} (expected "name:ip")')
            return list(value)
        if kind == "egresslist":
            for item in self.strlist(value, parts):
                try:
                    parse_pattern(item)
                except ValueError as exc:
                    raise self.error(parts, str(exc)) from None
            return list(value)
        if kind == "resolvemap":
            if not isinstance(value, dict):
                raise self.error(parts, f'expected a table of name = "address", got {_type_name(value)}')
            for k, v in value.items():
                try:
                    if normalize(k) != k.lower().rstrip(".") or is_ip(k):
                        raise BadName(f"{k!r} is not a plain host name")
                except BadName as exc:
                    raise self.error([*parts, k], str(exc)) from None
                if not isinstance(v, str) or not is_ip(v):
                    raise self.error([*parts, k], f"expected an IP address, got {v!r}")
            return dict(value)
        if kind == "cpath":
            if not isinstance(value, str):
                raise self.error(parts, f"expected a string, got {_type_name(value)}")
            problem = container_path_problem(value)
            if problem is not None:
                raise self.error(parts, problem)
            return value
        if kind == "prefix":
            if not isinstance(value, str):
                raise self.error(parts, f"expected a string, got {_type_name(value)}")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
                raise self.error(parts, f"invalid container name prefix {value!r} (letters, digits, _ . -)")
            if len(value) > MAX_CONTAINER_PREFIX:
                raise self.error(parts, f"must be at most {MAX_CONTAINER_PREFIX} characters")
            return value
        if kind == "strmap":
            if not isinstance(value, dict):
                raise self.error(parts, f"expected a table of strings, got {_type_name(value)}")
            for k, v in value.items():
                if not isinstance(v, str):
                    raise self.error([*parts, k], f"expected a string, got {_type_name(v)}")
            return dict(value)
        if kind == "profiles":
            return self.profiles(value, parts)
        raise AssertionError(kind)

    def strlist(self, value: Any, parts: PathParts) -> list[str]:
        if not isinstance(value, list):
            raise self.error(parts, f"expected a list of strings, got {_type_name(value)}")
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise self.error(parts, f"expected non-empty strings, got {_type_name(item)} {item!r}")
        return list(value)

    def ulimits(self, value: Any, parts: PathParts) -> dict[str, tuple[int, int]]:
        if not isinstance(value, dict):
            raise self.error(parts, f"expected a table of ulimits, got {_type_name(value)}")
        out: dict[str, tuple[int, int]] = {}
        for name, item in value.items():
            if name not in ULIMIT_NAMES:
                raise self.error(
                    [*parts, name], f"unknown ulimit (expected one of: {', '.join(ULIMIT_NAMES)})"
                )
            try:
                out[name] = parse_ulimit(item)
            except ValueError as exc:
                raise self.error([*parts, name], str(exc)) from None
        return out

    def profiles(self, value: Any, parts: PathParts) -> dict[str, dict[str, Any]]:
        if not isinstance(value, dict):
            raise self.error(parts, f"expected a table of profiles, got {_type_name(value)}")
        out: dict[str, dict[str, Any]] = {}
        for binary, profile in value.items():
            here = [*parts, binary]
            if not isinstance(profile, dict):
                raise self.error(here, f"expected a table, got {_type_name(profile)}")
            for key, item in profile.items():
                kind = PROFILE_KEYS.get(key)
                if kind is None:
                    raise self.error([*here, key], f"unknown key{_suggest(key, PROFILE_KEYS)}")
                if kind == "strlist":
                    self.strlist(item, [*here, key])
                elif isinstance(item, bool) or not isinstance(item, int) or item < 0:
                    raise self.error([*here, key], "expected a non-negative integer")
            try:
                SafeBinProfile.from_config(profile)
            except ValueError as exc:
                raise self.error(here, str(exc)) from None
            out[binary] = dict(profile)
        return out


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _suggest(name: str, keys: Mapping[str, Any]) -> str:
    lowered = {k.lower(): k for k in keys}
    close = lowered.get(name.lower().replace("_", ""))
    if close is None:
        import difflib

        found = difflib.get_close_matches(name, list(keys), n=1)
        close = found[0] if found else None
    return f" (did you mean {close!r}?)" if close else f" (expected one of: {', '.join(keys)})"


def _build(
    path: Path, data: dict[str, Any], lines: dict[str, int], *, exists: bool, env: Mapping[str, str] | None
) -> Config:
    check = _Checker(path, lines)
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
        raise check.error(["agents"], f"expected a table, got {_type_name(agents)}")
    for key in agents:
        if key not in ("defaults", "list"):
            raise check.error(["agents", key], "unknown key (expected one of: defaults, list)")
    defaults = agents.get("defaults", {})
    if not isinstance(defaults, dict):
        raise check.error(["agents", "defaults"], f"expected a table, got {_type_name(defaults)}")
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
        raise check.error(["nodes"], f"expected a table of [nodes.<name>], got {_type_name(nodes)}")
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


def _agent_uid(check: _Checker, parsed: Mapping[str, Any], here: PathParts, cfg: Config) -> int | None:
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


def _gateway_config(check: _Checker, raw: Any) -> GatewayConfig:
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


def _check_node_env(check: _Checker, parsed: dict[str, Any], here: PathParts) -> None:
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
    check: _Checker,
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


def _check_egress(check: _Checker, sandbox: SandboxConfig, parts: PathParts) -> None:
    """Egress is the sandbox's only route out: a Docker network beside it would be another."""
    mode = sandbox.egress.get("mode", "none")
    if mode != "none" and sandbox.docker.network not in ("", "none"):
        raise check.error(
            [*parts, "egress", "mode"],
            f'egress mode {mode!r} needs docker.network = "none" (got {sandbox.docker.network!r}): the '
            "egress proxy must be the only way out",
        )


def _check_browser(check: _Checker, values: Mapping[str, Any], parts: PathParts) -> None:
    if values.get("allow_host_control"):
        raise check.error(
            [*parts, "allowHostControl"],
            "exechost never drives a browser on the host; only the sandboxed browser exists (set false)",
        )


def _check_rootfs(check: _Checker, bwrap: Mapping[str, Any], parts: PathParts) -> None:
    """A bubblewrap rootfs is a directory given by absolute path (`~` allowed): mounted read-only as /."""
    rootfs = bwrap.get("rootfs")
    if rootfs is not None and not os.path.isabs(os.path.expanduser(rootfs)):
        raise check.error([*parts, "rootfs"], f"must be an absolute path, got {rootfs!r}")


def _number(limit: float) -> str:
    """A limit as a config file spells it: 2097152, never 2.09715e+06 (a byte count read back)."""
    return str(int(limit)) if float(limit).is_integer() else f"{limit:g}"


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
