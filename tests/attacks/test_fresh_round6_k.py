"""Fresh round 6, attacker k: ambient authority, whose is it, limits per principal, crash at the worst
moment — against the gateway's principals, its durable state and its restart."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import principals
from engine.approvals.grants import GRANTS_NAME, GrantLimits, GrantStore
from engine.approvals.history import HISTORY_DIR, DecisionLog, encode_entry
from engine.approvals.room import MAX_PENDING_PER_AGENT
from engine.approvals.store import ApprovalsStore
from engine.policy.precedence import SessionOverrides
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from engine.sandbox import bwrap
from engine.sandbox.bwraplimits import mem_total as _mem_total
from runner.gateway import overrides_file
from tests.attacks.rawclient import RawClient
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, FULL, cli, connect, listed, wait_until, write_config
from tests.helpers.pending import fold_pending
from tests.helpers.sshd import _keygen, make_node


@pytest.fixture
def state() -> Iterator[Path]:
    """A short state dir (Unix socket paths stay far under 107 bytes), 0700, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="r6k", dir="/tmp"))
    path = root / "s"
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _agent(state: Path) -> ControlClient:
    return await ControlClient.connect(state, client="agent", name="agent", autostart=False, operator=False)


async def _runs(state: Path, command: str) -> bool:
    """Whether agent main's `command` ran (True) or was refused by policy (False)."""
    agent = await _agent(state)
    try:
        result = await agent.request("exec", {"command": command})
    except RemoteError as exc:
        assert "security=deny" in str(exc), exc
        return False
    finally:
        await agent.close()
    assert result["details"]["status"] == "completed", result
    return True


# ---- class 7: crash at the worst moment ---------------------------------------------------------------


async def test_operator_lockdown_override_survives_a_gateway_crash(state: Path) -> None:
    """Was open: session overrides (`/exec security=deny` on agent:<id>) lived only in the gateway's memory;
    a crash or restart dropped the operator's lock-down and the agent ran under its broader configured
    policy again. Now kept in <state>/session-overrides.json, written before the override is answered."""
    write_config(state, FULL)
    daemon = Daemon(state).start()
    try:
        operator = await connect(state)
        try:
            # The operator stops agent main from running anything on the host (the console's Policy pane).
            await operator.request(
                "policy.override", {"sessionKey": "agent:main", "directive": "/exec security=deny"}
            )
        finally:
            await operator.close()
        assert not await _runs(state, "echo before-crash")
        daemon.restart()  # SIGKILL, then a new gateway on the same state dir
        assert not await _runs(state, "echo after-crash"), "the operator's security=deny was lost"
    finally:
        daemon.stop()


async def _background(state: Path, tag: str) -> str:
    """Agent main starts `echo tag` in the background; its session id (RemoteError when refused)."""
    agent = await _agent(state)
    try:
        result = await agent.request("exec", {"command": f"echo {tag}", "background": True})
        return str(result["details"]["sessionId"])
    finally:
        await agent.close()


async def test_session_cap_holds_across_a_restart(state: Path) -> None:
    """Was open: a restart adopted sessions that had ended and been reported (adopt._adopt_ended) without
    counting them against their agent (Quota.admit), so after each restart an agent kept another full
    maxSessionsPerAgent (and output budget) on top of what it already held."""
    write_config(state, FULL + "maxSessionsPerAgent = 3\n")
    daemon = Daemon(state).start()
    try:
        sids = [await _background(state, f"kept-{i}") for i in range(3)]
        # Each ended and was reported: the session host wrote its exit and done files.
        holders = state / "holders"
        await wait_until(lambda: all((holders / f"{sid}.done").exists() for sid in sids), 30)
        with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
            await _background(state, "one-too-many")
        daemon.restart()
        agent = await _agent(state)
        try:
            listed = await agent.request("process", {"action": "list"})
        finally:
            await agent.close()
        assert {s["sessionId"] for s in listed["details"]["sessions"]} >= set(sids)  # all three kept
        with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
            await _background(state, "after-restart")
    finally:
        daemon.stop()


