"""Sessions through a real PTY: REPL, password prompt, keys, paste, resize, DSR and cursor-key mode."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.sessions import RunSpec, SessionManager

PY = sys.executable
# Reads raw bytes from the terminal until a sentinel byte sequence, then prints them as hex.
RAW_READER = (
    "import os,sys,tty;tty.setraw(0);print('ready',flush=True);buf=b''\n"
    "while not buf.endswith(sys.argv[1].encode()): buf+=os.read(0,100)\n"
    "print('GOT',buf.hex(),flush=True)"
)


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SessionManager]:
    manager = SessionManager(state_dir, kill_grace_sec=1.0)
    yield manager
    await manager.close()


async def start(mgr: SessionManager, command: str, **kw: object) -> str:
    result = await mgr.run(RunSpec(command=command, scope_key="p", pty=True, background=True, **kw))  # type: ignore[arg-type]
    return str(result.details["sessionId"])


async def until(mgr: SessionManager, sid: str, needle: str, polls: int = 40) -> str:
    seen = ""
    for _ in range(polls):
        result = await mgr.process("poll", {"sessionId": sid, "timeout": 1000}, "p")
        # Output may arrive a character at a time (a REPL's prompt): join the drained parts.
        text = result.text.removesuffix("\n\nProcess still running.")
        seen += "" if text == "(no new output)" else text
        if needle in seen:
            return seen
        if result.details["status"] != "running":
            break
    raise AssertionError(f"{needle!r} never appeared in {seen!r} (last: {result.text!r}, {result.details})")


async def test_python_repl(mgr: SessionManager) -> None:
    sid = await start(mgr, f"{PY} -q -i")
    await until(mgr, sid, ">>>")
    await mgr.process("write", {"sessionId": sid, "data": "print(6 * 7)\r"}, "p")
    await until(mgr, sid, "42")
    # Typed text, not ^D: readline switches the line discipline and a bare EOT can be lost then.
    sent = await mgr.process("send-keys", {"sessionId": sid, "literal": "exit()", "keys": ["enter"]}, "p")
    assert sent.text == f"Sent 7 bytes to session {sid}."
    await until(mgr, sid, "Process exited with code 0.")


async def test_cat_echo_and_eof(mgr: SessionManager) -> None:
    sid = await start(mgr, "cat")
    # Nothing printed yet, so the cursor-key mode is unknown: arrows would be a guess.
    refused = await mgr.process("send-keys", {"sessionId": sid, "keys": ["up"]}, "p")
    assert refused.text == (
        f"Session {sid} cursor key mode is not known yet. "
        "Poll or log until startup output appears, then retry send-keys."
    )
    await mgr.process("send-keys", {"sessionId": sid, "literal": "hello", "keys": ["enter"]}, "p")
    text = await until(mgr, sid, "hello")
    if text.count("hello") < 2:  # the terminal's echo, then cat's copy
        text += await until(mgr, sid, "hello")
    assert text.count("hello") == 2
    submit = await mgr.process("submit", {"sessionId": sid}, "p")
    assert submit.text == f"Submitted session {sid} (sent CR)."
    closed = await mgr.process("write", {"sessionId": sid, "data": "", "eof": True}, "p")
    assert closed.text == f"Wrote 0 bytes to session {sid} (stdin closed)."
    await until(mgr, sid, "Process exited with code 0.")


async def test_password_prompt_is_not_echoed(mgr: SessionManager) -> None:
    code = "import getpass; p = getpass.getpass('Password: '); print('got', len(p))"
    sid = await start(mgr, f'{PY} -c "{code}"')
    await until(mgr, sid, "Password:")
    await mgr.process("write", {"sessionId": sid, "data": "hunter2\r"}, "p")
    text = await until(mgr, sid, "got 7")
    assert "hunter2" not in text
    log = await mgr.process("log", {"sessionId": sid}, "p")
    assert "hunter2" not in log.text


async def test_ctrl_c_reaches_the_foreground_group(mgr: SessionManager) -> None:
    sid = await start(mgr, "echo armed; sleep 300")
    await until(mgr, sid, "armed")
    session = mgr.get(sid)
    assert session is not None
    for _ in range(5):
        # Like a user, press ^C again if it landed while the shell was between commands.
        await mgr.process("send-keys", {"sessionId": sid, "keys": ["C-c"]}, "p")
        try:
            await asyncio.wait_for(session.done.wait(), 2)
            break
        except TimeoutError:
            continue
    text = await until(mgr, sid, "Process exited with")
    assert "SIGINT" in text or "code 130" in text


async def test_term_and_size_and_resize(mgr: SessionManager) -> None:
    sid = await start(
        mgr,
        "echo TERM=$TERM; stty size; trap 'stty size' WINCH; echo trapped; while :; do sleep 0.05; done",
        cols=100,
        rows=30,
        env={"PATH": os.environ["PATH"]},  # no TERM given: the PTY gets xterm-256color
    )
    text = await until(mgr, sid, "trapped")
    assert "TERM=xterm-256color" in text
    assert "30 100" in text
    assert mgr.resize(sid, 132, 50)
    await until(mgr, sid, "50 132")


async def test_dsr_query_is_answered(mgr: SessionManager) -> None:
    code = (
        "import os,sys,tty;tty.setraw(0);os.write(1,b'\\x1b[6n');buf=b''\n"
        "while not buf.endswith(b'R'): buf+=os.read(0,32)\n"
        "print('\\r\\nPOS',buf.hex(),flush=True)"
    )
    sid = await start(mgr, f'{PY} -c "{code}"')
    text = await until(mgr, sid, "POS " + b"\x1b[1;1R".hex())
    assert "POS " + b"\x1b[1;1R".hex() in text
    assert "[6n" not in text


async def test_cursor_key_mode_and_paste(mgr: SessionManager) -> None:
    app_mode = "import sys;sys.stdout.write('\\x1b[?1h');sys.stdout.flush();" + RAW_READER.replace(
        "import os,sys,tty;", "import os,tty;"
    )
    sid = await start(mgr, f'{PY} -c "{app_mode}" 5A')
    await until(mgr, sid, "ready")
    session = mgr.get(sid)
    assert session is not None and session.cursor_key_mode == "application"
    await mgr.process("send-keys", {"sessionId": sid, "keys": ["up", "C-up"], "literal": "Z"}, "p")
    text = await until(mgr, sid, "GOT " + b"Z\x1bOA\x1b[1;5A".hex())
    # literal first, then keys: SS3 for the plain arrow in application mode, CSI 1;5 for ctrl.
    assert "GOT " + b"Z\x1bOA\x1b[1;5A".hex() in text

    sid2 = await start(mgr, f'{PY} -c "{RAW_READER}" 201~')
    await until(mgr, sid2, "ready")
    pasted = await mgr.process("paste", {"sessionId": sid2, "text": "echo hi\n"}, "p")
    assert pasted.text == f"Pasted 8 chars to session {sid2}."
    text2 = await until(mgr, sid2, "GOT " + b"\x1b[200~echo hi\n\x1b[201~".hex())
    assert "GOT " + b"\x1b[200~echo hi\n\x1b[201~".hex() in text2


async def test_send_keys_with_delay(mgr: SessionManager) -> None:
    sid = await start(mgr, f'{PY} -c "{RAW_READER}" xyz')
    await until(mgr, sid, "ready")
    sent = await mgr.process("send-keys", {"sessionId": sid, "keys": ["x", "y"], "delayMs": 20}, "p")
    assert sent.text == f"Sent 2 bytes to session {sid}."
    # A bare string is one key name, not a list of letters.
    one = await mgr.process("send-keys", {"sessionId": sid, "keys": "z"}, "p")
    assert one.text == f"Sent 1 bytes to session {sid}."
    assert "GOT " + b"xyz".hex() in await until(mgr, sid, "GOT " + b"xyz".hex())


async def test_raw_bytes_reach_viewers(mgr: SessionManager) -> None:
    sid = await start(mgr, "printf '\\033[31mred\\033[0m\\n'")
    session = mgr.get(sid)
    assert session is not None
    await session.done.wait()
    viewer = mgr.subscribe(sid)
    raw = b"".join([chunk.data async for chunk in viewer])
    assert b"\x1b[31mred\x1b[0m" in raw
    log = await mgr.process("log", {"sessionId": sid}, "p")
    assert log.text == "red"


async def test_a_terminal_the_view_cannot_make_fails_the_run_and_is_not_retried_without_one(
    mgr: SessionManager, tmp_path: Path
) -> None:
    """The host view makes a PTY session's terminal (RunSpec.pty_in_view): when it cannot, the run fails
    saying why, and is not retried with pipes (its argv would still try to make the terminal)."""
    from engine.commands import hostkeeper

    helper = hostkeeper.helper_path()
    if helper is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    marker = tmp_path / "ran"
    argv = [helper, "own-pts", "bogus", "--", "/bin/sh", "-c", f"touch {marker}"]
    result = await mgr.run(
        RunSpec(command="touch ran", argv=argv, scope_key="p", pty=True, pty_in_view=True, cwd=str(tmp_path))
    )
    assert result.details["status"] == "failed", result.text
    assert "made no terminal" in result.text and "retrying without PTY" not in result.text, result.text
    assert not marker.exists()
