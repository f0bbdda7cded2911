"""A node shared by several gateways files everything under its owner (the gateway's namespace + agent),
never the plain agent name: sandbox scopes, allow-always entries, grants, asks and egress principals."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine.approvals.grants import GrantLimits, GrantStore
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRequest
from engine.approvals.store import ApprovalsFileError, ApprovalsStore
from engine.sandbox.settings import (
    container_name,
    is_shared,
    layout,
    resolve_settings,
    scope_key,
    slugify,
    split_namespace,
)
from engine.tools.exec_request import ExecContext
from runner.node import gateways
from runner.node import grants as node_grants
from tests.helpers.gateway import FULL, connect, gateway, write_config
from tests.helpers.sshd import SshdNode, sshd_nodes  # noqa: F401

A = "a" * 32 + "/"  # two gateways' namespaces as a node files them (a key's fingerprint + SEP)
B = "b" * 32 + "/"


def test_every_sandbox_scope_is_the_gateways_on_a_shared_node() -> None:
    """Tried: gateway B's `main` on a node where gateway A's `main` has its (scope agent) sandbox: the
    scope key had no gateway in it. Every scope now carries the namespace; without one it is as before."""
    assert scope_key("agent", "main", "x") == "agent:main"  # a gateway's own (and old) keys are unchanged
    assert scope_key("shared", "main", "x") == "shared"
    assert scope_key("agent", "main", A + "s") == A + "agent:main"
    assert scope_key("shared", "main", A + "s", A) == A + "shared"
    assert scope_key("session", "main", A + "s", A) == A + "s"
    assert scope_key("session", "main", "s", A) == A + "s"  # a key without its namespace gets it
    assert scope_key("agent", "main", "s", A) == A + "agent:main"
    settings = resolve_settings(None, "main")
    mine, theirs, plain = (layout(settings, "main", "s", namespace=ns) for ns in (A, B, ""))
    assert len({mine.name, theirs.name, plain.name}) == 3
    assert len({mine.sandbox_workspace, theirs.sandbox_workspace, plain.sandbox_workspace}) == 3
    assert len({mine.agent_workspace, theirs.agent_workspace, plain.agent_workspace}) == 3
    assert plain.scope_key == "agent:main"  # an existing sandbox's label still reads as its scope
    assert split_namespace(mine.scope_key) == (A, "agent:main")
    assert split_namespace("agent:main:x/y") == ("", "agent:main:x/y")  # a gateway's own key with a `/`


def test_a_gateways_shared_scope_on_a_node_is_its_own_and_still_shared(tmp_path: Path) -> None:
    from engine.config.loader import load_config

    config_file = tmp_path / "config.toml"
    config_file.write_text('[agents.defaults.sandbox]\nscope = "shared"\n')
    settings = resolve_settings(load_config(config_file), "main")
    assert settings.scope == "shared"
    names = {ns: container_name(settings, scope_key("shared", "main", "s", ns)) for ns in (A, B, "")}
    assert len(set(names.values())) == 3 and all(is_shared(n) for n in names.values())
    assert names[""].endswith("-shared") and layout(settings, "x", "s").sandbox_workspace.endswith("/shared")
    assert (
        layout(settings, "x", "s", namespace=A).sandbox_workspace
        != layout(settings, "x", "s").sandbox_workspace
    )


def _store(tmp_path: Path, agents: dict[str, object]) -> ApprovalsStore:
    path = tmp_path / "exec-approvals.json"
    path.write_text(json.dumps({"version": 1, "agents": agents}))
    os.chmod(path, 0o600)
    return ApprovalsStore(path)


def test_an_allow_always_is_filed_and_read_under_its_owner(tmp_path: Path) -> None:
    """Tried: gateway B's human's allow-always for B's `main` on a shared node ran A's `main`'s command
    unasked. It is filed under `<B>main`; A's `main` reads `<A>main` and the wildcard, never B's or the
    plain name's."""
    store = _store(
        tmp_path,
        {
            "*": {"allowlist": [{"pattern": "/usr/bin/every"}]},
            "main": {
                "security": "allowlist",
                "ask": "always",
                "allowlist": [
                    {"pattern": "/usr/bin/plain"},  # the node operator's own (`approvals allowlist add`)
                    {"pattern": "/usr/bin/old", "source": "allow-always"},  # some gateway's human's, once
                ],
            },
        },
    )
    store.persist_allow_always(B + "main", ["/usr/bin/touch"])
    saved = json.loads(store.path.read_text())
    assert [e["pattern"] for e in saved["agents"][B + "main"]["allowlist"]] == ["/usr/bin/touch"]
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    snap = store.snapshot()
    mine = [e.pattern for e in snap.entries("main", A + "main")]
    theirs = [e.pattern for e in snap.entries("main", B + "main")]
    anonymous = [e.pattern for e in snap.entries("main", "main")]
    # Neither B's yes nor an unattributable old yes under the name; the node operator's entry for the name.
    assert mine == ["/usr/bin/every", "/usr/bin/plain"]
    assert theirs == ["/usr/bin/every", "/usr/bin/plain", "/usr/bin/touch"]
    assert anonymous == ["/usr/bin/every", "/usr/bin/plain", "/usr/bin/old"]  # the anonymous namespace's
    # A use stamp finds the entry that matched, the owner's or the name's.
    plain_id = next(e.id for e in snap.entries("main", A + "main") if e.pattern == "/usr/bin/plain")
    touch_id = next(e.id for e in snap.entries("main", B + "main") if e.pattern == "/usr/bin/touch")
    assert snap.find_entry(A + "main", plain_id) is not None and snap.find_entry(B + "main", touch_id)
    assert snap.find_entry(A + "main", touch_id) is None
    # The node operator's policy for the agent still applies to every gateway's agent of that name.
    assert snap.agent("main", A + "main").ask == "always"
    # An ExecContext's owner is what the exec tool files under: the namespace and the agent.
    assert ExecContext(agent_id="main", namespace=A).owner == A + "main"
    assert ExecContext(agent_id="main").owner == "main"