async def test_node_session_cap_holds_across_a_restart(state: Path) -> None:
    ssh = state.parent / "ssh"
    ssh.mkdir(mode=0o700)
    key, known = ssh / "id", ssh / "known_hosts"
    _keygen(key)
    known.touch(mode=0o600)
    node = make_node(ssh, "alpha", "127.0.0.2", key, known)
    node_config = node.state_dir / "config.toml"
    node_config.write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    os.chmod(node_config, 0o600)
    node.start()
    node.trust()
    service = node.run_service()  # the node's sessions outlive the link, as in production
    write_config(
        state,
        '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\nmaxSessionsPerAgent = 2\n'
        + node.config_toml(),
    )
    daemon = Daemon(state).start()

    async def on_node(tag: str) -> str:
        agent = await _agent(state)
        try:
            call = {"command": f"sleep 300 # {tag}", "node": "alpha", "background": True}
            return str((await agent.request("exec", call))["details"]["sessionId"])
        finally:
            await agent.close()

    try:
        held = [await on_node("first"), await on_node("second")]
        with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
            await on_node("third")
        daemon.restart()
        with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
            await on_node("after-restart")
        agent = await _agent(state)
        try:
            listed = await agent.request("process", {"action": "list"})
        finally:
            await agent.close()
        assert set(held) <= {s["sessionId"] for s in listed["details"]["sessions"]}  # both still run
    finally:
        daemon.stop()
        service.kill()
        service.wait()
        node.stop()  # and every process the node's state dir started


async def test_revoked_agents_approved_run_does_not_start_after_a_crash(state: Path) -> None:
    write_config(state, ALLOWLIST + listed("ops"))
    token = principals.mint(state, "ops")
    marker = state.parent / "ran"
    daemon = Daemon(state).start()
    try:
        ops = await ControlClient.connect(state, client="ops", name="ops", autostart=False, credential=token)
        try:
            asked = await ops.request("exec", {"command": f"touch {marker}"})
        finally:
            await ops.close()
        assert asked["details"]["status"] == "approval-pending"
        # The gateway dies right after writing the operator's allow-once, before the run starts: what the
        # next gateway finds is the ask decided, its run not begun.
        daemon.kill()
        path = fold_pending(state)
        data = json.loads(path.read_text())
        (ask,) = data["asks"]
        assert ask["request"]["agent_id"] == "ops" and ask["run"] is None
        ask.update(decision="allow-once", resolved_by="operator", resolved_at_ms=ask["created_at_ms"] + 1)
        path.write_text(json.dumps(data))
        # The operator revokes ops before starting the gateway again.
        assert cli(state, "agents", "revoke", "ops").returncode == 0
        daemon.start()
        operator = await connect(state)

        async def outcome() -> str | None:  # what the restored ask led to, once it is over
            got = await operator.request("approvals.status", {"approvalId": ask["id"]})
            status = (got["details"]["run"] or {}).get("status")
            return status if status in ("completed", "failed", "denied") else None

        try:
            ended = await wait_until(outcome, 30)
        finally:
            await operator.close()
        assert not marker.exists(), "the revoked agent's command ran"
        assert ended == "denied"
    finally:
        daemon.stop()


# ---- class 3: limits per principal -------------------------------------------------------------------

BWRAP_BUDGET = 4 << 20


