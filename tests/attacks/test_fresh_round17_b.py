"""Fresh round 17 b: a hostile agent on the wire (the control socket, its principals, its byte budgets)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web as aiohttp_web

from console import socket_asks
from console import web as web_console
from engine import fairpool, ostext, principals, statefs
from engine.approvals.request import NOT_UTF8
from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import request_decision
from engine.approvals.store import ApprovalsStore
from engine.config.model import ConfigError
from engine.nodes import wire
from engine.protocol.frames import RemoteError
from tests.helpers.gateway import ALLOWLIST, FULL, connect, gateway, listed, wait_until, write_config
from tests.helpers.hostile_node import Hostile, ask
from tests.helpers.sshd import SshdNode

pytestmark = pytest.mark.asyncio

MiB = 1 << 20


def _rss() -> int:
    """This process's resident bytes (the gateway runs in it)."""
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


async def test_class3_an_agents_waiting_polls_pin_24x_their_budget_in_decoded_params(state_dir: Path) -> None:
    """Agent main (the gateway token alone) starts one background `sleep` and sends 15 `process poll`s
    that wait for its output (up to 120 s), each carrying a ~1 MiB field the verb ignores: a list of
    empty objects. Each frame fits the 4 MiB per-connection and 16 MiB per-agent budgets, so all are
    read and held while they wait. Their decoded params stay alive in `_dispatch` (the `Request` it
    awaits on), and a `{}` costs 72 bytes of Python for 3 bytes of JSON. The doc's claim is that the
    budget bounds memory, not only bytes (~16.5 MB traced for one agent's 16 MiB)."""
    write_config(state_dir, FULL)
    pad: list[dict[str, Any]] = [{} for _ in range(340_000)]  # ~1,020,000 bytes of JSON: under 1 MiB
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, operator=False)
        more = [await connect(state_dir, operator=False) for _ in range(4)]
        operator = await connect(state_dir)
        try:
            res = await agent.request("exec", {"command": "sleep 300", "background": True})
            sid = str(res["details"]["sessionId"])
            base = _rss()
            params = {"action": "poll", "sessionId": sid, "timeout": 120_000, "pad": pad}
            # three per connection (its own budget is 4 MiB), five connections: 15 of one agent's 16 MiB
            polls = [
                asyncio.ensure_future(client.request("process", params))
                for client in (agent, *more)
                for _ in range(3)
            ]
            # all read and waiting, or the agent's budget says no more may be read (a budget that counts
            # what a request holds stops earlier)
            await wait_until(
                lambda: (
                    server._intake.requests.get("main", 0) >= 15
                    or any(c.intake_full for c in server.connections)
                ),
                timeout=60,
            )
            held = _rss() - base
            await operator.request("process", {"action": "kill", "sessionId": sid})
            for poll in polls:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(poll, 30)
            # one agent's requests in flight were to hold about its 16 MiB budget, not many times it
            assert held < 4 * 16 * MiB, f"one agent's waiting requests hold {held / MiB:.0f} MiB"
        finally:
            for client in (agent, *more, operator):
                await client.close()


async def test_class3_one_agents_ask_too_large_to_show_is_refused_not_filed(state_dir: Path) -> None:
    """Agent main asks once for `ls|ls|…` (5,400 segments, 16 KiB: under the analysis's 16,384-char cap),
    whose decision (every segment, twice in the view) is ~3 MB as shown: past a frame, it would make every
    page of the operator's inbox from it on fail. Held: the ask is refused (APPROVAL_TOO_LARGE), and ops's
    ask after it is listed."""
    write_config(state_dir, ALLOWLIST + listed("ops"))
    ops_token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        ops = await connect(state_dir, operator=False, credential=ops_token)
        operator = await connect(state_dir)
        try:
            with pytest.raises(RemoteError, match="as the operator would be shown it"):
                await main.request("exec", {"command": "|".join(["ls"] * 5400)})
            small = await ops.request("exec", {"command": "ls /"})
            assert small["details"]["status"] == "approval-pending"
            shown: list[str] = []
            for method in ("approvals.pending", "approvals.attach"):
                try:
                    page = await operator.request(method, {})
                except RemoteError as exc:
                    shown.append(f"{method}: {exc.code}")
                    continue
                shown += [str(row.get("command"))[:20] for row in page.get("approvals", [])]
            assert shown.count("ls /") == 2, shown
        finally:
            for client in (main, ops, operator):
                await client.close()


