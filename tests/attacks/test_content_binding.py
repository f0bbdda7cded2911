"""Issue 18 item 2: an approval runs exactly the bytes the operator was shown, or nothing.

Each attack asks through a real gateway, changes a file the command will execute or read as code, and
then a human (the operator's connection) approves. Before content binding the new bytes ran.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.protocol.client import ControlClient
from tests.attacks.harness import ALLOWLIST, tool
from tests.helpers.gateway import connect, gateway, wait_until, write_config

GOOD = "#!/bin/sh\necho approved-bytes\n"


@pytest.fixture(autouse=True, params=["children", "session-host"])
def where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every attack twice: plain children, and in the session host as the daemon runs them (the sealed
    copies then reach the command by SCM_RIGHTS)."""
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1" if request.param == "session-host" else "0")
    return str(request.param)


def evil(marker: Path) -> str:
    return f"#!/bin/sh\ntouch {marker}\necho evil-bytes\n"


async def _outcome(agent: ControlClient, key: str) -> str:
    async def hit() -> str | None:
        # Drained: undelivered events outlive a gateway restart, and each call here starts a new gateway.
        events = (await agent.request("events", {"sessionKey": key, "drain": True}))["events"]
        return next(
            (e["text"] for e in events if e["text"].startswith(("Exec finished", "Exec denied"))), None
        )

    text: str = await wait_until(hit, timeout=20)
    return text


async def approve_after(
    state: Path,
    command: str,
    workdir: Path,
    attack: Callable[[], Any],
    *,
    decision: str = "allow-once",
    shown: Callable[[dict[str, Any]], None] | None = None,
) -> str:
    """Ask for `command`, run `attack` while the ask is pending, approve as the operator: the follow-up."""
    write_config(state, ALLOWLIST)
    async with gateway(state):
        agent = await connect(state, "agent")
        operator = await connect(state, "operator")
        try:
            res = await agent.request(
                "exec", {"command": command, "workdir": str(workdir), "sessionKey": "k"}
            )
            assert res["details"]["status"] == "approval-pending", res
            if shown is not None:
                shown((await operator.request("approvals.pending"))["approvals"][0])
            attack()
            await operator.request("approve", {"id": res["details"]["approvalId"], "decision": decision})
            return await _outcome(agent, "k")
        finally:
            await agent.close()
            await operator.close()


def _rewrite_in_place(path: Path, body: str) -> None:
    with open(path, "r+b") as f:  # same inode: the old dev/ino check saw nothing
        f.write(body.encode())
        f.truncate()


async def test_in_place_rewrite_of_an_approved_binary(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "mybin", GOOD)
    ino = (tmp_path / "mybin").stat().st_ino

    def digests(view: dict[str, Any]) -> None:
        rows = {d["path"]: d for d in view["contentDigests"]}
        assert rows[str(tmp_path / "mybin")]["agentWritable"] is True, rows

    text = await approve_after(
        state_dir,
        "./mybin",
        tmp_path,
        lambda: _rewrite_in_place(tmp_path / "mybin", evil(marker)),
        shown=digests,
    )
    assert (tmp_path / "mybin").stat().st_ino == ino
    assert "approval-stale" in text and str(tmp_path / "mybin") in text and "sha256" in text, text
    assert not marker.exists()