@needs_bwrap
async def test_sandbox_session_spool_is_capped_at_the_agents_share(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: a sandbox command's streams handed to the session host (HostLauncher.hold) were spooled up
    to the host's default cap (64 MiB), never the share of the agent's output budget its session was
    granted, as a gateway-host command's spool is: an agent whose whole budget was 4 MiB left 30 MB on
    disk with one command."""
    write_config(
        state,
        f"[tools.exec]\nmaxOutputBytesPerAgent = {BWRAP_BUDGET}\n"
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n',
    )
    daemon = Daemon(state).start()  # the daemon holds sessions in its session host
    try:
        agent = await _agent(state)
        try:
            loud = "head -c 30000000 /dev/zero | tr '\\0' x; echo; echo done"
            started = await agent.request("exec", {"command": loud, "background": True})
            sid = started["details"]["sessionId"]

            async def ended() -> bool:
                got = await agent.request("process", {"action": "poll", "sessionId": sid, "timeout": 2000})
                return got["details"].get("status") in ("completed", "failed")

            await wait_until(ended, 120, interval=0.2)
        finally:
            await agent.close()
        spool = state / "holders" / f"{sid}.spool"
        assert spool.exists()
        assert spool.stat().st_size <= BWRAP_BUDGET + 64 * 1024  # (chunk headers)
    finally:
        daemon.stop()
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        bwrap.remove_all()  # this state dir's sandbox keepers


# ---- tried and held: regression tests -----------------------------------------------------------------


async def test_asks_restored_after_a_crash_still_count_against_their_agent(state: Path) -> None:
    """Class 3 x 7: the asks a crash left on disk come back counted (ApprovalManager.restore → _opened), so
    a restart does not hand an agent a second 32 asks in the operator's inbox."""
    write_config(state, ALLOWLIST)
    daemon = Daemon(state).start()
    try:
        agent = await _agent(state)
        try:
            for i in range(MAX_PENDING_PER_AGENT):
                asked = await agent.request("exec", {"command": f"touch /nonexistent/ask-{i}"})
                assert asked["details"]["status"] == "approval-pending"
        finally:
            await agent.close()
        daemon.restart()
        agent = await _agent(state)
        try:
            with pytest.raises(RemoteError, match="approvals waiting for the operator"):
                await agent.request("exec", {"command": "touch /nonexistent/one-more"})
        finally:
            await agent.close()
    finally:
        daemon.stop()


async def test_an_agent_cannot_lock_down_or_read_another_agents_scope(state: Path) -> None:
    """Class 2: `policy.override` and `approvals.status` name keys and ids of another agent; the override
    lands in the caller's own namespace and another agent's ask reads as unknown."""
    write_config(state, ALLOWLIST + listed("ops"))
    token = principals.mint(state, "ops")
    daemon = Daemon(state).start()
    try:
        main = await _agent(state)
        ops = await ControlClient.connect(state, client="ops", name="ops", autostart=False, credential=token)
        try:
            asked = await main.request("exec", {"command": "touch /nonexistent/mains"})
            approval = asked["details"]["approvalId"]
            with pytest.raises(RemoteError, match="unknown or expired approval id"):
                await ops.request("approvals.status", {"approvalId": approval})
            set_ = await ops.request(
                "policy.override", {"sessionKey": "agent:main", "directive": "/exec security=deny"}
            )
            assert set_["details"]["sessionKey"] == "agent:ops:agent:main"
            mine = await main.request("policy.overrides", {})
            assert mine["overrides"] == {}
        finally:
            await main.close()
            await ops.close()
    finally:
        daemon.stop()


async def test_a_limited_grant_is_not_granted_twice_across_a_crash(state: Path) -> None:
    write_config(state, ALLOWLIST)
    marker = state.parent / "granted"
    daemon = Daemon(state).start()
    try:
        agent = await _agent(state)
        try:
            asked = await agent.request("exec", {"command": f"touch {marker}"})
        finally:
            await agent.close()
        assert asked["details"]["status"] == "approval-pending"
        daemon.kill()
        # The operator's allow-always for 2 uses was decided, the gateway wrote its grant, and was killed
        # before the pending journal took the grant's id: what the next gateway finds.
        path = fold_pending(state)
        data = json.loads(path.read_text())
        (ask,) = data["asks"]
        limits = GrantLimits(uses=2)
        ask.update(
            decision="allow-always",
            resolved_by="operator",
            resolved_at_ms=ask["created_at_ms"] + 1,
            grant=limits.to_json(),
        )
        path.write_text(json.dumps(data))
        patterns = ask["request"]["decision_json"]["allowAlwaysPatterns"]
        assert patterns
        grants = GrantStore(state / GRANTS_NAME)
        grants.add("main", patterns, f"touch {marker}", limits)
        daemon.start()
        operator = await connect(state)

        async def ran() -> bool:
            got = await operator.request("approvals.status", {"approvalId": ask["id"]})
            return (got["details"]["run"] or {}).get("status") == "completed"

        try:
            await wait_until(ran, 30)
        finally:
            await operator.close()
        assert marker.exists()
        assert len(grants.active("main")) == 1, "the operator's grant of 2 uses was made twice"
    finally:
        daemon.stop()


@pytest.mark.parametrize("restart", [False, True], ids=["live", "after-a-crash"])
async def test_an_expired_ask_falls_back_under_todays_policy(state: Path, restart: bool) -> None:
    permissive = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "always"\naskFallback = "full"\n'
    tightened = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\naskFallback = "deny"\n'
    )
    write_config(state, permissive)
    marker = state.parent / "fell-back"
    daemon = Daemon(state, env={"EXECHOST_APPROVAL_TIMEOUT_MS": "3000"}).start()
    try:
        agent = await _agent(state)
        try:
            asked = await agent.request("exec", {"command": f"touch {marker}"})
        finally:
            await agent.close()
        approval = asked["details"]["approvalId"]
        if restart:
            daemon.kill()
        write_config(state, tightened)  # nobody answered; the operator takes the fallback away
        if restart:
            daemon.start()
        agent = await _agent(state)

        async def outcome() -> str | None:  # the ask's end, as its agent is told
            got = await agent.request("events", {})
            return next((e["text"] for e in got["events"] if approval in e["text"]), None)

        try:
            told = await wait_until(outcome, 30, interval=0.2)
        finally:
            await agent.close()
        assert not marker.exists(), told
        assert told.startswith("Exec denied")
    finally:
        daemon.stop()


