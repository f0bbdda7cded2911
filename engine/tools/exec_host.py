"""The exec-frame evaluator: local policy and approvals file decide, a human may be asked, argv runs."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.approvals.grants import GRANTS_NAME, GrantStore
from engine.approvals.socket.principal import NotThisPrincipal, frame_agent
from engine.approvals.socket.wire import Decider, ExecHostRequest, ExecOutcome, PromptRequest
from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs, hostkeeper, hostnet, hostprivate, hostroots, hosttrust
from engine.commands.allowlist import identity_problem
from engine.commands.hostenv import sanitize_host_env
from engine.commands.hostoutside import HostViewError, Outside, home_dir, inside
from engine.commands.hostroots import refuse_hidden_cwd
from engine.commands.hostview import joined
from engine.commands.matches import AllowlistEntry
from engine.commands.offargv import carried
from engine.commands.pinned import in_checked_cwd, open_checked_dir, view_for
from engine.commands.treecode import ANCHOR
from engine.commands.verified import DEFAULT_SHELL, StaleContent, verify
from engine.config import nodekeys
from engine.config.loader import load_config
from engine.config.model import Config
from engine.errors import ExecHostError
from engine.policy import overridestable
from engine.policy.decision import Decision, evaluate
from engine.policy.precedence import SessionOverrides, overrides_for
from engine.policy.privatebinds import private_binds
from engine.results import ToolError
from engine.sandbox import bwraplimits, hostcpu
from engine.statefs import state_dir
from engine.tools import enginestate
from engine.unixsock import PeerInfo

OUTPUT_CAP = 200_000  # chars of stdout/stderr returned per exec
KEEP_BYTES = OUTPUT_CAP * 4  # bytes enough for OUTPUT_CAP chars of any UTF-8
BYTE_CAP = 32 << 20  # bytes one stream may write before the run is killed (`yes` would run to its timeout)


def host_outside(
    config: Config,
    agent_id: str = "main",
    workdir: str | None = None,
    owner: str | None = None,
    *,
    operator: bool = False,
    own: bool = False,
) -> Outside:
    """What the gateway holds outside the state dir, for the host view: every node's login credentials
    (its identityFile, its identityAgent's socket: engine.config.nodekeys) and the Docker engine's sockets
    hidden; the agents' socket's directory, every pathPrepend dir and every bwrap rootfs read-only (the
    socket stays reachable, never removable; program_dirs); every file the gateway reads from its config
    to decide read-only (the config file itself, a seccomp profile, known_hosts files: made empty first
    when missing); the operator's `hostWritable` dirs, the only writable ones in the home that is
    read-only otherwise (the run's `workdir` only for workdir_note); and every sandbox workspace root, the
    default and each agent's (covered: one agent's host command never reads or plants another agent's
    sandbox files); the agent's own /tmp, /var/tmp, /dev/shm, runtime dir (engine.commands.hostprivate),
    with `workdir` named as the run sees it when it is in one of them. The private dirs and the pids
    and memory cgroups are `owner`'s (ExecContext.owner: a node keys them by the calling gateway too), or
    agent_id's; an `operator` call's runs join the operator's own groups (_join_tasks, _join_memory),
    and one naming no agent (`own`: ExecContext.operators_own) has the operator's own private dirs and
    network namespace."""
    with gatewaydirs.recording():  # each tried (a failure owed), then the view refused if one failed
        keys, creds = config_secrets(config)
        for root in workspace_roots(config):  # recorded before any agent's first use (fresh round 18 c)
            gatewaydirs.record_root(home_dir(), root)
        anywhere = writable_anywhere(config)
    writable = config.exec_for(agent_id).host_writable
    # every other gateway's too, as it records them (engine.commands.gatewaydirs: fresh round 15 b)
    their_keys, their_creds = gatewaydirs.others_secrets(home_dir(), str(state_dir()), _needed(writable))
    read = {str(config.path)} if config.exists else set()
    read |= {os.path.expanduser(n.known_hosts) for n in config.nodes.values() if n.known_hosts}
    profiles = [config.sandbox.docker.seccomp_profile] + [
        a.sandbox.get("docker", {}).get("seccomp_profile") for a in config.agents.values()
    ]
    read |= {os.path.expanduser(p) for p in profiles if isinstance(p, str) and p.startswith(("/", "~"))}
    sock = config.gateway.agent_socket
    # The operator's own call names an agent for its policy only: its runs' places are the operator's
    # (fresh round 15 b: its /tmp files were that agent's to read, its loopback that agent's servers').
    space = hostprivate.space(owner or agent_id, operator=own)
    private = hostprivate.binds(
        str(state_dir()), space, hostprivate.dests(config.exec_for(agent_id).host_private)
    )
    # a root another account owns or may change is not bound writable: covered, as another agent's is
    kept, refused = hostroots.trusted_writable(writable)
    return Outside(
        hidden=tuple(dict.fromkeys([*keys, *their_keys])) + engine_sockets(),
        readonly=((os.path.dirname(sock),) if sock else ()) + program_dirs(config),
        files=tuple(sorted(os.path.abspath(p) for p in read)),
        writable=kept,
        refused=refused,
        writable_anywhere=anywhere,
        workdir=workdir,
        covered=(roots := workspace_roots(config))
        + tuple(dict.fromkeys([*creds, *their_creds]))
        + other_gateways(writable, roots)
        + engine_state(writable),
        join_tasks=_join_tasks(owner or agent_id, operator=operator),
        join_memory=_join_memory(owner or agent_id, operator=operator),
        join_cpu=_join_cpu(owner or agent_id, operator=operator),
        private=private,
        # the agent's own network namespace, keyed as its private dirs are (engine.commands.hostnet): the
        # operator's own for its call (`hostnet._operator`, egress under the defaults' [sandbox.egress])
        net_agent=space if config.exec_for(agent_id).host_network == hostnet.OWN else None,
        chdir=hostprivate.view_of(private, workdir) if workdir else None,
    )


def writable_anywhere(config: Config) -> tuple[str, ...]:
    """Every agent's hostWritable root the config names, and every present one a config of this account
    named before (engine.commands.gatewaydirs: recorded at first use): a retired agent's dir keeps what its
    runs wrote and stays covered in every view (fresh round 17 a). A recorded root that holds, or is in, one
    the config names now is left to the config's word for that tree."""
    named = list(
        dict.fromkeys(p for e in (config.exec, *map(config.exec_for, config.agents)) for p in e.host_writable)
    )
    home = home_dir()
    gatewaydirs.record_writable(home, named)
    now = [os.path.realpath(os.path.expanduser(p)) for p in named]
    retired = [
        r
        for r in gatewaydirs.recorded_writable(home)
        if not any(inside(r, n) or inside(n, r) for n in now) and os.path.isdir(r)
    ]
    return (*named, *retired)


def config_secrets(config: Config) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What this gateway's host views hide because its config and environment name it: the files its node
    links log in with (engine.config.nodekeys, hidden with an empty file) and the Docker engine's client
    key dirs (covered whole). Recorded for every other gateway's views to hide too (gatewaydirs), once
    per process and path, so a key named later (a config reload) is recorded at its first view."""
    keys = tuple(nodekeys.hidden_paths(config.nodes.values()))  # exactly what the node links log in with
    creds = engine_credentials()
    gatewaydirs.record_secrets(home_dir(), keys, creds)
    return keys, creds


def private_source(
    config: Config, agent_id: str, path: str, owner: str | None = None, *, operator: bool = False
) -> str | None:
    """Where `path`, as a host run of the agent names it, is on the host when it is in one of the agent's
    private dirs (engine.commands.hostprivate: its own /tmp, ...; the operator's own for its `operator`
    call); None otherwise, or with no host view."""
    binds = private_binds(config, agent_id, owner, operator=operator)
    return hostprivate.source_of(binds, os.path.abspath(os.path.expanduser(path)))


def _join_tasks(agent_id: str, *, operator: bool = False) -> str | None:
    """The `tasks` file of the pids cgroup the run joins, made (or its caps set again) now: the agent's for
    its host runs; the operator's own for the operator's (an `exec` with no agent's credential names an
    agent, main by default, for policy only: its processes are no agent's, fresh round 10 b)."""
    group = bwraplimits.operator_pids_group() if operator else bwraplimits.host_pids_group(agent_id)
    return str(group / "tasks") if group is not None else None


def _join_memory(agent_id: str, *, operator: bool = False) -> str | None:
    """The `tasks` file of the memory cgroup the run joins after the pids one (fresh round 17 a: a run
    stayed in the gateway's own, uncapped, and one agent's `grep x /dev/zero` took the host's RAM): the
    agent's share, in the owner group its sandboxes of both backends draw on; the operator's own for the
    operator's. None where no v1 memory hierarchy is writable (`sandbox explain` says so)."""
    group = bwraplimits.operator_memory_group() if operator else bwraplimits.host_memory_group(agent_id)
    return str(group / "tasks") if group is not None else None


def _join_cpu(agent_id: str, *, operator: bool = False) -> str | None:
    """The `tasks` file of the cpu cgroup the run joins after the memory one (fresh round 17 a: runs
    stayed in the gateway's own cpu group, and one agent's busy runs took the cores from the gateway and
    every other principal): the agent's, with its Docker sandboxes' parent; the operator's own for the
    operator's. None where no v1 cpu hierarchy is writable."""
    group = hostcpu.operator_cpu_group() if operator else hostcpu.host_cpu_group(agent_id)
    return str(group / "tasks") if group is not None else None


def capped(argv: list[str], agent_id: str, *, operator: bool = False) -> list[str]:
    """A gateway-host run without the host view (hostView = "none") joins its agent's pids cgroup too:
    the view is the operator's to drop, the agent's share of the host's processes is not (round 8 o).
    Then the cgroup hierarchies are read-only for it (exechost-hostenter `ro-cgroups`, as in every view):
    the groups are the gateway uid's files, and the run could otherwise leave its group or join another
    agent's (fresh round 10 b). Its memory and cpu cgroups too (_join_memory, _join_cpu)."""
    outside = Outside(
        join_tasks=_join_tasks(agent_id, operator=operator),
        join_memory=_join_memory(agent_id, operator=operator),
        join_cpu=_join_cpu(agent_id, operator=operator),
    )
    helper = hostkeeper.helper_path()
    if outside.join_tasks and helper is not None:
        argv = [helper, "ro-cgroups", "--", *argv]
    return joined(argv, outside)


def program_dirs(config: Config) -> tuple[str, ...]:
    """Directories whose programs later runs execute as the operator's: every `pathPrepend` dir (the
    global one and each agent's: one agent's PATH is no other agent's to plant in) and every bwrap
    sandbox rootfs (the default and each agent's: every sandbox of that agent runs its programs)."""
    execs = [config.exec, *(config.exec_for(a) for a in config.agents)]
    dirs = {p for e in execs for p in e.path_prepend if p and ":" not in p}
    rootfs = [config.sandbox.bwrap.get("rootfs")]
    rootfs += [a.sandbox.get("bwrap", {}).get("rootfs") for a in config.agents.values()]
    dirs |= {r for r in rootfs if isinstance(r, str) and r}
    # (each as it resolves: a run's PATH names the resolved dir, engine.commands.hostenv.host_path)
    found = {os.path.realpath(os.path.expanduser(d)) for d in dirs}
    return tuple(sorted(d for d in found if d != os.sep))


def workspace_roots(config: Config) -> tuple[str, ...]:
    """Where every agent's sandbox workspaces live: the global workspaceRoot and each agent's own."""
    roots = [config.sandbox.workspace_root]
    roots += [str(a.sandbox.get("workspace_root") or "") for a in config.agents.values()]
    return tuple(sorted({os.path.abspath(os.path.expanduser(r)) for r in roots if r}))


def other_gateways(writable: Iterable[str] = (), roots: Iterable[str] = ()) -> tuple[str, ...]:
    """Every other exechost service's state dir of this account, a gateway's or a node's, and every
    sandbox workspace root ever used but the config's `roots` (engine.commands.gatewaydirs), covered whole
    as the state dir is: never one holding what every run needs, nor one of the agent's own `writable`."""
    needed = _needed(writable)
    home, state = home_dir(), str(state_dir())
    return gatewaydirs.others(home, state, needed) + gatewaydirs.old_roots(home, state, needed, roots)


def _needed(writable: Iterable[str]) -> list[str]:
    """What no cover of another's dir may hold: what every run needs, and the agent's own `writable`."""
    helper = hostkeeper.helper_path()
    path_dirs = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith(os.sep)]
    needed = [*path_dirs, *hosttrust.import_paths(), *([helper] if helper is not None else [])]
    return needed + [os.path.abspath(os.path.expanduser(w)) for w in writable]


def engine_sockets() -> tuple[str, ...]:
    """The Docker engine's API sockets: root-equivalent (a container binding the state dir reads every
    token), reachable by the gateway's account through the docker group. Host commands get an empty file
    in their place; sandboxes are how an agent reaches containers."""
    found = {"/run/docker.sock", "/var/run/docker.sock"}
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        found.add(host[len("unix://") :])
    # By real path: bwrap resolves a destination through links as the view is built (/var/run -> /run),
    # and one bind hides every name for it.
    return tuple(sorted({os.path.realpath(p) for p in found if os.path.exists(p)}))


def engine_state(writable: Iterable[str] = ()) -> tuple[str, ...]:
    """The container engines' state dirs (engine.tools.enginestate: Docker's data-root and exec-root,
    containerd's, Podman's, …), covered whole as a workspace root is: every sandbox's config and env is
    recorded there. Never one holding what every run needs, nor one of the agent's own `writable`."""
    needed = [os.path.realpath(n) for n in _needed(writable)]
    return tuple(d for d in enginestate.state_dirs() if not any(inside(n, d) for n in needed))


def engine_credentials() -> tuple[str, ...]:
    """The Docker engine's client credentials, as docker.from_env and the docker CLI find them: the TLS
    client key of an engine over TCP (DOCKER_CERT_PATH, else ~/.docker) and the CLI's config dir
    (DOCKER_CONFIG, else ~/.docker: registry logins, contexts naming engines and their keys). Covered
    whole in the host view, present ones only (a dir made later re-makes the view: its identity is in the
    kept view's key). Never `/`, the home or a directory holding it: that would cover every run's world
    (docs/SECURITY.md)."""
    home = os.path.realpath(os.path.expanduser("~"))
    named = [
        os.environ.get("DOCKER_CERT_PATH"),
        os.environ.get("DOCKER_CONFIG"),
        os.path.join(home, ".docker"),
    ]
    found = {os.path.realpath(os.path.expanduser(p)) for p in named if p}
    keep = [
        d for d in found if os.path.isdir(d) and d != os.sep and not (home + os.sep).startswith(d + os.sep)
    ]
    return tuple(sorted(d for d in keep if d != home))


def env_lines(env: Mapping[str, str] | None) -> list[str]:
    """The env an `exec` frame sets, one line per key with its value: what the approver allows the command
    to run with (a key alone hides `GNUMAKEFLAGS=--eval=…`), first among the ask's warnings."""
    return [f"Env: {key}={value}" for key, value in sorted((env or {}).items())]


@dataclass(frozen=True)
class _Decided:
    """One decided exec frame and what its run needs."""

    decision: Decision
    config: Config
    agent_id: str
    cwd: str
    env: dict[str, str]
    store: ApprovalsStore
    grants: GrantStore | None = None  # the grants file it was decided with (a use is taken per run)


def content_fingerprint(decided: Decision, overrides: Mapping[str, str] | None) -> str:
    """The digest of what a decision binds: every file it runs or reads as code (path, sha256, size), the
    program each segment resolves to, the pinned rendering and the env the frame adds. A human's yes on a
    `request` frame counts for an `exec` frame only when the two are equal (issue 27 §5)."""
    shape = {
        "content": decided.content.to_json() if decided.content is not None else None,
        "resolved": [s.get("resolvedPath") for s in decided.segments],
        "pinned": decided.pinned_command,
        "env": sorted((overrides or {}).items()),
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()


def _gateway_state(
    grants: GrantStore | None, agent_id: str, session_key: str | None
) -> tuple[dict[str, SessionOverrides], list[AllowlistEntry]]:
    """What the gateway decides `agent_id`'s exec with beside config and approvals file, as it keeps it in
    the state dir: its session overrides table and, with `grants`, the agent's live grants for the session
    (blocking: one thread hop for both). Raises when the table cannot be read."""
    table = overridestable.read(state_dir() / overridestable.OVERRIDES_NAME)
    return table, grants.entries(agent_id, session_key or None) if grants is not None else []


@dataclass
class LocalExecHost:
    """Evaluates `exec` frames against this machine's config and approvals file, asks, then runs.

    What runs is exactly the evaluated argv (no shell re-parse), with a sanitised environment.
    """

    config_path: str | Path | None = None
    approvals_path: Path | None = None

    async def _decide(
        self,
        command: str,
        cwd: str,
        named: str | None,
        overrides: dict[str, str] | None,
        session_key: str | None = None,
        *,
        use_grants: bool = False,
    ) -> _Decided | ExecOutcome:
        """The decision for `command` in `cwd` as the socket's principal, and what its run needs; the one
        path both an `exec` frame and a `request` frame's fingerprint take. Decided as the gateway decides
        that principal's exec (engine.tools.decide): under the session overrides the gateway keeps in the
        state dir (the operator's `/exec security=deny` on agent:main reaches the socket too) and, with
        `use_grants`, the live grants with their limits (exec-grants.json), never a copy of either."""
        config = await asyncio.to_thread(load_config, self.config_path)
        try:
            # Who authenticated on the socket (its shared token: main, or nobody), never the frame's agentId.
            # The server already made the request its principal's; asked again under this very config.
            agent_id = frame_agent(config, named)
        except NotThisPrincipal as exc:
            return ExecOutcome.fail("INVALID_REQUEST", str(exc), "principal")
        try:
            env = sanitize_host_env(os.environ, overrides, inherit=config.exec_for(agent_id).inherit_env).env
        except ToolError as exc:
            return ExecOutcome.fail("INVALID_REQUEST", str(exc), "env")
        nodekeys.drop_hidden_agent(env, nodekeys.hidden_paths(config.nodes.values()))
        store = ApprovalsStore(self.approvals_path)
        grants = GrantStore(state_dir() / GRANTS_NAME) if use_grants else None
        try:
            table, live = await asyncio.to_thread(_gateway_state, grants, agent_id, session_key)
        except (OSError, ExecHostError, ValueError) as exc:  # fail closed: a lockdown may be in it
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: session overrides unreadable: {exc}")
        private = await asyncio.to_thread(private_source, config, agent_id, cwd)
        if private is not None:  # the agent's own copy of /tmp (or the like): decided and run there
            if not os.path.isdir(private):
                return ExecOutcome.fail("INVALID_REQUEST", f"{cwd} is not a directory of this agent's", "cwd")
            cwd = private
        decided = await asyncio.to_thread(
            evaluate,
            command,
            config=config,
            agent_id=agent_id,
            params={"host": "gateway"},
            overrides=overrides_for(table, agent_id, session_key or ""),
            store=store,
            cwd=cwd,
            env=env,
            session_key=session_key or None,
            env_overrides=overrides or None,  # only inert keys ride along unasked (issue 27 §3)
            grants=live,
        )
        return _Decided(decided, config, agent_id, cwd, env, store, grants)

    async def fingerprint(self, command: str, cwd: str | None, agent_id: str) -> str | None:
        """What a `request` frame's ask is about, as the `exec` frame claiming its yes will be decided
        (content_fingerprint); the server keeps it with the human's decision. None: nothing to bind to."""
        prepared = await self._decide(command, cwd or os.getcwd(), agent_id, None)
        return None if isinstance(prepared, ExecOutcome) else content_fingerprint(prepared.decision, None)

    async def policy(self, command: str, cwd: str | None, agent_id: str) -> Decision | None:
        """The decision this host's policy makes for a `request` frame's command as the socket's principal
        (the `exec` frame's path, _decide): what an ask it answers itself shows and offers, never the
        frame's own labels. None: refused before any decision (the principal, the env)."""
        prepared = await self._decide(command, cwd or os.getcwd(), agent_id, None)
        return None if isinstance(prepared, ExecOutcome) else prepared.decision

    async def __call__(self, request: ExecHostRequest, decide: Decider, peer: PeerInfo) -> ExecOutcome:
        command = shlex.join(request.command)
        # A claimed yes (vetted by the server) is this one run's own: no grant's use is taken for it, as a
        # gateway ask's approved run takes none.
        prepared = await self._decide(
            command,
            request.cwd or os.getcwd(),
            request.agent_id,
            request.env,
            request.session_key,
            use_grants=request.approval_decision is None,
        )
        if isinstance(prepared, ExecOutcome):
            return prepared
        decided, config, agent_id = prepared.decision, prepared.config, prepared.agent_id
        cwd, env, store = prepared.cwd, prepared.env, prepared.store
        security = decided.security
        if security is None:  # the policy itself refused (e.g. host=gateway not allowed here)
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {decided.reason}", "policy")
        if security == "deny":
            return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DISABLED: security=deny", "security=deny")
        if decided.verdict == "deny":
            # A decision sent by the client answers an ask; it never overrides a deny (unlike OpenClaw).
            return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DENIED: allowlist miss", "allowlist-miss")
        # The client's approvalDecision was vetted by the server: it stands only for a decision a human
        # made for this very request (never a frame approving itself), and only for the very bytes, paths
        # and env the human was asked about: this decision's, which the run is then held to (verify).
        decision = request.approval_decision if decided.verdict == "ask" else None
        if decision is not None and request.approved_content != content_fingerprint(decided, request.env):
            decision = None  # changed since the human was asked (or never bound): asked again
        if decided.verdict == "ask" and decision is None:
            resolved = next((s.get("resolvedPath") for s in decided.segments if s.get("resolvedPath")), None)
            decision = await decide(
                PromptRequest(
                    id=str(uuid.uuid4()),
                    command=command,
                    cwd=request.cwd or cwd,  # as the agent named it: the run's view's, never the state dir's
                    host="gateway",
                    security=security,
                    ask=decided.ask,
                    agent_id=agent_id,
                    resolved_path=resolved,
                    session_key=request.session_key,
                    source="socket-exec",
                    peer_pid=peer.pid,
                    allowed_decisions=tuple(decided.allowed_decisions),
                    warnings=(*env_lines(request.env), *decided.warnings),
                    env=tuple(sorted((request.env or {}).items())),
                    # the proof of who asked: relayed as socketToken, the ask ends with the token
                    token_id=request.token_id,
                )
            )
            if decision == "deny":
                return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DENIED: user denied", "user-denied")
        if decision is not None and decision not in decided.allowed_decisions:
            decision = "allow-once"  # e.g. allow-always under ask=always
        # One resolution, used for both the decision and the run: the pinned argv (pathPrepend included),
        # re-checked down to dev/ino just before it starts.
        if decided.pinned_command is None:
            return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DENIED: executable not found", "not-found")
        # The tree's re-vet reads files the agent can replace (a FIFO): off the loop, as the decision was.
        problem = identity_problem(decided.identity)
        if problem is None and decided.tree is not None:
            problem = await asyncio.to_thread(decided.tree_problem)
        if problem is not None:
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {problem}", "approval-stale")
        if decision is None and decided.grant_ids:
            # An allow that leans on grants takes one use of each, all or none (GrantStore.consume), as a
            # gateway exec does: a grant that ended since the decision runs nothing.
            grants = prepared.grants
            if grants is None or not await asyncio.to_thread(grants.consume, decided.grant_ids):
                return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DENIED: its grant ended", "grant-ended")
        # Saved here only when this host asked a human itself (the console's own inbox, no gateway): a
        # relayed ask's yes is saved by the gateway, with its limits, and answers this run as allow-once.
        if decision == "allow-always" and decided.allow_always_patterns:
            await asyncio.to_thread(store.persist_allow_always, agent_id, decided.allow_always_patterns)
        timeout = (request.timeout_ms or 1_800_000) / 1000
        try:
            # The bytes decided on, or nothing: agent-writable files run from sealed copies.
            pinned = decided.pinned_command
            run = await asyncio.to_thread(verify, decided.content, pinned, pinned)
        except StaleContent as exc:
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {exc}", "approval-stale")
        cwd_fd = None
        try:
            # The run is held to the decided cwd by an fd (checked by inode), the tree re-read through
            # it, and host tools read the vetted bytes: as a gateway exec does (issue 27 §4).
            if decided.tree is not None and decided.identity:
                cwd_fd = await asyncio.to_thread(open_checked_dir, cwd, decided.identity)
            anchor = f"{ANCHOR}{cwd_fd}" if cwd_fd is not None else None
            # The host view (engine.commands.hostview), as every gateway-host run has it.
            host = config.exec_for(agent_id).host_view != "none"
            outside = host_outside(config, agent_id, cwd)
            if host:
                refuse_hidden_cwd(cwd, str(state_dir()), outside)
            view = await asyncio.to_thread(view_for, decided.tree, run, anchor, host=host, outside=outside)
        except HostViewError as exc:
            run.close()
            if cwd_fd is not None:
                os.close(cwd_fd)
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {exc}", "host-view")
        except (StaleContent, OSError) as exc:
            run.close()
            if cwd_fd is not None:
                os.close(cwd_fd)
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {exc}", "approval-stale")
        try:
            # every word single-quoted: exactly the pinned argv (in a shell only to check the cwd first)
            words = shlex.split(run.command)
            if cwd_fd is not None and not view.check_cwd(cwd_fd):  # else checked in the view itself
                words = [DEFAULT_SHELL, "-c", in_checked_cwd(cwd_fd, run.command)]
            argv = view.wrap(words) if host else joined(view.wrap(words), outside)  # (as capped)
            env = {**env, **view.env}
            fds = (*run.fds, *view.fds, *(() if cwd_fd is None else (cwd_fd,)))
            payload = await run_argv(argv, cwd=cwd, env=env, timeout=timeout, pass_fds=fds)
        finally:
            run.close()
            view.close()
            if cwd_fd is not None:
                os.close(cwd_fd)
        return ExecOutcome(ok=True, payload=payload)


class _Tail:
    """The last bytes of one stream, read as they come: the gateway holds at most about 2 * KEEP_BYTES of
    it, however much the command writes (issue 27 §3: `head -c 128M /dev/zero` grew it by 128 MiB)."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.kept += chunk
        if len(self.kept) > 2 * KEEP_BYTES:
            del self.kept[:-KEEP_BYTES]

    def text(self) -> str:
        return bytes(self.kept[-KEEP_BYTES:]).decode("utf-8", "replace")[-OUTPUT_CAP:]

    def cut(self) -> bool:
        return self.total > len(self.text().encode("utf-8", "replace")) or self.total > KEEP_BYTES


async def _drain(stream: asyncio.StreamReader | None, tail: _Tail, over: asyncio.Event) -> None:
    """Reads a stream to its end into `tail`; past BYTE_CAP sets `over` (the run is killed)."""
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        if over.is_set():
            continue  # being killed: read on to the end (the pipe's EOF lets the process be reaped)
        tail.add(chunk)
        if tail.total > BYTE_CAP:
            over.set()


async def run_argv(
    argv: list[str], *, cwd: str, env: Mapping[str, str], timeout: float, pass_fds: tuple[int, ...] = ()
) -> dict[str, Any]:
    """Run argv (no shell) in its own process group; the exec-res payload shape. Output is read as it
    comes and only its tail kept; a command writing past BYTE_CAP on a stream is killed (`outputCapped`),
    and `stdoutTruncated`/`stderrTruncated` say a stream was cut to its tail."""
    # A shell's text in the environment, never on an argv (engine.commands.offargv); a bare argv is the
    # program's own, as it will be once exec'd.
    argv, spawn_env = carried(argv, env)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=spawn_env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        return {
            "exitCode": None,
            "timedOut": False,
            "success": False,
            "stdout": "",
            "stderr": "",
            "error": str(exc),
        }
    out, err, over = _Tail(), _Tail(), asyncio.Event()

    async def to_the_end() -> None:
        await asyncio.gather(_drain(proc.stdout, out, over), _drain(proc.stderr, err, over))
        await proc.wait()

    ran = asyncio.ensure_future(to_the_end())
    capped = asyncio.ensure_future(over.wait())
    try:
        await asyncio.wait({ran, capped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        timed_out = not ran.done() and not over.is_set()
        if not ran.done():  # past its time or its output cap: the whole group goes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await ran
    finally:
        capped.cancel()
        ran.cancel()
    code = proc.returncode
    payload: dict[str, Any] = {
        "exitCode": code,
        "timedOut": timed_out,
        "success": code == 0 and not timed_out and not over.is_set(),
        "stdout": out.text(),
        "stderr": err.text(),
        "stdoutTruncated": out.cut(),
        "stderrTruncated": err.cut(),
    }
    if over.is_set():
        payload["outputCapped"] = True
        payload["error"] = f"output past {BYTE_CAP} bytes: the command was killed (its tail is kept)"
    return payload
