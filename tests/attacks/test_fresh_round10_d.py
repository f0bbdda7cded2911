"""Fresh round 10, attacker d: a host tool reads exactly the bytes that were checked (issue 27 §4):
emulating another program, check then use, crash at the worst moment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, wait_until, write_config

needs_bwrap = pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode != 0,
    reason="needs bubblewrap",
)


@pytest.fixture(autouse=True)
def _npm_offline(state_dir: Path) -> None:
    """npm in these tests never asks the registry (its update notifier would): the test's own home."""
    home = Path(os.environ["HOME"])
    assert home.parent == state_dir.parent
    (home / ".npmrc").write_text("update-notifier=false\noffline=true\naudit=false\nfund=false\n")


def _private_root(state: Path) -> Path:
    """The test's stand-in for /tmp (conftest: EXECHOST_HOST_PRIVATE), private to each agent."""
    return Path(os.environ["EXECHOST_HOST_PRIVATE"])


def _agent_copy(state: Path, agent: str, path: Path) -> Path:
    from engine.commands import hostprivate

    binds = hostprivate.binds(str(state), agent, hostprivate.dests(None))
    source = hostprivate.source_of(binds, str(path))
    assert source is not None
    return Path(source)


async def _exec(state: Path, params: dict[str, Any]) -> dict[str, Any]:
    client = await connect(state)
    try:
        result = await client.request("exec", {"agentId": "main", **params})
    finally:
        await client.close()
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


async def _approve(state: Path, approval_id: str) -> None:
    client = await connect(state)
    try:
        await client.request("approve", {"id": approval_id, "decision": "allow-once"})
    finally:
        await client.close()


PACKAGE = {
    "name": "p",
    "version": "1.0.0",
    "scripts": {"test": "cat go.fifo >/dev/null; npm run --silent build", "build": "echo SAFE > out.txt"},
}


async def _npm_rewrite_after_spawn(state: Path, work: Path, copy: Path) -> str:
    """Ask `npm test` in `work` (its files in `copy` on the host), approve it as shown, and once the run
    is past its spawn rewrite package.json in place; what the approved run's nested npm ran."""
    import json

    copy.mkdir(parents=True, exist_ok=True)
    (copy / "package.json").write_text(json.dumps(PACKAGE))
    os.mkfifo(copy / "go.fifo")
    details = await _exec(state, {"command": "npm test", "workdir": str(work)})
    assert details["status"] == "approval-pending", details
    await _approve(state, details["approvalId"])

    def after_spawn() -> None:
        with open(copy / "go.fifo", "w") as go:  # returns once the approved run's `cat` opened it
            scripts = {
                "test": "cat go.fifo >/dev/null; npm run --silent build",
                "build": "echo PWNED > out.txt",
            }
            evil = {**PACKAGE, "scripts": scripts}
            with open(copy / "package.json", "r+") as f:  # in place: same inode, no rename
                f.truncate(0)
                f.write(json.dumps(evil))
            go.write("go\n")

    await asyncio.wait_for(asyncio.to_thread(after_spawn), 120)
    out = copy / "out.txt"
    await wait_until(out.exists, timeout=120)
    await wait_until(lambda: out.read_text().strip() != "", timeout=30)
    return out.read_text().strip()


@needs_bwrap
async def test_npm_control_workdir_outside_private_dirs(state_dir: Path) -> None:
    """Control: in an ordinary workdir the approved run reads the bound copy of package.json."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "proj"
    async with gateway(state_dir):
        assert await _npm_rewrite_after_spawn(state_dir, work, work) == "SAFE"


@needs_bwrap
async def test_npm_in_private_tmp_reads_live_package_json(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    work = _private_root(state_dir) / "proj"
    async with gateway(state_dir):
        copy = _agent_copy(state_dir, "main", work)
        assert await _npm_rewrite_after_spawn(state_dir, work, copy) == "SAFE"


RUN_SH = "echo ran >> count\n[ -e released ] || cat go.fifo > /dev/null\n"


async def _asked_then_stopped(state: Path, work: Path) -> str:
    """`sh run.sh` asked by the agent, the gateway then stopped: the ask waits on disk. Its id."""
    work.mkdir()
    (work / "run.sh").write_text(RUN_SH)
    os.mkfifo(work / "go.fifo")
    async with gateway(state):
        details = await _exec(state, {"command": "sh run.sh", "workdir": str(work)})
    assert details["status"] == "approval-pending", details
    return str(details["approvalId"])


def _approved_on_disk(state: Path, ask_id: str) -> None:
    """What a crash right after the operator's allow-once leaves: the ask approved, its run not started."""
    import json
    import time

    from tests.helpers.pending import fold_pending

    path = fold_pending(state)
    data = json.loads(path.read_text())
    (ask,) = [a for a in data["asks"] if a["id"] == ask_id]
    ask.update(decision="allow-once", resolved_by="operator", resolved_at_ms=int(time.time() * 1000))
    path.write_text(json.dumps(data))


