"""Sessions engine: exec result shapes, the `process` actions' texts, output caps, events and keys."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.results import ToolError
from engine.sessions import RunSpec, SessionManager, SystemEvents
from engine.sessions import registry as registry_module
from engine.sessions.actions import KILL_WAIT_SEC
from engine.sessions.fanout import OutputChunk, OutputSubscription
from engine.sessions.keys import encode_keys, encode_paste, needs_cursor_mode
from engine.sessions.launcher import home_workdir
from engine.sessions.output import SessionOutput
from engine.sessions.outtext import TextDecoder, sanitize
from engine.sessions.registry import Registry, clamp_cleanup_ms, derive_session_name, make_slug
from engine.sessions.textviews import OutputBuffer
from engine.tools.decide import checked_workdir
from tests.helpers.gateway import wait_until

RUNNING_SUFFIX = "Use process (list/poll/log/write/kill/clear/remove) for follow-up."


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SessionManager]:
    manager = SessionManager(state_dir, kill_grace_sec=1.0)
    yield manager
    await manager.close()


async def bg(mgr: SessionManager, command: str, scope: str = "s1", **kw: object) -> str:
    result = await mgr.run(RunSpec(command=command, scope_key=scope, background=True, **kw))  # type: ignore[arg-type]
    assert result.details["status"] == "running"
    return str(result.details["sessionId"])


async def wait_exit(mgr: SessionManager, sid: str, scope: str = "s1") -> str:
    text = ""
    for _ in range(100):
        result = await mgr.process("poll", {"sessionId": sid, "timeout": 2000}, scope)
        text += result.text
        if result.details["status"] != "running":
            return text
    raise AssertionError("session never exited")


# -- exec results ----------------------------------------------------------------------------------
async def test_completed_result(mgr: SessionManager) -> None:
    result = await mgr.run(RunSpec(command="echo out; echo err >&2", scope_key="s1"))
    assert result.text == "out\nerr"
    assert result.details["status"] == "completed"
    assert result.details["exitCode"] == 0
    assert result.details["aggregated"] == "out\nerr"
    assert result.details["cwd"] == home_workdir()  # where an exec with no workdir runs
    assert isinstance(result.details["durationMs"], int)
    # A foreground session that finished vanishes (reference §2.2).
    assert mgr.list_sessions("s1") == []


async def test_nonzero_exit_is_completed_with_note(mgr: SessionManager) -> None:
    result = await mgr.run(RunSpec(command="echo partial; exit 3", scope_key="s1"))
    assert result.text == "partial\n\n(Command exited with code 3)"
    assert result.details["status"] == "completed"
    assert result.details["exitCode"] == 3
    empty = await mgr.run(RunSpec(command="true", scope_key="s1"))
    assert empty.text == "(no output)"


async def test_not_found_and_not_executable(mgr: SessionManager, tmp_path: Path) -> None:
    missing = await mgr.run(RunSpec(command="definitely-not-a-command-xyz", scope_key="s1"))
    assert missing.details["status"] == "failed"
    assert missing.details["exitCode"] == 127
    assert missing.text.endswith("\n\nCommand not found")
    script = tmp_path / "noexec.sh"
    script.write_text("echo hi\n")
    denied = await mgr.run(RunSpec(command=str(script), scope_key="s1"))
    assert denied.details["exitCode"] == 126
    assert denied.text.endswith("Command not executable (permission denied)")


async def test_spawn_failure_is_a_failed_result(mgr: SessionManager, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-binary")
    result = await mgr.run(RunSpec(command="x", argv=[missing], scope_key="s1"))
    assert result.details["status"] == "failed"
    assert "No such file or directory" in result.text
    pty = await mgr.run(RunSpec(command="x", argv=[missing], pty=True, scope_key="s1"))
    assert pty.text.startswith("Warning: PTY spawn failed ([Errno 2] No such file or directory")
    assert "); retrying without PTY for `x`.\n\n[Errno 2]" in pty.text
    assert mgr.list_sessions(None) == []


async def test_empty_command_is_refused(mgr: SessionManager) -> None:
    with pytest.raises(ToolError, match=r"^Provide a command to start\.$"):
        await mgr.run(RunSpec(command="   ", scope_key="s1"))


async def test_workdir_fallback_warning(mgr: SessionManager, tmp_path: Path) -> None:
    """The manager's fallback is exec's (issue 33 §3: it was the gateway's own cwd here, $HOME there)."""
    missing = tmp_path / "nope"
    result = await mgr.run(RunSpec(command="pwd", cwd=str(missing), scope_key="s1"))
    cwd = home_workdir()
    decided: list[str] = []
    assert checked_workdir(str(missing), decided) == cwd and decided == [result.text.split("\n")[0]]
    assert result.text == f'Warning: workdir "{missing}" is unavailable; using "{cwd}".\n\n{cwd}'
    ok = await mgr.run(RunSpec(command="pwd", cwd=str(tmp_path), scope_key="s1"))
    assert ok.text == str(tmp_path)


async def test_env_is_passed_as_given(mgr: SessionManager) -> None:
    env = {"PATH": os.environ["PATH"], "ONLY_THIS": "yes"}
    result = await mgr.run(RunSpec(command="echo $ONLY_THIS-${HOME:-nohome}", env=env, scope_key="s1"))
    assert result.text == "yes-nohome"


async def test_timeout_text(state_dir: Path) -> None:
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    try:
        result = await manager.run(RunSpec(command="echo started; sleep 30", timeout_sec=0.5, scope_key="s"))
    finally:
        await manager.close()
    assert result.details["status"] == "failed"
    assert result.details["timedOut"] is True
    assert result.details["exitCode"] is None
    assert result.text.startswith(
        "started\n\nCommand timed out after 0.5 seconds. If this command is expected"
    )
    assert result.text.endswith("Do not rely on shell backgrounding with a trailing &.")


async def test_default_timeout_applies_in_foreground_only(state_dir: Path) -> None:
    manager = SessionManager(state_dir, timeout_sec=0.3, kill_grace_sec=0.5)
    try:
        fg = await manager.run(RunSpec(command="sleep 2", scope_key="s"))
        assert fg.details["timedOut"] is True
        # Backgrounded without an explicit timeout: no timeout at all (reference §1.10).
        sid = str(
            (await manager.run(RunSpec(command="sleep 1; echo ok", background=True, scope_key="s"))).details[
                "sessionId"
            ]
        )
        session = manager.get(sid)
        assert session is not None and session.spec.timeout_sec is None
        text = await wait_exit(manager, sid, "s")
        assert "ok" in text and text.endswith("Process exited with code 0.")
        # An explicit timeout still applies after backgrounding.
        sid2 = str(
            (
                await manager.run(RunSpec(command="sleep 5", background=True, timeout_sec=0.3, scope_key="s"))
            ).details["sessionId"]
        )
        text2 = await wait_exit(manager, sid2, "s")
        assert text2.endswith("Process exited with signal SIGTERM.")
    finally:
        await manager.close()


async def test_yield_backgrounds_then_poll(mgr: SessionManager) -> None:
    result = await mgr.run(RunSpec(command="echo early; sleep 0.6; echo late", yield_ms=10, scope_key="s1"))
    sid = result.details["sessionId"]
    assert (
        result.text == f"Command still running (session {sid}, pid {result.details['pid']}). {RUNNING_SUFFIX}"
    )
    assert set(result.details) == {"status", "sessionId", "pid", "startedAt", "cwd", "tail"}
    text = await wait_exit(mgr, sid)
    assert "late" in text
    assert text.endswith("\n\nProcess exited with code 0.")


async def test_abort_before_background_kills(mgr: SessionManager) -> None:
    task = asyncio.create_task(mgr.run(RunSpec(command="sleep 30", yield_ms=60_000, scope_key="s1")))
    for _ in range(200):
        if mgr.list_sessions(None):
            break
        await asyncio.sleep(0.01)
    [row] = mgr.list_sessions(None)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    session = mgr.get(row["sessionId"])
    assert session is not None
    await asyncio.wait_for(session.done.wait(), 10)
    assert session.exit_signal == "SIGTERM"


# -- notifyOnExit ----------------------------------------------------------------------------------
async def test_notify_on_exit(mgr: SessionManager) -> None:
    sid = await bg(mgr, "echo one; echo   two; exit 2", session_key="agent:main")
    await wait_exit(mgr, sid)
    assert mgr.events.drain("agent:main") == [f"Exec completed ({sid}, code 2) :: one two"]
    assert mgr.events.drain("agent:main") == []
    quiet = await bg(mgr, "true", session_key="agent:q")
    await wait_exit(mgr, quiet)
    assert mgr.events.peek("agent:q") == []
    loud = await bg(mgr, "true", session_key="agent:l", notify_on_exit_empty_success=True)
    await wait_exit(mgr, loud)
    assert mgr.events.drain("agent:l") == [f"Exec completed ({loud}, code 0)"]
    off = await bg(mgr, "echo x", session_key="agent:o", notify_on_exit=False)
    await wait_exit(mgr, off)
    assert mgr.events.peek("agent:o") == []


async def test_notify_failed_by_signal_and_compacts(mgr: SessionManager) -> None:
    sid = await bg(mgr, "printf '%0300d' 0; echo; kill -9 $$", session_key="k")
    await wait_exit(mgr, sid)
    [event] = mgr.events.drain("k")
    assert event.startswith(f"Exec failed ({sid}, signal SIGKILL) :: 000")
    assert event.endswith("…")
    assert len(event.split(" :: ", 1)[1]) == 180


def test_system_events_queue() -> None:
    events = SystemEvents(max_per_key=2)
    seen: list[tuple[str, str]] = []
    unsubscribe = events.subscribe(lambda key, text: seen.append((key, text)))
    for text in ("a", "b", "c"):
        events.enqueue("k", text)
    events.enqueue("  ", "ignored")
    assert events.peek("k") == ["b", "c"]
    assert events.keys() == ["k"]
    assert events.drain("k") == ["b", "c"]
    assert events.drain("k") == []
    unsubscribe()
    events.enqueue("k", "d")
    assert seen == [("k", "a"), ("k", "b"), ("k", "c")]


# -- process actions -------------------------------------------------------------------------------
async def test_action_errors(mgr: SessionManager) -> None:
    assert (await mgr.process("poll", {}, "s1")).text == "sessionId is required for this action."
    bad = await mgr.process("explode", {"sessionId": "x"}, "s1")
    assert bad.text == "Unknown action explode"
    assert bad.details["status"] == "failed"
    for action, text in [
        ("poll", "No session found for nope"),
        ("log", "No session found for nope"),
        ("write", "No active session found for nope"),
        ("send-keys", "No active session found for nope"),
        ("submit", "No active session found for nope"),
        ("paste", "No active session found for nope"),
        ("kill", "No active session found for nope"),
        ("clear", "No finished session found for nope"),
        ("remove", "No session found for nope"),
    ]:
        result = await mgr.process(action, {"sessionId": "nope"}, "s1")
        assert (result.text, result.details["status"]) == (text, "failed"), action


async def test_poll_unknown_id_answers_at_once(mgr: SessionManager) -> None:
    # A generous bound only to turn a hang (OpenClaw #86477) into a failure, not a timing assertion.
    result = await asyncio.wait_for(mgr.process("poll", {"sessionId": "nope", "timeout": 120000}, "s1"), 10)
    assert result.text == "No session found for nope"


async def test_scopes_isolate_sessions(mgr: SessionManager) -> None:
    sid = await bg(mgr, "sleep 30", scope="agent:a")
    assert (await mgr.process("poll", {"sessionId": sid}, "agent:b")).text == f"No session found for {sid}"
    assert (
        await mgr.process("kill", {"sessionId": sid}, "agent:b")
    ).text == f"No active session found for {sid}"
    assert (await mgr.process("list", {}, "agent:b")).text == "No running or recent sessions."
    assert [s["sessionId"] for s in mgr.list_sessions(None)] == [sid]
    listing = await mgr.process("list", {}, "agent:a")
    assert listing.text.startswith(f"{sid} running   ")
    assert listing.text.endswith(" :: sleep 30")
    assert listing.details["sessions"][0]["sessionId"] == sid


async def test_foreground_session_is_not_backgrounded(mgr: SessionManager) -> None:
    task = asyncio.create_task(mgr.run(RunSpec(command="cat", yield_ms=60_000, stdin=True, scope_key="s1")))
    for _ in range(200):
        if mgr.list_sessions(None):
            break
        await asyncio.sleep(0.01)
    sid = mgr.list_sessions(None)[0]["sessionId"]
    for action in ("poll", "log", "write", "kill", "remove"):
        result = await mgr.process(action, {"sessionId": sid, "data": "x"}, "s1")
        assert result.text == f"Session {sid} is not backgrounded.", action
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_write_eof_and_stdin_closed_texts(mgr: SessionManager) -> None:
    sid = await bg(mgr, "cat")
    wrote = await mgr.process("write", {"sessionId": sid, "data": "héllo\n"}, "s1")
    assert wrote.text == f"Wrote 7 bytes to session {sid}."
    closed = await mgr.process("write", {"sessionId": sid, "data": "bye\n", "eof": True}, "s1")
    assert closed.text == f"Wrote 4 bytes to session {sid} (stdin closed)."
    text = await wait_exit(mgr, sid)
    assert "héllo\nbye" in text
    assert text.endswith("Process exited with code 0.")
    no_stdin = await bg(mgr, "sleep 30", stdin=False)
    result = await mgr.process("write", {"sessionId": no_stdin, "data": "x"}, "s1")
    assert result.text == f"Session {no_stdin} stdin is not writable."
    empty = await mgr.process("paste", {"sessionId": sid, "text": ""}, "s1")
    assert empty.text == f"No active session found for {sid}"


async def test_poll_backoff_and_drain(mgr: SessionManager) -> None:
    sid = await bg(mgr, "echo first; exec cat")
    first = await mgr.process("poll", {"sessionId": sid, "timeout": 5000}, "s1")
    assert first.text == "first\n\nProcess still running."
    assert first.details["retryInMs"] == 5000
    retries = [(await mgr.process("poll", {"sessionId": sid}, "s1")).details["retryInMs"] for _ in range(5)]
    assert retries == [5000, 10000, 30000, 60000, 60000]
    again = await mgr.process("poll", {"sessionId": sid}, "s1")
    assert again.text == "(no new output)\n\nProcess still running."
    await mgr.process("write", {"sessionId": sid, "data": "more\n"}, "s1")
    fresh = await mgr.process("poll", {"sessionId": sid, "timeout": 5000}, "s1")
    assert fresh.text == "more\n\nProcess still running."
    assert fresh.details["retryInMs"] == 5000


async def test_kill_of_a_process_that_ignores_sigterm_says_running(state_dir: Path) -> None:
    # Issue 21: kill said `completed` while the text said "Termination requested" and it still ran.
    manager = SessionManager(state_dir, kill_grace_sec=KILL_WAIT_SEC + 1)  # SIGKILL after kill answers
    try:
        sid = await bg(manager, "trap '' TERM; echo armed; sleep 60")
        await wait_until(lambda: "armed" in manager.get(sid, "s1").output.read(0, 100).text)
        killed = await manager.process("kill", {"sessionId": sid}, "s1")
        assert killed.details["status"] == "running" and killed.details["terminationRequested"]
        still = "It is still running; poll to see it exit."
        assert killed.text == f"Termination requested for session {sid}. {still}"
    finally:
        await manager.close()


async def test_kill_clear_remove(mgr: SessionManager) -> None:
    sid = await bg(mgr, "sleep 30")
    assert (
        await mgr.process("clear", {"sessionId": sid}, "s1")
    ).text == f"No finished session found for {sid}"
    killed = await mgr.process("kill", {"sessionId": sid}, "s1")
    assert killed.text == f"Termination requested for session {sid}."
    assert killed.details["status"] == "completed"  # sleep is gone by the time kill answers
    text = await wait_exit(mgr, sid)
    assert text == "(no output recorded)\n\nProcess exited with signal SIGTERM."
    polled = await mgr.process("poll", {"sessionId": sid}, "s1")
    assert polled.details["status"] == "killed"  # issue 10: a kill is not a failure of the command
    assert polled.details["exitSignal"] == "SIGTERM"
    assert (await mgr.process("kill", {"sessionId": sid}, "s1")).text == f"No active session found for {sid}"
    assert (await mgr.process("clear", {"sessionId": sid}, "s1")).text == f"Cleared session {sid}."
    assert (await mgr.process("poll", {"sessionId": sid}, "s1")).text == f"No session found for {sid}"

    running = await bg(mgr, "sleep 30")
    session = mgr.get(running)
    assert session is not None
    removed = await mgr.process("remove", {"sessionId": running}, "s1")
    assert removed.text == f"Removed session {running} (termination requested)."
    assert mgr.get(running) is None
    await asyncio.wait_for(session.done.wait(), 10)
    finished = await bg(mgr, "true")
    await wait_exit(mgr, finished)
    assert (await mgr.process("remove", {"sessionId": finished}, "s1")).text == f"Removed session {finished}."


async def test_log_paging(mgr: SessionManager) -> None:
    sid = await bg(mgr, "seq 1 250")
    await wait_exit(mgr, sid)
    default = await mgr.process("log", {"sessionId": sid}, "s1")
    assert default.text.startswith("51\n52\n")
    assert default.text.endswith("250\n\n[showing last 200 of 250 lines; pass offset/limit to page]")
    assert default.details["totalLines"] == 250
    assert default.details["total"] == 250
    assert (await mgr.process("log", {"sessionId": sid, "limit": 2}, "s1")).text == "249\n250"
    assert (await mgr.process("log", {"sessionId": sid, "offset": 248}, "s1")).text == "249\n250"
    assert (await mgr.process("log", {"sessionId": sid, "offset": 0, "limit": 3}, "s1")).text == "1\n2\n3"
    quiet = await bg(mgr, "true")
    await wait_exit(mgr, quiet)
    assert (await mgr.process("log", {"sessionId": quiet}, "s1")).text == "(no output recorded)"
    live = await bg(mgr, "sleep 30")
    assert (await mgr.process("log", {"sessionId": live}, "s1")).text == "(no output yet)"


async def test_output_beyond_ring_is_paged_from_disk(state_dir: Path) -> None:
    manager = SessionManager(state_dir, log_cap_bytes=1024 * 1024)
    try:
        result = await manager.run(RunSpec(command="seq 1 60000", scope_key="s"))
        sid = result.details["sessionId"]
        assert result.text.startswith("[truncated: ")
        assert f"process log sessionId={sid}" in result.text
        assert result.text.endswith("\n60000")
        log_path = state_dir / "sessions" / f"{sid}.log"
        assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700
        head = await manager.process("log", {"sessionId": sid, "offset": 0, "limit": 3}, "s")
        assert head.text == "1\n2\n3"
        assert head.details["totalLines"] == 60000
        assert head.details["truncated"] is True
        assert (await manager.process("clear", {"sessionId": sid}, "s")).text == f"Cleared session {sid}."
        assert not log_path.exists()
    finally:
        await manager.close()


# -- output buffers --------------------------------------------------------------------------------
def test_ring_marker_pending_cap_and_tail(tmp_path: Path) -> None:
    # The log holds raw bytes in frames of 5 header bytes: 1575 bytes are lines 0-14.
    out = SessionOutput(tmp_path / "x.log", ring_chars=1000, pending_chars=300, log_cap=1575)
    for i in range(30):
        out.feed("stdout", (f"{i:04d}" + "." * 95 + "\n").encode())  # 100 chars a line
    assert out.ring.length == 1000
    assert out.dropped == 2000
    assert out.aggregated().startswith("[truncated: 2000 earlier chars dropped from memory;")
    assert out.tail(100) == "0029" + "." * 95 + "\n"
    stdout, stderr, dropped = out.drain()
    assert len(stdout) == 300 and stderr == "" and dropped == 2700
    assert out.drain() == ("", "", 0)
    # Disk log capped at lines 0-14, ring holds lines 20-29: an honest gap line between.
    full = out.full_text_sync()
    assert full.startswith("0000")
    assert "\n[... 500 chars not kept (log cap reached) ...]\n0020" in full
    assert full.endswith("0029" + "." * 95 + "\n")
    assert full.count("\n") == 15 + 2 + 10


def test_decoder_keeps_split_utf8_and_views_strip_controls() -> None:
    decoder = TextDecoder()
    data = "é€😀".encode()
    text = "".join(decoder.feed(data[i : i + 1]) for i in range(len(data)))
    assert text == "é€😀"
    assert decoder.feed(b"\xff") + decoder.feed(b"", final=True) == "\ufffd"
    # Whole escape sequences go, for pipes too: no `[31m` remnants in what the agent reads.
    assert sanitize("a\x00b\x07c\td\r\ne\x1b[31m") == "abc\td\r\ne"
    assert sanitize("x\u200by\ufeffz\u202e") == "xyz"
    assert sanitize("\x1b[1;31mred\x1b[0m \x1b]0;title\x07ok\x1b[?2004h", terminal=True) == "red ok"
    out = OutputBuffer()
    out.append("stdout", "ok\x1b[2J\x00\n")
    out.append("stderr", "\u200bwarn\n")
    assert out.aggregated() == "ok\nwarn\n"
    assert out.drain() == ("ok\n", "warn\n", 0)


async def test_slow_viewer_drops_oldest_with_gap() -> None:
    viewer = OutputSubscription(max_bytes=10)
    for i in range(5):
        viewer.push(OutputChunk("stdout", f"{i}abcd".encode()))
    gap = await viewer.get()
    assert gap == OutputChunk("gap", b"", 15)
    assert await viewer.get() == OutputChunk("stdout", b"3abcd")
    assert await viewer.get() == OutputChunk("stdout", b"4abcd")
    viewer.end()
    assert await viewer.get() is None


async def test_subscribe_sees_live_output(mgr: SessionManager) -> None:
    sid = await bg(mgr, "cat")
    viewer = mgr.subscribe(sid)
    await mgr.process("write", {"sessionId": sid, "data": "ping\n", "eof": True}, "s1")
    chunks = [chunk async for chunk in viewer]
    assert b"".join(c.data for c in chunks) == b"ping\n"
    with pytest.raises(KeyError):
        mgr.subscribe("nope")
    page = await mgr.read_output(sid)
    assert (page["offset"], page["nextOffset"], page["data"], page["dropped"]) == (0, 5, "ping\n", 0)
    tail = await mgr.read_output(sid, limit=2)
    assert (tail["offset"], tail["data"]) == (3, "g\n")
    resumed = await mgr.read_output(sid, offset=2, limit=2)
    assert (resumed["offset"], resumed["data"]) == (2, "ng")
    with pytest.raises(KeyError):
        await mgr.read_output("nope")


def test_raw_replay_reports_what_it_no_longer_holds() -> None:
    from engine.sessions.fanout import RawFanout

    raw = RawFanout(replay_bytes=10)
    for i in range(5):
        raw.push("stdout", f"{i}abcd".encode())
    start, data, dropped = raw.read(0)
    assert (start, data, dropped) == (15, b"3abcd4abcd", 15)
    assert raw.read(None, 3) == (22, b"bcd", 0)


# -- registry --------------------------------------------------------------------------------------
def test_slug_collisions() -> None:
    taken: set[str] = set()
    first = make_slug(taken.__contains__)
    assert first.count("-") == 1
    everything = lambda s: s != "x"  # noqa: E731
    with_time = make_slug(everything)
    assert with_time.count("-") == 4
    base_taken = make_slug(lambda s: s.count("-") == 1)
    assert base_taken.endswith("-2")
    three = make_slug(lambda s: s.count("-") == 1 or s.rsplit("-", 1)[1].isdigit())
    assert three.count("-") == 2 and not three.rsplit("-", 1)[1].isdigit()


def test_cleanup_clamp_and_sweep() -> None:
    assert clamp_cleanup_ms(None) == 1_800_000
    assert clamp_cleanup_ms(5) == 60_000
    assert clamp_cleanup_ms(10**12) == 3 * 3600 * 1000
    registry = Registry(60_000)
    assert registry.sweep() == []


async def test_sweeper_drops_old_finished(mgr: SessionManager) -> None:
    sid = await bg(mgr, "true")
    await wait_exit(mgr, sid)
    session = mgr.get(sid)
    assert session is not None and session.ended_at is not None
    assert mgr.registry.sweep(now=session.ended_at + 1_800_000 - 1) == []
    assert mgr.registry.sweep(now=session.ended_at + 1_800_001) == [sid]
    assert mgr.get(sid) is None


async def test_a_dropped_id_is_not_handed_out_again_at_once(
    mgr: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session host forgets a finished session a moment after the registry drops it: the same name
    spawned in that moment was refused there as a duplicate (seen in the bench: ~1 in 4,000 execs)."""
    sid = await bg(mgr, "true")
    await wait_exit(mgr, sid)
    assert mgr.registry.drop(sid) is not None
    base = sid.split("-")
    # Every word drawn is the dropped id's own: without the memory of dropped ids, new_id returns it.
    words = iter(base * 10)
    monkeypatch.setattr(registry_module.secrets, "choice", lambda seq: next(words))
    assert mgr.new_id() != sid
    assert mgr.new_id().startswith(f"{base[0]}-{base[1]}")


def test_session_name() -> None:
    assert derive_session_name("npm --silent run build") == "npm run"
    assert derive_session_name("ls") == "ls"
    # Issue 30: a loop was listed as `for i`; a leading assignment hid the command.
    assert derive_session_name("for i in 1 2 3; do echo $i; done") == "for i in 1 2 3; do echo $i; done"
    assert derive_session_name("while sleep 5; do date; done") == "while sleep 5; do date; done"
    assert derive_session_name("FOO=1 make -j4 build") == "make build"
    assert len(derive_session_name("x " + "y" * 100)) == 48


# -- keys ------------------------------------------------------------------------------------------
def test_key_encoding() -> None:
    def enc(*keys: str, mode: str = "normal") -> bytes:
        return encode_keys(keys=list(keys), cursor_mode=mode).data

    assert enc("C-c") == b"\x03"
    assert enc("^D") == b"\x04"
    assert enc("enter", "tab", "space", "bspace") == b"\r\t \x7f"
    assert enc("up", "left") == b"\x1b[A\x1b[D"
    assert enc("up", "home", mode="application") == b"\x1bOA\x1bOH"
    assert enc("C-up") == b"\x1b[1;5A"
    assert enc("S-M-right") == b"\x1b[1;4C"
    assert enc("C-delete") == b"\x1b[3;5~"
    assert enc("M-x") == b"\x1bx"
    assert enc("S-a") == b"A"
    assert enc("S-tab") == b"\x1b[Z"
    assert enc("f1", "f12", "kp5", "kpenter") == b"\x1bOP\x1b[24~\x1bOu\x1bOM"
    assert enc("M-enter") == b"\x1b\r"
    mixed = encode_keys(keys=["enter", "C-nosuch"], hex_bytes=["0x1b", "zz", "41"], literal="hi")
    assert mixed.data == b"hi\x1bA\rnosuch"
    assert mixed.warnings == ["Invalid hex byte: zz", 'Unknown key "nosuch" for modifiers; sending literal.']
    assert needs_cursor_mode(["up"]) and not needs_cursor_mode(["C-up", "enter"])


def test_paste_encoding_cannot_escape_brackets() -> None:
    assert encode_paste("ls\n") == "\x1b[200~ls\n\x1b[201~"
    assert encode_paste("ls\n", bracketed=False) == "ls\n"
    assert encode_paste("a\x1b[201~rm -rf ~\n") == "\x1b[200~arm -rf ~\n\x1b[201~"


async def test_the_operator_reads_and_stops_a_foreground_run_its_list_shows(mgr: SessionManager) -> None:
    """The operator's list shows foreground runs; what it may do with one is said, and log and kill work
    (the agent's own poll would drain output its waiting exec returns, so poll stays refused)."""
    task = asyncio.create_task(
        mgr.run(RunSpec(command="echo started; exec cat", yield_ms=60_000, stdin=True, scope_key="s1"))
    )
    await wait_until(lambda: mgr.list_sessions(None))
    sid = mgr.list_sessions(None)[0]["sessionId"]
    refused = await mgr.process("poll", {"sessionId": sid}, None)
    assert refused.text.startswith(f"Session {sid} is not backgrounded. It runs in the foreground")
    assert "process log" in refused.text
    await wait_until(lambda: "started" in mgr.registry.get(sid).output.tail())  # type: ignore[union-attr]
    log = await mgr.process("log", {"sessionId": sid}, None)
    assert log.text == "started", log.text
    # the agent's view of the same run is unchanged
    assert (await mgr.process("log", {"sessionId": sid}, "s1")).text == f"Session {sid} is not backgrounded."
    killed = await mgr.process("kill", {"sessionId": sid}, None)
    assert killed.details["terminationRequested"] is True, killed.text
    result = await task
    assert result.details["status"] == "failed", result.details
    assert "started" in result.text
