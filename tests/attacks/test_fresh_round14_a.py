"""Fresh round 14 a (issue 27 §1, the gateway's wire and principals): what an agent still does after its
credential is revoked or rotated, and what a peer can become by what it says in its hello."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.protocol.client import ControlClient
from engine.sandbox import bwraplimits
from tests.attacks.rawclient import RawClient
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.gateway import write_config as _write_config
from tests.helpers.sandbox import IMAGE, build_test_image

# ops may run anything on the gateway host (its policy is not what is attacked here); its host runs' only
# way out is the egress proxy, where an unknown name asks.
OPS_EGRESS = (
    '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n\n'
    '[[agents.list]]\nid = "ops"\n\n'
    '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nallow = []\nask = true\n'
)

# A host run that waits for the test (a FIFO in its workdir: the open blocks until the test opens it for
# writing), then asks the egress proxy its runs are given for a tunnel to a name nobody allowed, and writes
# the proxy's answer. The name is never resolved: an unknown name asks before anything is looked up.
CONNECTER = r"""
import os, socket, sys
work = sys.argv[1]
open(os.path.join(work, "gate")).read()
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT after-rotate.example:443 HTTP/1.1\r\nHost: after-rotate.example:443\r\n\r\n")
data = s.recv(4096)
with open(os.path.join(work, "answer"), "wb") as f:
    f.write(data or b"(closed)")
