"""What a loaded config.toml is: the per-table dataclasses (each key's default, declared once) and merges."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.config.schema import (
    DEFAULT_BROWSER_IMAGE,
    DEFAULT_BROWSER_PREFIX,
    DEFAULT_CONTAINER_PREFIX,
    DEFAULT_PIDS_LIMIT,
    DEFAULT_SANDBOX_IMAGE,
    DEFAULT_SANDBOX_POOL,
    DEFAULT_ULIMITS,
    DEFAULT_WORKDIR,
    MIB,
)
from engine.errors import ExecHostError
from engine.principals import MAIN_AGENT


class ConfigError(ExecHostError):
    """A config file is unreadable or invalid; names the file, the dotted key and the line."""

    code = "tool_error"  # a refused call, as the agent sees it

    def __init__(self, file: str | Path, key: str, line: int | None, message: str) -> None:
        self.file = str(file)
        self.key = key
        self.line = line
        self.message = message
        where = f"{self.file}:{line}" if line is not None else self.file
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


# --------------------------------------------------------------------------- views


@dataclass
class ExecConfig:
    """`tools.exec`: policy fields are None when unset, so policy can tell which layer decided."""

    host: str | None = None
    security: str | None = None
    ask: str | None = None
    ask_fallback: str | None = None
    node: str | None = None
    timeout_sec: int = 1800
    background_ms: int = 10_000
    cleanup_ms: int = 1_800_000
    notify_on_exit: bool = True
    notify_on_exit_empty_success: bool = False
    path_prepend: list[str] = field(default_factory=list)
    safe_bins: list[str] | None = None  # None = engine.commands.safebins.DEFAULT_SAFE_BINS
    safe_bin_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_cap_bytes: int = 64 * MIB
    inert_env: list[str] = field(default_factory=list)  # env keys beyond hostenv.INERT_ENV_KEYS
    inherit_env: list[str] = field(default_factory=list)  # gateway env keys beyond hostenv.INHERITED_KEYS
    tree_safe: list[str] = field(default_factory=list)  # programs beyond treesafe.TREE_SAFE
    max_sessions_per_agent: int = 64
    max_sandboxes_per_agent: int = 16  # live sandboxes, at most max_sessions_per_agent (sandbox.agentcap)
    max_output_bytes_per_agent: int = 2048 * MIB
    # "bwrap": gateway-host runs see no state dir and read-only trusted configs (engine.commands.hostview);
    # "none": they see the host as the gateway does (the operator's opt-out where bwrap cannot run).
    host_view: str = "bwrap"
    # "own": each agent's gateway-host runs share a network namespace of their own, only `lo`, egress
    # through the sandboxes' proxy (engine.commands.hostnet); "host": the host's (every loopback service)
    host_network: str = "own"
    host_writable: list[str] = field(default_factory=list)  # absolute, `~` expanded at use
    host_private: list[str] | None = None  # None: engine.commands.hostprivate.DEFAULT


@dataclass
class DockerConfig:
    """`sandbox.docker`: every key engine.sandbox.settings.DockerSettings resolves (reference §6.1)."""

    image: str = DEFAULT_SANDBOX_IMAGE
    container_prefix: str = DEFAULT_CONTAINER_PREFIX
    workdir: str = DEFAULT_WORKDIR
    read_only_root: bool = True
    tmpfs: list[str] = field(default_factory=lambda: ["/tmp", "/var/tmp", "/run"])
    network: str = "none"
    user: str | None = None
    cap_drop: list[str] = field(default_factory=lambda: ["ALL"])
    env: dict[str, str] = field(default_factory=lambda: {"LANG": "C.UTF-8"})
    memory: str | int | None = None
    memory_swap: str | int | None = None  # -1 = unlimited swap
    cpus: float | None = None
    pids_limit: int | None = DEFAULT_PIDS_LIMIT
    ulimits: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_ULIMITS))  # (soft, hard)
    file_table_share: int = 16  # 1/N of fs.file-max one sandbox may hold (engine.sandbox.filetable)
    seccomp_profile: str | None = None
    apparmor_profile: str | None = None
    dns: list[str] = field(default_factory=list)
    extra_hosts: list[str] = field(default_factory=list)  # "name:ip", as `docker --add-host`
    binds: list[str] = field(default_factory=list)
    setup_command: str | None = None
    pool: int = DEFAULT_SANDBOX_POOL
    dangerously_allow_reserved_container_targets: bool = False
    dangerously_allow_external_bind_sources: bool = False
    dangerously_allow_container_namespace_join: bool = False


@dataclass
class BrowserConfig:
    """`sandbox.browser`: the browser sandbox (reference §6.1). Ports are the container's own; the network
    defaults to none (pages from the workspace) where OpenClaw's defaults to a bridge."""

    enabled: bool = False
    image: str = DEFAULT_BROWSER_IMAGE
    container_prefix: str = DEFAULT_BROWSER_PREFIX
    network: str = "none"
    cdp_port: int = 9222
    vnc_port: int = 5900
    no_vnc_port: int = 6080
    headless: bool = False
    enable_no_vnc: bool = True
    allow_host_control: bool = False
    auto_start: bool = True
    auto_start_timeout_ms: int = 12_000
    binds: list[str] | None = None  # None = docker.binds; set (even []) replaces them


