"""Fresh attacks, round 4 (attacker f): issue 27 classes 4 and 5 — a host tool reads exactly the bytes that
were checked, found the way the tool finds them; what was approved is what runs, in every spelling.

Every attack that works is a strict xfail naming why; the passing tests are attacks that failed and stay
as regressions. Each test runs a real gateway, real git, real bubblewrap and real interpreters."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.hostenv import git_config_env
from engine.commands.pinned import PinnedView, view_for
from engine.commands.rendering import pinned_command
from engine.commands.treecode import TreeVet, tree_vet
from engine.commands.verified import VerifiedRun
from engine.protocol.client import ControlClient
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.gateway import connect, gateway, wait_until, write_config

GIT: list[tuple[str, str | None]] = [("/usr/bin/git", None)]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _git(*args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=x", "-c", "user.email=x@y", *args], check=True, capture_output=True
    )


def _repo(root: Path, files: dict[str, str]) -> Path:
    _git("init", "-q", str(root))
    for name, text in files.items():
        (root / name).write_text(text)
    _git("-C", str(root), "add", ".")
    _git("-C", str(root), "commit", "-qm", "init")
    return root


def _filter(marker: Path) -> str:
    """A clean filter that leaves `marker` behind when git runs it."""
    return f'[filter "x"]\n\tclean = "touch {marker}; cat"\n'


def _stat_dirty(path: Path) -> None:
    """Same bytes, another mtime: git must hash the file again, through its clean filter."""
    os.utime(path, (1, 1))


async def _finished(client: ControlClient, approval_id: str) -> str:
    """The text of the event that ends the approved run."""

    async def ended() -> str | None:
        events = (await client.request("events", {}))["events"]
        texts = [e["text"] for e in events if approval_id in e["text"]]
        return texts[-1] if texts else None

    text: str = await wait_until(ended, timeout=30)
    return text


async def _ask_then(
    client: ControlClient, ws: Path, command: str, between: Callable[[], object], decision: str
) -> tuple[dict[str, Any], str]:
    """The agent asks for `command`; `between` runs while the ask waits; the operator answers `decision`."""
    result = await client.request("exec", {"command": command, "workdir": str(ws)})
    details = result["details"]
    assert details["status"] == "approval-pending", result["text"]
    if decision == "allow-always" and decision not in details["allowedDecisions"]:
        # Not proven bound (issue 27 §5): the ask says why, and the operator can only approve this run.
        assert "allow-always is not offered" in result["text"], result["text"]
        decision = "allow-once"
    between()
    await client.request("approve", {"id": details["approvalId"], "decision": decision})
    return details, await _finished(client, details["approvalId"])


# --- class 4: git reads a per-worktree config nobody vetted ---------------------------------------------


def _decided_git_status(ws: Path) -> tuple[VerifiedRun, TreeVet]:
    """An allowlisted `git status --short` in `ws`, decided as the gateway decides it."""
    analysis = analyze_command("git status --short")
    result = evaluate_allowlist(
        analysis, [AllowlistEntry("/usr/bin/git")], cwd=str(ws), env={"PATH": "/usr/bin:/bin"}
    )
    vet = tree_vet(analysis, result, str(ws), [])
    assert not vet.found, vet.found  # inert config: runs unasked
    return VerifiedRun(pinned_command(analysis, result) or "git status --short"), vet


def _run_in_view(view: PinnedView, run: VerifiedRun, ws: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **view.env, **git_config_env()}
    argv = view.wrap(["/bin/sh", "-c", run.command])
    return subprocess.run(argv, cwd=ws, env=env, pass_fds=view.fds, capture_output=True, text=True)


@needs_bwrap
@pytest.mark.parametrize("present", [False, True])
def test_class4_a_worktree_config_planted_after_the_revet_runs_a_filter(
    state_dir: Path, tmp_path: Path, present: bool
) -> None:
    """$GIT_DIR/config.worktree, absent (or inert) at the spawn's re-vet, is planted right after it, before
    git starts (extensions.worktreeConfig is an inert key, so git would read it by path). The re-vet is
    view_for's pin: exactly the window between the last check and git's read. (The gateway-level form of
    this attack served .git/HEAD from a FIFO to learn when git started; vetting now refuses a FIFO HEAD.)"""
    ws = _repo(tmp_path / "w", {"a.txt": "a\n"})
    _git("-C", str(ws), "config", "core.repositoryformatversion", "1")
    _git("-C", str(ws), "config", "extensions.worktreeConfig", "true")
    worktree_config = ws / ".git" / "config.worktree"
    if present:
        worktree_config.write_text("[user]\n\tname = vetted\n")
    (ws / ".gitattributes").write_text("*.txt filter=x\n")
    _stat_dirty(ws / "a.txt")
    marker = tmp_path / "PWNED"
    run, vet = _decided_git_status(ws)
    view = view_for(vet, run)
    try:
        worktree_config.write_text(_filter(marker))  # after the re-vet, before git reads it
        done = _run_in_view(view, run, ws)
    finally:
        view.close()
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "git ran a filter from a config exechost never vetted"


@needs_bwrap
def test_regression_a_vetted_worktree_config_still_applies(state_dir: Path, tmp_path: Path) -> None:
    """The legitimate case: config.worktree's vetted keys are what git sees, after the common config's."""
    ws = _repo(tmp_path / "w", {"a.txt": "a\n"})
    _git("-C", str(ws), "config", "extensions.worktreeConfig", "true")
    _git("-C", str(ws), "config", "user.name", "common")
    _git("-C", str(ws), "config", "--worktree", "user.name", "per-worktree")
    analysis = analyze_command("git config user.name")
    result = evaluate_allowlist(
        analysis, [AllowlistEntry("/usr/bin/git")], cwd=str(ws), env={"PATH": "/usr/bin:/bin"}
    )
    vet = tree_vet(analysis, result, str(ws), [])
    run = VerifiedRun(pinned_command(analysis, result) or "git config user.name")
    view = view_for(vet, run)
    try:
        done = _run_in_view(view, run, ws)
    finally:
        view.close()
    assert done.stdout.strip() == "per-worktree", (done.stdout, done.stderr)


async def test_a_fifo_head_stalls_the_gateway(state_dir: Path, tmp_path: Path) -> None:
    ws = _repo(tmp_path / "w", {"a.txt": "a\n"})
    head = ws / ".git" / "HEAD"
    os.unlink(head)
    os.mkfifo(head)
    other = tmp_path / "o"
    other.mkdir()
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/git", arg_pattern=None)
    loop = asyncio.get_running_loop()
    stalled: list[str] = []
    done = threading.Event()

    def responsive() -> bool:
        """Whether the gateway's loop runs a callback within a generous bound (a detector, not a timing
        assertion: a healthy loop answers at once)."""
        ping = threading.Event()
        loop.call_soon_threadsafe(ping.set)
        return ping.wait(5)

    def serve(victim: ControlClient) -> None:
        readers = 0
        while not done.is_set():
            fd = os.open(head, os.O_WRONLY)  # returns once a reader is inside open(HEAD)
            readers += 1
            try:
                if done.is_set():
                    return
                if any("loop" in what for what in stalled):
                    pass  # shown once: serve the rest at once
                elif not responsive():
                    stalled.append(f"reader {readers}: the event loop is blocked in open(.git/HEAD)")
                elif readers == 1:
                    other_exec = asyncio.run_coroutine_threadsafe(
                        victim.request("exec", {"command": "pwd", "workdir": str(other)}), loop
                    )
                    try:
                        other_exec.result(10)
                    except TimeoutError:
                        stalled.append("another client's exec waited behind the attacker's FIFO")
                os.write(fd, b"ref: refs/heads/master\n")
            except OSError:
                pass
            finally:
                os.close(fd)

    async with gateway(state_dir):
        attacker, victim = await connect(state_dir, operator=False), await connect(state_dir, "victim")
        server = threading.Thread(target=serve, args=(victim,), daemon=True)
        server.start()
        try:
            await attacker.request("exec", {"command": "git status", "workdir": str(ws)})
        finally:
            done.set()
            reader = os.open(head, os.O_RDONLY | os.O_NONBLOCK)
            await asyncio.to_thread(server.join, 30)
            os.close(reader)
            await attacker.close()
            await victim.close()
    assert not stalled, stalled


# --- class 5: a submodule found by git, not by the emulation ---------------------------------------------


def _super_with_submodule(tmp_path: Path, marker: Path) -> tuple[Path, Path]:
    """A superproject whose index holds a gitlink `sub`, a checked-out repository with a filter in its
    config (which the vetting must see) and a file git must re-hash through it."""
    sub = _repo(tmp_path / "w" / "sub", {"a.txt": "a\n", ".gitattributes": "*.txt filter=x\n"})
    ws = tmp_path / "w"
    _git("init", "-q", str(ws))
    (ws / "t").write_text("t\n")
    _git("-C", str(ws), "add", "t", "sub")
    _git("-C", str(ws), "commit", "-qm", "top")
    with open(sub / ".git" / "config", "a") as f:
        f.write(_filter(marker))
    _stat_dirty(sub / "a.txt")
    return ws, sub


async def test_regression_a_plain_submodule_filter_asks(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    ws, _ = _super_with_submodule(tmp_path, marker)
    details = await attempt(state_dir, "git status --short", allow=GIT, workdir=str(ws))
    assert refused(details), details["_text"]
    assert not marker.exists()


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param("head-newline", id="HEAD is 'ref:\\nrefs/heads/master' (git skips any isspace)"),
        pytest.param("refs-file", id="refs is an executable file (git checks access(X_OK), not a dir)"),
        pytest.param(
            "commondir-space", id="commondir 'c ' (git strips only \\r\\n, the emulation all space)"
        ),
    ],
)
async def test_class5_a_submodule_git_accepts_and_the_emulation_does_not(
    state_dir: Path, tmp_path: Path, spelling: str
) -> None:
    marker = tmp_path / "PWNED"
    ws, sub = _super_with_submodule(tmp_path, marker)
    dot = sub / ".git"
    if spelling == "head-newline":
        (dot / "HEAD").write_text("ref:\nrefs/heads/master\n")
    elif spelling == "refs-file":
        os.rename(dot / "refs", dot / "refs.moved")
        (dot / "refs").write_text("")
        os.chmod(dot / "refs", 0o755)
    else:
        inert = dot / "c"
        evil = dot / "c "
        for common in (inert, evil):
            common.mkdir()
            for name in ("objects", "refs"):
                os.symlink(dot / name, common / name)
        shutil.copy(dot / "config", inert / "config")
        (inert / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
        shutil.copy(dot / "config", evil / "config")
        (dot / "commondir").write_text("c \n")
    details = await attempt(state_dir, "git status --short", allow=GIT, workdir=str(ws))
    assert refused(details) or not marker.exists(), details["_text"]
    assert not marker.exists(), "git ran a submodule filter that exechost never vetted"


# --- class 5: what was approved is what runs --------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "nohup sh x.sh",
        "setsid sh x.sh",
        "env -S 'sh x.sh'",
        "env -i sh x.sh",
        "env -C . sh x.sh",
        "xargs -a /dev/null sh x.sh",
        "find . -maxdepth 0 -exec sh x.sh ';'",
    ],
)
async def test_class5_allow_always_through_an_opaque_wrapper_binds_no_script(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "x.sh").write_text("echo GOOD\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, command, lambda: None, "allow-always")
            # it ran as approved, or (env -S, xargs -a: round 10 e) is refused as a run nothing can bind
            assert "GOOD" in text or "cannot be bound to what was approved" in text, text
            (ws / "x.sh").write_text("echo EVIL\n")
            again = await client.request("exec", {"command": command, "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten script ran on the old allow-always"


@pytest.mark.parametrize(
    "command", ["sh x.s?", "sh x.s[h]", "sh x.*", "sh ${PWD}/x.sh", "sh $PWD/x.s?", "./x.s?", "bash *.sh"]
)
async def test_class5_a_script_spelled_by_expansion_runs_rewritten_on_allow_once(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "x.sh").write_text("#!/bin/sh\necho GOOD\n")
    (ws / "x.sh").chmod(0o755)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(
                client, ws, command, lambda: (ws / "x.sh").write_text("#!/bin/sh\necho EVIL\n"), "allow-once"
            )
        finally:
            await client.close()
    assert "EVIL" not in text, "the script rewritten after the approval ran"
    assert "approval-stale" in text, text


@pytest.mark.parametrize("command", ["sh x.s?", "sh ${PWD}/x.sh", "cat *.txt"])
async def test_regression_an_expanded_command_runs_what_was_shown(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    """The legitimate case: the ask names what the shell expands the words to now, offers no allow-always
    (the files were decided on, not granted), and once approved the expansion runs — a file added after
    the ask that the pattern would also match does not."""
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "x.sh").write_text("echo GOOD\n")
    (ws / "a.txt").write_text("GOOD\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            result = await client.request("exec", {"command": command, "workdir": str(ws)})
            details = result["details"]
            assert details["status"] == "approval-pending", result["text"]
            assert "the shell expands" in result["text"], result["text"]
            assert "allow-always" not in details["allowedDecisions"], details
            (ws / "x.sa").write_text("echo LATE\n")
            (ws / "b.txt").write_text("LATE\n")
            await client.request("approve", {"id": details["approvalId"], "decision": "allow-once"})
            text = await _finished(client, details["approvalId"])
        finally:
            await client.close()
    assert "GOOD" in text and "LATE" not in text, text


@pytest.mark.parametrize(
    ("command", "runs", "py"),
    [
        ("python3 app", "app/__main__.py", True),
        ("python3 ./app/", "app/__main__.py", True),
        ("node app", "app/index.js", False),
        ("node x", "x.js", False),
    ],
)
async def test_class5_an_operand_the_interpreter_resolves_to_another_file_binds_nothing(
    state_dir: Path, tmp_path: Path, command: str, runs: str, py: bool
) -> None:
    ws = tmp_path / "w"
    target = ws / runs
    target.parent.mkdir(parents=True, exist_ok=True)
    code = "print('{}')\n" if py else "console.log('{}')\n"
    target.write_text(code.format("GOOD"))
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, command, lambda: None, "allow-always")
            assert "GOOD" in text
            target.write_text(code.format("EVIL"))
            again = await client.request("exec", {"command": command, "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], f"the rewritten {runs} ran on the old allow-always"


@pytest.mark.parametrize(
    "command",
    ["env -- sh x.sh", "exec -a foo sh x.sh", "command sh x.sh", "sh -o errexit x.sh", "cat x.sh | sh"],
)
async def test_regression_spellings_that_stay_bound(state_dir: Path, tmp_path: Path, command: str) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "x.sh").write_text("echo GOOD\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(
                client, ws, command, lambda: (ws / "x.sh").write_text("echo EVIL\n"), "allow-once"
            )
        finally:
            await client.close()
    assert "approval-stale" in text and "EVIL" not in text, text


async def test_regression_a_python_zipapp_is_bound_by_its_bytes(state_dir: Path, tmp_path: Path) -> None:
    ws = tmp_path / "w"
    ws.mkdir()

    def zipapp(text: str) -> None:
        with zipfile.ZipFile(ws / "app.zip", "w") as z:
            z.writestr("__main__.py", text)

    zipapp("print('GOOD')\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(
                client, ws, "python3 app.zip", lambda: zipapp("print('EVIL')\n"), "allow-once"
            )
        finally:
            await client.close()
    assert "approval-stale" in text and "EVIL" not in text, text


# --- class 4: the tree npm reads is not the tree the emulation walks -----------------------------------


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
async def test_class4_npm_reads_the_workspace_roots_npmrc_above_the_vetted_package(
    state_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "w"
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    (root / "package.json").write_text('{"name": "root", "workspaces": ["pkg"]}\n')
    (pkg / "package.json").write_text(
        '{"name": "pkg", "version": "1.0.0", "scripts": {"test": "echo GOOD"}}\n'
    )
    shell = tmp_path / "shell.sh"
    shell.write_text('#!/bin/sh\necho EVIL-SHELL "$@"\n')
    shell.chmod(0o755)
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/npm", arg_pattern=None)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, pkg, "npm test", lambda: None, "allow-always")
            assert "GOOD" in text and "EVIL" not in text, text
            (root / ".npmrc").write_text(f"script-shell={shell}\n")
            again = await client.request("exec", {"command": "npm test", "workdir": str(pkg)})
        finally:
            await client.close()
    assert "EVIL-SHELL" not in again["text"], "a workspace root's .npmrc chose the shell of an approved npm"


# --- class 4: the config exechost trusts is written by the program it allowlists -------------------------


async def test_class4_allowlisted_git_writes_the_trusted_global_config(
    state_dir: Path, tmp_path: Path
) -> None:
    ws = _repo(tmp_path / "w", {"a.txt": "a\n", ".gitattributes": "*.txt filter=x\n"})
    _stat_dirty(ws / "a.txt")
    marker = tmp_path / "PWNED"
    first = await attempt(
        state_dir, f"git config --global filter.x.clean 'touch {marker}; cat'", allow=GIT, workdir=str(ws)
    )
    second = await attempt(state_dir, "git status --short", allow=GIT, workdir=str(ws))
    assert refused(first) or refused(second) or not marker.exists(), (first["_text"], second["_text"])
    assert not marker.exists(), "git ran a filter an allowlisted git wrote into the global config"


# --- class 5: a path exechost resolves in its own process, not the program's ------------------------------


@pytest.mark.parametrize(
    ("command", "py"),
    [
        ("sh /proc/self/cwd/x.sh", False),
        ("/proc/self/cwd/x.sh", False),
        ("sh /proc/thread-self/cwd/x.sh", False),
        ("sh /dev/fd/../../self/cwd/x.sh", False),
        ("python3 /proc/self/cwd/x.py", True),
    ],
)
async def test_class5_a_proc_self_path_names_the_gateways_cwd_not_the_runs(
    state_dir: Path, tmp_path: Path, command: str, py: bool
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    script = ws / ("x.py" if py else "x.sh")
    code = "print('{}')\n" if py else "#!/bin/sh\necho {}\n"
    script.write_text(code.format("GOOD"))
    script.chmod(0o755)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            first = await client.request("exec", {"command": command, "workdir": str(ws)})
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return  # nothing an allow-always could save: not this attack
            decision = {"id": first["details"]["approvalId"], "decision": "allow-always"}
            await client.request("approve", decision)
            text = await _finished(client, first["details"]["approvalId"])
            assert "GOOD" in text, text
            script.write_text(code.format("EVIL"))
            again = await client.request("exec", {"command": command, "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten script ran on the old allow-always"


async def test_class5_allow_always_on_eval_binds_no_script(state_dir: Path, tmp_path: Path) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "x.sh").write_text("echo GOOD\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, "eval 'sh x.sh'", lambda: None, "allow-always")
            assert "GOOD" in text
            (ws / "x.sh").write_text("echo EVIL\n")
            again = await client.request("exec", {"command": "eval 'sh x.sh'", "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten script ran on the old allow-always"


@pytest.mark.parametrize("command", ["a=x.sh; sh $a", "sh `echo x.sh`", "X=x.sh sh -c 'sh $X'"])
async def test_regression_an_unresolvable_script_is_never_offered_allow_always(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "x.sh").write_text("echo GOOD\n")
    details = await attempt(state_dir, command, workdir=str(ws))
    assert details["status"] == "approval-pending", details["_text"]
    assert "allow-always" not in details["allowedDecisions"], details


async def test_class5_bash_finds_its_script_operand_on_path(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    # the operator's ~/bin, on the gateway's PATH (one outside the home that any but root can change is
    # dropped from a host run's PATH: hostenv.host_path)
    bindir = Path.home() / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    (bindir / "x.sh").write_text("echo GOOD\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, "bash x.sh", lambda: None, "allow-always")
            assert "GOOD" in text, text
            (bindir / "x.sh").write_text("echo EVIL\n")
            again = await client.request("exec", {"command": "bash x.sh", "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "a script bash found on PATH ran on the old allow-always"


@pytest.mark.parametrize(
    "command",
    [
        "env git status --short",
        "timeout 5 git status --short",
        "bash -lc 'git status --short'",
        "/usr/bin/../bin/git status --short",
        "g''it status --short",
        "exec -a foo git status --short",
    ],
)
async def test_regression_every_spelling_of_an_allowlisted_git_vets_its_repository(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = _repo(tmp_path / "w", {"a.txt": "a\n", ".gitattributes": "*.txt filter=x\n"})
    marker = tmp_path / "PWNED"
    with open(ws / ".git" / "config", "a") as f:
        f.write(_filter(marker))
    _stat_dirty(ws / "a.txt")
    allow: list[tuple[str, str | None]] = [*GIT, ("/usr/bin/env", None), ("/usr/bin/timeout", None)]
    details = await attempt(state_dir, command, allow=allow, workdir=str(ws))
    assert refused(details), details["_text"]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("shebang", "payload", "code"),
    [
        ("#!/bin/sh ./payload.sh", "payload.sh", "echo {}\n"),
        ("#!/usr/bin/env -S sh ./payload.sh", "payload.sh", "echo {}\n"),
        ("#!/usr/bin/env -S python3 ./payload.py", "payload.py", "print('{}')\n"),
        ("#!./interp", "interp", "#!/bin/sh\necho {}\n"),
        ("#!interp", "interp", "#!/bin/sh\necho {}\n"),
    ],
)
async def test_class5_a_shebang_argument_names_an_unbound_script(
    state_dir: Path, tmp_path: Path, shebang: str, payload: str, code: str
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "run").write_text(shebang + "\n")
    (ws / "run").chmod(0o755)
    (ws / payload).write_text(code.format("GOOD"))
    (ws / payload).chmod(0o755)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, "./run", lambda: None, "allow-always")
            assert "GOOD" in text, text
            (ws / payload).write_text(code.format("EVIL"))
            again = await client.request("exec", {"command": "./run", "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten #! payload ran on the old allow-always"


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
@pytest.mark.parametrize(
    "command", ["perl -I. -Mevil x.pl", "perl -I . -mevil x.pl", "perl -Ilib -Mevil x.pl"]
)
async def test_class5_a_perl_module_preload_is_not_bound(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    (ws / "lib").mkdir(parents=True)
    (ws / "x.pl").write_text('print "main\\n";\n')

    def modules(word: str) -> None:
        for where in (ws, ws / "lib"):
            (where / "evil.pm").write_text(f'package evil; print "{word}\\n"; 1;\n')

    modules("GOOD")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, command, lambda: None, "allow-always")
            assert "GOOD" in text, text
            modules("EVIL")
            again = await client.request("exec", {"command": command, "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten preloaded module ran on the old allow-always"


# --- class 5: make's option grammar is emulated, and differs from make's ----------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "make --fil=evil.mk",  # getopt_long takes any unique prefix of --file/--makefile/--directory
        "make --makef=evil.mk",
        "make --direc=sub",
        "make -rf evil.mk",  # -f inside a cluster of short options
        "make -sfevil.mk",
        "make -kC sub",
        # The recipe is in the argv itself (spelled `EV""IL` so that only running it prints EVIL).
        """make --eval='all:;@echo EV""IL'""",
        """make -sE'all:;@echo EV""IL'""",
        """make --ev 'all:;@echo EV""IL'""",
        """make 'x:=$(shell echo EV""IL >&2)'""",  # a command-line assignment is make code too
        """make 'x!=echo EV""IL >&2'""",
        """make 'GNUMAKEFLAGS=--eval=all:;@echo EV""IL'""",
        "make SHELL=./evil.sh",
    ],
)
async def test_class5_make_reads_a_makefile_through_an_option_spelling_treecode_does_not_parse(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    (ws / "sub").mkdir(parents=True)
    (ws / "evil.mk").write_text("all:\n\t@echo EVIL\n")
    (ws / "sub" / "Makefile").write_text("all:\n\t@echo EVIL\n")
    details = await attempt(state_dir, command, allow=[("/usr/bin/make", None)], workdir=str(ws))
    assert refused(details) and "EVIL" not in details["_text"], details["_text"]


@pytest.mark.parametrize("command", ["make -f evil.mk", "make --file evil.mk", "make -Csub", "make"])
async def test_regression_make_spelled_plainly_asks_for_an_agent_makefile(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    (ws / "sub").mkdir(parents=True)
    (ws / "evil.mk").write_text("all:\n\t@echo EVIL\n")
    (ws / "sub" / "Makefile").write_text("all:\n\t@echo EVIL\n")
    (ws / "Makefile").write_text("all:\n\t@echo EVIL\n")
    details = await attempt(state_dir, command, allow=[("/usr/bin/make", None)], workdir=str(ws))
    assert refused(details), details["_text"]


PIP = os.path.join(os.path.dirname(sys.executable), "pip")


@pytest.mark.skipif(not os.access(PIP, os.X_OK), reason="no pip beside this interpreter")
@pytest.mark.parametrize(
    "option",
    ["-qr r.txt", "-r r.txt", "-qrr.txt", "--edit=pkg", "-q -e pkg", "-f pkg", "--python=./py"],
)
async def test_class5_pip_reads_a_requirements_file_in_a_short_option_cluster(
    state_dir: Path, tmp_path: Path, option: str
) -> None:
    ws = tmp_path / "w"
    (ws / "pkg").mkdir(parents=True)
    marker = tmp_path / "PWNED"
    (ws / "pkg" / "setup.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\nfrom setuptools import setup\nsetup(name='p', version='1')\n"
    )
    (ws / "r.txt").write_text("./pkg\n")
    command = f"{PIP} wheel --no-deps --no-build-isolation --no-index {option} -w out"
    details = await attempt(state_dir, command, allow=[(PIP, None)], workdir=str(ws))
    assert refused(details), details["_text"]
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("awk") is None, reason="awk is not installed")
@pytest.mark.parametrize(
    "command",
    [
        "awk -fp.awk",
        "awk -f p.awk",
        "awk -v x=1 -f p.awk",
    ],
)
async def test_class5_an_awk_program_file_attached_to_f(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "p.awk").write_text('BEGIN { print "GOOD" }\n')
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, command, lambda: None, "allow-always")
            assert "GOOD" in text, text
            (ws / "p.awk").write_text('BEGIN { print "EVIL" }\n')
            again = await client.request("exec", {"command": command, "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten awk program ran on the old allow-always"


@pytest.mark.parametrize(
    "command",
    [
        "sed -fs.sed in.txt",
        "sed --file=s.sed in.txt",
        "sed --fi=s.sed in.txt",
        "sed -n -f s.sed in.txt",
        "sed -nf s.sed in.txt",
    ],
)
async def test_class5_a_sed_script_file_in_other_spellings(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "in.txt").write_text("a\n")
    (ws / "s.sed").write_text("1e echo GOOD\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            _, text = await _ask_then(client, ws, command, lambda: None, "allow-always")
            assert "GOOD" in text, text
            (ws / "s.sed").write_text("1e echo EVIL\n")
            again = await client.request("exec", {"command": command, "workdir": str(ws)})
        finally:
            await client.close()
    assert "EVIL" not in again["text"], "the rewritten sed script ran on the old allow-always"
