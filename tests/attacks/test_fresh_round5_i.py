"""Fresh attacker round 5, session 3, letter i: the host view, make pinning, special files, command joins,
per-agent quotas and content binding, attacked from the docs and the code (issue 27)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import attempt, refused, tool

# The payload every planted program runs: it records who ran it and whether the state dir (the operator's
# token) was in its view.
_PAYLOAD = """#!/bin/sh
{{ id -u; cat '{state}/operator.json' 2>&1; }} > '{marker}'
"""


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


# ---------------------------------------------------------------- class 4/5: what the decision runs


# Closed: a config is parsed only by a git only root can change (gitvet.parser_git).
async def test_class4_the_decision_runs_the_agents_own_git_to_parse_a_config(
    state_dir: Path, tmp_path: Path
) -> None:
    """Nothing is allowlisted, nothing is approved: the command only asks. But deciding it vets the
    repository's config with `git config --file - …`, and the git it runs is the command's own argv[0]
    as resolved — here `./git`, a script the agent wrote into its workspace. It runs in the gateway's own
    process context (no host view), so it reads the operator's token: from then on the agent approves
    its own asks. An agent's `policy.check` of the same text does it too, and so does an exec under
    security=deny (the tree is vetted before the policy refuses)."""
    work = _repo(tmp_path / "w")
    marker = work / "ran"
    tool(work / "git", _PAYLOAD.format(state=state_dir, marker=marker))
    details = await attempt(state_dir, "./git status", workdir=str(work))
    assert refused(details)  # the command itself was never allowed ...
    assert not marker.exists(), f"... but the decision ran the agent's git: {marker.read_text()!r}"


# Closed: a config is parsed only by a git only root can change (gitvet.parser_git).
async def test_class4_a_link_named_git_in_the_workspace_runs_at_decision_time(
    state_dir: Path, tmp_path: Path
) -> None:
    work = _repo(tmp_path / "w")
    marker = work / "ran"
    payload = tool(tmp_path / "bin" / "payload", _PAYLOAD.format(state=state_dir, marker=marker))
    os.symlink(payload, tmp_path / "bin" / "git")
    details = await attempt(state_dir, f"{tmp_path}/bin/git log -1", workdir=str(work))
    assert refused(details)
    assert not marker.exists(), f"the decision ran the agent's program: {marker.read_text()!r}"


# --------------------------------------------------------------------------- make: command-line variables


# Closed by tree27a/tree27b (round 4 fixes): kept as a regression.
async def test_class4_make_runs_a_command_line_shell_with_no_makefile(
    state_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "foo.c").write_text("int main(void) { return 0; }\n")
    marker = work / "ran"
    tool(work / "evil.sh", f"#!/bin/sh\necho shell > '{marker}'\n")
    details = await attempt(
        state_dir, "make SHELL=./evil.sh foo", allow=[("/usr/bin/make", None)], workdir=str(work)
    )
    assert refused(details) or not marker.exists(), "an allowlisted make ran the agent's SHELL unasked"


# Closed: a file a make assignment names is bound by its bytes (treefiles.make_value_paths).
async def test_class4_make_runs_a_command_line_compiler(state_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "foo.c").write_text("int main(void) { return 0; }\n")
    marker = work / "ran"
    tool(work / "cc", f"#!/bin/sh\necho cc > '{marker}'\n")
    details = await attempt(state_dir, "make CC=./cc foo", allow=[("/usr/bin/make", None)], workdir=str(work))
    assert refused(details) or not marker.exists(), "an allowlisted make ran the agent's CC unasked"


# --------------------------------------------------------------------------- the host view: ~/.ssh/config


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Closed: the host view makes ~/.ssh and the gateway's install read-only (hosttrust.trusted_dirs).
async def test_class1_a_host_command_plants_ssh_config_the_gateway_runs(
    state_dir: Path, tmp_path: Path
) -> None:
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import connect, gateway, write_config

    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700)  # the operator's: it holds the node's key and known_hosts
    known = home / ".ssh" / "known_hosts"
    known.write_text("")
    key = home / ".ssh" / "id_node"  # named by the node: without a key the link would not reach asyncssh
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    planted = work / "sshconf"
    planted.write_text(
        f"Match exec \"sh -c 'id -u > {marker}; cat {state_dir}/operator.json >> {marker}'\"\n  User nobody\n"
    )
    write_config(
        state_dir,
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[nodes.n1]\nhost = "127.0.0.1"\nport = {_free_port()}\nknownHosts = "{known}"\n'
        f'identityFile = "{key}"\n',
    )
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cp", arg_pattern=None)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir, "operator")
        try:
            copied = await agent.request(
                "exec", {"command": f"cp sshconf {home}/.ssh/config", "workdir": str(work)}
            )
            assert copied["details"]["status"] == "completed", copied["text"]
            # The operator's next look at the nodes (or any node use) connects: the link fails, but asyncssh
            # has read ~/.ssh/config by then.
            await operator.request("nodes.status", {"ping": True})
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), f"the gateway ran the planted ssh config: {marker.read_text()!r}"


# ------------------------------------------------------------------ special files: a FIFO as a tree file


def _feed_fifo(path: Path, data: bytes, stop: threading.Event) -> threading.Thread:
    """Write `data` into the FIFO at `path` each time a reader opens it (as an agent's process would), one
    whole copy per open: after each, wait (inotify IN_CLOSE_NOWRITE) for that reader to close it."""
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_CLOEXEC)
    assert watch >= 0 and libc.inotify_add_watch(watch, os.fsencode(path), 0x10) >= 0  # IN_CLOSE_NOWRITE

    def feed() -> None:
        try:
            while not stop.is_set():
                fd = os.open(path, os.O_WRONLY)  # blocks until a program opens it for reading
                try:
                    if stop.is_set():
                        return
                    os.write(fd, data)
                finally:
                    os.close(fd)
                os.read(watch, 4096)  # that reader closed it: the next open is a new reader
        finally:
            os.close(watch)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def _stop_feeding(path: Path, stop: threading.Event, feeder: threading.Thread) -> None:
    stop.set()
    if feeder.is_alive():  # blocked in its open: a reader that closes at once lets it see `stop`
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    feeder.join(10)


# Closed: whatever exists at a tree file's name is a finding, a FIFO left unbound (treefiles.tree_files).
async def test_class6_a_fifo_package_json_is_no_file_to_vet_and_npm_runs_what_it_reads(
    state_dir: Path, tmp_path: Path
) -> None:
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config

    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    os.mkfifo(work / "package.json")
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/npm", arg_pattern=None)
    script = f"id -u > {marker}"
    stop = threading.Event()
    fifo = work / "package.json"
    feeder = _feed_fifo(fifo, json.dumps({"name": "w", "scripts": {"x": script}}).encode(), stop)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            # npm takes seconds to start: wait for it (up to the 120 s yield window), not the default window
            result = await agent.request(
                "exec", {"command": "npm run x", "workdir": str(work), "yieldMs": 120_000, "timeout": 110}
            )
            status = result["details"]["status"]
        finally:
            await agent.close()
            _stop_feeding(fifo, stop, feeder)
    assert status == "approval-pending" or not marker.exists(), "npm ran a package.json nobody vetted"


# Closed by tree27a/tree27b (round 4 fixes): kept as a regression.
async def test_class6_a_fifo_makefile_is_offered_allow_always(state_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    os.mkfifo(work / "mk")
    details = await attempt(state_dir, "make -f mk", allow=[("/usr/bin/make", None)], workdir=str(work))
    assert details["status"] == "approval-pending"
    assert "allow-always" not in details["allowedDecisions"], "an unvettable makefile can be allowed for good"


# ---------------------------------------------------------------------- content binding: approve, then swap


async def _approve_first_ask(
    state_dir: Path, command: str, work: Path, decision: str, *, background: bool = False
) -> dict[str, Any]:
    """The agent asks for `command`; the operator (attached) answers `decision`; the exec's result."""
    from tests.helpers.gateway import connect, wait_until

    operator = await connect(state_dir, "operator")
    agent = await connect(state_dir, "agent", operator=False)
    try:
        await operator.request("approvals.attach", {})
        params = {"command": command, "workdir": str(work), "background": background}
        call = asyncio.ensure_future(agent.request("exec", params))

        async def asked() -> list[dict[str, Any]] | bool:
            return True if call.done() else await operator.pending_approvals()

        pending = await wait_until(asked, timeout=60)
        assert pending is not True, f"it did not ask: {(await call)['text']}"
        await operator.request("approve", {"id": pending[0]["id"], "decision": decision})
        result: dict[str, Any] = await asyncio.wait_for(call, 120)
        return result
    finally:
        await agent.close()
        await operator.close()


# Closed: a file a make assignment names is bound by its bytes (treefiles.make_value_paths).
async def test_class6_allow_always_on_make_with_a_shell_assignment_leaves_the_shell_unbound(
    state_dir: Path, tmp_path: Path
) -> None:
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config

    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    (work / "Makefile").write_text("all:\n\t@true\n")
    tool(work / "s.sh", "#!/bin/sh\necho approved >> ran\n")
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/make", arg_pattern=None)
    command = "make SHELL=./s.sh all"
    async with gateway(state_dir):
        # allow-always is not offered for make in a writable tree (treecode.RECIPE_TREE): allow once
        first = await _approve_first_ask(state_dir, command, work, "allow-once")
        assert first["details"]["status"] == "completed", first["text"]
        assert marker.exists(), first
        assert marker.read_text() == "approved\n"
        tool(work / "s.sh", "#!/bin/sh\necho swapped >> ran\n")  # the approved command is unchanged
        agent = await connect(state_dir, "agent", operator=False)
        try:
            again = await agent.request("exec", {"command": command, "workdir": str(work)})
        finally:
            await agent.close()
    assert again["details"]["status"] == "approval-pending" or "swapped" not in marker.read_text(), (
        "the rewritten shell ran under the earlier allow-always"
    )


# --------------------------------------------------------------------------- the host view: ambient sockets

_DOCKER_SOCKETS = [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)]


