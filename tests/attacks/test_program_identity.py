"""A program is what it is invoked as (engine.commands.progident): git's linked programs and rustup's proxies
choose what they do by argv[0]. Round 10 f's attacks, with the outcome a refusal at the decision (the round's
own tests assert the vulnerable first step, a session started or a bare path saved, before the payload)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.gateway import connect, gateway, wait_until, write_config


def _repo_with_a_tar_command(repo: Path, marker: Path) -> None:
    git = ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a").write_text("a\n")
    subprocess.run([*git, "add", "a"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    subprocess.run([*git, "config", "tar.evil.remote", "true"], check=True)
    subprocess.run(
        [*git, "config", "tar.evil.command", f"sh -c 'echo ran > {marker}; cat >/dev/null'"], check=True
    )


@pytest.mark.parametrize("program", ["git-upload-archive", "git-upload-pack", "git-receive-pack"])
async def test_a_git_linked_program_serving_a_repository_asks(state_dir: Path, program: str) -> None:
    """`git-upload-archive log` is git's upload-archive serving ./log (whose config names a tar command),
    not `git log` in the cwd: vetted as the subcommand it is, which is not known to run no program."""
    linked = f"/usr/bin/{program}"
    if not os.path.islink(linked):
        pytest.skip("needs git's linked programs")
    work = state_dir.parent / "w"
    marker = work / "ran"
    _repo_with_a_tar_command(work / "log", marker)
    details = await attempt(state_dir, f"{program} log", allow=[(linked, None)], workdir=str(work))
    assert refused(details), details["_text"]
    assert not marker.exists()


RUST_GDB = "/root/.cargo/bin/rust-gdb"


@pytest.mark.skipif(
    not (os.path.isfile(RUST_GDB) and shutil.which("gdb") and os.path.isdir("/root/.rustup/toolchains")),
    reason="needs rustup's rust-gdb and gdb",
)
async def test_allow_always_of_rust_gdb_saves_the_exact_command_and_a_shell_escape_asks(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUSTUP_HOME", "/root/.rustup")  # the operator's toolchains: the test has its own HOME
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            params = {"agentId": "main", "workdir": str(work), "timeout": 60}
            first = await client.request("exec", {"command": "rust-gdb --version", **params})
            assert first["details"]["status"] == "approval-pending", first["text"]
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            store = ApprovalsStore(state_dir / "exec-approvals.json")
            saved = await wait_until(
                lambda: [e.pattern for e in store.snapshot().entries("main")], timeout=60
            )
            # A debugger (a runner of any code) is never saved by its bare path: the exact command is.
            assert RUST_GDB not in saved and all(p.startswith("=command:") for p in saved), saved
            command = f"rust-gdb -batch -nx -ex 'shell echo ran > {marker}'"
            second = await client.request("exec", {"command": command, **params})
        finally:
            await client.close()
    assert not marker.exists(), "the saved rust-gdb ran a gdb shell command"
    assert refused(second["details"]), second["text"]