def _crash_image(state: Path) -> dict[Path, bytes]:
    """The approvals files as a kill -9 now would leave them (every write was fsynced)."""
    from engine.approvals.durable import PENDING_NAME

    out: dict[Path, bytes] = {}
    for p in [state / PENDING_NAME, state / (PENDING_NAME + ".journal"), *(state / "history").glob("**/*")]:
        if p.is_file():
            out[p] = p.read_bytes()
    return out


def _restore_image(state: Path, image: dict[Path, bytes]) -> None:
    from engine.approvals.durable import PENDING_NAME

    for p in [state / PENDING_NAME, state / (PENDING_NAME + ".journal"), *(state / "history").glob("**/*")]:
        if p.is_file() and p not in image:
            p.unlink()
    for p, data in image.items():
        p.write_bytes(data)


async def _run_and_crash(state: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Path, bytes]:
    """The next gateway runs the approved ask. The crash image: the approvals files as a kill -9 right
    after its start was journaled (and the run spawned) would leave them."""
    from engine.approvals import durable

    images: list[dict[Path, bytes]] = []
    real_append = durable.PendingFile.append

    def append(self: durable.PendingFile, lines: list[bytes], **kw: Any) -> None:
        real_append(self, lines, **kw)
        if any(b'"status": "starting"' in line for line in lines) and not images:
            images.append(_crash_image(state))

    monkeypatch.setattr(durable.PendingFile, "append", append)
    count = work / "count"
    async with gateway(state):
        await wait_until(lambda: count.exists() and count.read_text() == "ran\n", timeout=60)
        (work / "released").write_text("")
        with open(work / "go.fifo", "w") as go:
            go.write("x")
    monkeypatch.setattr(durable.PendingFile, "append", real_append)
    assert images, "the run's start was never journaled"
    return images[0]


async def _next_gateway_runs(state: Path, ask_id: str, image: dict[Path, bytes]) -> str:
    """The gateway after the crash: what the run's count says once the ask is settled."""
    from tests.helpers.pending import stored_asks

    _restore_image(state, image)
    async with gateway(state):
        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state)], timeout=60)
        client = await connect(state)
        try:

            async def all_ended() -> bool:
                rows = (await client.request("sessions.list", {}))["sessions"]
                return all(r.get("status") != "running" for r in rows)

            await wait_until(all_ended, timeout=60)  # a run started again has written its count
        finally:
            await client.close()
    return (state.parent / "w" / "count").read_text()