@pytest.mark.skipif(not _DOCKER_SOCKETS or not os.path.exists("/usr/bin/curl"), reason="dockerd, curl")
# Closed: the host view puts an empty file over the engine's sockets (exec_host.engine_sockets).
async def test_class1_a_host_command_reaches_the_docker_api_from_the_host_view(
    state_dir: Path, tmp_path: Path
) -> None:
    """Under allowlist the same is one allowlisted curl in a tree the agent cannot write (a non-root
    gateway); here (root, every tree writable) security=full stands in for it: the view is the same."""
    work = tmp_path / "w"
    work.mkdir()
    details = await attempt(
        state_dir,
        f"curl -s --unix-socket {_DOCKER_SOCKETS[0]} http://docker/_ping",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        workdir=str(work),
    )
    assert details["status"] == "completed", details["_text"]
    assert details["aggregated"].strip() != "OK", "a host command spoke to the Docker engine"


# Closed: the host view makes ~/.ssh and the gateway's install read-only (hosttrust.trusted_dirs).
async def test_class1_the_gateways_own_code_is_writable_from_the_host_view(
    state_dir: Path, tmp_path: Path
) -> None:
    """`test -w` only asks (nothing is written); security=full stands in for an allowlisted writer such as
    `cp` or `tee`, which is all it takes: the next session host or CLI the gateway starts runs the file."""
    import sysconfig

    from engine.sessions.hostlink import HOST_MAIN

    work = tmp_path / "w"
    work.mkdir()
    targets = [HOST_MAIN, sysconfig.get_paths()["purelib"]]
    checks = " ; ".join(f"if test -w {t}; then echo writable; fi" for t in targets)
    details = await attempt(
        state_dir,
        checks,
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        workdir=str(work),
    )
    assert details["status"] == "completed", details["_text"]
    assert "writable" not in details["aggregated"], "a host command can rewrite code the gateway runs"