"""


@pytest.fixture
def work() -> Any:
    """A workdir outside every private dir (/tmp is the agent's own copy in its host view): the test and
    the run see the same files."""
    path = Path(tempfile.mkdtemp(prefix="atk14a-", dir="/srv"))
    _WORK.append(str(path))
    try:
        yield path
    finally:
        _WORK.remove(str(path))
        shutil.rmtree(path, ignore_errors=True)


_WORK: list[str] = []


def write_config(state: Path, text: str) -> None:
    """The test's config, with its shared workdir (when it has one) writable to the host runs: outside it,
    every tree outside the home is a read-only layer in the run's view, where the test's FIFO would be
    another inode (fix15sock)."""
    if _WORK:
        text = text.replace("[tools.exec]\n", f'[tools.exec]\nhostWritable = ["{_WORK[-1]}"]\n', 1)
    _write_config(state, text)


async def _agent(state: Path, token: str) -> ControlClient:
    return await ControlClient.connect(state, client="agent", name="agent", autostart=False, credential=token)


async def _pending(op: ControlClient) -> list[dict[str, Any]]:
    page = await op.request("approvals.pending", {})
    return list(page["approvals"])


def _egress_asks(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in rows if name in json.dumps(r)]


async def test_class1_a_host_run_of_a_rotated_credential_still_files_egress_asks(
    state_dir: Path, work: Path
) -> None:
    write_config(state_dir, OPS_EGRESS)
    token = principals.mint(state_dir, "ops")
    os.mkfifo(work / "gate")
    (work / "c.py").write_text(CONNECTER)
    async with gateway(state_dir) as server:
        op = await connect(state_dir)
        agent = await _agent(state_dir, token)
        try:
            res = await agent.request(
                "exec",
                {"command": f"python3 {work}/c.py {work}", "workdir": str(work), "background": True},
            )
            assert res["details"]["status"] == "running", res
            # The token leaked: the operator rotates it (the old connection is dropped, the old
            # credential's asks are settled, a new generation begins).
            rotated = await op.request("agents.rotate", {"agent": "ops"})
            assert rotated["token"] != token
            assert server.services.approvals.generations.current("ops") > 0
            # Only now the old credential's run asks.
            fd = await asyncio.to_thread(os.open, work / "gate", os.O_WRONLY)
            os.close(fd)
            answer = work / "answer"

            async def settled() -> bool:
                return answer.exists() or bool(_egress_asks(await _pending(op), "after-rotate.example"))

            await wait_until(settled, timeout=30)
            asks = _egress_asks(await _pending(op), "after-rotate.example")
            for ask in asks:  # (nobody approves it: the test's own cleanup)
                await op.request("approve", {"id": ask["id"], "decision": "deny"})
            await wait_until(answer.exists, timeout=30)
            assert asks == [], "an egress ask of the rotated credential's run waited for the operator"
            assert b"403" in answer.read_bytes()
        finally:
            await agent.close()
            await op.close()


# A host run that opens a tunnel through its egress proxy to an allowed name (the operator's `resolve`
# maps it to the test's echo server on the host's loopback), says it is up, waits for the test, then
# speaks through the tunnel and writes what came back (or how it ended).
TUNNELER = r"""
import os, socket, sys
work, port = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT origin.test:%s HTTP/1.1\r\nHost: origin.test:%s\r\n\r\n" % (port.encode(), port.encode()))
head = b""
while b"\r\n\r\n" not in head:
    chunk = s.recv(1)
    if not chunk:
        break
    head += chunk
with open(os.path.join(work, "head"), "wb") as f:
    f.write(head)
open(os.path.join(work, "gate")).read()
try:
    s.sendall(b"after-rotate\n")
    got = s.recv(100)
except OSError as exc:
    got = ("error %s" % exc).encode()
with open(os.path.join(work, "answer"), "wb") as f:
    f.write(got or b"(closed)")
"""


async def _echo_server() -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def test_class1_a_host_runs_tunnel_outlives_the_rotation_of_its_credential(
    state_dir: Path, work: Path
) -> None:
    origin = await _echo_server()
    port = origin.sockets[0].getsockname()[1]
    config = OPS_EGRESS.replace(
        "allow = []", f'allow = ["origin.test:{port}"]\nresolve = {{ "origin.test" = "127.0.0.1" }}'
    )
    write_config(state_dir, config)
    token = principals.mint(state_dir, "ops")
    os.mkfifo(work / "gate")
    (work / "t.py").write_text(TUNNELER)
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await _agent(state_dir, token)
        try:
            res = await agent.request(
                "exec",
                {"command": f"python3 {work}/t.py {work} {port}", "workdir": str(work), "background": True},
            )
            assert res["details"]["status"] == "running", res
            await wait_until((work / "head").exists, timeout=30)
            assert b" 200 " in (work / "head").read_bytes(), (work / "head").read_bytes()
            await op.request("agents.rotate", {"agent": "ops"})
            fd = await asyncio.to_thread(os.open, work / "gate", os.O_WRONLY)
            os.close(fd)
            await wait_until((work / "answer").exists, timeout=30)
            assert b"after-rotate" not in (work / "answer").read_bytes()
        finally:
            await agent.close()
            await op.close()
            origin.close()


# A host run that asks for a tunnel to a name nobody allowed (the operator's `resolve` maps it to the
# test's echo server, so nothing leaves the host), and, if it is let through, speaks through it.
ASKER = r"""
import os, socket, sys
work, port = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT origin.test:%s HTTP/1.1\r\nHost: origin.test:%s\r\n\r\n" % (port.encode(), port.encode()))
head = b""
while b"\r\n\r\n" not in head:
    chunk = s.recv(1)
    if not chunk:
        break
    head += chunk
got = b""
if b" 200 " in head:
    s.sendall(b"through\n")
    got = s.recv(100)
with open(os.path.join(work, "answer"), "wb") as f:
    f.write(head + got)
"""


async def test_class1_an_egress_ask_made_before_a_rotation_is_still_approvable_after_it(
    state_dir: Path, work: Path
) -> None:
    origin = await _echo_server()
    port = origin.sockets[0].getsockname()[1]
    config = OPS_EGRESS.replace("allow = []", 'allow = []\nresolve = { "origin.test" = "127.0.0.1" }')
    write_config(state_dir, config)
    token = principals.mint(state_dir, "ops")
    (work / "a.py").write_text(ASKER)
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await _agent(state_dir, token)
        try:
            res = await agent.request(
                "exec",
                {"command": f"python3 {work}/a.py {work} {port}", "workdir": str(work), "background": True},
            )
            assert res["details"]["status"] == "running", res

            async def asked() -> list[dict[str, Any]]:
                return _egress_asks(await _pending(op), f"origin.test:{port}")

            (ask,) = await wait_until(asked, timeout=30)
            assert ask["agentId"] == "ops", ask
            await op.request("agents.rotate", {"agent": "ops"})
            still = await asked()
            for row in still:  # what the inbox shows after the rotation, answered as it is shown
                await op.request("approve", {"id": row["id"], "decision": "allow-once"})
            await wait_until((work / "answer").exists, timeout=30)
            assert still == [], "the leaked credential's ask was still in the inbox after the rotation"
            assert b"through" not in (work / "answer").read_bytes()
        finally:
            await agent.close()
            await op.close()
            origin.close()


async def test_class1_execs_dispatched_before_a_revoke_start_after_its_kill(
    state_dir: Path, work: Path
) -> None:
    write_config(state_dir, OPS_EGRESS)
    token = principals.mint(state_dir, "ops")
    (work / "g1").touch()
    count = 24  # under maxSessionsPerAgent and the output budget's share of each session
    # `g*` is a word the shell expands from the file system: its decision runs the expansion (a bwrap and a
    # shell) in the agent's one decision lane, so the queue behind it is long compared to the revoke.
    command = f"tail -f {work}/g*"
    async with gateway(state_dir) as server:
        op = await connect(state_dir)
        agent, welcome = await RawClient.open(state_dir, credential=token)
        try:
            assert welcome.get("agent") == "ops", welcome
            frames = [
                {
                    "type": "req",
                    "id": n,
                    "method": "exec",
                    "params": {"command": command, "workdir": str(work), "background": True},
                }
                for n in range(count)
            ]
            agent.writer.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))  # one burst
            await agent.writer.drain()
            (conn,) = await wait_until(lambda: [c for c in server.connections if c.agent == "ops"])
            # Every request is dispatched (a task of the gateway's) before the revoke: sent before it.
            await wait_until(lambda: len(conn.tasks) == count or conn.closed, timeout=30)
            assert len(conn.tasks) == count
            answer = await op.request("agents.revoke", {"agent": "ops"})
            assert answer["revoked"] is True
            await asyncio.gather(*list(conn.tasks), return_exceptions=True)  # what it was dispatched settles
            rows = (await op.request("sessions.list", {}))["sessions"]
            alive = [
                r
                for r in rows
                if principals.owns_key("ops", r.get("scopeKey") or "") and r.get("status") == "running"
            ]
            assert alive == [], f"{len(alive)} of ops's commands run after its revoke"
        finally:
            agent.close()
            await op.close()
            await asyncio.to_thread(bwraplimits.kill_host_group, "ops")  # the test's own cleanup


SANDBOXED = (
    '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n\n'
    '[[agents.list]]\nid = "ops"\n\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n\n'
    '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nallow = []\nask = true\n'
    'resolve = { "sandbox-after-revoke.test" = "127.0.0.1" }\n'
)
SANDBOX_ASKER = (
    'python3 -c \'import socket; s=socket.create_connection(("127.0.0.1",3128)); '
    's.sendall(b"CONNECT sandbox-after-revoke.test:9 HTTP/1.1\\r\\n'
    'Host: sandbox-after-revoke.test:9\\r\\n\\r\\n"); '
    "print(s.recv(200))'"
)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
async def test_class1_an_exec_in_flight_restamps_the_revoked_agents_sandbox_egress(state_dir: Path) -> None:
    write_config(state_dir, SANDBOXED)
    token = principals.mint(state_dir, "ops")
    count = 20  # the asker last: it enters the sandbox behind 19 others, long after the revoke
    async with gateway(state_dir) as server:
        op = await connect(state_dir)
        agent, welcome = await RawClient.open(state_dir, credential=token)
        try:
            assert welcome.get("agent") == "ops", welcome
            frames = [
                {
                    "type": "req",
                    "id": n,
                    "method": "exec",
                    "params": {"command": SANDBOX_ASKER if n == count - 1 else "true", "timeout": 30},
                }
                for n in range(count)
            ]
            agent.writer.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))  # one burst
            await agent.writer.drain()
            (conn,) = await wait_until(lambda: [c for c in server.connections if c.agent == "ops"])
            await wait_until(lambda: len(conn.tasks) == count or conn.closed, timeout=30)
            assert len(conn.tasks) == count
            answer = await op.request("agents.revoke", {"agent": "ops"})
            assert answer["revoked"] is True
            await asyncio.gather(*list(conn.tasks), return_exceptions=True)
            asks = _egress_asks(await _pending(op), "sandbox-after-revoke.test")
            for ask in asks:
                assert not ask["sessionKey"].startswith("hostnet."), ask  # its sandbox's, not a host run's
                await op.request("approve", {"id": ask["id"], "decision": "deny"})
            assert asks == [], "the revoked agent's sandbox filed an egress ask after the revoke"
        finally:
            agent.close()
            await op.close()
            from engine.sandbox import bwrap

            await asyncio.to_thread(bwrap.remove_all)


# Hellos the wire decodes leniently elsewhere but this gateway must not take as anything but a refusal:
# a duplicate key whose last value is wrong, numbers no encoder writes back, text no UTF-8 holds.
_ODD_HELLOS = {
    "duplicate operator, last wrong": '"operator": "{op}", "operator": "x"',
    "duplicate token, last wrong": '"token": "{tok}", "token": "x"',
    "version NaN": '"version": NaN',
    "version huge": '"version": 18446744073709551617',
    "version true": '"version": true',
    "operator lone surrogate": '"operator": "{op}\\ud800"',
    "credential NUL": '"credential": "{cred}\\u0000"',
    "credential padded past the cut": '"credential": "{cred}' + " " * 300 + '"',
}


@pytest.mark.parametrize("case", sorted(_ODD_HELLOS))
async def test_an_odd_hello_is_refused_never_a_principal(state_dir: Path, case: str) -> None:
    """Defence held: each hello below is answered with an error frame, never a welcome, so no spelling of
    a hello makes a peer the operator or another agent."""
    from engine.protocol.frames import OPERATOR_TOKEN_NAME, read_token

    write_config(state_dir, OPS_EGRESS)
    cred = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        tok = read_token(state_dir) or ""
        op = read_token(state_dir, OPERATOR_TOKEN_NAME) or ""
        fields = {"token": f'"token": "{tok}"', "version": '"version": 1'}
        extra = _ODD_HELLOS[case].format(op=op, tok=tok, cred=cred)
        for key in ("token", "version"):
            if f'"{key}"' in extra:
                fields.pop(key)
        body = ", ".join(['"type": "hello"', '"client": "raw"', *fields.values(), extra])
        reader, writer = await asyncio.open_unix_connection(str(state_dir / "gateway.sock"))
        try:
            writer.write(("{" + body + "}\n").encode("utf-8", "surrogatepass"))
            await writer.drain()
            first = json.loads(await asyncio.wait_for(reader.readline(), 30))
        finally:
            writer.close()
        assert first["type"] == "error", (case, first)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
async def test_class1_a_sandbox_egress_ask_of_a_rotated_credential_stays_in_the_inbox(
    state_dir: Path,
) -> None:
    from engine.approvals.store import ApprovalsStore

    write_config(state_dir, SANDBOXED)
    token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await _agent(state_dir, token)
        try:
            await agent.request("exec", {"command": SANDBOX_ASKER, "background": True})

            async def asked() -> list[dict[str, Any]]:
                return _egress_asks(await _pending(op), "sandbox-after-revoke.test")

            (ask,) = await wait_until(asked, timeout=60)
            assert not ask["sessionKey"].startswith("hostnet."), ask
            await op.request("agents.rotate", {"agent": "ops"})
            still = await asked()
            for row in still:  # answered as the inbox shows it after the rotation
                await op.request("approve", {"id": row["id"], "decision": "allow-always"})
            store = ApprovalsStore(state_dir / "exec-approvals.json")
            saved = await wait_until(lambda: store.egress_allow("ops") or not still, timeout=10)
            assert still == [], f"the rotated credential's ask was still asked; saved for ops: {saved}"
        finally:
            await agent.close()
            await op.close()
            from engine.sandbox import bwrap

            await asyncio.to_thread(bwrap.remove_all)


async def test_another_agents_session_and_ask_ids_read_as_absent_through_every_verb(
    state_dir: Path, work: Path
) -> None:
    """Defence held: agent main (the bare gateway token) knows ops's session id and ask id outright (as if
    guessed); every verb that takes one answers exactly as for an id that does not exist, and nothing it
    sends reaches ops's session."""
    write_config(state_dir, OPS_EGRESS)
    token = principals.mint(state_dir, "ops")
    sink = work / "typed"
    (work / "c.py").write_text(CONNECTER.replace("after-rotate.example", "guess.example"))
    os.mkfifo(work / "gate")
    async with gateway(state_dir):
        op = await connect(state_dir)
        ops = await _agent(state_dir, token)
        main = await connect(state_dir, operator=False)
        try:
            res = await ops.request("exec", {"command": f"cat > {sink}", "background": True})
            sid = res["details"]["sessionId"]
            await ops.request(
                "exec", {"command": f"python3 {work}/c.py {work}", "workdir": str(work), "background": True}
            )
            fd = await asyncio.to_thread(os.open, work / "gate", os.O_WRONLY)
            os.close(fd)

            async def asked() -> list[dict[str, Any]]:
                return _egress_asks(await _pending(op), "guess.example")

            (ask,) = await wait_until(asked, timeout=30)
            ask_id = ask["id"]
            verbs: list[tuple[str, dict[str, Any]]] = [
                ("process", {"action": "poll", "sessionId": sid}),
                ("process", {"action": "log", "sessionId": sid}),
                ("process", {"action": "write", "sessionId": sid, "data": "from-main\n"}),
                ("process", {"action": "send-keys", "sessionId": sid, "literal": "from-main\n"}),
                ("process", {"action": "kill", "sessionId": sid}),
                ("process", {"action": "remove", "sessionId": sid}),
                ("process", {"action": "poll", "sessionId": sid, "sessionKey": "agent:ops"}),
                ("sessions.output", {"sessionId": sid}),
                ("sessions.resize", {"sessionId": sid, "cols": 80, "rows": 24}),
                ("approvals.status", {"approvalId": ask_id}),
                ("approvals.status", {"approvalId": ask_id[:8]}),
            ]

            async def answer(method: str, params: dict[str, Any]) -> str:
                try:
                    return json.dumps(await main.request(method, params))
                except Exception as exc:  # RemoteError: the answer an unknown id gets
                    return str(exc)

            for method, params in verbs:
                got = await answer(method, params)
                # the same verb naming ids that never existed (same lengths, so no text differs by them)
                fake = {
                    k: ("zzzz-" + v[5:] if v in (sid, ask_id, ask_id[:8]) else v) if isinstance(v, str) else v
                    for k, v in params.items()
                }
                absent = await answer(method, fake)
                for real, made in ((sid, "zzzz-" + sid[5:]), (ask_id, "zzzz-" + ask_id[5:])):
                    absent = absent.replace(made, real).replace(made[:8], real[:8])
                assert got == absent, (method, params, got, absent)
            listed = await main.request("process", {"action": "list"})
            assert sid not in json.dumps(listed)
            polled = await ops.request("process", {"action": "poll", "sessionId": sid})
            assert polled["details"]["status"] == "running", polled
            assert (await ops.request("approvals.status", {"approvalId": ask_id}))["details"]["status"] == (
                "approval-pending"
            )
            assert not sink.exists() or b"from-main" not in sink.read_bytes()
        finally:
            await main.close()
            await ops.close()
            await op.close()
            await asyncio.to_thread(bwraplimits.kill_host_group, "ops")