def test_an_owners_policy_fields_come_before_the_names(tmp_path: Path) -> None:
    store = _store(tmp_path, {"main": {"ask": "off"}, A + "main": {"ask": "always", "security": "bogus"}})
    view = store.snapshot().agent("main", A + "main")
    assert view.ask == "always" and view.sources["ask"] == f"agents.{A}main.ask"
    assert store.snapshot().agent("main", B + "main").ask == "off"
    assert view.security is None  # an invalid owner value falls through to the name's (unset) and defaults


def test_a_corrupt_approvals_file_is_never_overwritten_by_an_owners_allow_always(tmp_path: Path) -> None:
    path = tmp_path / "exec-approvals.json"
    path.write_text('{"version": 1, "agents": {')
    os.chmod(path, 0o600)
    before = path.read_bytes()
    with pytest.raises(ApprovalsFileError):
        ApprovalsStore(path).persist_allow_always(A + "main", ["/usr/bin/touch"])
    assert path.read_bytes() == before


def test_a_nodes_grants_are_listed_and_revoked_by_their_own_gateway_only(tmp_path: Path) -> None:
    """Tried: gateway B listing (and revoking) the grants gateway A's human made for A's `main` on a shared
    node: the node listed every grant. Each is its owner's; another gateway's reads as absent."""
    import asyncio

    store = GrantStore(tmp_path / "exec-grants.json")
    limits = GrantLimits(uses=3, session_only=True)
    mine = store.add(A + "main", ["/usr/bin/true"], "true", limits, session_key=A + "agent:main:s1")
    theirs = store.add(B + "main", ["/usr/bin/false"], "false", GrantLimits(uses=3))
    assert [e.pattern for e in store.entries(A + "main", A + "agent:main:s1")] == ["/usr/bin/true"]
    assert store.entries(B + "main", A + "agent:main:s1") == [
        e for e in store.entries(B + "main", None) if e.pattern == "/usr/bin/false"
    ]

    async def as_gateway(ns: str, method: str, params: dict[str, object]) -> dict[str, object]:
        token = gateways.CURRENT_GATEWAY.set(ns)
        try:
            return await node_grants.handle(store, method, params)
        finally:
            gateways.CURRENT_GATEWAY.reset(token)

    async def scenario() -> None:
        listed = await as_gateway(A, "grants.list", {})
        rows = listed["grants"]
        assert isinstance(rows, list) and [r["id"] for r in rows] == [mine.id]
        assert rows[0]["agentId"] == "main" and rows[0]["sessionKey"] == "agent:main:s1"  # its own terms
        assert (await as_gateway(A, "grants.list", {"agentId": "main"}))["grants"] == rows
        with pytest.raises(node_grants.GrantRequestError):
            await as_gateway(A, "grants.revoke", {"id": theirs.id})
        with pytest.raises(node_grants.GrantRequestError):
            await as_gateway(A, "grants.list", {"agentId": B + "main"})  # no naming another's namespace
        assert (await as_gateway("", "grants.list", {}))["grants"] == []  # the anonymous link's: none
        revoked = await as_gateway(B, "grants.revoke", {"id": theirs.id})
        assert revoked["revoked"]["agentId"] == "main"  # type: ignore[index]

    asyncio.run(scenario())
    assert [g.id for g in store.active()] == [mine.id]