@needs_bwrap
async def test_crash_while_approved_run_runs_control(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: killed while the approved run runs, the next gateway never runs it again."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    ask_id = await _asked_then_stopped(state_dir, work)
    _approved_on_disk(state_dir, ask_id)
    image = await _run_and_crash(state_dir, work, monkeypatch)
    assert await _next_gateway_runs(state_dir, ask_id, image) == "ran\n"


@needs_bwrap
async def test_torn_journal_tail_and_failed_fold_never_run_an_approved_command_twice(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found open (fresh round 10 d), fixed: the journal's torn-line guard was in memory only; after a
    crash mid-append and a start whose fold failed, the next line (an approved ask's `starting` note) was
    glued to the torn one and lost, and a crash after the spawn ran the command again. The journal's
    last byte is checked before the first append now, as the decision history's is."""
    import errno

    from engine.approvals import durable
    from engine.approvals.durable import PENDING_NAME

    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    ask_id = await _asked_then_stopped(state_dir, work)
    _approved_on_disk(state_dir, ask_id)
    # power lost mid-append: the journal ends in a torn line (no newline), as load() expects it may
    with open(state_dir / (PENDING_NAME + ".journal"), "ab") as j:
        j.write(b'{"ask": {"id": "torn-by-power-lo')
    # and the next start cannot fold the journal into a new snapshot: no inode left for its temp file
    # (an agent's files in its private /tmp live on the state dir's filesystem)
    real = durable.atomic_write
    failed: list[Path] = []

    def no_inode(path: Path, data: bytes | str, *a: Any, **kw: Any) -> None:
        if not failed:
            failed.append(path)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data, *a, **kw)

    monkeypatch.setattr(durable, "atomic_write", no_inode)
    image = await _run_and_crash(state_dir, work, monkeypatch)
    assert failed, "the fold at start was not attempted"
    monkeypatch.setattr(durable, "atomic_write", real)
    assert await _next_gateway_runs(state_dir, ask_id, image) == "ran\n"


NPM_TEST = '{"name":"p","version":"1.0.0","scripts":{"test":"echo PWNED-$((6*7))"}}'
NINJA = "rule r\n  command = echo PWNED-$$((6*7))\nbuild x: r\n"
CMAKE = 'execute_process(COMMAND sh -c "echo PWNED-$((6*7))")\n'
ABSOLUTE_INTO = [
    ("/usr/bin/npm", "npm --prefix {p} test", "package.json", NPM_TEST),
    ("/usr/bin/npm", "npm test -C {p}", "package.json", NPM_TEST),
    ("/usr/bin/ninja", "ninja -C {p}", "build.ninja", NINJA),
    ("/usr/bin/ninja", "ninja -f {p}/build.ninja", "build.ninja", NINJA),
    ("/usr/bin/cmake", "cmake -P {p}/x.cmake", "x.cmake", CMAKE),
]
ABSOLUTE_IDS = ["npm-prefix", "npm-C", "ninja-C", "ninja-f", "cmake-P"]
needs_tools = pytest.mark.skipif(
    not all(os.path.exists(e) for e, *_ in ABSOLUTE_INTO), reason="needs npm, ninja and cmake"
)


async def _allowlisted_tool_on(state: Path, exe: str, command: str, proj: Path) -> dict[str, Any]:
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", exe)
    async with gateway(state):
        return await _exec(state, {"command": command.format(p=proj), "workdir": "/"})


@needs_tools
@needs_bwrap
@pytest.mark.parametrize(("exe", "command", "name", "body"), ABSOLUTE_INTO, ids=ABSOLUTE_IDS)
async def test_tree_program_pointed_into_a_plain_dir_asks(
    state_dir: Path, exe: str, command: str, name: str, body: str
) -> None:
    """Control: the same tool pointed at a project in an ordinary directory names its file and asks."""
    proj = state_dir.parent / "p"
    proj.mkdir()
    (proj / name).write_text(body)
    details = await _allowlisted_tool_on(state_dir, exe, command, proj)
    assert details["status"] == "approval-pending", details


@needs_tools
@needs_bwrap
@pytest.mark.parametrize(("exe", "command", "name", "body"), ABSOLUTE_INTO, ids=ABSOLUTE_IDS)
async def test_tree_program_pointed_into_the_private_tmp_runs_unasked(
    state_dir: Path, exe: str, command: str, name: str, body: str
) -> None:
    proj = _private_root(state_dir) / "p"
    copy = _agent_copy(state_dir, "main", proj)
    copy.mkdir(parents=True)
    (copy / name).write_text(body)
    details = await _allowlisted_tool_on(state_dir, exe, command, proj)
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]
    assert details["status"] == "approval-pending", details


@needs_bwrap
async def test_workdir_linked_to_the_private_root_is_refused(state_dir: Path) -> None:
    """Tried, held: a workdir in the agent's /tmp that is a link to the private dir itself resolves, for
    the gateway, into the host's shared dir (nothing there: allowlisted npm allowed) and, in the view, to
    the agent's own copy holding its package.json; the spawn's cwd fd check refuses the run."""
    root = _private_root(state_dir)
    copy_root = _agent_copy(state_dir, "main", root)
    copy_root.mkdir(parents=True, exist_ok=True)
    (copy_root / "package.json").write_text(NPM_TEST)
    os.symlink(str(root), copy_root / "proj")  # in the view: the agent's /tmp; on the host: the shared one
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/npm")
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": "npm test", "workdir": str(root / "proj")})
    assert "PWNED" not in details["_text"]
    # asked before anything starts (engine.commands.viewpaths: the workdir is another directory in the
    # view than on the host), or refused by the spawn's check of the cwd
    assert details["status"] == "approval-pending" or "working directory changed" in details["_text"], details


FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


async def _ssh_include_writable(state: Path, config_lines: dict[str, str]) -> str:
    """The operator's ~/.ssh holds `config_lines` (name -> text); `{x}` names a file outside the home
    that asyncssh reads as ssh config through them. What a host run appending to it gets."""
    home = Path(os.environ["HOME"])
    target = state.parent / "dots" / "extra.conf"
    target.parent.mkdir()
    target.write_text("# the operator's\n")
    for name, text in config_lines.items():
        path = home / ".ssh" / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(text.format(x=target))
    write_config(state, FULL)
    async with gateway(state):
        details = await _exec(
            state, {"command": f"echo 'Match exec \"touch /tmp/owned\"' >> {target}", "workdir": "/"}
        )
    assert details["status"] == "completed", details
    return target.read_text()


def _asyncssh_reads(home: Path, target: Path) -> bool:
    """Whether asyncssh, as the gateway connects to a node, parses `target` as the operator's config."""
    import asyncssh.config as sshconfig

    read: list[str] = []
    real = sshconfig.SSHConfig.parse

    def parse(self: Any, path: Path) -> None:
        read.append(str(path))
        real(self, path)

    sshconfig.SSHConfig.parse = parse  # type: ignore[method-assign]
    try:
        sshconfig.SSHClientConfig.load(
            None, [home / ".ssh" / "config"], False, False, False, "local", "user", "node", 22
        )
    finally:
        sshconfig.SSHConfig.parse = real  # type: ignore[method-assign]
    return str(target) in read


@needs_bwrap
async def test_ssh_include_outside_the_home_is_read_only(state_dir: Path) -> None:
    """Control: a file ~/.ssh/config includes outside the home is read-only to host runs."""
    home = Path(os.environ["HOME"])
    after = await _ssh_include_writable(state_dir, {"config": "Include {x}\n"})
    assert _asyncssh_reads(home, state_dir.parent / "dots" / "extra.conf")
    assert "Match" not in after


@needs_bwrap
@pytest.mark.parametrize(
    "lines",
    [
        {"config": '"Include" {x}\n'},
        {"config": "Include config.d/*\n", "config.d/.team": "Include {x}\n"},
        {"config": "Include config.d/team.conf # was {x}\n"},
        {"config": "Include config.d/**/*.conf\n", "config.d/team/a/b.conf": "Include {x}\n"},
    ],
    ids=["quoted-keyword", "hidden-file-in-glob", "trailing-comment", "recursive-glob"],
)
async def test_ssh_include_asyncssh_reads_but_the_view_leaves_writable(
    state_dir: Path, lines: dict[str, str]
) -> None:
    home = Path(os.environ["HOME"])
    after = await _ssh_include_writable(state_dir, lines)
    assert _asyncssh_reads(home, state_dir.parent / "dots" / "extra.conf")
    assert "Match" not in after


def _git(work: Path, *args: str) -> None:
    ident = ["-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run(["git", "-C", str(work), *ident, *args], check=True, capture_output=True)


async def _earlier_segment_writes(state: Path, command: str, *, present: bool = False) -> dict[str, Any]:
    """Allowlisted git, cp and npm; a repository whose branch `other` holds the agent's package.json
    and whose work tree holds it as evil.json (and as package.json when `present`)."""
    work = state.parent / "w"
    work.mkdir()
    (work / "evil.json").write_text(NPM_TEST)
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "evil.json")
    _git(work, "commit", "-qm", "one")
    _git(work, "checkout", "-qb", "other")
    (work / "package.json").write_text(NPM_TEST)
    _git(work, "add", "package.json")
    _git(work, "commit", "-qm", "two")
    _git(work, "checkout", "-q", "main")
    if present:
        (work / "package.json").write_text(NPM_TEST)
    write_config(state, ALLOWLIST)
    store = ApprovalsStore(state / "exec-approvals.json")
    for exe in ("/usr/bin/npm", "/usr/bin/git", "/usr/bin/cp"):
        store.add_allowlist("main", exe)
    async with gateway(state):
        return await _exec(state, {"command": command, "workdir": str(work)})


@needs_tools
@needs_bwrap
async def test_npm_with_its_package_json_present_asks(state_dir: Path) -> None:
    """Control: allowlisted npm in a tree holding the agent's package.json names it and asks."""
    details = await _earlier_segment_writes(state_dir, "npm test", present=True)
    assert details["status"] == "approval-pending", details


@needs_tools
@needs_bwrap
@pytest.mark.parametrize(
    "command",
    [
        "git checkout other -- package.json && npm test",
        "git mv evil.json package.json && npm test",
        "cp evil.json package.json; npm test",
    ],
    ids=["git-checkout", "git-mv", "cp"],
)
async def test_earlier_segment_writes_the_file_a_tree_program_runs(state_dir: Path, command: str) -> None:
    details = await _earlier_segment_writes(state_dir, command)
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]
    assert details["status"] == "approval-pending", details