@pytest.mark.parametrize("key", [None, "s1"])
async def test_class1_an_offline_revoke_leaves_the_agents_held_sessions_running(
    state_dir: Path, work: Path, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    """Every session the agent owns ends, whatever its scope under `agent:ops` (its own `s1` is
    `agent:ops:s1`): an offline revoke once ended only the scope `agent:ops` exactly."""
    from tests.helpers.gateway import cli

    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # the daemon's way: sessions outlive it
    write_config(state_dir, OPS_EGRESS)
    token = principals.mint(state_dir, "ops")
    beat = work / "beat"
    beat.touch()
    try:
        async with gateway(state_dir):
            agent = await _agent(state_dir, token)
            try:
                params = {"command": f"tail -f {beat}", "background": True}
                res = await agent.request("exec", {**params, "sessionKey": key} if key else params)
                assert res["details"]["status"] == "running", res
                pid = int(res["details"]["pid"])
            finally:
                await agent.close()
        assert os.path.exists(f"/proc/{pid}"), "the held session ended with its gateway"
        done = await asyncio.to_thread(cli, state_dir, "agents", "revoke", "ops")  # no gateway runs
        assert done.returncode == 0, done.stderr
        assert principals.read_token(state_dir, "ops") is None
        async with gateway(state_dir) as server:
            adoption = server.services.adoption
            if adoption is not None:
                await asyncio.wait_for(adoption.done.wait(), 60)  # (a bound on a hang, not a time)
            op = await connect(state_dir)
            try:
                rows = (await op.request("sessions.list", {}))["sessions"]
            finally:
                await op.close()
            alive = [r for r in rows if r.get("scopeKey") == "agent:ops" and r.get("status") == "running"]
            assert alive == [] and not os.path.exists(f"/proc/{pid}"), (
                f"the revoked agent's session runs on under the next gateway: {alive}"
            )
    finally:
        await asyncio.to_thread(bwraplimits.kill_host_group, "ops")


OPS_DOCKER = (
    '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n\n'
    '[[agents.list]]\nid = "ops"\n\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "docker"\nscope = "session"\n'
    f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\npool = 0\n'
)


async def test_an_offline_revoke_ends_the_agents_held_sandbox_sessions_in_every_scope_it_owns(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox session is in no host group (the offline revoke's kill does not reach it): the next
    gateway ends it as it adopts it, in whatever scope of the agent it runs (`agent:ops:s1` here); only
    `agent:ops` exactly was ended once."""
    from engine.sandbox import docker_ops
    from tests.helpers.gateway import cli

    build_test_image()
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")
    write_config(state_dir, OPS_DOCKER)
    token = principals.mint(state_dir, "ops")
    try:
        async with gateway(state_dir):
            agent = await _agent(state_dir, token)
            try:
                res = await agent.request(
                    "exec", {"command": "sleep 3600", "background": True, "sessionKey": "s1"}
                )
                assert res["details"]["status"] == "running", res
                sid = res["details"]["sessionId"]
            finally:
                await agent.close()
        done = await asyncio.to_thread(cli, state_dir, "agents", "revoke", "ops")  # no gateway runs
        assert done.returncode == 0, done.stderr
        async with gateway(state_dir) as server:
            adoption = server.services.adoption
            assert adoption is not None
            await asyncio.wait_for(adoption.done.wait(), 60)  # (a bound on a hang, not a time)
            op = await connect(state_dir)
            try:
                rows = (await op.request("sessions.list", {}))["sessions"]
            finally:
                await op.close()
            [row] = [r for r in rows if r["sessionId"] == sid]
            assert row["scopeKey"] == "agent:ops:s1"
            assert row["status"] != "running", f"the revoked agent's sandbox session runs on: {row}"
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