async def test_two_gateways_asks_of_one_agent_name_are_two_questions() -> None:
    """Tried: gateway A's and B's `main` asking the same command on a shared node at once: the node's
    manager coalesced them into one record, and one gateway's human's answer ran the other's agent's."""
    mgr = ApprovalManager()
    mine, _ = mgr.register(ApprovalRequest(command="ls", cwd="/tmp", session_key=A + "s", owner=A + "main"))
    theirs, _ = mgr.register(ApprovalRequest(command="ls", cwd="/tmp", session_key=B + "s", owner=B + "main"))
    assert theirs.id != mine.id
    again, _ = mgr.register(ApprovalRequest(command="ls", cwd="/tmp", session_key=A + "t", owner=A + "main"))
    assert again.id == mine.id  # its own gateway's asks still coalesce
    assert "owner" not in mine.view()  # the node's own key never goes over the wire


async def test_a_sandboxs_egress_principal_on_a_node_is_its_owner(tmp_path: Path) -> None:
    """Tried: an egress ask from gateway A's `main`'s sandbox bound to gateway B's latest call of `main`
    (the node keyed its runs in flight by the plain name). The sandbox's connections are its owner's: the
    proxy listens under `<namespace><agent>`, and the node binds asks by that."""
    from engine.config.loader import load_config
    from engine.sandbox.egress import forwarder
    from engine.sandbox.manager import SandboxManager

    config_file = tmp_path / "config.toml"
    config_file.write_text('[agents.defaults.sandbox.egress]\nmode = "allowlist"\n')

    settings = resolve_settings(load_config(config_file), "main")
    heard: list[tuple[str, str]] = []

    async def egress(sandbox: str, principal: str, uid: int | None) -> bool:
        heard.append((sandbox, principal))
        return False

    manager = SandboxManager()
    manager.egress = egress
    lays = [layout(settings, "main", "s", namespace=ns) for ns in (A, "")]
    try:
        for lay in lays:
            await manager._egress_ready(settings, lay, "main")
    finally:
        for lay in lays:
            forwarder.remove_dir(lay.name)
    assert heard == [(lays[0].name, A + "main"), (lays[1].name, "main")]

    from engine.sandbox.egress.proxy import Request
    from runner.node.egress import node_egress  # the bind: the owner's latest call, never the name's

    runs = {A + "main": [(A, "run-a")], B + "main": [(B, "run-b")]}
    hub = node_egress(
        ApprovalManager(),
        ApprovalsStore(tmp_path / "a.json"),
        GrantStore(tmp_path / "g.json"),
        tmp_path,
        lambda: load_config(config_file),
        runs,
    )
    assert hub.bind_ask is not None
    undo = hub.bind_ask(Request(A + "main", lays[0].name, "x.test", 80, "GET"))
    try:
        assert gateways.CURRENT_GATEWAY.get() == A
    finally:
        undo()
    assert hub._egress(A + "main") == hub._egress("main")  # its settings are still the agent's