async def test_in_place_rewrite_of_an_elf_binary(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    shutil.copy("/bin/echo", tmp_path / "mybin")
    text = await approve_after(
        state_dir,
        "./mybin hi",
        tmp_path,
        lambda: _rewrite_in_place(tmp_path / "mybin", evil(marker)),
    )
    assert "approval-stale" in text, text
    assert not marker.exists()


async def test_truncate_and_write(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "mybin", GOOD)

    def attack() -> None:
        with open(tmp_path / "mybin", "w") as f:  # O_TRUNC, same inode
            f.write(evil(marker))

    text = await approve_after(state_dir, "./mybin", tmp_path, attack)
    assert "approval-stale" in text, text
    assert not marker.exists()


async def test_rename_over(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "mybin", GOOD)
    tool(tmp_path / "new", evil(marker))
    text = await approve_after(
        state_dir, "./mybin", tmp_path, lambda: os.replace(tmp_path / "new", tmp_path / "mybin")
    )
    assert "approval-stale" in text, text
    assert not marker.exists()


async def test_hard_link_swap(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "good", GOOD)
    os.link(tmp_path / "good", tmp_path / "mybin")
    tool(tmp_path / "bad", evil(marker))

    def attack() -> None:
        os.unlink(tmp_path / "mybin")
        os.link(tmp_path / "bad", tmp_path / "mybin")

    text = await approve_after(state_dir, "./mybin", tmp_path, attack)
    assert "approval-stale" in text, text
    assert not marker.exists()


async def test_script_operand_rewrite(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "s.sh").write_text("echo approved-bytes\n")
    text = await approve_after(
        state_dir, "sh s.sh", tmp_path, lambda: _rewrite_in_place(tmp_path / "s.sh", f"touch {marker}\n")
    )
    assert "approval-stale" in text and "s.sh" in text, text
    assert not marker.exists()


async def test_python_script_operand_rewrite(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "x.py").write_text("print('approved-bytes')\n")
    text = await approve_after(
        state_dir,
        "python3 -u x.py",
        tmp_path,
        lambda: _rewrite_in_place(tmp_path / "x.py", f"open({str(marker)!r}, 'w')\n"),
    )
    assert "approval-stale" in text and "x.py" in text, text
    assert not marker.exists()


async def test_shebang_line_retargeted(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "interp", f"#!/bin/sh\ntouch {marker}\n")
    tool(tmp_path / "run", GOOD)
    text = await approve_after(
        state_dir,
        "./run",
        tmp_path,
        lambda: _rewrite_in_place(tmp_path / "run", f"#!{tmp_path / 'interp'}\necho approved-bytes\n"),
    )
    assert "approval-stale" in text, text
    assert not marker.exists()


async def test_shebang_interpreter_replaced(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "interp", '#!/bin/sh\nexec /bin/sh "$@"\n')
    tool(tmp_path / "run", f"#!{tmp_path / 'interp'}\necho approved-bytes\n")

    def shown(view: dict[str, Any]) -> None:
        roles = {d["path"]: d["role"] for d in view["contentDigests"]}
        assert roles.get(str(tmp_path / "interp")) == "interpreter", roles

    text = await approve_after(
        state_dir,
        "./run",
        tmp_path,
        lambda: _rewrite_in_place(tmp_path / "interp", f'#!/bin/sh\ntouch {marker}\nexec /bin/sh "$@"\n'),
        shown=shown,
    )
    assert "approval-stale" in text and "interp" in text, text
    assert not marker.exists()


async def test_unchanged_files_run_from_the_verified_copy(state_dir: Path, tmp_path: Path) -> None:
    """The defence must not break the honest case: unchanged content runs, ELF and scripts alike."""
    shutil.copy("/bin/echo", tmp_path / "mybin")
    text = await approve_after(state_dir, "./mybin hello-elf", tmp_path, lambda: None)
    assert text.startswith("Exec finished") and "hello-elf" in text, text
    tool(tmp_path / "interp", '#!/bin/sh\nexec /bin/sh "$@"\n')
    tool(tmp_path / "run", f"#!{tmp_path / 'interp'}\necho approved-bytes\n")
    text = await approve_after(state_dir, "./run", tmp_path, lambda: None)
    assert "approved-bytes" in text, text
    (tmp_path / "s.sh").write_text("echo from-script\n")
    text = await approve_after(state_dir, "sh s.sh", tmp_path, lambda: None)
    assert "from-script" in text, text


async def test_a_writer_racing_the_approval_never_gets_its_bytes_run(state_dir: Path, tmp_path: Path) -> None:
    """A writer flips the file between the approved and the evil bytes (in place and by rename) the whole
    time; every approval runs the approved bytes or is refused, never anything else."""
    marker = tmp_path / "pwned"
    target = tool(tmp_path / "mybin", GOOD)
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            body = evil(marker) if n % 2 else GOOD
            if n % 3:
                with contextlib.suppress(OSError):
                    _rewrite_in_place(target, body)
            else:
                tmp = tmp_path / f".w{n % 7}"
                tool(tmp, body)
                os.replace(tmp, target)

    outcomes: list[str] = []
    for _ in range(6):
        thread = threading.Thread(target=writer, daemon=True)
        stop.clear()
        # The ask records the approved bytes (GOOD); the writer starts only after it.
        tool(target, GOOD)
        outcome = await approve_after(state_dir, "./mybin", tmp_path, thread.start)
        stop.set()
        thread.join()
        outcomes.append(outcome)
        assert not marker.exists(), outcome
        assert "evil-bytes" not in outcome
        assert "approved-bytes" in outcome or "approval-stale" in outcome or "Exec denied" in outcome, outcome
    assert not marker.exists(), outcomes


@pytest.mark.parametrize("decision", ["allow-always"])
async def test_allow_always_of_a_writable_file_binds_its_content(
    state_dir: Path, tmp_path: Path, decision: str
) -> None:
    """Allow-always on an agent-writable `./tool` saves the content-bound command, not the path: once the
    file is rewritten the next run asks again instead of running the new bytes."""
    marker = tmp_path / "pwned"
    tool(tmp_path / "mybin", GOOD)
    text = await approve_after(state_dir, "./mybin", tmp_path, lambda: None, decision=decision)
    assert "approved-bytes" in text, text
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        again = await agent.request("exec", {"command": "./mybin", "workdir": str(tmp_path)})
        assert again["details"]["status"] == "completed" and "approved-bytes" in again["text"], again
        _rewrite_in_place(tmp_path / "mybin", evil(marker))
        after = await agent.request("exec", {"command": "./mybin", "workdir": str(tmp_path)})
        assert after["details"]["status"] == "approval-pending", after
        await agent.close()
    assert not marker.exists()


async def test_socket_exec_raw_command_must_be_its_argv(state_dir: Path, tmp_path: Path) -> None:
    """An `exec` frame showed one text (`rawCommand`, which a human approved on a `request` frame) and
    carried another argv: the argv ran on the strength of that approval. Now the frame is refused."""
    from engine.approvals.socket.server import (
        ApprovalSocketServer,
        PromptRequest,
        exec_frame,
        request_decision,
        request_exec,
    )
    from engine.tools.exec_host import LocalExecHost

    token = "exec-token-" + "r" * 24
    marker = tmp_path / "pwned"
    asked: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        asked.append(request)
        return "allow-once"

    write_config(state_dir, ALLOWLIST)
    path = state_dir / "exec-approvals.sock"
    async with ApprovalSocketServer(path, token, decider=human, exec_handler=LocalExecHost()):
        assert await request_decision(path, token, {"command": "echo hi"}, request_id="req-1") == "allow-once"
        claim = {
            "command": ["/bin/sh", "-c", f"touch {marker}", "x"],
            "rawCommand": "echo hi",
            "approvalDecision": "allow-once",
        }
        res = await request_exec(path, token, {}, frame=exec_frame(token, claim, request_id="req-1"))
        assert res is not None and res["ok"] is False, res
        assert res["error"]["code"] == "INVALID_REQUEST"
        assert res["error"]["message"] == "rawCommand does not match command"
        for argv, raw in (
            (["echo", "hi"], "echo  hi"),  # whitespace inside is not normalised
            (["/bin/sh", "-c", "echo hi", "x"], "echo hi"),  # trailing words run unseen as $0…
            (["echo", "hi there"], "echo hi there"),  # the canonical display quotes that word
        ):
            res = await request_exec(path, token, {"command": argv, "rawCommand": raw})
            assert res is not None and res["error"]["message"] == "rawCommand does not match command", argv
        # What the reference accepts still runs: the canonical display (trimmed) or a plain wrapper's script.
        for argv, raw in (
            (["echo", "hi there"], ' echo "hi there" '),
            (["/bin/sh", "-c", "echo ok"], "echo ok"),
        ):
            res = await request_exec(path, token, {"command": argv, "rawCommand": raw})
            assert res is not None and res["ok"] is True, (argv, res)
    assert len(asked) == 3 and not marker.exists()


def test_an_allowlisted_writable_tool_is_flagged_and_runs_only_the_decided_bytes(
    state_dir: Path, tmp_path: Path
) -> None:
    """A writable `./tool` on the allowlist: the operator is warned (policy check, `allowlist add`), and
    the run executes the sealed copy of the bytes just decided on, never a later rewrite."""
    from engine.approvals.store import ApprovalsStore
    from engine.commands.verified import StaleContent, verify
    from engine.config.loader import load_config_text
    from engine.policy.decision import evaluate
    from tests.helpers.gateway import cli

    marker = tmp_path / "pwned"
    target = tool(tmp_path / "tool", GOOD)
    added = cli(state_dir, "approvals", "allowlist", "add", str(target))
    assert added.returncode == 0 and "a file the agent can write" in added.stderr, added
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    # `tool` is no program known to take no code from its tree: the operator vouches for it (treeSafe),
    # else this writable tree would make it ask (engine.commands.treesafe).
    config = load_config_text(ALLOWLIST + 'treeSafe = ["tool"]\n')
    d = evaluate("./tool", config=config, store=store, cwd=str(tmp_path))
    assert d.verdict == "allow" and any("a file the agent can write" in w for w in d.warnings), d.warnings
    run = verify(d.content, d.enforced_command or "", d.enforced_command)
    try:
        assert run.fds and run.mirrors and run.mirrors[0].path in run.command, run.command
        _rewrite_in_place(target, evil(marker))  # after the check: the copy is what runs
        import subprocess

        from engine.commands.pinned import pinned_view

        view = pinned_view(None, run.rereads, mirrors=run.mirrors)  # as the spawn starts it
        try:
            out = subprocess.run(
                view.argv("/bin/sh", run.command) or ["/bin/sh", "-c", run.command],
                pass_fds=(*run.fds, *view.fds),
                capture_output=True,
                text=True,
            )
        finally:
            view.close()
        assert out.stdout == "approved-bytes\n", out
    finally:
        run.close()
    with pytest.raises(StaleContent, match="changed since it was approved"):
        verify(d.content, d.enforced_command or "", d.enforced_command)
    assert not marker.exists()


async def test_a_verified_copy_keeps_the_scripts_own_name(state_dir: Path, tmp_path: Path) -> None:
    """Running the sealed copy must not break the honest script: `$0` is a path to it whose last part is
    its name and whose directory reaches its siblings (its mirror in the run's view, verified.Mirror:
    no rename outside the run reaches a re-read of it), and a Python script still imports its siblings
    and sees `__file__` and `sys.argv[0]` as that one path."""
    (tmp_path / "helper.py").write_text("VALUE = 'sibling-import-ok'\n")
    (tmp_path / "x.py").write_text(
        "import sys, helper\nprint(helper.VALUE, sys.argv[0], __file__, __name__, sys.argv[1:])\n"
    )
    text = await approve_after(state_dir, "python3 -u x.py a1", tmp_path, lambda: None)
    mirrored = f"{state_dir}/pinned/m/0{tmp_path}"
    assert f"sibling-import-ok {mirrored}/x.py {mirrored}/x.py __main__ ['a1']" in text, text
    (tmp_path / "s.sh").write_text('echo "name=$0 dir=$(dirname "$0") args=$*"; cat "$(dirname "$0")/x.py"\n')
    text = await approve_after(state_dir, "sh -e s.sh b1 b2", tmp_path, lambda: None)
    assert f"name={mirrored}/s.sh dir={mirrored} args=b1 b2" in text and "import sys, helper" in text, text
    tool(tmp_path / "run", '#!/bin/sh\necho "self=$0 args=$*"\n')
    text = await approve_after(state_dir, "./run c1", tmp_path, lambda: None)
    assert f"self={mirrored}/run args=c1" in text, text


async def test_a_file_created_after_the_ask_does_not_run(state_dir: Path, tmp_path: Path) -> None:
    """`sh s.sh` or `./mybin` asked while the file did not exist: the approver saw nothing to run, so a
    file the agent creates afterwards must not run on that approval."""
    marker = tmp_path / "pwned"

    def shown_absent(view: dict[str, Any]) -> None:
        assert any(d["sha256"] is None for d in view["contentDigests"]), view["contentDigests"]

    for command, path in (("sh s.sh", tmp_path / "s.sh"), ("./mybin", tmp_path / "mybin")):
        text = await approve_after(
            state_dir, command, tmp_path, lambda p=path: tool(p, evil(marker)), shown=shown_absent
        )
        assert "approval-stale" in text and "appeared since it was approved" in text, text
        path.unlink()
    assert not marker.exists()


async def test_asks_for_other_bytes_never_coalesce(state_dir: Path, tmp_path: Path) -> None:
    """Two identical asks coalesce into one approval; if the file changed between them, the second is a
    new approval (the operator's answer to the first never covers bytes they were not shown)."""
    marker = tmp_path / "pwned"
    tool(tmp_path / "mybin", GOOD)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        params = {"command": "./mybin", "workdir": str(tmp_path)}
        first = (await agent.request("exec", params))["details"]
        same = (await agent.request("exec", params))["details"]
        assert same["approvalId"] == first["approvalId"]
        _rewrite_in_place(tmp_path / "mybin", evil(marker))
        other = (await agent.request("exec", params))["details"]
        assert other["status"] == "approval-pending" and other["approvalId"] != first["approvalId"]
        await agent.close()
    assert not marker.exists()


async def test_an_unreadable_writable_executable_is_refused_not_unbound(
    state_dir: Path, tmp_path: Path
) -> None:
    """Mode 0111 hides the bytes from the digest; the agent can still swap them. Such a file is refused at
    the run instead of running unverified (root reads anything, so this is checked as a decision)."""
    from engine.commands.verified import StaleContent, verify
    from engine.config.loader import load_config_text
    from engine.policy.decision import evaluate

    fifo = tmp_path / "mybin"
    os.mkfifo(fifo)  # unreadable as a program for everyone, root included
    os.chmod(fifo, 0o755)
    d = evaluate(str(fifo), config=load_config_text(ALLOWLIST), cwd=str(tmp_path))
    assert d.content is not None and d.content.items
    assert all(not i.sha256 for i in d.content.items), d.content.items  # unreadable, or not a program
    with pytest.raises(StaleContent):
        verify(d.content, d.pinned_command or str(fifo), d.pinned_command)
