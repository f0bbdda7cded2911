"""Fresh round 17 b: a hostile agent on the wire (the control socket, its principals, its byte budgets)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine import ostext, principals
from engine.approvals.pending import NOT_UTF8
from engine.protocol.frames import RemoteError
from tests.helpers.gateway import ALLOWLIST, FULL, connect, gateway, listed, wait_until, write_config

pytestmark = pytest.mark.asyncio

MiB = 1 << 20


def _rss() -> int:
    """This process's resident bytes (the gateway runs in it)."""
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


@pytest.mark.xfail(
    strict=True,
    reason="open: the per-agent request budget charges a request its frame's bytes plus a flat 6 KiB, "
    "but the decoded params it holds while it runs are up to ~24x the frame (`[{},{},…]`: 3 bytes of "
    "JSON, 72 bytes of Python); 15 waiting polls of one agent within its 16 MiB pin ~370 MB",
)
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
            await wait_until(lambda: server._intake.requests.get("main", 0) >= 15, timeout=60)
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


@pytest.mark.xfail(
    strict=True,
    reason="open: `approvals.status` shows every requester the record's `run`, which is its first "
    "requester's; agent main, joining the operator's own ask with the identical call, reads the tail of "
    "the operator's run (its own /tmp, never main's) once the operator approves the two",
)
async def test_class2_agent_main_reads_the_operators_run_output_through_a_joined_ask(state_dir: Path) -> None:
    """The operator keeps a note in its own /tmp (its own places, never main's: fresh round 15 b) and
    runs `cat /tmp/op-note` naming no agent (main's policy: it asks). Agent main sends the identical call
    (same command and workdir): it joins the ask as a second requester, shown to the operator as main's.
    The operator approves once: `cat` of main's own /tmp is harmless to main. Each requester's run reads
    its own /tmp; main then asks `approvals.status` of the id its call was answered with."""
    write_config(state_dir, ALLOWLIST)
    home = str(state_dir.parent / "h")
    async with gateway(state_dir):
        operator = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        try:
            made = await operator.request(
                "exec", {"command": "printf OPSECRET > /tmp/op-note", "workdir": home}
            )
            await operator.request("approve", {"id": made["details"]["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: _ran(operator, made["details"]["approvalId"]))
            own = await operator.request("exec", {"command": "cat /tmp/op-note", "workdir": home})
            joined = await main.request("exec", {"command": "cat /tmp/op-note", "workdir": home})
            ask = str(own["details"]["approvalId"])
            assert joined["details"]["approvalId"] == ask, (own, joined)
            await operator.request("approve", {"id": ask, "decision": "allow-once"})
            await wait_until(lambda: _ran(operator, ask))
            seen = await main.request("approvals.status", {"approvalId": ask})
            assert "OPSECRET" not in str(seen), seen
        finally:
            for client in (main, operator):
                await client.close()


async def _ran(client: Any, ask: str) -> bool:
    """The approval's (first) run has ended (its status is final)."""
    got = await client.request("approvals.status", {"approvalId": ask})
    run = got["details"].get("run") or {}
    return run.get("status") in ("completed", "failed", "denied")


@pytest.mark.xfail(
    strict=True,
    reason="open: the pending-ask caps are 32 per principal and 256 in all, and the total counts the "
    "operator's own share with the agents': eight agents' 32 asks each fill it, and the operator's own "
    "exec is refused (APPROVAL_QUEUE_FULL), where connections keep the last 16 slots for the operator",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="open: the gateway's own watch (every second) looks at gateway.json, operator.json and the "
    "config, never at the agents' credential files: a credential re-minted on disk (an offline `agents "
    "add --rotate`, a restore) leaves the leaked one's live connection running commands until somebody "
    "runs `agents refresh`, where a replaced gateway token's holder is cut within a second",
)
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
            server.services.live_config.get()  # the watch's look (server._watch_files), now
            server._tokens_now()
            await wait_until(lambda: not server._rechecks)
            try:
                after = await attacker.request("exec", {"command": "echo after-the-rotation"})
                ran = "after-the-rotation" in after["text"]
            except (RemoteError, ConnectionError):
                ran = False
            assert not ran, "the leaked credential's connection still runs commands"
        finally:
            await attacker.close()