def _odd_tree(state: Path) -> Path:
    """Agent main's own tree (what any run of it can make: `mkdir $'\\xff'`): a program in a directory
    whose name is not UTF-8, reached through a link with a plain name. The gateway reads its path with
    surrogateescape: a lone surrogate in every path it shows of it (the ask's resolvedPath, segments)."""
    work = state.parent / "w"
    odd = os.path.join(os.fsencode(work), b"\xff")
    os.makedirs(odd)
    prog = os.path.join(odd, b"p")
    with open(prog, "wb") as f:
        f.write(b"#!/bin/sh\necho hi\n")
    os.chmod(prog, 0o755)
    os.symlink(prog, work / "p")
    return work


async def test_class5_a_non_utf8_dir_name_in_one_ask_breaks_the_operators_inbox(state_dir: Path) -> None:
    """Agent main's own tree holds a program under a directory whose name is not UTF-8 (any run of the
    agent can make one: `mkdir $'\\xff'`), reached through a link with a plain name. Its `./p` asks;
    agent ops asks for `ls /` as usual. The operator must see ops's ask in its inbox."""
    write_config(state_dir, ALLOWLIST + listed("ops"))
    ops_token = principals.mint(state_dir, "ops")
    work = _odd_tree(state_dir)
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        ops = await connect(state_dir, operator=False, credential=ops_token)
        operator = await connect(state_dir)
        try:
            odd_ask = await main.request("exec", {"command": "./p", "workdir": str(work)})
            assert odd_ask["details"]["status"] == "approval-pending", odd_ask
            small = await ops.request("exec", {"command": "ls /"})
            assert small["details"]["status"] == "approval-pending"
            shown: list[str] = []
            for method in ("approvals.pending", "approvals.attach"):
                try:
                    page = await operator.request(method, {})
                except RemoteError as exc:
                    shown.append(f"{method}: {exc.code} {exc.message[:80]}")
                    continue
                shown += [str(row.get("command"))[:20] for row in page.get("approvals", [])]
            assert shown.count("ls /") == 2, shown
        finally:
            for client in (main, ops, operator):
                await client.close()


async def test_class7_a_non_utf8_path_in_one_ask_loses_every_pending_ask_at_restart(state_dir: Path) -> None:
    """Agent ops asks for `ls /`; agent main asks for `./p` in its non-UTF-8 tree; the gateway restarts
    (an upgrade, a reboot). Pending asks outlive a gateway (the pending journal): the next gateway must
    restore ops's ask, for the operator to decide and ops's waiting run to start."""
    write_config(state_dir, ALLOWLIST + listed("ops"))
    ops_token = principals.mint(state_dir, "ops")
    work = _odd_tree(state_dir)
    async with gateway(state_dir) as server:
        main = await connect(state_dir, operator=False)
        ops = await connect(state_dir, operator=False, credential=ops_token)
        try:
            small = await ops.request("exec", {"command": "ls /"})
            assert small["details"]["status"] == "approval-pending"
            odd_ask = await main.request("exec", {"command": "./p", "workdir": str(work)})
            assert odd_ask["details"]["status"] == "approval-pending", odd_ask
            await server.services.approvals.durable()
        finally:
            for client in (main, ops):
                await client.close()
    async with gateway(state_dir) as server:
        restored = [r.request.command for r in server.services.approvals.pending()]
        problem = server.services.journal.pending_file.problem
        assert "ls /" in restored, (restored, problem)