async def test_a_gateway_lists_and_recreates_only_its_own_sandboxes_on_a_shared_node(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    """Tried: gateway B's operator listing a shared node's sandboxes and `sandbox.recreate all` there: the
    node listed gateway A's agent's sandbox too, and removed it. A gateway's verbs see only its own."""
    from tests.helpers.daemon import Daemon

    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(
        '[tools.exec]\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
    )
    config = FULL.replace('"gateway"', '"node"') + node.config_toml()
    write_config(state_dir, config)
    other = state_dir.parent / "s2"
    other.mkdir(mode=0o700)
    write_config(other, config)
    run = {"agentId": "main", "host": "node", "node": node.name, "command": "echo made > mine.txt"}
    async with gateway(state_dir):
        mine = await connect(state_dir)
        try:
            assert (await mine.request("exec", run))["details"].get("exitCode") == 0
            listed = (await mine.request("sandbox.list", {"node": node.name}))["containers"]
        finally:
            await mine.close()
    assert [r["sessionKey"] for r in listed] == ["agent:main"]  # its own, in its own terms
    assert listed[0]["configMatch"], listed
    with Daemon(other):
        theirs = await connect(other)
        try:
            assert (await theirs.request("exec", run))["details"].get("exitCode") == 0
            their_rows = (await theirs.request("sandbox.list", {"node": node.name}))["containers"]
            removed = await theirs.request("sandbox.recreate", {"node": node.name, "all": True})
        finally:
            await theirs.close()
    assert [r["sessionKey"] for r in their_rows] == ["agent:main"]
    assert their_rows[0]["containerName"] != listed[0]["containerName"]
    assert removed["removed"] == [their_rows[0]["containerName"]]
    # A node process of its own per link (serve --stdio): a restart. A's sandbox is found by its label and
    # record again, under the same name, its files there.
    async with gateway(state_dir):
        mine = await connect(state_dir)
        try:
            again = (await mine.request("sandbox.list", {"node": node.name}))["containers"]
            read = await mine.request("exec", {**run, "command": "cat mine.txt"})
        finally:
            await mine.close()
    assert [r["containerName"] for r in again] == [listed[0]["containerName"]] and again[0]["configMatch"]
    assert "made" in str(read["details"].get("aggregated") or read["text"]), read


async def test_one_gateways_agent_fills_no_other_gateways_ask_queue_on_a_shared_node() -> None:
    """Tried: gateway B's `main` filling a shared node's pending asks for `main` up to the per-agent cap:
    gateway A's `main` was refused every ask (APPROVAL_QUEUE_FULL). The cap counts per owner."""
    from engine.approvals.request import ApprovalError

    mgr = ApprovalManager(max_per_agent=2)
    for i in range(2):
        mgr.register(ApprovalRequest(command=f"b{i}", cwd="/tmp", session_key=B + "s", owner=B + "main"))
    with pytest.raises(ApprovalError, match="already has"):
        mgr.register(ApprovalRequest(command="b2", cwd="/tmp", session_key=B + "s", owner=B + "main"))
    mine, _ = mgr.register(ApprovalRequest(command="a0", cwd="/tmp", session_key=A + "s", owner=A + "main"))
    assert mine.request.principal == A + "main"


def test_a_gateways_agents_sandboxes_count_in_its_own_owner_group_on_a_shared_node() -> None:
    """Tried: gateway B's `main`'s sandboxes on a shared node taking the pids share of `main`'s owner group,
    which gateway A's `main`'s sandboxes count against too. Each is in its owner's group (namespace + agent),
    the one that agent's host runs there join (ExecContext.owner)."""
    from engine.sandbox import docker_ops, dockercg

    if not dockercg.usable():
        pytest.skip("no writable v1 pids hierarchy here: containers get no owner group")
    settings = resolve_settings(None, "main")
    parents = {
        ns: docker_ops.create_kwargs(
            settings,
            layout(settings, "main", "s", namespace=ns),
            config_hash="x",
            created_at_ms=1,
            env={},
            user=None,
            has_busybox=False,
            agent_id="main",
        ).get("cgroup_parent")
        for ns in (A, B, "")
    }
    assert parents[""] == dockercg.parent_for("agent-" + slugify("main"))  # a gateway's: as before
    assert parents[A] == dockercg.parent_for("agent-" + slugify(A + "main"))
    assert len(set(parents.values())) == 3


def test_a_gateways_shared_scope_is_an_owner_of_its_own_on_a_shared_node(tmp_path: Path) -> None:
    """Tried (fresh round 17 a): each gateway's shared scope on a node is a sandbox of its own, but its
    owner was the plain `shared`: one host uid and one pids and RAM share for both gateways. Every owner is
    in its namespace now, the shared scope's too: a Docker sandbox's cgroup parent and a bwrap sandbox's
    uid differ per gateway; a gateway's own shared scope is `shared`, as before."""
    from engine.sandbox import dockercg, sandboxuid

    config_file = tmp_path / "config.toml"
    config_file.write_text('[agents.defaults.sandbox]\nscope = "shared"\n')
    from engine.config.loader import load_config

    settings = resolve_settings(load_config(config_file), "main")
    owners = {
        ns: dockercg.owner_of(
            settings.scope, split_namespace(layout(settings, "main", "s", namespace=ns).scope_key)[0] + "main"
        )
        for ns in (A, B, "")
    }
    assert owners[""] == "shared"
    assert len(set(owners.values())) == 3
    assert owners[A] == dockercg.owner_of("shared", A + "ops")  # one owner for all of a gateway's agents
    if os.geteuid() == 0:
        assert len({sandboxuid.for_owner(o) for o in owners.values()}) == 3
    if dockercg.usable():
        assert len({dockercg.parent_for(o) for o in owners.values()}) == 3


def test_a_gateway_hears_only_of_its_own_runs_on_a_shared_node() -> None:
    """Tried: gateway B asking a shared node `runs.status` of a run id gateway A's run carries (a run id is
    the gateway's to choose): the node's ledger was keyed by the id alone and told B of A's run."""
    from runner.node.runs import RunLedger

    ledger = RunLedger()
    ledger.began(A + "r1")  # as runner.node.sysrun files it: under the gateway's namespace
    ledger.answered(A + "r2", {"state": "ended"})
    assert ledger.status(["r1", "r2"], A)["runs"] == {"r1": {"state": "in-flight"}, "r2": {"state": "ended"}}
    assert ledger.status(["r1", "r2"], B)["runs"] == {"r1": {"state": "unknown"}, "r2": {"state": "unknown"}}