async def _push_into(state: Path, dest: Path, copy: Path, url: str) -> dict[str, Any]:
    """Allowlisted git pushes from a vetted repository to `url` (naming `dest`, whose files are at `copy`
    on the host): a repository whose pre-receive hook is the agent's."""
    work = state.parent / "w"
    work.mkdir()
    (work / "a.txt").write_text("a")
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "a.txt")
    _git(work, "commit", "-qm", "one")
    copy.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    hook = copy / ".git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho PWNED-$((6*7)) >&2\n")
    hook.chmod(0o755)
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/git")
    command = f"git push {url.format(d=dest)} main:refs/heads/x"
    async with gateway(state):
        return await _exec(state, {"command": command, "workdir": str(work)})


PUSH_URLS = ["{d}", "file://{d}", "{d}/.git"]


@needs_bwrap
@pytest.mark.parametrize("url", PUSH_URLS, ids=["path", "file-url", "dotgit"])
async def test_push_into_a_plain_dir_asks(state_dir: Path, url: str) -> None:
    """Control: a push to a local repository names its receive-pack tree and asks."""
    dest = state_dir.parent / "dest"
    details = await _push_into(state_dir, dest, dest, url)
    assert details["status"] == "approval-pending", details


@needs_bwrap
@pytest.mark.parametrize("url", PUSH_URLS, ids=["path", "file-url", "dotgit"])
async def test_push_into_the_private_tmp_runs_its_hook_unasked(state_dir: Path, url: str) -> None:
    dest = _private_root(state_dir) / "dest"
    details = await _push_into(state_dir, dest, _agent_copy(state_dir, "main", dest), url)
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]
    assert details["status"] == "approval-pending", details