@pytest.mark.parametrize("lockdown", ["config", "override"])
async def test_security_deny_set_after_an_ask_refuses_its_approval(state: Path, lockdown: str) -> None:
    write_config(state, ALLOWLIST)
    marker = state.parent / "ran-under-deny"
    daemon = Daemon(state).start()
    try:
        agent = await _agent(state)
        try:
            asked = await agent.request("exec", {"command": f"touch {marker}"})
        finally:
            await agent.close()
        approval = asked["details"]["approvalId"]
        operator = await connect(state)
        try:
            if lockdown == "config":
                write_config(state, '[tools.exec]\nhost = "gateway"\nsecurity = "deny"\n')
            else:
                lock = {"sessionKey": "agent:main", "directive": "/exec security=deny"}
                await operator.request("policy.override", lock)
            await operator.request("approve", {"id": approval, "decision": "allow-once"})
        finally:
            await operator.close()
        agent = await _agent(state)

        async def outcome() -> str | None:
            got = await agent.request("events", {})
            return next((e["text"] for e in got["events"] if approval in e["text"]), None)

        try:
            told = await wait_until(outcome, 30, interval=0.2)
        finally:
            await agent.close()
        assert not marker.exists(), told
    finally:
        daemon.stop()


@needs_bwrap
async def test_pty_terminals_cannot_pin_tmpfs_past_the_agents_ram_share(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: a PTY command in a bwrap sandbox was a one-shot bwrap with tmpfs mounts of its own, never
    counted in the RAM reservations, so each terminal could pin another full /tmp. Now a terminal joins
    the running sandbox's namespaces and its bwrap takes that view whole: the same tmpfs mounts."""
    # One /tmp of 5 GiB: its sandbox fits this agent's quarter of the host's RAM; a second one would not.
    # (Nothing here writes more than a few bytes: the caps are reservations, not allocations.)
    quarter = _mem_total() // 4
    size = quarter * 5 // 6
    write_config(
        state,
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nscope = "session"\n'
        f'[agents.defaults.sandbox.docker]\ntmpfs = ["/tmp:size={size}"]\n',
    )
    daemon = Daemon(state).start()
    try:
        agent = await _agent(state)
        try:
            kept = await agent.request("exec", {"command": "echo keeper > /tmp/k", "sessionKey": "s1"})
            assert kept["details"]["status"] == "completed"
            with pytest.raises(RemoteError, match="reserve"):  # the budget holds for a second sandbox
                await agent.request("exec", {"command": "true", "sessionKey": "s2"})
            try:
                term = await agent.request(
                    "exec", {"command": "cat /tmp/k || echo own-tmpfs", "sessionKey": "s1", "pty": True}
                )
            except RemoteError as exc:  # refused for the budget: what a second sandbox gets
                assert "reserve" in str(exc)
            else:  # or it runs in the sandbox's own view, /tmp and all
                assert "keeper" in term["text"], term["text"]
        finally:
            await agent.close()
    finally:
        daemon.stop()
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        bwrap.remove_all()


def _decided(tag: str, agent: str = "main") -> dict[str, object]:
    """A decision line of one of `agent`'s asks: denied, with a 60 KB command."""
    return {"kind": "decision", "v": 1, "id": f"{tag}-{uuid.uuid4()}", "status": "deny", "agentId": agent,
            "command": "x" * 60_000}  # fmt: skip


def _answered(raw: RawClient) -> int:
    """Responses the gateway has already sent on a paused raw connection (read from the kernel's buffer
    without waiting)."""
    sock = socket.socket(fileno=os.dup(raw.writer.get_extra_info("socket").fileno()))
    data = b""
    try:
        while chunk := sock.recv(1 << 20, socket.MSG_DONTWAIT):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        sock.close()
    return data.count(b"\n")


async def test_an_agents_status_flood_does_not_queue_the_operator(state: Path) -> None:
    write_config(state, ALLOWLIST)
    # A decision history of 2.4 MB (its bound is 5 MiB): 40 asks with 60 KB commands, decided (an agent
    # fills it itself, 32 asks at a time, as they are denied or expire). Agent ops's: agent main's status
    # of one is refused (a short answer) only once the history was read to find it.
    log = DecisionLog(state / HISTORY_DIR)
    for batch in range(5):
        log.write_lines([encode_entry(_decided(f"{batch:02d}{n:02d}", "ops")) for n in range(8)])
    daemon = Daemon(state).start()
    raws: list[RawClient] = []
    try:
        operator = await connect(state)
        try:
            for _ in range(4):
                raw, _first = await RawClient.open(state)  # agent main, reading nothing back
                raws.append(raw)
                for n in range(100):
                    # Ids nobody decided (and ambiguous prefixes) no longer cost a read: the decision
                    # history's id index answers them (tests/runner/gateway/test_history_index.py). So the
                    # flood names decided asks (a unique prefix each): each one is still a whole read.
                    await raw.request("approvals.status", {"approvalId": f"{n // 8 % 5:02d}{n % 8:02d}"})
            await operator.request("approvals.history", {})
            answered = sum(_answered(raw) for raw in raws)
        finally:
            await operator.close()
        assert answered < 4 * 100 // 2, f"the operator waited behind {answered} of the agent's scans"
    finally:
        for raw in raws:
            raw.close()
        daemon.stop()


def test_session_overrides_file_round_trip_and_a_bad_file_kept_aside(state: Path) -> None:
    """The overrides file: 0600, read back as written; one that does not parse is moved aside (never
    silently replaced) and one entry that is not an override is dropped, the rest kept."""
    path = state / overrides_file.OVERRIDES_NAME
    table = {"agent:ops": SessionOverrides(security="deny"), "agent:main:x": SessionOverrides(ask="always")}
    overrides_file.save(path, table)
    assert path.stat().st_mode & 0o777 == 0o600
    assert overrides_file.load(path) == table
    data = json.loads(path.read_text())
    data["overrides"]["agent:evil"] = {"security": "full", "shell": "sh -c id"}
    path.write_text(json.dumps(data))
    assert overrides_file.load(path) == table
    path.write_text("{not json")
    assert overrides_file.load(path) == {}
    assert path.with_name(path.name + ".bad").read_text() == "{not json"


async def test_a_node_shared_by_two_gateways_keeps_their_agents_apart(state: Path) -> None:
    other = state.parent / "b"
    other.mkdir(mode=0o700)
    ssh = state.parent / "ssh"
    ssh.mkdir(mode=0o700)
    key, known = ssh / "id", ssh / "known_hosts"
    _keygen(key)
    known.touch(mode=0o600)
    node = make_node(ssh, "alpha", "127.0.0.2", key, known)
    node_config = node.state_dir / "config.toml"
    node_config.write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    os.chmod(node_config, 0o600)
    node.start()
    node.trust()
    service = node.run_service()
    config = '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n' + node.config_toml()
    write_config(state, config)
    write_config(other, config)
    mine, theirs = Daemon(state).start(), Daemon(other).start()
    try:
        agent = await _agent(state)
        try:
            call = {"command": "echo SECRET-OF-A; sleep 300", "node": "alpha", "background": True}
            sid = (await agent.request("exec", call))["details"]["sessionId"]
        finally:
            await agent.close()
        stranger = await _agent(other)  # gateway B's agent main: another operator's agent
        try:
            await stranger.request("exec", {"command": "true", "node": "alpha"})
            with pytest.raises(RemoteError, match="No session found"):
                await stranger.request("process", {"action": "log", "sessionId": sid})
        finally:
            await stranger.close()
    finally:
        mine.stop()
        theirs.stop()
        service.kill()
        service.wait()
        node.stop()


# ---- operator vs agent: who may switch on what ---------------------------------------------------------


async def test_an_agents_elevated_call_still_asks(state: Path) -> None:
    write_config(state, ALLOWLIST + "[tools.elevated]\nenabled = true\n")
    marker = state.parent / "elevated-ran"
    daemon = Daemon(state).start()
    try:
        agent = await _agent(state)
        try:
            with pytest.raises(RemoteError, match="needs the operator role"):  # the session switch
                await agent.request("policy.override", {"sessionKey": "s", "directive": "/elevated on"})
            result = await agent.request("exec", {"command": f"touch {marker}", "elevated": True})
        finally:
            await agent.close()
        assert result["details"]["status"] == "approval-pending", result["text"]
        assert not marker.exists()
    finally:
        daemon.stop()


async def test_a_lockdown_that_cannot_be_saved_still_holds_and_says_so(state: Path) -> None:
    """Class 7 x full disk: the overrides file cannot be written (here: a directory in its place); the
    operator's `/exec security=deny` still applies now (refusing it would fail open just when an agent
    filled the disk) and the answer says it will not outlive the gateway."""
    write_config(state, FULL)
    (state / overrides_file.OVERRIDES_NAME).mkdir()
    daemon = Daemon(state).start()
    try:
        operator = await connect(state)
        try:
            got = await operator.request(
                "policy.override", {"sessionKey": "agent:main", "directive": "/exec security=deny"}
            )
        finally:
            await operator.close()
        assert "only until the gateway restarts" in got["text"]
        assert not await _runs(state, "echo locked-out")
    finally:
        daemon.stop()


@needs_bwrap
async def test_another_agents_sandbox_workspace_is_out_of_a_host_commands_reach(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: the host view hid sandbox workspaces only while they lay in the state dir; with
    `workspaceRoot` elsewhere agent main's allowlisted `cat` read agent ops's sandbox files. Now every
    configured workspace root is covered in the host view, as the state dir is."""
    root = state.parent / "ws"
    write_config(
        state,
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[agents.defaults.sandbox]\nbackend = "bwrap"\nworkspaceRoot = "{root}"\n'
        '[[agents.list]]\nid = "ops"\ntools.exec.host = "auto"\nsandbox.mode = "all"\n',
    )
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat", arg_pattern=None)
    token = principals.mint(state, "ops")
    daemon = Daemon(state).start()
    try:
        ops = await ControlClient.connect(state, client="ops", name="ops", autostart=False, credential=token)
        try:
            wrote = await ops.request("exec", {"command": "echo OPS-SECRET > /workspace/secret.txt; pwd"})
        finally:
            await ops.close()
        assert "/workspace" in wrote["text"]  # it ran in ops's sandbox
        (secret,) = root.rglob("secret.txt")  # where ops's workspace is: its name is sha256 of `agent:ops`
        agent = await _agent(state)
        try:
            try:
                read = await agent.request("exec", {"command": f"cat {secret}"})
            except RemoteError:
                return  # refused: out of reach
        finally:
            await agent.close()
        assert "OPS-SECRET" not in read["text"], read["text"]
    finally:
        daemon.stop()
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        bwrap.remove_all()


async def test_an_elevated_call_does_not_escape_the_operators_lockdown(state: Path) -> None:
    write_config(state, ALLOWLIST + "[tools.elevated]\nenabled = true\n")
    marker = state.parent / "escaped"
    daemon = Daemon(state).start()
    try:
        operator = await connect(state)
        try:
            lock = {"sessionKey": "agent:main", "directive": "/exec security=deny"}
            await operator.request("policy.override", lock)
        finally:
            await operator.close()
        assert not await _runs(state, f"touch {marker}")
        agent = await _agent(state)
        try:
            with contextlib.suppress(RemoteError):  # refused, as every other call of a locked-down agent
                await agent.request("exec", {"command": f"touch {marker}", "elevated": True})
        finally:
            await agent.close()
        assert not marker.exists()
    finally:
        daemon.stop()


async def test_the_operators_lockdown_reaches_a_shell_already_running(state: Path) -> None:
    write_config(state, FULL)
    marker = state.parent / "fed-after-lockdown"
    daemon = Daemon(state).start()
    try:
        agent = await _agent(state)
        try:
            started = await agent.request("exec", {"command": "sh", "background": True})
            sid = started["details"]["sessionId"]
            operator = await connect(state)
            try:
                lock = {"sessionKey": "agent:main", "directive": "/exec security=deny"}
                await operator.request("policy.override", lock)
            finally:
                await operator.close()
            feed = {"action": "write", "sessionId": sid, "data": f"touch {marker}\nexit\n"}
            try:
                await agent.request("process", feed)
            except RemoteError:
                return  # refused: what a locked-down agent gets

            async def over() -> bool:  # the shell has read its input to the end and run it
                got = await agent.request("process", {"action": "poll", "sessionId": sid, "timeout": 2000})
                return got["details"].get("status") != "running"

            await wait_until(over, 30, interval=0.2)
        finally:
            await agent.close()
        assert not marker.exists()
    finally:
        daemon.stop()