# ----------------------------------------------------------------------- TREE_SAFE: a program-running option


def test_class4_rg_hostname_bin_is_a_program_running_option() -> None:
    """Was open: TREE_SAFE listed rg's program-running option as --pre only; ripgrep >= 14's
    --hostname-bin=COMMAND runs COMMAND (to name the host in hyperlinks). Decided without running rg (this
    machine's Debian ripgrep 13 predates the option): the one question is whether the tree-safe list would
    let the command run unasked."""
    from engine.commands.treesafe import is_tree_safe

    argv = ["rg", "--hostname-bin=./x", "--hyperlink-format=default", "foo"]
    assert not is_tree_safe(argv, "/usr/bin/rg"), "rg with --hostname-bin counted as taking no code"
    assert not is_tree_safe(["rg", "--hostname-bin", "./x", "foo"], "/usr/bin/rg")
    assert is_tree_safe(["rg", "--hyperlink-format=default", "foo"], "/usr/bin/rg")  # the plain search
    # rg's options are read as an allowlist: the next program-running option asks before anyone lists it.
    assert not is_tree_safe(["rg", "--some-future-option=./x", "foo"], "/usr/bin/rg")
    assert not is_tree_safe(["rg", "-z", "foo"], "/usr/bin/rg")  # runs the decompressors on PATH
    assert is_tree_safe(["rg", "-n", "-i", "-g", "*.py", "-A3", "--", "-x", "."], "/usr/bin/rg")


