"""`policy check` says what `exec` does: a corpus of calls decided by both, every field of the decision equal
(issue 33 §2: the check had no grants, no env, no cwd fallback, and exec skipped the sandbox refusal)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.grants import GrantLimits
from engine.approvals.store import ApprovalsStore
from engine.protocol.frames import RemoteError
from engine.protocol.requests import ExecRequest
from engine.results import ToolError
from engine.tools.exec_request import ExecContext
from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config

ECHO = os.path.realpath(shutil.which("echo") or "/bin/echo")
HEAD = os.path.realpath(shutil.which("head") or "/usr/bin/head")
SANDBOX_REFUSED = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\n'
    '[agents.defaults.sandbox.docker]\nnetwork = "host"\n'
)


def corpus(tree: Path) -> list[dict[str, Any]]:
    return [
        {"command": "echo hi"},
        {"command": "ls -l"},
        {"command": "echo hi | wc -l", "workdir": str(tree)},
        {"command": "./run.sh"},  # no workdir: exec runs it in $HOME, not in the gateway's cwd
        {"command": "./run.sh", "workdir": str(tree)},
        {"command": "./run.sh", "workdir": str(tree / "gone")},  # fallback to $HOME, with the warning
        {"command": "echo hi", "env": {"MY_SETTING": "1"}},  # env not on the inert list asks
        {"command": "echo hi", "env": {"LANG": "C"}},
        {"command": "head -n1 /etc/hostname"},  # allowed by a live grant only
        {"command": "echo hi", "security": "deny"},
        {"command": "echo hi", "ask": "always"},
        {"command": "echo hi", "host": "gateway", "security": "full", "ask": "off"},
        {"command": "cat <<EOF\nx\nEOF"},
        {"command": "echo $(id)"},
    ]


async def _both(server: Any, client: Any, params: dict[str, Any], key: str) -> tuple[Any, Any]:
    check = {k: v for k, v in params.items() if k != "workdir"}
    if "workdir" in params:
        check["cwd"] = params["workdir"]
    checked = await client.request("policy.check", {**check, "sessionKey": key})
    ctx = ExecContext(agent_id="main", session_key=key, operator=True)
    prepared = await server.services.exec_tool._prepare(ExecRequest.decode(params), ctx)
    return checked, json.loads(json.dumps(prepared.decision.to_json()))


async def test_policy_check_and_exec_decide_every_call_alike(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    script = tree / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    monkeypatch.chdir(tree)  # the gateway's own cwd holds run.sh: only a wrong fallback would find it
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", ECHO)
    store.add_allowlist("main", str(script))
    key = "agent:main:s1"
    async with gateway(state_dir) as server:
        grant = GrantLimits(uses=5)
        server.services.grants.add("main", [HEAD], "head -n1 /etc/hostname", grant, session_key=key)
        client = await connect(state_dir)
        verdicts = set()
        for params in corpus(tree):
            checked, executed = await _both(server, client, params, key)
            assert checked == executed, params
            verdicts.add(executed["decision"])
        assert verdicts == {"allow", "ask", "deny"}  # the corpus reaches every verdict
        await client.close()


async def test_a_refused_env_override_is_refused_by_the_check_as_by_exec(state_dir: Path) -> None:
    """LD_PRELOAD on a host run: exec refused it after deciding, while the check said ask."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        client = await connect(state_dir)
        params = {"command": "ls", "env": {"LD_PRELOAD": "/tmp/x.so"}}
        with pytest.raises(RemoteError) as checked:
            await client.request("policy.check", {**params, "sessionKey": "agent:main:s1"})
        with pytest.raises(ToolError) as executed:
            await server.services.exec_tool._prepare(
                ExecRequest.decode(params), ExecContext(session_key="agent:main:s1")
            )
        assert "LD_PRELOAD" in str(executed.value) and str(executed.value) in str(checked.value)
        await client.close()


async def test_a_refused_sandbox_is_denied_by_exec_as_by_the_check(state_dir: Path) -> None:
    write_config(state_dir, SANDBOX_REFUSED)
    async with gateway(state_dir) as server:
        client = await connect(state_dir)
        checked, executed = await _both(server, client, {"command": "true"}, "agent:main:s1")
        assert checked == executed and executed["decision"] == "deny", executed
        await client.close()