SAFE_PACKAGE = '{"name":"p","version":"1.0.0","scripts":{"test":"echo SAFE > out.txt"}}'
EVIL_PACKAGE = '{"name":"p","version":"1.0.0","scripts":{"test":"echo PWNED > out.txt"}}'


async def _ask_restart_approve(state: Path, *, rewrite: bool, approve_before_restart: bool) -> str:
    """`npm test` asked with SAFE_PACKAGE shown; the gateway restarts (the ask waits on disk); the agent
    rewrites package.json in place (when `rewrite`); the operator approves the ask as it was shown
    (before the restart: a crash right after the approval). What the approved run ran."""
    work = state.parent / "w"
    work.mkdir()
    (work / "package.json").write_text(SAFE_PACKAGE)
    write_config(state, ALLOWLIST)
    async with gateway(state):
        details = await _exec(state, {"command": "npm test", "workdir": str(work)})
    assert details["status"] == "approval-pending", details
    ask_id = str(details["approvalId"])
    if approve_before_restart:
        _approved_on_disk(state, ask_id)
    if rewrite:
        with open(work / "package.json", "r+") as f:  # in place: the same inode, the same directory
            f.truncate(0)
            f.write(EVIL_PACKAGE)
    out = work / "out.txt"
    async with gateway(state):
        if not approve_before_restart:
            await _approve(state, ask_id)
        from tests.helpers.pending import stored_asks

        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state)], timeout=60)
        await _sessions_ended(state)
    return out.read_text().strip() if out.exists() else "not run"


async def _sessions_ended(state: Path) -> None:
    client = await connect(state)
    try:

        async def all_ended() -> bool:
            rows = (await client.request("sessions.list", {}))["sessions"]
            return all(r.get("status") != "running" for r in rows)

        await wait_until(all_ended, timeout=60)
    finally:
        await client.close()


@needs_tools
@needs_bwrap
async def test_package_json_rewritten_while_the_ask_waits_is_stale(state_dir: Path) -> None:
    """Control: with no restart, package.json rewritten while the ask waits makes the approval stale."""
    from tests.helpers.pending import stored_asks

    work = state_dir.parent / "w"
    work.mkdir()
    (work / "package.json").write_text(SAFE_PACKAGE)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": "npm test", "workdir": str(work)})
        assert details["status"] == "approval-pending", details
        ask_id = str(details["approvalId"])
        with open(work / "package.json", "r+") as f:
            f.truncate(0)
            f.write(EVIL_PACKAGE)
        await _approve(state_dir, ask_id)
        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state_dir)], timeout=60)
        await _sessions_ended(state_dir)
    assert not (work / "out.txt").exists()


@needs_tools
@needs_bwrap
async def test_restored_ask_unchanged_runs_as_approved(state_dir: Path) -> None:
    """Control: an ask restored after a restart, approved, runs what was shown."""
    assert await _ask_restart_approve(state_dir, rewrite=False, approve_before_restart=False) == "SAFE"


@needs_tools
@needs_bwrap
@pytest.mark.parametrize("before", [False, True], ids=["approved-after-restart", "approved-then-crash"])
async def test_restored_ask_with_its_tree_rewritten_is_stale(state_dir: Path, before: bool) -> None:
    """Found open (fresh round 10 d), fixed: a restored ask was decided afresh and stale_reason never
    compared the bytes the operator was shown (content_key); package.json rewritten in place while no
    gateway ran ran as approved. Now such an ask is approval-stale."""
    assert await _ask_restart_approve(state_dir, rewrite=True, approve_before_restart=before) != "PWNED"


RESTART_FILES = {
    "sh run.sh": ("run.sh", "#!/bin/sh\necho SAFE > out.txt\n"),
    "python3 run.py": ("run.py", "open('out.txt', 'w').write('SAFE')\n"),
    "./run.sh": ("run.sh", "#!/bin/sh\necho SAFE > out.txt\n"),
    "make": ("Makefile", "all:\n\techo SAFE > out.txt\n"),
}


