"""`exec` frames on exec-approvals.sock: checked against this host's config and approvals file, then run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from engine.approvals.socket.server import (
    ApprovalSocketServer,
    PromptRequest,
    exec_frame,
    request_decision,
    request_exec,
)
from engine.approvals.store import ApprovalsStore
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import ALLOWLIST, write_config

TOKEN = "exec-token-" + "k" * 24


class Human:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[PromptRequest] = []

    async def __call__(self, request: PromptRequest) -> str:
        self.asked.append(request)
        return self.answer


async def run(state: Path, human: Human, request: dict) -> dict:
    path = state / "exec-approvals.sock"
    async with ApprovalSocketServer(path, TOKEN, decider=human, exec_handler=LocalExecHost()):
        res = await request_exec(path, TOKEN, request)
    assert res is not None
    return res


async def test_allowlisted_runs_without_asking(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore().add_allowlist("main", "/usr/bin/echo")
    human = Human("deny")
    res = await run(state_dir, human, {"command": ["echo", "from", "socket"], "cwd": "/tmp"})
    assert res["ok"] is True
    assert res["payload"]["stdout"] == "from socket\n"
    assert res["payload"]["exitCode"] == 0 and res["payload"]["success"] is True
    assert human.asked == []


async def test_miss_asks_and_allow_once_runs(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    human = Human("allow-once")
    res = await run(state_dir, human, {"command": ["id", "-u"]})
    assert res["ok"] is True and res["payload"]["stdout"].strip().isdigit()
    [asked] = human.asked
    assert asked.command == "id -u" and asked.source == "socket-exec" and asked.resolved_path == "/usr/bin/id"
    assert ApprovalsStore().agent("main").allowlist == []  # once is once


async def test_miss_denied_by_human(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    res = await run(state_dir, Human("deny"), {"command": ["touch", str(state_dir / "nope")]})
    assert res["error"] == {
        "code": "UNAVAILABLE",
        "message": "SYSTEM_RUN_DENIED: user denied",
        "reason": "user-denied",
    }
    assert not (state_dir / "nope").exists()


async def test_allow_always_persists_the_pattern(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    res = await run(state_dir, Human("allow-always"), {"command": ["uname", "-s"]})
    assert res["ok"] is True
    assert any(r.pattern.endswith("/uname") for r in ApprovalsStore().agent("main").allowlist)


async def test_security_deny_is_disabled(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "deny"\n')
    human = Human("allow-once")
    res = await run(state_dir, human, {"command": ["id"]})
    assert res["error"]["reason"] == "security=deny"
    assert human.asked == []


async def test_ask_off_miss_is_denied(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "off"\n')
    res = await run(state_dir, Human("allow-once"), {"command": ["id"]})
    assert res["error"] == {
        "code": "UNAVAILABLE",
        "message": "SYSTEM_RUN_DENIED: allowlist miss",
        "reason": "allowlist-miss",
    }


async def test_loader_env_is_refused(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    res = await run(state_dir, Human("allow-once"), {"command": ["id"], "env": {"LD_PRELOAD": "/tmp/x.so"}})
    assert res["ok"] is False and res["error"]["reason"] == "env"


async def test_timeout_kills_the_group(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    res = await asyncio.wait_for(
        run(state_dir, Human("deny"), {"command": ["sleep", "30"], "timeoutMs": 300}), 15
    )
    assert res["ok"] is True and res["payload"]["timedOut"] is True and res["payload"]["success"] is False


async def test_client_decision_never_overrides_a_deny(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "off"\n')
    target = state_dir / "made"
    res = await run(
        state_dir,
        Human("allow-once"),
        {"command": ["touch", str(target)], "approvalDecision": "allow-always"},
    )
    assert res["error"]["reason"] == "allowlist-miss"
    assert not target.exists()
    assert ApprovalsStore().agent("main").allowlist == []


async def test_client_decision_answers_an_ask_only_with_the_humans_decision(state_dir: Path) -> None:
    """An approvalDecision stands for a decision a human made on a `request` with the same id and command
    (then nobody is asked twice); a frame that just claims one is asked about like any other."""
    write_config(state_dir, ALLOWLIST)
    path = state_dir / "exec-approvals.sock"
    human = Human("allow-once")
    async with ApprovalSocketServer(path, TOKEN, decider=human, exec_handler=LocalExecHost()):
        decided = await request_decision(path, TOKEN, {"command": "id -u"}, request_id="req-1")
        assert decided == "allow-once" and len(human.asked) == 1
        claim = {"command": ["id", "-u"], "approvalDecision": "allow-once"}
        frame = exec_frame(TOKEN, claim, request_id="req-1")
        res = await request_exec(path, TOKEN, {}, frame=frame)
        assert res is not None and res["ok"] is True and len(human.asked) == 1
        # Consumed once: the same claim again is asked about.
        claim = {"command": ["id", "-u"], "approvalDecision": "allow-once"}
        frame = exec_frame(TOKEN, claim, request_id="req-1")
        await request_exec(path, TOKEN, {}, frame=frame)
        assert len(human.asked) == 2


async def test_policy_refusal_is_reported(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\n')
    res = await run(state_dir, Human("allow-once"), {"command": ["id"]})
    assert res["ok"] is False and res["error"]["reason"] == "policy"
    assert "SYSTEM_RUN_DENIED" in res["error"]["message"]


async def test_output_is_whole_when_small_and_its_tail_when_cut(tmp_path: Path) -> None:
    import os

    from engine.tools.exec_host import OUTPUT_CAP, run_argv

    env = dict(os.environ)
    small = await run_argv(["sh", "-c", "echo out; echo err >&2"], cwd=str(tmp_path), env=env, timeout=60)
    assert (small["stdout"], small["stderr"], small["success"]) == ("out\n", "err\n", True)
    assert not small["stdoutTruncated"] and not small["stderrTruncated"] and "outputCapped" not in small
    # Past OUTPUT_CAP and under BYTE_CAP: the command runs to its end, its last chars kept, the cut said.
    cut = await run_argv(
        ["sh", "-c", f"head -c {OUTPUT_CAP} /dev/zero | tr '\\0' a; echo END"],
        cwd=str(tmp_path),
        env=env,
        timeout=60,
    )
    assert cut["success"] and cut["stdoutTruncated"] and "outputCapped" not in cut
    assert len(cut["stdout"]) == OUTPUT_CAP and cut["stdout"].endswith("aEND\n")


async def test_a_command_writing_without_end_is_killed_at_the_byte_cap(tmp_path: Path) -> None:
    import os

    from engine.tools.exec_host import OUTPUT_CAP, run_argv

    endless = await run_argv(["yes"], cwd=str(tmp_path), env=dict(os.environ), timeout=1800)
    assert endless["outputCapped"] and endless["stdoutTruncated"] and not endless["timedOut"]
    assert not endless["success"] and endless["exitCode"] == -9
    assert len(endless["stdout"]) == OUTPUT_CAP and "killed" in endless["error"]


async def test_session_overrides_the_gateway_keeps_decide_socket_frames(state_dir: Path) -> None:
    """The overrides table the gateway writes (session-overrides.json) decides an `exec` frame as it
    decides the same agent over the gateway: an agent-wide `security=deny` refuses it unasked."""
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore().add_allowlist("main", "/usr/bin/echo")
    table = {"version": 1, "overrides": {"agent:main": {"security": "deny"}}}
    (state_dir / "session-overrides.json").write_text(json.dumps(table))
    human = Human("allow-once")
    res = await run(state_dir, human, {"command": ["echo", "locked"]})
    assert res["error"]["reason"] == "security=deny" and human.asked == []


async def test_an_unreadable_overrides_table_refuses_socket_frames(state_dir: Path) -> None:
    """A table that does not parse may hold a lockdown: the frame is refused, never decided without it
    (and the file is left as it is: only the gateway sets a bad one aside)."""
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore().add_allowlist("main", "/usr/bin/echo")
    (state_dir / "session-overrides.json").write_text("{not json")
    human = Human("allow-once")
    res = await run(state_dir, human, {"command": ["echo", "unlocked"]})
    assert res["ok"] is False and "session overrides unreadable" in res["error"]["message"]
    assert human.asked == [] and (state_dir / "session-overrides.json").read_text() == "{not json"