# ------------------------------------------------------------------------ the host view: another agent's PTY


# Was open: every agent's host commands shared the gateway's uid and the host's /dev/pts, and /dev/pts is
# no /proc or /dev/fd word: an allowlisted `echo … | tee /dev/pts/N` of agent main wrote into agent ops's
# PTY session, forging its output (and a reader there takes its keystrokes). Closed: every run has a
# /dev/pts of its own, and a PTY session's terminal is made in it (engine/commands/hostenter/layers.c).
async def test_class2_an_allowlisted_tee_writes_into_another_agents_pty_session(
    state_dir: Path, tmp_path: Path
) -> None:
    from engine import principals
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import ALLOWLIST, connect, gateway, listed, wait_until, write_config

    work = tmp_path / "w"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + listed("ops"))
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    for agent, program in (("ops", "/usr/bin/cat"), ("main", "/usr/bin/echo"), ("main", "/usr/bin/tee")):
        store.add_allowlist(agent, program, arg_pattern=None)
    ops_token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        ops = await connect(state_dir, "ops", operator=False, credential=ops_token)
        main = await connect(state_dir, "main", operator=False)
        try:
            started = await ops.request(
                "exec", {"command": "cat", "workdir": str(work), "pty": True, "background": True}
            )
            session = started["details"]["sessionId"]
            pid = started["details"]["pid"]
            tty = await wait_until(lambda: _tty_of(pid), timeout=30)  # what `ls -l /dev/pts` showed main
            # ... and every terminal the host has, in case ops's is named differently where main looks
            targets = " ".join(sorted({tty, *_host_ptys()}))
            forged = await main.request(
                "exec", {"command": f"echo FORGED-BY-MAIN | tee {targets}", "workdir": str(work)}
            )
            assert forged["details"]["status"] in ("completed", "failed"), forged["text"]  # it ran

            async def ops_sees() -> str:
                log = await ops.request("process", {"action": "log", "sessionId": session})
                return str(log.get("text", ""))

            # ops types a line after main's write: the PTY keeps order, so once ops sees its own line
            # echoed, whatever main wrote before it has been read too.
            await ops.request("process", {"action": "write", "sessionId": session, "data": "SENTINEL\n"})
            await wait_until(lambda: _contains(ops_sees, "SENTINEL"), timeout=30)
            seen = await ops_sees()
            await ops.request("process", {"action": "kill", "sessionId": session})
        finally:
            await ops.close()
            await main.close()
    assert "FORGED-BY-MAIN" not in seen, "agent main wrote into agent ops's session"


def _tty_of(pid: int) -> str | None:
    """The terminal a process (or, under the host view's bwrap, its child) has as stdin."""
    for candidate in [pid, *_children(pid)]:
        try:
            target = os.readlink(f"/proc/{candidate}/fd/0")
        except OSError:
            continue
        if target.startswith("/dev/pts/"):
            return target
    return None


def _host_ptys() -> list[str]:
    """Every terminal in the host's /dev/pts (the gateway's view)."""
    return [f"/dev/pts/{name}" for name in os.listdir("/dev/pts") if name.isdigit()]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(p) for p in f.read().split()]
    except OSError:
        return []
    return kids + [g for k in kids for g in _children(k)]


async def _contains(read: Callable[[], Awaitable[str]], text: str) -> bool:
    return text in await read()