@needs_bwrap
@pytest.mark.parametrize("command", list(RESTART_FILES))
async def test_restored_ask_with_its_script_rewritten_is_stale(state_dir: Path, command: str) -> None:
    """Found open (fresh round 10 d), fixed: a script or Makefile rewritten in place (same inode) while the
    gateway restarted ran as approved; the content digests are compared now."""
    from tests.helpers.pending import stored_asks

    work = state_dir.parent / "w"
    work.mkdir()
    name, safe = RESTART_FILES[command]
    (work / name).write_text(safe)
    (work / name).chmod(0o755)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": command, "workdir": str(work)})
    assert details["status"] == "approval-pending", details
    ask_id = str(details["approvalId"])
    with open(work / name, "r+") as f:  # in place while no gateway runs: the same inode
        f.truncate(0)
        f.write(safe.replace("SAFE", "PWNED"))
    async with gateway(state_dir):
        await _approve(state_dir, ask_id)  # what was shown: the SAFE bytes
        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state_dir)], timeout=60)
        await _sessions_ended(state_dir)
    out = work / "out.txt"
    assert not out.exists() or out.read_text().strip() == "SAFE"


@needs_bwrap
async def test_restored_ask_allow_always_never_saves_the_rewritten_script(state_dir: Path) -> None:
    """Found open (fresh round 10 d), fixed: allow-always on a restored ask saved the rewritten script's
    digest, so it ran then and unasked ever after."""
    from tests.helpers.pending import stored_asks

    work = state_dir.parent / "w"
    work.mkdir()
    (work / "run.sh").write_text("echo SAFE >> out.txt\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": "sh run.sh", "workdir": str(work)})
    assert "allow-always" in details["allowedDecisions"], details
    ask_id = str(details["approvalId"])
    with open(work / "run.sh", "r+") as f:
        f.truncate(0)
        f.write("echo PWNED >> out.txt\n")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            await client.request("approve", {"id": ask_id, "decision": "allow-always"})
        finally:
            await client.close()
        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state_dir)], timeout=60)
        await _sessions_ended(state_dir)
        again = await _exec(state_dir, {"command": "sh run.sh", "workdir": str(work)})
        await _sessions_ended(state_dir)
    assert again["status"] == "approval-pending", again
    assert "PWNED" not in (work / "out.txt").read_text() if (work / "out.txt").exists() else True


@needs_bwrap
@pytest.mark.parametrize(
    ("exe", "command", "seed"),
    [
        ("/usr/bin/make", "make -C {p}", "Makefile"),
        ("/usr/bin/make", "make -f {p}/Makefile", "Makefile"),
        ("/usr/bin/git", "git -C {p} status --short", "git"),
    ],
    ids=["make-C", "make-f", "git-C"],
)
async def test_make_and_git_pointed_into_the_private_tmp_read_nothing_unvetted(
    state_dir: Path, exe: str, command: str, seed: str
) -> None:
    """Tried, held: make and git named into the agent's private /tmp, where the gateway's namespace has
    nothing: make is handed /dev/null for a makefile that was absent, git a GIT_DIR naming no repository,
    so the agent's Makefile recipe and its repository's clean filter never run."""
    proj = _private_root(state_dir) / "p"
    copy = _agent_copy(state_dir, "main", proj)
    copy.mkdir(parents=True)
    if seed == "git":
        (copy / "a.txt").write_text("a")
        (copy / ".gitattributes").write_text("* filter=x\n")
        _git(copy, "init", "-q")
        _git(copy, "add", "a.txt", ".gitattributes")
        _git(copy, "commit", "-qm", "one")
        (copy / "a.txt").write_text("b")
        with open(copy / ".git" / "config", "a") as f:
            f.write('[filter "x"]\n\tclean = "echo PWNED-$((6*7)) >&2; cat"\n')
    else:
        (copy / "Makefile").write_text("all:\n\t@echo PWNED-$$((6*7))\n")
    details = await _allowlisted_tool_on(state_dir, exe, command, proj)
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]


@needs_tools
@needs_bwrap
async def test_npm_workspace_root_above_the_home_is_not_named(state_dir: Path) -> None:
    from tests.helpers.pending import stored_asks

    home = Path(os.environ["HOME"])
    above = home.parent  # the test's home is in a directory host runs may write, as a service's may be
    proj = home / "proj"
    proj.mkdir()
    (proj / "package.json").write_text('{"name":"proj","version":"1.0.0","scripts":{"test":"echo SAFE"}}')
    (above / "package.json").write_text(f'{{"name":"root","private":true,"workspaces":["{home.name}/proj"]}}')
    (above / "evil.sh").write_text('#!/bin/sh\necho PWNED-$((6*7))\nexec /bin/sh "$@"\n')
    (above / "evil.sh").chmod(0o755)
    (above / ".npmrc").write_text(f"script-shell={above}/evil.sh\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": "npm test", "workdir": str(proj)})
        assert details["status"] == "approval-pending", details
        if str(above / ".npmrc") in details["warningText"]:
            return  # named: the operator sees what runs
        ask_id = details["approvalId"]
        await _approve(state_dir, ask_id)
        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state_dir)], timeout=60)
        await _sessions_ended(state_dir)
        client = await connect(state_dir)
        try:
            rows = (await client.request("sessions.list", {}))["sessions"]
            outs = [await client.request("sessions.output", {"sessionId": r["sessionId"]}) for r in rows]
        finally:
            await client.close()
    assert not any("PWNED-42" in str(o.get("data")) for o in outs), outs