async def test_class5_a_non_utf8_path_in_a_decided_ask_breaks_the_operators_history(state_dir: Path) -> None:
    """Agent main asks for `./p` in its non-UTF-8 tree; the operator denies it. From then on the
    operator's `approvals.history` (the console's History pane, `exechost approvals history`) must still
    answer."""
    write_config(state_dir, ALLOWLIST)
    work = _odd_tree(state_dir)
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            odd_ask = await main.request("exec", {"command": "./p", "workdir": str(work)})
            assert odd_ask["details"]["status"] == "approval-pending", odd_ask
            await operator.request("approve", {"id": odd_ask["details"]["approvalId"], "decision": "deny"})
            page = await operator.request("approvals.history", {})
            assert page["approvals"], page
        finally:
            for client in (main, operator):
                await client.close()


async def test_class5_what_the_operator_is_shown_names_the_real_bytes(state_dir: Path) -> None:
    """Variant: the ask of `./p` in the non-UTF-8 tree is shown, and not as a lossy U+FFFD (two trees,
    b'\\xff' and b'\\xfe', would show alike) nor as a name another file could hold: as bash quotes its
    bytes, which read back to the very path, with a warning that says so; the whole page is UTF-8."""
    write_config(state_dir, ALLOWLIST)
    work = _odd_tree(state_dir)
    real = os.path.join(os.fsencode(work), b"\xff", b"p")
    async with gateway(state_dir) as server:
        main = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            odd_ask = await main.request("exec", {"command": "./p", "workdir": str(work)})
            assert odd_ask["details"]["status"] == "approval-pending", odd_ask
            (row,) = (await operator.request("approvals.pending", {}))["approvals"]
            shown = row["resolvedPath"]
            assert shown.startswith("$'") and "\\xff" in shown and "\ufffd" not in shown, shown
            assert os.fsencode(ostext.exact(shown)) == real
            assert NOT_UTF8 in row["warnings"]
            assert any(
                ostext.exact(s.get("resolvedPath") or "") == os.fsdecode(real) for s in row["segments"]
            )
            for record in server.services.approvals.pending():
                json.dumps(record.view(), ensure_ascii=False).encode("utf-8")  # every view: valid UTF-8
        finally:
            for client in (main, operator):
                await client.close()


async def test_class7_a_non_utf8_ask_restored_at_restart_runs_as_approved(state_dir: Path) -> None:
    """Variant: the ask of the non-UTF-8 path itself outlives the gateway too, and approved after the
    restart it runs the very file approved (its resume data kept exact, not only its shown text)."""
    write_config(state_dir, ALLOWLIST)
    work = _odd_tree(state_dir)
    async with gateway(state_dir) as server:
        main = await connect(state_dir, operator=False)
        try:
            odd_ask = await main.request("exec", {"command": "./p", "workdir": str(work), "sessionKey": "k"})
            assert odd_ask["details"]["status"] == "approval-pending", odd_ask
            await server.services.approvals.durable()
        finally:
            await main.close()
    async with gateway(state_dir) as server:
        (restored,) = server.services.approvals.pending()
        assert restored.id == odd_ask["details"]["approvalId"], server.services.journal.pending_file.problem
        assert restored.request.resolved_path is not None and "\\xff" in restored.request.resolved_path
        main = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            await operator.request("approve", {"id": restored.id, "decision": "allow-once"})

            async def finished() -> list[str]:
                events = (await main.request("events", {"sessionKey": "k"}))["events"]
                return [e["text"] for e in events if e["text"].startswith("Exec ")]

            texts = await wait_until(finished, timeout=30)
            assert "hi" in texts[0] and "code 0" in texts[0], texts
        finally:
            for client in (main, operator):
                await client.close()


