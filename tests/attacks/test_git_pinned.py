"""Issue 27 §4: host git reads exactly the repository and the config bytes that were vetted.

Repository discovery was emulated (a symlinked HEAD made vetting find nothing; a `sub/.git` with a garbage
HEAD was vetted while git used the parent's config), and the config could be swapped between the vet and
git's read (a racer won 26 of 200 tries). Now git is pointed at the repository vetted (GIT_DIR,
GIT_WORK_TREE) and reads its config from a private copy of the vetted bytes (engine.commands.pinned).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from tests.attacks.harness import refused
from tests.attacks.test_host_tools import GIT_ANY, config, git, make_repo
from tests.helpers.gateway import connect, gateway, wait_until, write_config

NO_ASK = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "off"\n'
TRIES = int(os.environ.get("EXECHOST_RACER_TRIES", "1000"))


def filtered(work: Path, marker: Path) -> None:
    """A clean filter that leaves a marker, on a modified file `git status` must hash."""
    (work / ".gitattributes").write_text("*.txt filter=x\n")
    config(work, "filter.x.clean", f"touch {marker}; cat")
    (work / "f.txt").write_text("two\n")


async def run(state: Path, command: str, workdir: Path, config_text: str = NO_ASK) -> dict[str, object]:
    from engine.approvals.store import ApprovalsStore

    write_config(state, config_text)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", GIT_ANY[0], arg_pattern=None)
    async with gateway(state):
        client = await connect(state)
        try:
            return await exec_once(client, command, workdir)
        finally:
            await client.close()


async def exec_once(client: ControlClient, command: str, workdir: Path) -> dict[str, object]:
    """The exec's details; a denial (ask=off: the vet found code) as status `denied`."""
    try:
        res = await client.request("exec", {"command": command, "workdir": str(workdir)})
    except RemoteError as exc:
        assert "exec denied" in str(exc), exc
        return {"status": "denied", "text": str(exc)}
    details: dict[str, object] = res["details"]
    return details