async def _cmake_script_after(state: Path, words: int) -> dict[str, Any]:
    """Allowlisted cmake runs the agent's x.cmake (`-P`) after `words` harmless -D definitions."""
    work = state.parent / "w"
    work.mkdir()
    (work / "x.cmake").write_text(CMAKE)
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/cmake")
    filler = " ".join(f"-DV{i}=1" for i in range(words))
    async with gateway(state):
        return await _exec(state, {"command": f"cmake {filler} -P x.cmake", "workdir": str(work)})


@needs_tools
@needs_bwrap
async def test_cmake_script_operand_is_named(state_dir: Path) -> None:
    """Control: `cmake -D… -P x.cmake` names x.cmake and asks."""
    details = await _cmake_script_after(state_dir, 8)
    assert details["status"] == "approval-pending", details


@needs_tools
@needs_bwrap
async def test_cmake_script_operand_past_64_words_runs_unasked(state_dir: Path) -> None:
    details = await _cmake_script_after(state_dir, 70)
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]
    assert details["status"] == "approval-pending", details


async def _make_cc_after(state: Path, words: int) -> dict[str, Any]:
    """Allowlisted make, no makefile: the built-in rule for foo.o runs $(CC), given as the agent's ./evil
    after `words` harmless assignments."""
    work = state.parent / "w"
    work.mkdir()
    (work / "foo.c").write_text("int x;\n")
    (work / "evil").write_text("#!/bin/sh\necho PWNED-$((6*7))\n")
    (work / "evil").chmod(0o755)
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/make")
    filler = " ".join(f"V{i}=1" for i in range(words))
    async with gateway(state):
        return await _exec(state, {"command": f"make {filler} CC=./evil foo.o", "workdir": str(work)})


@needs_bwrap
async def test_make_value_file_is_named(state_dir: Path) -> None:
    """Control: `make CC=./evil foo.o` names ./evil (MAKE_VALUE_FILE) and asks."""
    details = await _make_cc_after(state_dir, 8)
    assert details["status"] == "approval-pending", details


@needs_bwrap
async def test_make_value_file_past_64_words_runs_unasked(state_dir: Path) -> None:
    details = await _make_cc_after(state_dir, 70)
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]
    assert details["status"] == "approval-pending", details


