"""Content binding under the daemon: a command over an agent-writable script runs the verified sealed copy
(/proc/self/fd/N) — the fd must reach the command through its session holder, in the foreground, in the
background and in a PTY. Under the daemon every such run failed ("cannot open /proc/self/fd/10")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config_text
from engine.policy.decision import evaluate
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, connect, wait_until, write_config

# The system's python: a venv's (the checkout's, under a world-writable /tmp in a clone there) is never
# offered allow-always while the agent could write it (engine.commands.content, round 6 m).
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


async def test_verified_copies_reach_commands_under_holders(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    (tmp_path / "s.sh").write_text("echo from-$((6*7))\n")
    (tmp_path / "p.py").write_text("import sys\nprint('py', __file__.rsplit('/', 1)[-1], sys.argv[1:])\n")
    # An interpreter may take more code from its (writable) tree than the script: a path entry for sh
    # no longer runs it unasked there; allow-always for the exact command in this cwd does.
    for command in ("sh s.sh", f"{PYTHON} p.py a b"):
        decided = evaluate(command, config=load_config_text(ALLOWLIST), cwd=str(tmp_path))
        store.persist_allow_always("main", decided.allow_always_patterns)
    with Daemon(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        base = {"agentId": "main", "sessionKey": "k", "workdir": str(tmp_path)}
        res = await agent.request("exec", {**base, "command": "sh s.sh"})
        assert res["details"]["status"] == "completed" and "from-42" in res["text"], res
        res = await agent.request("exec", {**base, "command": f"{PYTHON} p.py a b"})
        assert "py p.py ['a', 'b']" in res["text"], res
        res = await agent.request("exec", {**base, "command": "sh s.sh", "pty": True})
        assert "from-42" in res["text"], res
        bg = await agent.request("exec", {**base, "command": "sh s.sh", "background": True})
        sid = bg["details"]["sessionId"]

        async def logged() -> str:
            got = await agent.request("process", {"action": "log", "sessionId": sid, "sessionKey": "k"})
            return str(got.get("text") or "")

        assert "from-42" in await wait_until(lambda: _has(logged, "from-42"), timeout=30)
        await agent.close()


async def _has(read: object, needle: str) -> str | None:
    text = await read()  # type: ignore[operator]
    return text if needle in text else None