async def test_head_as_a_symlink(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    work = make_repo(tmp_path / "r")
    git(work, "pack-refs", "--all")  # refs/heads/main is now only in packed-refs: the link dangles
    head = work / ".git" / "HEAD"
    head.unlink()
    head.symlink_to("refs/heads/main")
    filtered(work, marker)
    details = await run(state_dir, "git status --short", work)
    assert not marker.exists()
    assert refused(details), details


async def test_sub_git_with_a_garbage_head(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    work = make_repo(tmp_path / "r")
    filtered(work, marker)
    sub = work / "sub"
    (sub / ".git" / "objects").mkdir(parents=True)
    (sub / ".git" / "refs").mkdir()
    (sub / ".git" / "HEAD").write_text("garbage\n")
    (sub / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    details = await run(state_dir, "git status --short", sub)
    assert not marker.exists()
    assert refused(details), details


async def test_a_clean_repository_still_runs_and_writes(state_dir: Path, tmp_path: Path) -> None:
    """The pinned view changes nothing else: status reads, add writes the index, commit writes refs."""
    work = make_repo(tmp_path / "r")
    (work / "g.txt").write_text("new\n")
    who = "-c user.name=t -c user.email=t@x"
    details = await run(state_dir, f"git add g.txt && git {who} commit -qm two && git status --short", work)
    assert details["status"] == "completed", details
    assert git(work, "log", "--format=%s", "-1") == "two"
    assert git(work, "status", "--short") == ""


async def test_git_diff_of_a_modified_file_shows_the_diff(state_dir: Path, tmp_path: Path) -> None:
    """A forced `diff.external=` (meant to pin the external diff off) made git 2.39 try to run a program
    named "", so every host `git diff` of a change died ("external diff died"). The repository's own
    `diff.external` is not inert (gitvet asks) and the global config is read-only in the host view."""
    work = make_repo(tmp_path / "r")
    tracked = next(p for p in work.iterdir() if p.is_file())
    tracked.write_text("changed-line\n")
    details = await run(state_dir, "git diff", work)
    assert details["status"] == "completed", details
    assert "+changed-line" in str(details.get("aggregated") or ""), details
    marker = tmp_path / "pwned"
    config(work, "diff.external", f"touch {marker}")
    details = await run(state_dir, "git diff", work)
    assert not marker.exists()
    assert refused(details), details


async def test_a_config_swapped_while_git_runs_is_never_read(state_dir: Path, tmp_path: Path) -> None:
    """The racer swaps an inert `.git/config` for one with a filter, in a loop, while allowlisted
    `git status` runs TRIES times. Whatever the interleaving, the filter never runs: each run either was
    refused (the vet saw the filter) or read the inert bytes it was vetted on."""
    marker = tmp_path / "pwned"
    work = make_repo(tmp_path / "r")
    (work / ".gitattributes").write_text("*.txt filter=x\n")
    (work / "f.txt").write_text("two\n")
    cfg = work / ".git" / "config"
    inert = cfg.read_bytes()
    evil = inert + f'[filter "x"]\n\tclean = touch {marker}; cat\n'.encode()
    stop = threading.Event()

    def racer() -> None:
        spare = work / ".git" / "config.swap"
        while not stop.is_set():
            for data in (evil, inert):
                spare.write_bytes(data)
                os.replace(spare, cfg)

    from engine.approvals.store import ApprovalsStore

    write_config(state_dir, NO_ASK)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", GIT_ANY[0], arg_pattern=None)
    ran = 0
    async with gateway(state_dir):
        client = await connect(state_dir)
        thread = threading.Thread(target=racer, daemon=True)
        thread.start()
        try:
            for _ in range(TRIES):
                details = await exec_once(client, "git status --short", work)
                ran += details["status"] == "completed"
        finally:
            stop.set()
            thread.join()
            await client.close()
    assert not marker.exists(), f"the filter ran (after {ran} of {TRIES} runs were allowed)"


MAKEFILE = """all:
\t@touch ready; while [ ! -e go ]; do sleep 0.01; done; $(MAKE) -s second
second:
\t@echo approved-second
"""


async def test_make_re_reading_its_makefile_gets_the_approved_bytes(state_dir: Path, tmp_path: Path) -> None:
    """The same view for every tree tool: an approved `make` whose recipe runs make again (which reads
    the Makefile again) gets the approved Makefile, though the agent rewrote it in between."""
    from tests.attacks.harness import ALLOWLIST
    from tests.attacks.test_content_binding import _outcome, _rewrite_in_place

    marker = tmp_path / "pwned"
    makefile = tmp_path / "Makefile"
    makefile.write_text(MAKEFILE)
    write_config(state_dir, ALLOWLIST)
    from engine.approvals.store import ApprovalsStore

    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/make", arg_pattern=None)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        operator = await connect(state_dir, "operator")
        try:
            res = await agent.request(
                "exec", {"command": "make -s", "workdir": str(tmp_path), "sessionKey": "k"}
            )
            assert res["details"]["status"] == "approval-pending", res  # the Makefile is agent-writable
            await operator.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: (tmp_path / "ready").exists(), timeout=20)
            _rewrite_in_place(makefile, MAKEFILE.replace("@echo approved-second", f"@touch {marker}"))
            (tmp_path / "go").touch()
            text = await _outcome(agent, "k")
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), text
    assert "approved-second" in text, text


async def test_an_exec_frame_on_the_approval_socket_runs_git_in_the_pinned_view(
    state_dir: Path, tmp_path: Path
) -> None:
    """The approval socket's `exec` frame runs host git too: pointed at the vetted repository, its config
    read from the sealed copy (git names where it read each key)."""
    from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest, request_exec
    from engine.approvals.store import ApprovalsStore
    from engine.tools.exec_host import LocalExecHost
    from tests.attacks.harness import ALLOWLIST

    work = make_repo(tmp_path / "r")
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore().add_allowlist("main", "/usr/bin/git")

    async def human(request: PromptRequest) -> str:
        raise AssertionError(f"a clean repository asked: {request}")

    token = "exec-token-" + "k" * 24
    path = state_dir / "exec-approvals.sock"
    command = ["git", "config", "--list", "--show-origin", "--local"]
    async with ApprovalSocketServer(path, token, decider=human, exec_handler=LocalExecHost()):
        res = await request_exec(path, token, {"command": command, "cwd": str(work)})
    assert res is not None and res.get("ok") is True, res
    text = str(res)
    assert f"{state_dir}/pinned/git/config" in text and str(work / ".git" / "config") not in text, text