@contextlib.contextmanager
def _npmrc_as_npm_sees_it(home: Path, deadline: float) -> Iterator[Any]:
    """The write end of the ~/.npmrc FIFO npm is blocked opening, opened as npm's view shows it (through
    its root: the home there is an overlay made for the run, whose FIFO is not the host's), once npm has
    it open for reading: a FIFO opened for writing with no reader yet fails (ENXIO), and is tried again."""
    while time.monotonic() < deadline:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if not any(a.endswith(b"/npm") or a == b"npm" for a in argv[:2]):
                    continue
                fd = os.open(f"/proc/{pid}/root{home}/.npmrc", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.set_blocking(fd, True)
            with os.fdopen(fd, "w") as rc:
                yield rc
            return
        time.sleep(0.02)  # npm not yet started, or not yet at its read of ~/.npmrc
    raise AssertionError("npm never opened ~/.npmrc")


async def _npm_first_read_after(state: Path, how: str) -> str:
    """Ask `npm test` with SAFE_PACKAGE shown and approve it; once npm runs in its view (it opens the
    operator's ~/.npmrc, here a FIFO standing for npm's slow start, before it reads package.json), the
    agent replaces package.json: `rename` a new file over it, or `inplace`. What npm's script wrote."""
    from tests.helpers.pending import stored_asks

    home = Path(os.environ["HOME"])
    (home / ".npmrc").unlink()
    os.mkfifo(home / ".npmrc")
    work = state.parent / "w"
    work.mkdir()
    (work / "package.json").write_text(SAFE_PACKAGE)
    write_config(state, ALLOWLIST)
    async with gateway(state):
        details = await _exec(state, {"command": "npm test", "workdir": str(work)})
        assert details["status"] == "approval-pending", details
        ask_id = str(details["approvalId"])
        await _approve(state, ask_id)

        def when_npm_runs() -> None:
            with _npmrc_as_npm_sees_it(home, deadline=time.monotonic() + 120) as rc:  # npm opened it
                if how == "rename":
                    (work / "new.json").write_text(EVIL_PACKAGE)
                    os.rename(work / "new.json", work / "package.json")
                else:
                    with open(work / "package.json", "r+") as f:
                        f.truncate(0)
                        f.write(EVIL_PACKAGE)
                rc.write("update-notifier=false\noffline=true\n")

        await asyncio.wait_for(asyncio.to_thread(when_npm_runs), 120)
        await wait_until(lambda: ask_id not in [a["id"] for a in stored_asks(state)], timeout=60)
        await _sessions_ended(state)
    out = work / "out.txt"
    return out.read_text().strip() if out.exists() else "not run"


@needs_tools
@needs_bwrap
async def test_npm_reads_its_bound_package_json_after_an_in_place_rewrite(state_dir: Path) -> None:
    """Control: rewritten in place after the spawn, package.json still reads as the bound copy."""
    assert await _npm_first_read_after(state_dir, "inplace") == "SAFE"


@needs_tools
@needs_bwrap
@pytest.mark.xfail(
    strict=True,
    reason="open: package.json (every tree file but make's) is bound read-only at its path, and npm's "
    "first read of it comes after the spawn: a rename over it in the host's namespace detaches the bind "
    "in the run's, and npm reads the agent's new file (round 9 w's detach, on a first read: a racer "
    "won 4 of 10 approved `npm test` runs with no FIFO)",
)
async def test_npm_first_read_of_package_json_after_a_rename_over_it(state_dir: Path) -> None:
    assert await _npm_first_read_after(state_dir, "rename") == "SAFE"


async def _connects_to_a_socket_in_the_home(state: Path, where: str) -> str:
    """A listening Unix socket of the operator's at ~/<where>/S.sock; what a host run connecting to it
    prints (CONNECTED when it reached the operator's process)."""
    import socket as _socket

    home = Path(os.environ["HOME"])
    d = home / where
    d.mkdir(parents=True, mode=0o700)
    path = d / "S.sock"
    srv = _socket.socket(_socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(4)
    write_config(state, FULL)
    cmd = (
        'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        f"s.connect('{path}'); print('CONNECTED')\""
    )
    try:
        async with gateway(state):
            details = await _exec(state, {"command": cmd, "workdir": "/"})
    finally:
        srv.close()
    return str(details["_text"])


@needs_bwrap
async def test_a_socket_in_ssh_is_out_of_reach(state_dir: Path) -> None:
    """Control: a ControlMaster socket under ~/.ssh is not in the run's copy of it (dirshadow)."""
    assert "CONNECTED" not in await _connects_to_a_socket_in_the_home(state_dir, ".ssh/cm")


@needs_bwrap
@pytest.mark.parametrize("where", [".cache/ssh", ".gnupg"])
async def test_a_socket_elsewhere_in_the_home_answers_host_runs(state_dir: Path, where: str) -> None:
    assert "CONNECTED" not in await _connects_to_a_socket_in_the_home(state_dir, where)


@needs_bwrap
async def test_earlier_segment_writing_a_makefile_reaches_no_make(state_dir: Path) -> None:
    """Tried, held: the same for make: a Makefile absent at the vet stays absent for make (-f /dev/null),
    whatever an earlier allowlisted segment writes there."""
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "evil.mk").write_text("all:\n\t@echo PWNED-$$((6*7))\n")
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    for exe in ("/usr/bin/make", "/usr/bin/cp"):
        store.add_allowlist("main", exe)
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": "cp evil.mk Makefile && make", "workdir": str(work)})
    assert details["status"] == "completed", details  # it ran, unasked: with /dev/null for a makefile
    assert "PWNED-42" not in details["_text"], details["_text"][-300:]


@needs_bwrap
async def test_gateway_makes_its_tmpdir_through_the_agents_link(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    root = _private_root(state_dir)
    monkeypatch.setenv("TMPDIR", str(root / "a" / "gwtmp"))
    home = Path(os.environ["HOME"])
    (home / ".config").mkdir()
    copy_root = _agent_copy(state_dir, "main", root)
    shutil.rmtree(copy_root / "a", ignore_errors=True)
    os.symlink(str(home / ".config"), copy_root / "a")  # what a host run of the agent may do in its /tmp
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        await _exec(state_dir, {"command": "true", "workdir": "/"})
    assert not (home / ".config" / "gwtmp").exists()


@needs_bwrap
async def test_vet_follows_the_agents_link_into_the_state_dir(state_dir: Path) -> None:
    work = state_dir.parent / "w"
    work.mkdir()
    _git(work, "init", "-q")
    (work / ".git" / "config").unlink()
    os.symlink(str(state_dir / "config.toml"), work / ".git" / "config")
    node = '\n[nodes.alpha]\nhost = "10.0.0.9"\nuser = "deploy"\nidentityFile = "/srv/keys/alpha"\n'
    write_config(state_dir, ALLOWLIST + node)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/git")
    async with gateway(state_dir):
        details = await _exec(state_dir, {"command": "git status --short", "workdir": str(work)})
    assert "nodes.alpha" not in details["_text"], details["_text"][:400]