async def test_class2_agent_main_reads_the_operators_run_output_through_a_joined_ask(state_dir: Path) -> None:
    """The operator keeps a note in its own /tmp (its own places, never main's: fresh round 15 b; here
    the private dir's stand-in) and runs `cat` of it naming no agent (main's policy: it asks). Agent main
    sends the identical call (same command and workdir): it joins the ask as a second requester, shown to
    the operator as main's. The operator approves once: `cat` of main's own /tmp is harmless to main.
    Each requester's run reads its own /tmp (main's has no note); main then asks `approvals.status` of the
    id its call was answered with."""
    write_config(state_dir, ALLOWLIST)
    home = str(state_dir.parent / "h")
    # the private dir (the test's stand-in for /tmp: tests/conftest.py), a copy of its own per principal
    note = os.path.join(os.environ["EXECHOST_HOST_PRIVATE"], "op-note")
    async with gateway(state_dir):
        operator = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        try:
            made = await operator.request("exec", {"command": f"printf OPSECRET > {note}", "workdir": home})
            await operator.request("approve", {"id": made["details"]["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: _ran(operator, made["details"]["approvalId"]))
            own = await operator.request("exec", {"command": f"cat {note}", "workdir": home})
            joined = await main.request("exec", {"command": f"cat {note}", "workdir": home})
            ask = str(own["details"]["approvalId"])
            assert joined["details"]["approvalId"] == ask, (own, joined)
            await operator.request("approve", {"id": ask, "decision": "allow-once"})
            await wait_until(lambda: _ran(operator, ask))
            for params in ({"approvalId": ask}, {"approvalId": ask, "sessionKey": ""}):
                seen = await main.request("approvals.status", params)
                assert "OPSECRET" not in str(seen), (params, seen["details"].get("run"))
        finally:
            for client in (main, operator):
                await client.close()


async def _ran(client: Any, ask: str) -> bool:
    """The approval's (first) run has ended (its status is final)."""
    got = await client.request("approvals.status", {"approvalId": ask})
    run = got["details"].get("run") or {}
    return run.get("status") in ("completed", "failed", "denied")


async def test_class3_eight_agents_asks_refuse_the_operators_own_exec(state_dir: Path) -> None:
    """Eight agents (each within its own share of 32 waiting asks) ask 32 times each. The operator then
    runs a command of its own that asks: its share (`_operator`) is empty, and no agent's asks may reach
    what the operator needs (the connections' table keeps the operator 16 slots no agent can take)."""
    names = [f"a{i}" for i in range(8)]
    write_config(state_dir, ALLOWLIST + listed(*names))
    tokens = {name: principals.mint(state_dir, name) for name in names}
    async with gateway(state_dir):
        agents = [await connect(state_dir, operator=False, credential=tokens[name]) for name in names]
        operator = await connect(state_dir)
        try:
            for n, agent in enumerate(agents):
                asks = [agent.request("exec", {"command": f"ls /n{n}-{i}"}) for i in range(32)]
                for got in await asyncio.gather(*asks):
                    assert got["details"]["status"] == "approval-pending", got
            try:
                mine = await operator.request("exec", {"command": "ls /operators-own"})
                status = mine["details"]["status"]
            except RemoteError as exc:
                status = f"{exc.code}: {exc.message[:120]}"
            assert status == "approval-pending", status
        finally:
            for client in (*agents, operator):
                await client.close()


async def test_class1_a_credential_re_minted_on_disk_keeps_its_live_connection(state_dir: Path) -> None:
    """Agent ops's credential leaked to an attacker, who holds a connection with it. The operator re-mints
    ops's credential on disk (the file rewritten, as `agents add --rotate` does when it cannot reach the
    gateway). The gateway's watch then looks at its files (done here as its loop does each second), and
    the attacker's next request must not run."""
    write_config(state_dir, FULL + listed("ops"))
    leaked = principals.mint(state_dir, "ops")
    async with gateway(state_dir) as server:
        attacker = await connect(state_dir, operator=False, credential=leaked)
        try:
            first = await attacker.request("exec", {"command": "echo before"})
            assert "before" in first["text"], first
            principals.mint(state_dir, "ops")  # the new credential: the leaked one is no longer ops's
            server.look_at_files()  # the watch's look (server._watch_files), now
            await wait_until(lambda: not server._rechecks)
            # and the watch's own next looks (every second): the leaked connection is cut, or never is
            with contextlib.suppress(AssertionError):
                await wait_until(lambda: attacker.close_reason is not None, timeout=3)
            try:
                after = await attacker.request("exec", {"command": "echo after-the-rotation"})
                ran = "after-the-rotation" in after["text"]
            except (RemoteError, ConnectionError):
                ran = False
            assert not ran, "the leaked credential's connection still runs commands"
        finally:
            await attacker.close()


async def test_class3_agent_mains_slow_decisions_hold_the_operators_own_exec(state_dir: Path) -> None:
    """Agent main sends, on four connections, a command whose glob the decision expands in its view over a
    tree of links to itself (`d/*/*/*/*/*/*/*/*/zzz`: 10^8 lookups, cut at the expansion's 5 s). The
    pool runs one call of a principal at a time, and the other worker is free for every other principal.
    The operator then runs `ls /` of its own: it must be decided at once, not after main's queue."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    tree = work / "d"
    tree.mkdir(parents=True)
    for i in range(10):
        os.symlink(".", tree / f"l{i}")
    async with gateway(state_dir):
        mains = [await connect(state_dir, operator=False) for _ in range(4)]
        operator = await connect(state_dir)
        try:
            slow = {"command": "ls d/*/*/*/*/*/*/*/*/zzz", "workdir": str(work)}
            theirs = [asyncio.ensure_future(client.request("exec", slow)) for client in mains]
            await wait_until(lambda: fairpool.decisions.waiting("main") >= 3, timeout=30)
            mine = await operator.request("exec", {"command": "ls /", "workdir": str(work)})
            assert mine["details"]["status"] == "approval-pending", mine
            behind = sum(1 for task in theirs if task.done())
            await asyncio.gather(*theirs, return_exceptions=True)
            assert behind < len(theirs), "the operator's own exec was decided only after all of main's"
        finally:
            for client in (*mains, operator):
                await client.close()


GATEWAY_NODE = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'


async def test_class3_a_compromised_nodes_waiting_ask_pins_its_whole_decoded_frame(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Agent main runs `ls` on node alpha, which is compromised. It asks once for that run (a run it was
    given: the ask is filed and waits for the operator), carrying a 4 MiB list of empty objects in a field
    no one reads. What the gateway keeps for the waiting ask must be the ask's own cut fields."""
    config = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(GATEWAY_NODE + config)
    hostile = Hostile(sshd_nodes[0], state_dir)
    pad = [{} for _ in range(1_400_000)]  # ~4.2 MB of JSON
    async with gateway(state_dir) as server:
        main = await connect(state_dir, operator=False)
        try:
            running = asyncio.ensure_future(main.request("exec", {"command": "ls", "node": "alpha"}))
            run = await hostile.next_run()
            frame = ask("r1", str(run["params"]["runId"]), pad=pad)
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                await hostile.inject(frame)
                await wait_until(lambda: server.services.approvals.pending(), timeout=60)
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            running.cancel()
            assert held < 16 * MiB, f"the waiting ask holds {held / MiB:.0f} MiB"
        finally:
            await main.close()


async def test_class3_a_nodes_waiting_asks_pin_nothing_wherever_the_padding_is(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """The neighbours of the padded ask: the list of `{}` beside the frame's params, beside the ask's
    request, and in the fields the gateway does read (env, warnings, allowed decisions). Each ask waits;
    none may keep what it was padded with."""
    config = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(GATEWAY_NODE + config)
    hostile = Hostile(sshd_nodes[0], state_dir)
    pad = [{} for _ in range(1_000_000)]  # ~3 MB of JSON
    async with gateway(state_dir) as server:
        main = await connect(state_dir, operator=False)
        try:
            running = asyncio.ensure_future(main.request("exec", {"command": "ls", "node": "alpha"}))
            run = str((await hostile.next_run())["params"]["runId"])
            frames = [{**ask("r1", run, command="id 1"), "pad": pad}]
            frames.append(ask("r2", run, command="id 2"))
            frames[-1]["params"]["pad"] = pad
            for n, key in enumerate(("env", "warnings", "allowedDecisions"), 3):
                frames.append(ask(f"r{n}", run, command=f"id {n}", **{key: pad}))
            for n, frame in enumerate(frames, 1):
                tracemalloc.start()
                try:
                    base = tracemalloc.get_traced_memory()[0]
                    await hostile.inject(frame)
                    await wait_until(lambda n=n: len(server.services.approvals.pending()) >= n, timeout=30)
                    held = tracemalloc.get_traced_memory()[0] - base
                finally:
                    tracemalloc.stop()
                assert held < 8 * MiB, f"ask {frame['id']} holds {held / MiB:.0f} MiB"
            running.cancel()
        finally:
            await main.close()


@pytest.mark.parametrize("decision", ["allow-always", "allow-once"])  # the neighbour: a yes of any kind
async def test_class1_a_replaced_socket_tokens_relayed_ask_still_saves_main_an_allow_always(
    state_dir: Path, decision: str
) -> None:
    """exec-approvals.sock's token leaked; its holder asks for `cat /etc/hostname` on the socket, and the
    console relays the ask to the gateway (as `socket_decider` does). The operator replaces the token in
    exec-approvals.json (the leaked holder's next frame is refused), then, later, answers the waiting ask
    allow-always. Nothing the replaced token asked may still be saved for main."""
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.ensure()
    path, leaked = store.socket_info()
    async with gateway(state_dir) as server:
        console = await connect(state_dir)

        async def decider(prompt: PromptRequest) -> str:  # console/app.py socket_decider, gateway up
            answer = await console.request(socket_asks.relay_params(prompt))
            return str(answer.get("decision") or "deny")

        sock = ApprovalSocketServer(
            path, store.socket_token_now, decider=decider, config_path=state_dir / "config.toml"
        )
        await sock.start()
        try:
            body = {"command": "cat /etc/hostname", "cwd": "/"}
            asking = asyncio.ensure_future(request_decision(path, leaked, body, timeout=120))
            await wait_until(lambda: server.services.approvals.pending())
            raw = json.loads((state_dir / "exec-approvals.json").read_text())
            raw["socket"]["token"] = "replaced-" + "x" * 40
            statefs.atomic_write(state_dir / "exec-approvals.json", json.dumps(raw))
            refused = await request_decision(path, leaked, {"command": "true", "cwd": "/"}, timeout=30)
            assert refused in (None, "deny")
            with contextlib.suppress(AssertionError):  # a replaced token's asks may be settled meanwhile
                await wait_until(lambda: not server.services.approvals.pending(), timeout=2)
            waiting = server.services.approvals.pending()
            if waiting:
                await console.request("approve", {"id": waiting[0].id, "decision": decision})
            answered = await asyncio.wait_for(asking, 60)
            assert answered in (None, "deny"), answered  # nor is the replaced token's ask allowed at all
            saved = [e.pattern for e in ApprovalsStore(state_dir / "exec-approvals.json").entries("main")]
            assert not any("cat" in p for p in saved), saved
        finally:
            await sock.close()
            await console.close()


async def test_class2_an_agent_named_default_shares_agent_mains_allowlist(state_dir: Path) -> None:
    """The operator lists an agent `default` (its own credential, the global policy: allowlist, asks on a
    miss). It asks for `cat /etc/hostname`; the operator approves it always, for agent default. Agent main
    (the gateway token alone) then runs the same command: it must still ask. (Fixed: a config listing
    `default` is refused at load, naming the file, key and line: it is main's legacy name.)"""
    write_config(state_dir, ALLOWLIST + listed("default"))
    token = principals.mint(state_dir, "default")
    try:
        await _default_shares_mains(state_dir, token)
    except ConfigError as exc:
        assert "legacy name" in str(exc) and "agents.list" in str(exc), exc


async def _default_shares_mains(state_dir: Path, token: str) -> None:
    async with gateway(state_dir) as server:
        default = await connect(state_dir, operator=False, credential=token)
        main = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            asked = await default.request("exec", {"command": "cat /etc/hostname"})
            assert asked["details"]["status"] == "approval-pending", asked
            await operator.request(
                "approve", {"id": asked["details"]["approvalId"], "decision": "allow-always"}
            )
            await wait_until(lambda: not server.services.approvals.pending())
            await wait_until(lambda: ApprovalsStore(state_dir / "exec-approvals.json").load().agents)
            theirs = await main.request("exec", {"command": "cat /etc/hostname"})
            assert theirs["details"]["status"] == "approval-pending", (
                theirs["details"]["status"],
                theirs["text"],
            )
        finally:
            for client in (default, main, operator):
                await client.close()


NON_MAIN = (
    '[tools.exec]\nsecurity = "full"\nask = "off"\n\n'
    '[agents.defaults.sandbox]\nmode = "non-main"\nbackend = "bwrap"\n'
)


async def test_class5_a_case_variant_of_the_main_session_runs_on_the_host_past_its_lockdown(
    state_dir: Path,
) -> None:
    """Only the agent's main session runs on the host (`non-main`: every other session in a bwrap
    sandbox). The operator locks that session down (`/exec security=deny` on `agent:main:main`). Agent
    main then sends its command with the session key `MAIN`: it must run in a sandbox (a session of its
    own, not the main one) or be refused as the main one is, never on the host."""
    write_config(state_dir, NON_MAIN)
    home = state_dir.parent / "h"
    probe = f"test -d {home} && echo ON-HOST || echo IN-SANDBOX"
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            await operator.request(
                "policy.override", {"directive": "/exec security=deny", "sessionKey": "agent:main:main"}
            )
            with pytest.raises(RemoteError, match="security=deny"):
                await main.request("exec", {"command": probe, "sessionKey": "main"})
            other = await main.request("exec", {"command": probe, "sessionKey": "s2"})
            assert "IN-SANDBOX" in other["text"], other  # any other session: the sandbox
            try:
                variant = await main.request("exec", {"command": probe, "sessionKey": "MAIN"})
                text = variant["text"]
            except RemoteError as exc:
                text = str(exc)
            assert "ON-HOST" not in text, text
        finally:
            for client in (main, operator):
                await client.close()


async def test_class3_a_compromised_nodes_hello_is_kept_whole_for_its_links_life(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Node alpha is compromised: its hello lists 1.4 million capabilities (`{}` each). The gateway keeps
    what it needs of a hello (its id, its name, the capabilities it knows) for as long as the link is up:
    it must not keep megabytes of the node's words."""
    config = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(GATEWAY_NODE + config)
    hostile = Hostile(sshd_nodes[0], state_dir)
    hello = json.loads((sshd_nodes[0].root / "hello.json").read_text())
    hello["caps"] = [*hello["caps"], *({} for _ in range(1_400_000))]
    (sshd_nodes[0].root / "hello.json").write_text(json.dumps(hello))
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        try:
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                running = asyncio.ensure_future(main.request("exec", {"command": "ls", "node": "alpha"}))
                await hostile.next_run()  # the link is up: its hello was read and kept
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            running.cancel()
            assert held < 16 * MiB, f"the link keeps {held / MiB:.0f} MiB of the node's hello"
        finally:
            await main.close()


async def test_class3_every_field_of_a_nodes_hello_is_kept_cut() -> None:
    """The neighbours of the 1.4 million caps: a hello whose every text field is megabytes long, whose caps
    are long strings, repeated, or not strings at all. What the link keeps is kilobytes; an over-long node
    id is refused (cut, it would name another node)."""
    big = "x" * MiB
    frame = {
        "type": "hello",
        "protocol": 2,
        "nodeId": "n1",
        "displayName": big,
        "version": big,
        "platform": big,
        "caps": ["system.run"] * 100_000 + [big, 7, None, {}] + [f"c{i}" for i in range(100_000)],
        "pathEnv": big,
        "instance": big,
        "stateDir": big,
        "place": big,
    }
    hello = wire.decode(json.dumps(frame).encode())
    assert isinstance(hello, wire.Hello)
    kept = sum(len(v) for v in vars(hello).values() if isinstance(v, str)) + sum(map(len, hello.caps))
    assert kept < 64 * 1024 and len(hello.caps) <= 64, (kept, len(hello.caps))
    assert hello.caps[0] == "system.run" and hello.caps.count("system.run") == 1
    with pytest.raises(wire.WireError, match="nodeId"):
        wire.decode(json.dumps({**frame, "nodeId": big}).encode())


async def test_class1_a_local_peer_writes_escapes_into_the_operators_terminal_through_the_access_log() -> (
    None
):
    """`exechost console --web` logs one line per request on its stderr: the operator's terminal. Another
    Unix account on the machine (an agent's own account in the strong setup: the port is on the host's
    loopback) needs no key to ask for a public file; its path names one that does not exist, spelled with
    escape sequences. Nothing that reaches the operator's terminal may hold a control character."""
    lines: list[str] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    port = web_console.free_port()
    server = web_console.GuardedServer("true", port)
    runner = aiohttp_web.AppRunner(await server._make_app(), access_log_class=web_console.RouteAccessLog)
    access = logging.getLogger("aiohttp.access")
    kept, level = Kept(), access.level
    access.addHandler(kept)
    access.setLevel(logging.INFO)
    await runner.setup()
    site = aiohttp_web.TCPSite(runner, web_console.HOST, port)
    await site.start()
    try:
        reader, writer = await asyncio.open_connection(web_console.HOST, port)
        head = f"GET /static/%1b%5d0%3bPWNED%07%1b%5b2J HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        writer.write((head + "Connection: close\r\n\r\n").encode())
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 404"), answer[:80]
        await wait_until(lambda: lines)
        assert not any(ch in line for line in lines for ch in "\x1b\x07"), lines
    finally:
        await runner.cleanup()
        access.removeHandler(kept)
        access.setLevel(level)


async def test_class3_a_compromised_nodes_4mb_node_id_is_pinned_in_the_gateways_state(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Node alpha is compromised and says hello with a node id of 4 million characters. The gateway pins
    the id a node presents (node-keys.json) so that no other node can take it later; what it keeps must
    be bounded like every other field a node sends."""
    config = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(GATEWAY_NODE + config)
    hostile = Hostile(sshd_nodes[0], state_dir, node_id="n" * 4_000_000)
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        try:
            # The hello is refused as it is read (a node id is short clean text, wire.NODE_ID), naming the
            # node: the link never comes up, and nothing of the id is pinned or kept.
            with pytest.raises(RemoteError, match=r"node alpha: its hello was refused .*nodeId") as refused:
                await main.request("exec", {"command": "ls", "node": "alpha"})
            assert len(str(refused.value)) < 1024, "the refusal quotes the id"
            assert not [f for f in hostile.seen() if f.get("type") == "req"], "the refused link was used"
            keys = state_dir / "node-keys.json"
            kept = keys.stat().st_size if keys.exists() else 0
            assert kept < 64 * 1024, f"node-keys.json holds {kept} bytes after one hello"
        finally:
            await main.close()
