"""Fresh round 16 b: the wire and the principals (proofs, run identity, the operator's scope, egress per
proof, revoke/rotate and live re-decisions), as a hostile agent holding its own credential, a node, or a
local process of another account."""

from __future__ import annotations

import contextlib
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
    details.setdefault("_text", result.get("text"))
    return details


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


@pytest.mark.parametrize("restart", [False, True])
async def test_class7_a_restored_anonymous_runs_egress_outlives_its_proofs_cut(
    state_dir: Path, restart: bool
) -> None:
    """Held live (restart False) and across a restart: the restored ask runs under a stamp rebuilt from its
    journaled proof (engine.tools.resume)."""
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
            server = await first.__aenter__()  # the ask is restored, its proof with it
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
                console.request(
                    "approvals.relay",
                    {
                        "id": "sock-1",
                        "command": command,
                        "cwd": str(work),
                        "socketToken": _socket_token(state_dir),
                    },
                )
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


def _socket_token(state: Path) -> str:
    """The id of exec-approvals.sock's token, as the console names it on each ask it relays."""
    from engine.approvals.socket.principal import socket_token_id
    from engine.approvals.store import ApprovalsStore

    return socket_token_id(ApprovalsStore(state / "exec-approvals.json").socket_info()[1])


def _replace_operator_token(state: Path) -> None:
    """The operator rotates a leaked operator token (a new operator.json, a new inode)."""
    import json
    import secrets

    from engine import statefs
    from engine.protocol.frames import OPERATOR_TOKEN_NAME, PROTOCOL_VERSION, token_path

    body = json.dumps({"version": PROTOCOL_VERSION, "token": secrets.token_urlsafe(24)}) + "\n"
    statefs.atomic_write(token_path(state, OPERATOR_TOKEN_NAME), body)


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


@pytest.mark.parametrize("how", ["offline-cli", "crash-mid-verb"])
async def test_class7_a_crash_inside_a_live_revoke_leaves_the_agents_run_running(
    state_dir: Path, how: str
) -> None:
    """offline-cli: `exechost agents revoke` with no gateway owes the kill to the next one. crash-mid-verb
    (fix 16rot): the live verb owes it too, before the credential goes (engine.nodes.revoking)."""
    import os

    from engine.nodes import revoking
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
        daemon.kill()  # SIGKILL (in the middle of `agents revoke ops`: right after its durable steps, what
        if how == "crash-mid-verb":  # it owes then the credential's removal, fsynced, before the group kill;
            revoking.revoke(state_dir, "ops", False)  # the same function the live verb calls)
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
    from engine.approvals.room import MAX_PENDING_PER_AGENT
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


@pytest.mark.parametrize("cut", ["anonymous-none", "gateway-token"])
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


@pytest.mark.parametrize("where", ["gateway", "node"])
async def test_class1_a_rotated_credentials_node_run_keeps_its_egress(
    state_dir: Path, sshd_nodes: list[Any], where: str
) -> None:
    """gateway (held, fix T10): the same run on the gateway host loses its way out at the rotation. node
    (fix 16rot): the node's rotated agent.revoke bumps the principal its host runs' egress is served as."""
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
            # the repeat's proof (`anonymous>main@<gateway token id>`) is not on the record
            assert not [key for key in record.proofs if key.startswith("anonymous>")]
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
@pytest.mark.parametrize("cut", ["rotation", "anonymous-none"])
async def test_class1_a_rotated_credentials_sandboxed_process_regains_egress(
    state_dir: Path, cut: str
) -> None:
    """anonymous-none: the same with a proof's cut (the gateway token alone), and credentialed main. Fix
    16rot: the sandbox, served under the ended generation or proof, ends before the new one's run enters."""
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
        agent = "ops" if cut == "rotation" else "main"
        leaked = principals.mint(state_dir, agent) if cut == "rotation" else None
        async with gateway(state_dir):
            ops = await connect(state_dir, client="leaker", operator=False, credential=leaked)
            op = await connect(state_dir, client="op")
            try:
                loop = f"while read x; do curl -s -m 10 {url}/$x; echo; echo END-$x; done"
                started = await _exec(ops, loop, background=True)
                assert "sessionId" in started, started.get("_text")
                sid = started["sessionId"]

                async def log() -> str:
                    return str((await op.request("process", {"action": "log", "sessionId": sid}))["text"])

                async def fetch(tag: str) -> str:
                    await op.request("process", {"action": "write", "sessionId": sid, "data": f"{tag}\n"})
                    await wait_until(lambda: _said(log, tag), timeout=20)
                    return (await log()).split(f"END-{tag}")[0].rsplit("END-", 1)[-1]

                assert "origin says hello" in await fetch("one")
                if cut == "rotation":
                    fresh = (await op.request("agents.rotate", {"agent": agent}))["token"]
                else:
                    fresh = principals.mint(state_dir, agent)  # main's own credential
                    text = (state_dir / "config.toml").read_text()
                    write_config(state_dir, text + '[gateway]\nanonymous = "none"\n')
                    await op.request("agents.refresh", {})
                assert "origin says hello" not in await fetch("two")  # refused: the rotation holds here
                ops2 = await connect(state_dir, client=agent, operator=False, credential=fresh)
                try:
                    await _exec(ops2, "true")  # the agent, back with its new credential, runs anything
                finally:
                    await ops2.close()

                async def ended() -> bool:
                    got = await op.request("process", {"action": "poll", "sessionId": sid})
                    return str(got["details"].get("status")) != "running"

                # The leaked process asks once more; it answers, or it has ended (fix 16rot: the sandbox,
                # served under the ended generation, ends before the new credential's run enters it).
                if not await ended():
                    with contextlib.suppress(Exception):  # (it ended meanwhile: nothing reads the line)
                        await op.request("process", {"action": "write", "sessionId": sid, "data": "three\n"})
                await wait_until(lambda: _said_or(log, "three", ended), timeout=20)
                third = (await log()).split("END-two", 1)[-1]
            finally:
                await op.close()
                await ops.close()
    assert "origin says hello" not in third, third


