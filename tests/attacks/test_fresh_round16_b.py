"""Fresh round 16 b: the wire and the principals (proofs, run identity, the operator's scope, egress per
proof, revoke/rotate and live re-decisions), as a hostile agent holding its own credential, a node, or a
local process of another account."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from tests.helpers.gateway import cli, connect, gateway, listed, wait_until, write_config

pytestmark = pytest.mark.asyncio


def _config(state: Path, extra: str = "") -> Path:
    """Allowlist with asks; a writable dir outside the state dir where an approved run leaves its mark."""
    work = state.parent / "w"
    work.mkdir(exist_ok=True)
    write_config(
        state,
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'hostWritable = ["{work}"]\n' + extra,
    )
    return work


async def _exec(client: Any, command: str, **params: Any) -> dict[str, Any]:
    result = await client.request("exec", {"command": command, **params})
    details: dict[str, Any] = result["details"]
    return details


@pytest.mark.xfail(
    strict=True,
    reason="open: a credential removed on disk is ended (its asks settled, its generation bumped) only "
    "through a live connection that presented it (GatewayServer.recheck collects the dropped connections' "
    "credentials): an agent that asked, then hung up, keeps its ask approvable after the operator removes "
    "its credential and runs `agents refresh`; the operator's yes runs it (a restart would deny it).",
)
async def test_class2_a_removed_credentials_ask_runs_when_its_agent_hung_up_first(state_dir: Path) -> None:
    work = _config(state_dir, listed("ops"))
    token = principals.mint(state_dir, "ops")
    marker = work / "ran"
    async with gateway(state_dir) as server:
        ops = await connect(state_dir, client="ops", operator=False, credential=token)
        details = await _exec(ops, f"touch {marker}", workdir=str(work))
        assert details["status"] == "approval-pending"
        approval = details["approvalId"]
        await ops.close()  # the leaker asks, then is gone before anyone notices the leak
        # The operator retires the leaked credential by hand and asks the gateway to re-decide.
        (principals.agents_dir(state_dir) / "ops.json").unlink()
        op = await connect(state_dir)
        try:
            await op.request("agents.refresh", {})
            await op.request("approve", {"id": approval, "decision": "allow-once"})
            record = server.services.approvals.get(approval)
            # it ran (the mark is there), or it was settled as the revoke settles it (noted denied)
            await wait_until(lambda: marker.exists() or (record.run or {}).get("status") == "denied")
        finally:
            await op.close()
    assert not marker.exists()


def _replace_gateway_token(state: Path) -> None:
    """The operator rotates a leaked gateway token: a new gateway.json (a new inode, as ensure_token)."""
    import json
    import secrets

    from engine import statefs
    from engine.protocol.frames import PROTOCOL_VERSION, token_path

    body = json.dumps({"version": PROTOCOL_VERSION, "token": secrets.token_urlsafe(24)}) + "\n"
    statefs.atomic_write(token_path(state), body)


@pytest.mark.xfail(
    strict=True,
    reason="open: the anonymous proof (`anonymous>main`, the gateway token alone) is decided by the config "
    "only (liveprincipal.proof_holds): when the operator replaces a leaked gateway.json, the old token's "
    "connections are dropped but the ask it made keeps its proof, stays approvable, and runs when approved.",
)
async def test_class2_a_replaced_gateway_tokens_ask_runs_when_approved(state_dir: Path) -> None:
    work = _config(state_dir)
    marker = work / "ran"
    async with gateway(state_dir) as server:
        leaker = await connect(state_dir, client="leaker", operator=False)  # the gateway token alone: main
        details = await _exec(leaker, f"touch {marker}", workdir=str(work))
        assert details["status"] == "approval-pending"
        approval = details["approvalId"]
        _replace_gateway_token(state_dir)
        op = await connect(state_dir)  # with the new token; its handshake sees the change
        try:
            await op.request("agents.refresh", {})
            # the old token's holder is dropped, as the construction says
            await wait_until(lambda: not [c for c in server.connections if not c.operator])
            await op.request("approve", {"id": approval, "decision": "allow-once"})
            record = server.services.approvals.get(approval)
            await wait_until(lambda: marker.exists() or (record.run or {}).get("status") == "denied")
        finally:
            await op.close()
            await leaker.close()
    assert not marker.exists()


def _feed(fifo: Path) -> bool:
    """One line into the run's FIFO once the run reads it (False while nobody does: polled, never a thread
    left blocked on the open)."""
    import errno
    import os

    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return False
        raise
    try:
        os.write(fd, b"go\n")
    finally:
        os.close(fd)
    return True


EGRESS = (
    '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nallow = ["origin.test:{port}"]\n'
    'resolve = {{ "origin.test" = "127.0.0.1" }}\nask = false\n'
)


RESTORED = pytest.mark.xfail(
    strict=True,
    reason="open: a restored ask runs with no stamp (engine.tools.resume.resume_ask authorizes nothing), so "
    "hostnet serves it under the agent's generation alone (EgressHub.host_generation: no stamp, no proof): "
    'the gateway-token-alone ask approved after a restart keeps its egress when `anonymous = "none"` '
    "cuts that proof off, where the same run approved before the restart loses it.",
)


@pytest.mark.parametrize("restart", [False, pytest.param(True, marks=RESTORED)])
async def test_class7_a_restored_anonymous_runs_egress_outlives_its_proofs_cut(
    state_dir: Path, restart: bool
) -> None:
    """Held live (restart False); open across a restart."""
    import os

    from tests.helpers.egress import origin

    with origin() as org:
        egress = EGRESS.format(port=org.port)
        work = _config(state_dir, egress)
        fifo = work / "go"
        os.mkfifo(fifo)
        one, two = work / "one", work / "two"
        url = f"http://origin.test:{org.port}"
        command = (
            f"read a < {fifo}; curl -s {url}/one > {one} 2>&1; "
            f"read b < {fifo}; curl -s {url}/two > {two} 2>&1; true"
        )
        first = gateway(state_dir)
        server = await first.__aenter__()
        leaker = await connect(state_dir, client="leaker", operator=False)  # the gateway token alone
        details = await _exec(leaker, command, workdir=str(work))
        await leaker.close()
        assert details["status"] == "approval-pending"
        approval = details["approvalId"]
        if restart:
            await first.__aexit__(None, None, None)
            first = gateway(state_dir)
            server = await first.__aenter__()  # the ask is restored, its proof `anonymous>main` with it
        try:
            op = await connect(state_dir)
            try:
                await op.request("approve", {"id": approval, "decision": "allow-once"})
                await wait_until(lambda: _feed(fifo))
                await wait_until(lambda: one.exists() and "origin says hello" in one.read_text(), timeout=20)
                # The operator shuts the gateway token's door: the proof the ask was made under ends.
                _config(state_dir, egress + '[gateway]\nanonymous = "none"\n')
                await op.request("agents.refresh", {})
                await wait_until(lambda: _feed(fifo))
                record = server.services.approvals.get(approval)
                await wait_until(
                    lambda: (record.run or {}).get("status") not in (None, "starting", "running")
                )
            finally:
                await op.close()
        finally:
            await first.__aexit__(None, None, None)
        assert "origin says hello" not in two.read_text()


async def test_class1_a_relayed_socket_ask_outlives_anonymous_none_and_allows_main(state_dir: Path) -> None:
    import asyncio

    work = _config(state_dir)
    marker = work / "ran"
    command = f"touch {marker}"
    main_token = principals.mint(state_dir, "main")  # the real agent main, with its own credential
    async with gateway(state_dir):
        console = await connect(state_dir, client="console")  # hosts exec-approvals.sock, relays its asks
        op = await connect(state_dir, client="op")
        try:
            relayed = asyncio.ensure_future(
                console.request("approvals.relay", {"id": "sock-1", "command": command, "cwd": str(work)})
            )

            async def asked() -> bool:
                return bool((await op.request("approvals.pending", {}))["approvals"])

            await wait_until(asked)
            # The operator shuts every door the gateway token (and the socket's token) opened alone.
            _config(state_dir, '[gateway]\nanonymous = "none"\n')
            await op.request("agents.refresh", {})
            rows = (await op.request("approvals.pending", {}))["approvals"]
            if rows:
                await op.request("approve", {"id": rows[0]["id"], "decision": "allow-always"})
            await asyncio.wait_for(asyncio.shield(relayed), 30)
            main = await connect(state_dir, client="main", operator=False, credential=main_token)
            try:
                details = await _exec(main, command, workdir=str(work))
            finally:
                await main.close()
        finally:
            await op.close()
            await console.close()
    assert details["status"] == "approval-pending", details


def _replace_operator_token(state: Path) -> None:
    """The operator rotates a leaked operator token (a new operator.json, a new inode)."""
    import json
    import secrets

    from engine import statefs
    from engine.protocol.frames import OPERATOR_TOKEN_NAME, PROTOCOL_VERSION, token_path

    body = json.dumps({"version": PROTOCOL_VERSION, "token": secrets.token_urlsafe(24)}) + "\n"
    statefs.atomic_write(token_path(state, OPERATOR_TOKEN_NAME), body)


@pytest.mark.xfail(
    strict=True,
    reason='open: the operator\'s calls are unstamped (liveprincipal.proof_key is "" for the operator) and '
    "its host runs' egress is served under no proof (`hostnet._operator`): a run the leaked operator token "
    "started keeps its way out after the operator replaces operator.json, though the token's connections "
    "are dropped (a rotated agent credential's runs lose theirs).",
)
async def test_class1_a_replaced_operator_tokens_run_keeps_its_egress(state_dir: Path) -> None:
    import os

    from tests.helpers.egress import origin

    with origin() as org:
        work = state_dir.parent / "w"
        work.mkdir()
        write_config(
            state_dir,
            '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
            f'hostWritable = ["{work}"]\n' + EGRESS.format(port=org.port),
        )
        fifo = work / "go"
        os.mkfifo(fifo)
        one, two = work / "one", work / "two"
        url = f"http://origin.test:{org.port}"
        command = (
            f"read a < {fifo}; curl -s {url}/one > {one} 2>&1; "
            f"read b < {fifo}; curl -s {url}/two > {two} 2>&1; echo end > {work / 'end'}"
        )
        async with gateway(state_dir) as server:
            leaked = await connect(state_dir, client="leaked")  # whoever read operator.json
            details = await _exec(leaked, command, workdir=str(work), background=True)
            assert details["status"] == "running", details
            await wait_until(lambda: _feed(fifo))
            await wait_until(lambda: one.exists() and "origin says hello" in one.read_text(), timeout=20)
            _replace_operator_token(state_dir)
            op = await connect(state_dir, client="op")  # the new token; its handshake sees the change
            try:
                await op.request("agents.refresh", {})
                await wait_until(lambda: not [c for c in server.connections if c.name == "leaked"])
                await wait_until(lambda: _feed(fifo))
                await wait_until(lambda: (work / "end").exists(), timeout=20)
            finally:
                await op.close()
                await leaked.close()
    assert "origin says hello" not in two.read_text()


async def test_class2_the_operators_own_allow_always_is_agent_mains(state_dir: Path) -> None:
    work = _config(state_dir)
    marker = work / "ran"
    command = f"touch {marker}"
    main_token = principals.mint(state_dir, "main")
    async with gateway(state_dir) as server:
        op = await connect(state_dir, client="op")
        try:
            details = await _exec(op, command, workdir=str(work))
            assert details["status"] == "approval-pending"
            record = server.services.approvals.get(details["approvalId"])
            assert record.view().get("operator") is True  # the operator's own ask, as shown
            await op.request("approve", {"id": record.id, "decision": "allow-always"})
            await wait_until(marker.exists)
            marker.unlink()
        finally:
            await op.close()
        main = await connect(state_dir, client="main", operator=False, credential=main_token)
        try:
            again = await _exec(main, command, workdir=str(work))
        finally:
            await main.close()
    assert again["status"] == "approval-pending", again
    assert not marker.exists()


async def test_class2_agent_main_hides_behind_the_operators_own_ask(state_dir: Path) -> None:
    import asyncio

    work = _config(state_dir)
    command = f"touch {work / 'x'}"
    main_token = principals.mint(state_dir, "main")
    async with gateway(state_dir) as server:
        console = await connect(state_dir, client="console")  # an approver is attached: calls wait
        await console.request("approvals.attach", {})
        op = await connect(state_dir, client="op")
        main = await connect(state_dir, client="main", operator=False, credential=main_token)
        try:
            own = asyncio.ensure_future(_exec(op, command, workdir=str(work)))
            await wait_until(server.services.approvals.pending)
            record = server.services.approvals.pending()[0]
            hidden = asyncio.ensure_future(_exec(main, command, workdir=str(work)))
            await wait_until(lambda: record.count >= 2)  # main's call is on the operator's record
            shown = record.view()  # what the operator decides on
            await console.request("approve", {"id": record.id, "decision": "allow-always"})
            await own
            ran = await hidden
        finally:
            await main.close()
            await op.close()
            await console.close()
    mains_shown = not shown.get("operator") or shown["requesterCount"] > 1
    assert mains_shown or ran["status"] != "completed", (shown, ran)


def _reader_left(fifo: Path) -> bool | None:
    """True when nobody reads `fifo` any more (its run is gone); False when a reader took our line."""
    import errno
    import os

    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return True
        raise
    try:
        os.write(fd, b"go\n")
    finally:
        os.close(fd)
    return False


MID_REVOKE = pytest.mark.xfail(
    strict=True,
    reason="open: `agents.revoke` (GatewayServer.revoke_agent) removes the credential (fsynced) and only "
    "then kills the agent's host group, with no durable note between (the offline CLI revoke writes "
    "hostrevocations.owe first): a gateway killed between the two leaves the revoked agent's held host "
    "run running, and the next gateway owes it nothing, so it runs on under no credential (its node "
    "revocation, Revocations.add, comes later still: a `node run` service's sessions of it are never told).",
)


@pytest.mark.parametrize("how", ["offline-cli", pytest.param("crash-mid-verb", marks=MID_REVOKE)])
async def test_class7_a_crash_inside_a_live_revoke_leaves_the_agents_run_running(
    state_dir: Path, how: str
) -> None:
    """offline-cli (held): `exechost agents revoke` with no gateway owes the kill to the next one."""
    import os

    from tests.helpers.daemon import Daemon

    work = state_dir.parent / "w"
    work.mkdir()
    write_config(
        state_dir,
        f'[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\nhostWritable = ["{work}"]\n'
        + listed("ops"),
    )
    token = principals.mint(state_dir, "ops")
    fifo, said = work / "go", work / "alive"
    os.mkfifo(fifo)
    daemon = Daemon(state_dir).start()
    try:
        ops = await connect(state_dir, client="ops", operator=False, credential=token)
        try:
            # (the FIFO stays open until the run ends: it has left only once it is gone)
            command = f"exec 3< {fifo}; read x <&3; echo alive > {said}; exec 3<&-"
            details = await _exec(ops, command, background=True)
            assert details["status"] == "running", details
        finally:
            await ops.close()
        daemon.kill()  # SIGKILL (in the middle of `agents revoke ops`: right after its first durable step,
        if how == "crash-mid-verb":
            principals.revoke(state_dir, "ops")  # the credential's removal, fsynced, before the group kill)
        else:
            assert cli(state_dir, "agents", "revoke", "ops").returncode == 0
        daemon.start()
        # The next gateway ends what a revoke owes before it answers; the run is gone, or it reads our line.
        await wait_until(lambda: said.exists() or _reader_left(fifo))
        gone = not said.exists()
    finally:
        daemon.stop()
    assert gone, "ops's run, revoked, ran on after the restart"


async def test_class3_agent_mains_asks_fill_the_operators_own_share(state_dir: Path) -> None:
    from engine.approvals.pending import MAX_PENDING_PER_AGENT
    from engine.protocol.frames import RemoteError

    work = _config(state_dir)
    async with gateway(state_dir):
        main = await connect(state_dir, client="main", operator=False)
        op = await connect(state_dir, client="op")
        try:
            for n in range(MAX_PENDING_PER_AGENT):
                asked = await _exec(main, f"touch {work / str(n)}", workdir=str(work))
                assert asked["status"] == "approval-pending"
            try:
                own = await _exec(op, f"touch {work / 'mine'}", workdir=str(work))
            except RemoteError as exc:
                own = {"status": f"refused: {exc}"}
        finally:
            await op.close()
            await main.close()
    assert own["status"] == "approval-pending", own


TOKEN_CUT = pytest.mark.xfail(
    strict=True,
    reason="open: the anonymous proof is decided by the config only (liveprincipal.proof_holds), so a "
    "background run the leaked gateway token started keeps its egress listener after the operator "
    "replaces gateway.json: its connections are dropped, its proof never ends.",
)


@pytest.mark.parametrize("cut", ["anonymous-none", pytest.param("gateway-token", marks=TOKEN_CUT)])
async def test_class1_a_replaced_gateway_tokens_run_keeps_its_egress(state_dir: Path, cut: str) -> None:
    """anonymous-none (held, fix15egress): the same run loses its way out when the config cuts it off."""
    import os

    from tests.helpers.egress import origin

    with origin() as org:
        work = state_dir.parent / "w"
        work.mkdir()
        write_config(
            state_dir,
            '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
            f'hostWritable = ["{work}"]\n' + EGRESS.format(port=org.port),
        )
        fifo = work / "go"
        os.mkfifo(fifo)
        one, two, end = work / "one", work / "two", work / "end"
        url = f"http://origin.test:{org.port}"
        command = (
            f"read a < {fifo}; curl -s {url}/one > {one} 2>&1; "
            f"read b < {fifo}; curl -s {url}/two > {two} 2>&1; echo end > {end}"
        )
        async with gateway(state_dir) as server:
            leaked = await connect(state_dir, client="leaked", operator=False)  # the gateway token alone
            details = await _exec(leaked, command, workdir=str(work), background=True)
            assert details["status"] == "running", details
            await wait_until(lambda: _feed(fifo))
            await wait_until(lambda: one.exists() and "origin says hello" in one.read_text(), timeout=20)
            if cut == "gateway-token":
                _replace_gateway_token(state_dir)
            else:
                text = (state_dir / "config.toml").read_text()
                write_config(state_dir, text + '[gateway]\nanonymous = "none"\n')
            op = await connect(state_dir, client="op")  # the new token; its handshake sees the change
            try:
                await op.request("agents.refresh", {})
                await wait_until(lambda: not [c for c in server.connections if c.name == "leaked"])
                await wait_until(lambda: _feed(fifo))
                await wait_until(end.exists, timeout=20)
            finally:
                await op.close()
                await leaked.close()
    assert "origin says hello" not in two.read_text()


ROTATED_ON_NODE = pytest.mark.xfail(
    strict=True,
    reason="open: a rotation is never told to nodes (GatewayServer.rotate_agent sends no agent.revoke; only "
    "a revoke bumps a node's generations), so a node run of the rotated, leaked credential keeps its "
    "allowlisted egress on the node, where the same run on the gateway host loses its listener at once.",
)


@pytest.mark.parametrize("where", ["gateway", pytest.param("node", marks=ROTATED_ON_NODE)])
async def test_class1_a_rotated_credentials_node_run_keeps_its_egress(
    state_dir: Path, sshd_nodes: list[Any], where: str
) -> None:
    """gateway (held, fix T10): the same run on the gateway host loses its way out at the rotation."""
    import os

    from tests.helpers.egress import origin

    node = sshd_nodes[0]
    marks = node.marks if where == "node" else state_dir.parent / "w"  # (the node key's dir is covered here)
    marks.mkdir(exist_ok=True)
    with origin() as org:
        egress = EGRESS.format(port=org.port)
        (node.state_dir / "config.toml").write_text(
            '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
            f'hostWritable = ["{marks}"]\n' + egress
        )
        nodes = (state_dir / "config.toml").read_text()
        place = f'host = "node"\nnode = "{node.name}"\n' if where == "node" else 'host = "gateway"\n'
        write_config(
            state_dir,
            f'[tools.exec]\n{place}security = "full"\nask = "off"\nhostWritable = ["{marks}"]\n'
            + egress
            + nodes
            + listed("ops"),
        )
        token = principals.mint(state_dir, "ops")
        fifo = marks / "go"
        os.mkfifo(fifo)
        one, two, end = marks / "one", marks / "two", marks / "end"
        url = f"http://origin.test:{org.port}"
        command = (
            f"read a < {fifo}; curl -s {url}/one > {one} 2>&1; "
            f"read b < {fifo}; curl -s {url}/two > {two} 2>&1; echo end > {end}"
        )
        async with gateway(state_dir):
            ops = await connect(state_dir, client="ops", operator=False, credential=token)
            op = await connect(state_dir, client="op")
            try:
                details = await _exec(ops, command, background=True)
                assert details["status"] == "running", details
                await wait_until(lambda: _feed(fifo))
                await wait_until(lambda: one.exists() and "origin says hello" in one.read_text(), timeout=30)
                await op.request("agents.rotate", {"agent": "ops"})  # ops's token leaked: a new one
                await wait_until(lambda: _feed(fifo))
                await wait_until(end.exists, timeout=30)
            finally:
                await op.close()
                await ops.close()
    assert "origin says hello" not in two.read_text()


@pytest.mark.parametrize("cut", [False, True])
async def test_class2_a_cut_proofs_repeat_of_anothers_ask_starts_nothing(state_dir: Path, cut: bool) -> None:
    """Held: the gateway token alone (anonymous main) repeats credentialed main's sessionless ask, so its
    proof is never recorded on the record (a repeat adds no requester), and `anonymous = "none"` settles
    nothing there; the operator's allow-always of main's ask still starts nothing for the cut-off call: its
    stamp is decided again at the spawn (Stamp.stale, live)."""
    import asyncio

    work = _config(state_dir)
    runs = work / "runs"
    runs.mkdir()
    command = f"mktemp -p {runs}"  # one new file per run
    main_token = principals.mint(state_dir, "main")
    async with gateway(state_dir) as server:
        console = await connect(state_dir, client="console")
        await console.request("approvals.attach", {})
        main = await connect(state_dir, client="main", operator=False, credential=main_token)
        leaked = await connect(state_dir, client="leaked", operator=False)
        try:
            mine = asyncio.ensure_future(_exec(main, command, workdir=str(work)))
            await wait_until(server.services.approvals.pending)
            record = server.services.approvals.pending()[0]
            theirs = asyncio.ensure_future(_exec(leaked, command, workdir=str(work)))
            await wait_until(lambda: record.count >= 2)
            assert "anonymous>main" not in record.proofs  # the repeat's proof is not on the record
            if cut:
                text = (state_dir / "config.toml").read_text()
                write_config(state_dir, text + '[gateway]\nanonymous = "none"\n')
                await console.request("agents.refresh", {})
            await console.request("approve", {"id": record.id, "decision": "allow-always"})
            assert (await mine)["status"] == "completed"
            if not cut:  # (the control: the repeat runs too)
                assert (await theirs)["status"] == "completed"
            else:
                with pytest.raises(ConnectionError):  # dropped at the refresh
                    await asyncio.wait_for(theirs, 30)
        finally:
            await leaked.close()
            await main.close()
            await console.close()
    assert len(list(runs.iterdir())) == (1 if cut else 2)


@pytest.mark.xfail(
    strict=True,
    reason="open: the token files and the config are looked at only when a handshake or a request comes "
    "(tokenfiles and LiveConfig: a stat per look; GatewayServer._tokens_now, _still_configured), never on "
    'their own: after the operator replaces a leaked operator.json (or sets `anonymous = "none"`), the '
    "cut-off idle connection, subscribed to the sessions topic, keeps receiving the session output it may "
    "no longer see (every agent's; credentialed main's) for as long as nobody connects or sends a request.",
)
@pytest.mark.parametrize("cut", ["operator-token", "anonymous-none"])
async def test_class1_an_idle_cut_off_connection_keeps_streaming_session_output(
    state_dir: Path, cut: str
) -> None:
    import os

    from tests.helpers.peers import collect, output_of

    work = _config(state_dir)
    write_config(
        state_dir,
        f'[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\nhostWritable = ["{work}"]\n',
    )
    fifo = work / "go"
    os.mkfifo(fifo)
    async with gateway(state_dir) as server:
        token = principals.mint(state_dir, "main")  # the real main, with its own credential
        main = await connect(state_dir, client="main", operator=False, credential=token)
        # whoever read operator.json; or the gateway token alone (main, until `anonymous = "none"`)
        leaked = await connect(state_dir, client="leaked", operator=cut == "operator-token")
        try:
            seen = collect(leaked)
            await leaked.request("subscribe", {"topics": ["sessions"]})
            details = await _exec(main, f"read x < {fifo}; echo SECRET-OUTPUT", background=True)
            sid = details["sessionId"]
            if cut == "operator-token":
                _replace_operator_token(state_dir)  # the operator rotates it, and sends nothing
            else:
                text = (state_dir / "config.toml").read_text()
                write_config(state_dir, text + '[gateway]\nanonymous = "none"\n')
            await wait_until(lambda: _feed(fifo))  # main's run prints; nobody makes a request
            await wait_until(
                lambda: (
                    not [c for c in server.connections if c.name == "leaked"]
                    or "SECRET-OUTPUT" in "".join(str(e.get("data")) for e in output_of(seen, sid))
                )
            )
            leaked_read = "SECRET-OUTPUT" in "".join(str(e.get("data")) for e in output_of(seen, sid))
        finally:
            await leaked.close()
            await main.close()
    assert not leaked_read


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
@pytest.mark.xfail(
    strict=True,
    reason="open (described in SECURITY as the design: 'a rotation refuses the same way until a run of the "
    "new credential enters the sandbox again'): one listener per sandbox, re-served under whichever run "
    "enters last, so the leaked credential's background process left in the agent's bwrap sandbox is "
    "refused after the rotation and gets its way out back as soon as the agent's new credential runs "
    "anything there (host runs are contained: a namespace per generation).",
)
async def test_class1_a_rotated_credentials_sandboxed_process_regains_egress(state_dir: Path) -> None:
    from tests.helpers.egress import origin

    with origin() as org:
        url = f"http://origin.test:{org.port}"
        write_config(
            state_dir,
            '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
            '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
            + EGRESS.format(port=org.port)
            + listed("ops"),
        )
        leaked = principals.mint(state_dir, "ops")
        async with gateway(state_dir):
            ops = await connect(state_dir, client="leaker", operator=False, credential=leaked)
            op = await connect(state_dir, client="op")
            try:
                loop = f"while read x; do curl -s -m 10 {url}/$x; echo; echo END-$x; done"
                sid = (await _exec(ops, loop, background=True))["sessionId"]

                async def log() -> str:
                    return str((await op.request("process", {"action": "log", "sessionId": sid}))["text"])

                async def fetch(tag: str) -> str:
                    await op.request("process", {"action": "write", "sessionId": sid, "data": f"{tag}\n"})
                    await wait_until(lambda: _said(log, tag), timeout=20)
                    return (await log()).split(f"END-{tag}")[0].rsplit("END-", 1)[-1]

                assert "origin says hello" in await fetch("one")
                fresh = (await op.request("agents.rotate", {"agent": "ops"}))["token"]
                assert "origin says hello" not in await fetch("two")  # refused: the rotation holds here
                ops2 = await connect(state_dir, client="ops", operator=False, credential=fresh)
                try:
                    await _exec(ops2, "true")  # the agent, back with its new credential, runs anything
                finally:
                    await ops2.close()
                third = await fetch("three")
            finally:
                await op.close()
                await ops.close()
    assert "origin says hello" not in third, third


async def _said(log: Any, tag: str) -> bool:
    return f"END-{tag}" in await log()