# ----------------------------------------------------------------------- the host view: the nodes' SSH key


async def test_class1_an_allowlisted_cat_reads_the_gateways_node_key(state_dir: Path, tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700)
    key = home / ".ssh" / "id_node"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    work = tmp_path / "w"
    work.mkdir()
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[nodes.n1]\nhost = "127.0.0.1"\nport = 2222\nidentityFile = "{key}"\n'
    )
    details = await attempt(
        state_dir, f"cat {key}", allow=[("/usr/bin/cat", None)], config=config, workdir=str(work)
    )
    assert details["status"] == "completed", details["_text"]
    assert "PRIVATE KEY" not in details["aggregated"], (
        "a host command read the key the gateway uses for nodes"
    )


# Closed by tree27a/tree27b (round 4 fixes): kept as a regression.
async def test_class5_make_expands_the_name_of_a_makefiles_assignment(
    state_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    (work / "evil.mk").write_text(f"$(shell id -u > {marker})\n")
    details = await attempt(
        state_dir, "make 'MAKEF$()ILES=evil.mk' all", allow=[("/usr/bin/make", None)], workdir=str(work)
    )
    assert refused(details) or not marker.exists(), "make read a makefile the MAKEFILES check never saw"


# ------------------------------------------------------------------------ limits: the approval socket's exec


async def test_class3_the_approval_socket_exec_buffers_all_output_in_the_gateway(
    state_dir: Path, tmp_path: Path
) -> None:
    """Was open: exec_host.run_argv read the whole of a command's stdout into the gateway's memory
    (proc.communicate) and only then kept the last 200,000 chars: one exec frame of an allowlisted
    `head -c 128M /dev/zero` (or `yes`, until its 30-minute timeout) grew the gateway by its output."""
    import resource

    from engine.approvals.socket.wire import ExecHostRequest
    from engine.approvals.store import ApprovalsStore
    from engine.tools.exec_host import OUTPUT_CAP, LocalExecHost
    from engine.unixsock import PeerInfo
    from tests.helpers.gateway import ALLOWLIST, write_config

    work = tmp_path / "w"
    work.mkdir()
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/head", arg_pattern=None)
    host = LocalExecHost(
        config_path=state_dir / "config.toml", approvals_path=state_dir / "exec-approvals.json"
    )
    size = 128 << 20

    async def never_asked(_request: object) -> str:
        raise AssertionError("an allowlisted head does not ask")

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    request = ExecHostRequest(command=("head", "-c", str(size), "/dev/zero"), cwd=str(work), agent_id="main")
    outcome = await host(request, never_asked, PeerInfo(os.getpid(), os.getuid(), os.getgid()))
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
    assert outcome.ok and outcome.payload is not None, outcome
    assert len(outcome.payload["stdout"]) == OUTPUT_CAP
    assert outcome.payload["stdoutTruncated"] and outcome.payload["outputCapped"], "the cut is said"
    assert grown < size // 4, f"the gateway grew by {grown >> 20} MiB to return {OUTPUT_CAP} chars"


# ---------------------------------------------------------------------- self-reference: "$0" through a link

_REREADS_ITSELF = """while [ ! -e go ]; do sleep 0.05; done
sed -n '/^#PAYLOAD/,$p' "$0" | tail -n +2 | sh
exit 0
#PAYLOAD
echo approved >> ran
"""


# Closed (links27): a link in the agent's directory is the agent's (filetrust.links_fixed).
async def test_class8_a_script_run_through_a_link_rereads_the_relinked_name(
    state_dir: Path, tmp_path: Path
) -> None:
    from tests.helpers.gateway import ALLOWLIST, gateway, wait_until, write_config

    work = tmp_path / "w"
    work.mkdir()
    (work / "real.sh").write_text(_REREADS_ITSELF)
    (work / "evil.sh").write_text("#PAYLOAD\necho swapped >> ran\n")
    os.symlink("real.sh", work / "link.sh")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        result = await _approve_first_ask(state_dir, "sh link.sh", work, "allow-once", background=True)
        assert result["details"]["status"] == "running", result["text"]
        os.symlink("evil.sh", work / "link.new")
        os.replace(work / "link.new", work / "link.sh")  # the link now names the payload
        (work / "go").touch()
        await wait_until(lambda: (work / "ran").exists(), timeout=60)
    assert (work / "ran").read_text() == "approved\n", "the approved script re-read the agent's payload"


async def test_class1_a_relative_state_dir_is_hidden_all_the_same(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: a relative OPENCLAW_STATE_DIR reached bwrap as `--tmpfs s`, which it resolves from / (it
    hid /s and left the real one, relative to the gateway's cwd, in view). statefs.state_dir() is absolute."""
    work = tmp_path / "w"
    work.mkdir()
    home = Path(os.environ["HOME"])
    for config in (home / ".gitconfig", home / ".config" / "git" / "config", home / ".npmrc"):
        config.parent.mkdir(parents=True, exist_ok=True)  # the operator's own: none is bound as missing
        config.write_text("")
    monkeypatch.chdir(state_dir.parent)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", state_dir.name)  # `OPENCLAW_STATE_DIR=s exechost gateway run`
    details = await attempt(
        state_dir,
        f"cat {state_dir}/operator.json",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        workdir=str(work),
    )
    hidden_at = Path("/") / state_dir.name
    if hidden_at.is_dir() and not any(hidden_at.iterdir()):
        hidden_at.rmdir()  # bwrap made it as its mountpoint on the host's /
    assert "token" not in details.get("aggregated", ""), "the state dir was in view of a host command"


# ------------------------------------------------------------------------- what held (passing regressions)


async def test_held_a_host_command_inherits_no_descriptor_of_the_gateway(
    state_dir: Path, tmp_path: Path
) -> None:
    """Beyond stdio, a host command holds only the fd of its checked cwd: no socket, spool or state-dir
    directory of the gateway's (an fd would reach the state dir through /proc/self/fd whatever the view)."""
    work = tmp_path / "w"
    work.mkdir()
    details = await attempt(
        state_dir,
        "ls -l /proc/self/fd/",
        config='[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        workdir=str(work),
    )
    assert details["status"] == "completed", details["_text"]
    targets = {
        int(line.split(" -> ")[0].split()[-1]): line.split(" -> ")[1]
        for line in details["aggregated"].splitlines()
        if " -> " in line
    }
    for fd, target in targets.items():
        if fd > 2:  # ls's own listing of /proc/<pid>/fd, and the cwd held for the `-ef` check
            assert target == str(work) or target.startswith("/proc/"), (fd, target)


async def test_held_a_makefile_written_earlier_in_the_chain_is_not_read(
    state_dir: Path, tmp_path: Path
) -> None:
    """`cp evil.mk Makefile && make all`: the Makefile was absent when decided, so make is handed
    `-f /dev/null` and never reads what the first command wrote."""
    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    (work / "evil.mk").write_text(f"$(shell id -u > {marker})\nall:\n\t@true\n")
    details = await attempt(
        state_dir,
        "cp evil.mk Makefile && make -r all",
        allow=[("/usr/bin/make", None), ("/usr/bin/cp", None)],
        workdir=str(work),
    )
    assert (work / "Makefile").exists()
    assert not marker.exists(), details["_text"]


async def test_held_a_fifo_named_makefile_is_never_read(state_dir: Path, tmp_path: Path) -> None:
    """No regular makefile when decided: the default lookup becomes `-f /dev/null`, so a FIFO named
    Makefile (whatever the agent would feed it) is never opened."""
    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    fifo = work / "Makefile"
    os.mkfifo(fifo)
    stop = threading.Event()
    feeder = _feed_fifo(fifo, f"$(shell id -u > {marker})\nall:\n\t@true\n".encode(), stop)
    try:
        await attempt(state_dir, "make -r all", allow=[("/usr/bin/make", None)], workdir=str(work))
    finally:
        _stop_feeding(fifo, stop, feeder)
    assert not marker.exists()


async def test_held_make_tilde_expands_a_makefile_name_but_reads_nothing(
    state_dir: Path, tmp_path: Path
) -> None:
    """make expands `~` in `-f~/x.mk` (the shell does not, mid-word); exechost reads it as `./~/x.mk`,
    absent, and hands make `/dev/null/x.mk` instead: the planted ~/x.mk is never read."""
    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    (Path(os.environ["HOME"]) / "x.mk").write_text(f"$(shell id -u > {marker})\nall:\n\t@true\n")
    await attempt(state_dir, "make -r -f~/x.mk all", allow=[("/usr/bin/make", None)], workdir=str(work))
    assert not marker.exists()


# ------------------------------------------------------------------------ the host view: the agents' socket


async def test_class3_an_allowlisted_rm_takes_the_agents_socket_from_every_agent(
    state_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    sock = tmp_path / "a" / "agents.sock"
    config = (
        '[gateway]\nagentGroup = "root"\n'
        f'agentSocket = "{sock}"\n'
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
    )
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state_dir, config)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/rm", arg_pattern=None)
    async with gateway(state_dir):
        assert sock.exists()  # the gateway made it
        agent = await connect(state_dir, "agent", operator=False)
        try:
            done = await agent.request("exec", {"command": f"rm -f {sock}", "workdir": str(work)})
        finally:
            await agent.close()
        assert done["details"]["status"] == "completed", done["text"]
        still_there = sock.exists()  # while the gateway runs: it removes its own at stop
    assert still_there, "one agent's host command removed the socket every agent connects to"


# ---------------------------------------------------------------------- limits: one ask, the operator's page


async def test_class3_one_ask_with_endless_warnings_breaks_the_operators_pending_list(
    state_dir: Path, tmp_path: Path
) -> None:
    """Was open: an ask's warnings were unbounded (one per git config key not known inert, one per
    makefile source such as each entry of RCS/): a 780 KB .git/config made one ask whose view was 13 MB,
    and `approvals.pending` (which always sends at least one view) failed for the operator. The command
    still asks, with its warnings capped and the rest counted."""
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config

    work = _repo(tmp_path / "w")
    keys = "\n".join(f"\tk{i:06d} = v" for i in range(60_000))
    with open(work / ".git" / "config", "a") as config:
        config.write(f"[zz]\n{keys}\n")  # 780 KB: under the vet's 1 MiB read cap
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/git", arg_pattern=None)
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir, "operator")
        try:
            with contextlib.suppress(
                Exception
            ):  # the agent's own answer is too big for a frame: its business
                await agent.request("exec", {"command": "git status", "workdir": str(work)})
            await wait_until(lambda: server.services.approvals.pending(), timeout=30)
            page = await operator.request("approvals.pending", {})
            warnings = server.services.approvals.pending()[0].request.warnings
        finally:
            await agent.close()
            await operator.close()
    assert page["total"] == 1
    assert any(w.startswith("… ") and w.endswith("more warnings (not shown)") for w in warnings), warnings


# ------------------------------------------------------------------- content binding: a link to a system file


# Closed (links27): a link in the agent's directory is the agent's (filetrust.links_fixed).
async def test_class6_allow_always_on_a_link_to_a_system_binary_saves_the_agents_link(
    state_dir: Path, tmp_path: Path
) -> None:
    from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config

    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    os.symlink("/usr/bin/ls", work / "myls")
    # Named `cat`: tree-safety goes by the name of the file that runs, and the agent's script has that name.
    tool(work / "bin" / "cat", f"#!/bin/sh\nid -u > {marker}\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        first = await _approve_first_ask(state_dir, "./myls", work, "allow-always")
        assert first["details"]["status"] == "completed", first["text"]
        os.symlink("bin/cat", work / "myls.new")
        os.replace(work / "myls.new", work / "myls")  # the approved name now leads to the agent's program
        agent = await connect(state_dir, "agent", operator=False)
        try:
            again = await agent.request("exec", {"command": "./myls", "workdir": str(work)})
        finally:
            await agent.close()
    assert again["details"]["status"] == "approval-pending" or not marker.exists(), (
        "the allow-always given to ls through a link ran the agent's program"
    )


async def test_class1_a_host_command_creates_the_operators_cargo_config(
    state_dir: Path, tmp_path: Path
) -> None:
    home = Path(os.environ["HOME"])
    work = tmp_path / "w"
    work.mkdir()
    (work / "c.toml").write_text('[build]\nrustc-wrapper = "/tmp/evil"\n')
    await attempt(
        state_dir,
        f"mkdir -p {home}/.cargo && cp c.toml {home}/.cargo/config.toml",
        allow=[("/usr/bin/mkdir", None), ("/usr/bin/cp", None)],
        workdir=str(work),
    )
    assert not (home / ".cargo" / "config.toml").exists(), "a host command wrote the operator's cargo config"


# Closed (links27): a link in the agent's directory is the agent's (filetrust.links_fixed).
async def test_class6_an_approved_link_to_a_system_binary_is_run_through_the_link(
    state_dir: Path, tmp_path: Path
) -> None:
    from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config
    from tests.helpers.race import exchange, exchange_loop, tries

    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    tool(work / "evil", f"#!/bin/sh\necho won >> {marker}\n")
    os.symlink("/usr/bin/true", work / "tool")  # what the operator is shown (its digest) and approves
    os.symlink("evil", work / "alt")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        operator = await connect(state_dir, "operator")
        agent = await connect(state_dir, "agent", operator=False)
        try:
            await operator.request("approvals.attach", {})
            for _ in tries(100):
                call = asyncio.ensure_future(
                    agent.request("exec", {"command": "./tool", "workdir": str(work)})
                )

                async def asked(call: asyncio.Future[dict[str, Any]] = call) -> list[dict[str, Any]] | bool:
                    return True if call.done() else await operator.pending_approvals()

                pending = await wait_until(asked, timeout=60)
                assert pending is not True, (await call)["text"]
                # The decision is made (on /usr/bin/true, the link untouched): the racer starts now.
                with exchange_loop(str(work / "tool"), str(work / "alt")):
                    await operator.request("approve", {"id": pending[0]["id"], "decision": "allow-once"})
                    await asyncio.wait_for(call, 60)
                if os.readlink(work / "tool") != "/usr/bin/true":
                    exchange(str(work / "tool"), str(work / "alt"))  # the next decision sees true again
                if marker.exists():
                    break
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), "an allow-once of /usr/bin/true ran the agent's program through its link"


# ------------------------------------------------------------------- special files: a terminal as a tree file


def test_class6_vetting_a_link_to_a_free_terminal_never_makes_it_the_gateways_terminal(
    tmp_path: Path,
) -> None:
    """Was open: the one read opened without O_NOCTTY, so a daemonized gateway (a session leader with no
    terminal) vetting `.git/HEAD -> /dev/pts/N` took that free terminal as its controlling tty, and whoever
    held the master could send it ^C (SIGINT) or hang it up (SIGHUP)."""
    from engine.commands.regular import Unreadable, read_regular

    master, slave = os.openpty()  # the agent's: a terminal nobody has as its controlling tty
    link = tmp_path / "HEAD"
    os.symlink(os.ttyname(slave), link)
    os.close(slave)
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the gateway daemon: its own session, no terminal
        try:
            os.setsid()
            with contextlib.suppress(Unreadable):
                read_regular(str(link), 4096)  # what gitvet does with .git/HEAD
            with open("/proc/self/stat") as stat:
                field = stat.read().rsplit(")", 1)[1].split()[4]
            os.write(done_w, field.encode())
        finally:
            os._exit(0)
    os.close(done_w)
    tty_nr = int(os.read(done_r, 64) or b"0")
    os.waitpid(pid, 0)
    os.close(done_r)
    os.close(master)
    assert tty_nr == 0, "reading the agent's terminal made it the daemon's controlling terminal"


# -------------------------------------------------------------------------- the host view: a dotfiles link


async def test_class1_a_dotfiles_link_to_the_global_git_config_is_repointed(
    state_dir: Path, tmp_path: Path
) -> None:
    home = Path(os.environ["HOME"])
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "gitconfig").write_text("[user]\n\tname = operator\n")
    os.symlink("dotfiles/gitconfig", home / ".gitconfig")  # stow, yadm, a dotfiles repo: common
    work = tmp_path / "w"
    work.mkdir()
    (work / "g").write_text("[alias]\n\tst = !id\n")
    details = await attempt(
        state_dir, f"ln -sfn {work}/g {home}/.gitconfig", allow=[("/usr/bin/ln", None)], workdir=str(work)
    )
    assert details["status"] == "completed", details["_text"]
    assert os.readlink(home / ".gitconfig") == "dotfiles/gitconfig", (
        "the global git config now is the agent's"
    )