async def _said(log: Any, tag: str) -> bool:
    return f"END-{tag}" in await log()


async def _said_or(log: Any, tag: str, ended: Any) -> bool:
    return await _said(log, tag) or await ended()


@pytest.mark.parametrize("flood", [0, 4])
async def test_class3_agent_mains_asks_rotate_the_operators_own_decisions_away(
    state_dir: Path, flood: int
) -> None:
    """The operator's own decisions were routed by the agent the ask named for policy (main) and rotated
    within main's 5 MiB by main's flood of big asks; they are the operator's now (history._route). flood 0:
    the control (the operator's own decision is listed)."""
    from engine.approvals.room import MAX_PENDING_PER_AGENT

    work = _config(state_dir)
    async with gateway(state_dir):
        main = await connect(state_dir, client="main", operator=False)
        op = await connect(state_dir, client="op")
        try:
            own = (await _exec(op, f"touch {work / 'mine'}", workdir=str(work)))["approvalId"]
            await op.request("approve", {"id": own, "decision": "deny", "reason": "the operator's own"})
            history = state_dir / "history"
            await wait_until(lambda: any(own in f.read_text() for f in history.glob("decisions*")))
            mains = history / "decisions.a.main.jsonl"
            assert not mains.exists() or own not in mains.read_text()  # the operator's, not main's
            pad = "x" * 60_000
            for batch in range(flood):  # ~4 x 32 asks of 60 KB, each denied: past main's 5 x 1 MiB
                ids = []
                for n in range(MAX_PENDING_PER_AGENT):
                    asked = await _exec(main, f"true {batch}-{n} #{pad}", workdir=str(work))
                    ids.append(asked["approvalId"])
                for approval in ids:
                    await op.request("approve", {"id": approval, "decision": "deny"})
            ids_left: set[str] = set()
            cursor = None
            while True:
                page = await op.request("approvals.history", {"cursor": cursor} if cursor else {})
                ids_left |= {row["id"] for row in page["approvals"]}
                cursor = page.get("next")
                if not cursor:
                    break
        finally:
            await op.close()
            await main.close()
    on_disk = "".join(path.read_text() for path in (state_dir / "history").glob("decisions*"))
    assert own in ids_left and own in on_disk, "the operator's own decision is gone from the history"


async def test_class5_a_nodes_hello_hides_the_operators_project_from_every_host_run(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    import json

    from engine.commands import gatewaydirs, hostoutside
    from tests.helpers.hostile_node import Hostile

    node = sshd_nodes[0]
    home = Path(hostoutside.home_dir())
    project = home / "project"
    project.mkdir()
    (project / "README").write_text("the operator's project\n")
    nodes = (state_dir / "config.toml").read_text()
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n' + nodes)
    Hostile(node, state_dir)
    hello = json.loads((node.root / "hello.json").read_text())
    hello.update(place=gatewaydirs.place(), stateDir=str(project))  # "my state dir is there"
    (node.root / "hello.json").write_text(json.dumps(hello))
    async with gateway(state_dir):
        op = await connect(state_dir, client="op")
        try:
            before = await _exec(op, f"cat {project}/README", agentId="main")
            assert "the operator's project" in str(before.get("aggregated"))
            await op.request("nodes.status", {"ping": True})  # the link comes up: its hello is read
            after = await _exec(op, f"cat {project}/README", agentId="main")
        finally:
            await op.close()
    assert "the operator's project" in str(after.get("aggregated")), after