@dataclass
class PruneConfig:
    idle_hours: float = 24
    max_age_days: float = 7


@dataclass
class SandboxConfig:
    backend: str = "docker"  # docker | bwrap (engine.sandbox.bwrap)
    mode: str = "off"
    scope: str = "agent"
    workspace_access: str = "none"
    workspace_root: str = ""  # filled with <state dir>/sandboxes when unset
    node: str | None = None  # sandboxes on this node (its Docker, its runner), not on the gateway's
    docker: DockerConfig = field(default_factory=DockerConfig)
    bwrap: dict[str, Any] = field(default_factory=dict)  # rootfs, landlock, tcpPorts; an agent's replaces it
    # mode, allow, deny, ask, resolve (engine.config.egress); an agent's keys override the global ones
    egress: dict[str, Any] = field(default_factory=dict)
    browser: BrowserConfig = field(default_factory=BrowserConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    # All of one agent's workspace images together, in bytes (engine.sandbox.wsbudget); None: a quarter of
    # the filesystem they are on
    max_workspace_bytes_per_agent: int | None = None


@dataclass
class NodeConfig:
    name: str
    host: str
    port: int | None = None  # None: ~/.ssh/config's Port for this host, else 22
    user: str | None = None
    identity_file: str | None = None  # the only key the node logs in with (engine.config.nodekeys)
    identity_agent: str | None = None  # an ssh-agent socket (or "SSH_AUTH_SOCK"), only when named
    known_hosts: str | None = None
    docker_socket: str | None = None
    proxy_jump: str | None = None
    exechost: str = "exechost"  # the remote command (a path when it is not on the node's PATH)
    display_name: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # for `node serve` on the node (validated names)
    state_dir: str | None = None  # OPENCLAW_STATE_DIR on the node


@dataclass
class GatewayConfig:
    """`[gateway]`: a second control socket for agents under their own Unix accounts (group-admitted)."""

    agent_group: str | None = None
    agent_socket: str | None = None
    anonymous: str = "main"  # "none": a connection with only the gateway token is refused


@dataclass
class AgentConfig:
    """One `[[agents.list]]` entry: only the keys it sets (attribute names), so merges keep layers apart."""

    id: str
    index: int
    uid: int | None = None  # the agent's own Unix account (`uid`, or `user` resolved at load)
    exec: dict[str, Any] = field(default_factory=dict)
    elevated_enabled: bool | None = None
    sandbox_tools: dict[str, list[str]] = field(default_factory=dict)  # tools.sandbox.tools: allow/deny
    sandbox: dict[str, Any] = field(default_factory=dict)  # docker/prune as nested dicts
    nodes: list[str] | None = None  # the nodes this agent may use; None: every node


@dataclass
class Config:
    path: Path
    exists: bool = False
    exec: ExecConfig = field(default_factory=ExecConfig)
    elevated_enabled: bool = False
    sandbox_tools: dict[str, list[str]] = field(default_factory=dict)  # tools.sandbox.tools: allow/deny
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    agents: dict[str, AgentConfig] = field(default_factory=dict)
    nodes: dict[str, NodeConfig] = field(default_factory=dict)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)

    def admits(self, agent_id: str) -> bool:
        """Whether a minted credential may make its holder `agent_id`: `[[agents.list]]` is the allowlist
        of principals, so an agent with no entry is nobody, and retiring an agent by removing its entry
        (the last one too) never leaves its credential working under the global defaults, broader than its
        entry was. `main` needs no entry: the gateway token alone is main, and the global defaults are its
        own policy (`[gateway] anonymous = "none"` is its switch)."""
        return agent_id == MAIN_AGENT or agent_id in self.agents

    def unlisted(self, agent_id: str) -> str:
        """Why `agent_id`'s credential is refused: the file and key that would admit it."""
        return (
            f"agent {agent_id!r} is not in [[agents.list]] of {self.path}: a credential connects only for "
            f'an agent listed there (add [[agents.list]] id = "{agent_id}" to list it, or '
            f"`exechost agents revoke {agent_id}`)"
        )

    def agent_for_uid(self, uid: int) -> str | None:
        """The agent whose `[[agents.list]]` entry names this Unix account, if any."""
        return next((a.id for a in self.agents.values() if a.uid is not None and a.uid == uid), None)

    def exec_for(self, agent_id: str) -> ExecConfig:
        """Global `tools.exec` with the agent's overrides on top (safeBinProfiles merged per binary)."""
        agent = self.agents.get(agent_id)
        own = agent.exec if agent is not None else {}
        merged = replace(self.exec, **{k: v for k, v in own.items() if k != "safe_bin_profiles"})
        # A copy throughout: callers may adjust their view without touching the loaded config.
        merged.path_prepend = list(merged.path_prepend)
        merged.inert_env = list(merged.inert_env)
        merged.inherit_env = list(merged.inherit_env)
        merged.tree_safe = list(merged.tree_safe)
        merged.safe_bins = list(merged.safe_bins) if merged.safe_bins is not None else None
        merged.safe_bin_profiles = {**self.exec.safe_bin_profiles, **own.get("safe_bin_profiles", {})}
        return merged

    def may_use_node(self, agent_id: str, node: str) -> bool:
        """`[[agents.list]] nodes`: the operator's choice of nodes per agent (default: all of them)."""
        agent = self.agents.get(agent_id)
        return agent is None or agent.nodes is None or node in agent.nodes

    def sandbox_tools_for(self, agent_id: str) -> tuple[list[str], list[str]]:
        """(allow, deny) for a sandboxed session of the agent: the agent's lists replace the global ones."""
        agent = self.agents.get(agent_id)
        own = agent.sandbox_tools if agent is not None else {}
        allow = own.get("allow", self.sandbox_tools.get("allow", []))
        deny = own.get("deny", self.sandbox_tools.get("deny", []))
        return list(allow), list(deny)

    def elevated_enabled_for(self, agent_id: str) -> bool:
        agent = self.agents.get(agent_id)
        if agent is not None and agent.elevated_enabled is not None:
            return agent.elevated_enabled
        return self.elevated_enabled

    def sandbox_value(self, agent_id: str, name: str) -> Any:
        """One top-level `sandbox` setting of the agent (its own, else the global one), without building
        the whole merged view: the exec path reads `mode`, `node` and `workspace_root` on every call."""
        agent = self.agents.get(agent_id)
        nested = ("docker", "browser", "prune", "egress")
        if agent is not None and name in agent.sandbox and name not in nested:
            return agent.sandbox[name]
        return getattr(self.sandbox, name)

    def sandbox_for(self, agent_id: str) -> SandboxConfig:
        """Reference §6.1 merge: agent over global; docker env merged, binds concatenated;
        scope=shared ignores the agent's docker and prune overrides."""
        agent = self.agents.get(agent_id)
        base = self.sandbox
        if agent is None or not agent.sandbox:
            docker, browser = _copy_docker(base.docker), replace(base.browser)
            return replace(base, docker=docker, browser=browser, prune=replace(base.prune))
        top = {k: v for k, v in agent.sandbox.items() if k not in ("docker", "browser", "prune", "egress")}
        merged = replace(base, **top)
        # One shared sandbox cannot follow two agents' egress rules: it follows the global ones.
        if merged.scope != "shared":
            merged.egress = {**base.egress, **agent.sandbox.get("egress", {})}
        docker, browser, prune = _copy_docker(base.docker), replace(base.browser), replace(base.prune)
        if merged.scope != "shared":
            over = dict(agent.sandbox.get("docker", {}))
            if "env" in over:
                over["env"] = {**base.docker.env, **over["env"]}
            if "ulimits" in over:
                over["ulimits"] = {**base.docker.ulimits, **over["ulimits"]}
            if "binds" in over:
                over["binds"] = [*base.docker.binds, *over["binds"]]
            docker = replace(docker, **over)
            browser = replace(browser, **agent.sandbox.get("browser", {}))
            prune = replace(prune, **agent.sandbox.get("prune", {}))
        merged.docker, merged.browser, merged.prune = docker, browser, prune
        return merged


def _copy_docker(docker: DockerConfig) -> DockerConfig:
    """A copy whose lists and tables are fresh too: callers may adjust their view."""
    return replace(
        docker,
        tmpfs=list(docker.tmpfs),
        cap_drop=list(docker.cap_drop),
        env=dict(docker.env),
        ulimits=dict(docker.ulimits),
        dns=list(docker.dns),
        extra_hosts=list(docker.extra_hosts),
        binds=list(docker.binds),
    )
