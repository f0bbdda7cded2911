"""Fresh round 9 (w): emulating another program (class 5) and self-reference (class 8)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.commands.analysis import analyze_command
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.gateway import connect, gateway, wait_until, write_config

GIT = "/usr/bin/git"


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _pushable(root: Path) -> tuple[Path, Path, Path]:
    """A work repository with one commit, and a bare repository beside it whose pre-receive hook (the
    agent's code) leaves a mark when receive-pack runs there."""
    work, dest, mark = root / "w", root / "dest", root / "PWNED"
    _git("init", "-q", str(work))
    _git(
        "-C",
        str(work),
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@b",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    _git("init", "-q", "--bare", str(dest))
    hook = dest / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {mark}\n")
    hook.chmod(0o755)
    return work, dest, mark


def _percent_last(path: Path) -> str:
    """`path` with its last character percent-encoded: git url-decodes a `scheme://` URL before it
    splits it, so `file:///x/des%74` is the repository /x/dest."""
    text = str(path)
    return text[:-1] + "%" + format(ord(text[-1]), "02x")


async def test_plain_push_to_a_local_repository_asks(state_dir: Path, tmp_path: Path) -> None:
    """Regression: the local destination by its path (and by a plain file:// URL) asks, once only."""
    work, dest, mark = _pushable(tmp_path)
    for url in (str(dest), f"file://{dest}"):
        details = await attempt(
            state_dir, f"git push {url} HEAD:refs/heads/x", allow=[(GIT, None)], workdir=str(work)
        )
        assert refused(details), details
        assert "receive-pack" in (details.get("warningText") or "")
    assert not mark.exists()


async def test_class5_push_to_a_percent_encoded_file_url_runs_the_destinations_hook(
    state_dir: Path, tmp_path: Path
) -> None:
    """Fixed: gitargv.local_destinations read a file:// URL undecoded, git url-decodes it, so an
    allowlisted `git push` to it ran the destination's pre-receive hook unasked."""
    work, dest, mark = _pushable(tmp_path)
    url = "file://" + _percent_last(dest)
    details = await attempt(
        state_dir, f"git push {url} HEAD:refs/heads/x", allow=[(GIT, None)], workdir=str(work)
    )
    assert refused(details) and not mark.exists(), (details["status"], details["_text"])


SH_READS_ITSELF = '#!/bin/sh\necho READY\nread ans\ncat "$0"\n'
PY_READS_ITSELF = (
    "#!/usr/bin/python3\nimport sys\nprint('READY', flush=True)\n"
    "sys.stdin.readline()\nprint(open(__file__).read())\n"
)
REWRITTEN = "#!/bin/sh\necho REWRITTEN-AFTER-THE-ASK\n"


async def _approved_run_rereads_itself(
    state: Path, work: Path, command: str, swap: str, name: str = "s.sh", rewritten: str = REWRITTEN
) -> str:
    """Ask for `command` (a script that waits for a line, then prints the file its own name names), approve
    it once, swap the script's bytes (`inplace`: rewritten in place; `rename`: a new file renamed over it)
    while it waits, then let it go on: its output."""
    write_config(state, ALLOWLIST)
    async with gateway(state):
        client = await connect(state)
        try:
            ask = await client.request("exec", {"command": command, "workdir": str(work), "background": True})
            assert ask["details"]["status"] == "approval-pending", ask
            await client.request("approve", {"id": ask["details"]["approvalId"], "decision": "allow-once"})

            async def listed() -> list[dict[str, Any]]:
                # the operator's list also shows a run still starting (not yet backgrounded): wait past it
                found = await client.request("process", {"action": "list"})
                return [row for row in found["details"].get("sessions") or [] if row.get("backgrounded")]

            sid = (await wait_until(listed))[0]["sessionId"]

            async def ready() -> bool:  # the run is past its view's set-up, waiting for its line
                polled = await client.request("process", {"action": "poll", "sessionId": sid})
                log = await client.request("process", {"action": "log", "sessionId": sid})
                # a run that ended before READY says why here, not as a wait that timed out
                assert "READY" in str(log["text"]) or polled["details"]["status"] == "running", (polled, log)
                return "READY" in str(log["text"])

            await wait_until(ready, timeout=30)
            script = work / name
            if swap == "inplace":
                with open(script, "r+") as handle:
                    handle.write(rewritten + "#" * 80 + "\n")
            else:
                (work / "new").write_text(rewritten)
                os.rename(work / "new", script)
            await client.request("process", {"action": "write", "sessionId": sid, "data": "y\n", "eof": True})

            async def ended() -> bool:
                polled = await client.request("process", {"action": "poll", "sessionId": sid})
                return polled["details"]["status"] != "running"

            await wait_until(ended, timeout=30)
            log = await client.request("process", {"action": "log", "sessionId": sid})
            return str(log["text"])
        finally:
            await client.close()


OPERANDS = [("sh s.sh", SH_READS_ITSELF), ("python3 s.sh", PY_READS_ITSELF)]


@pytest.mark.parametrize(("command", "body"), OPERANDS, ids=["dash", "python"])
async def test_an_operand_rereading_itself_after_an_in_place_rewrite_reads_the_approved_bytes(
    state_dir: Path, tmp_path: Path, command: str, body: str
) -> None:
    """Regression (class 8): `sh s.sh` / `python3 s.sh` re-reading "$0" / __file__ after the file was
    rewritten in place read the approved bytes (a read-only copy is bound at the script's path)."""
    (tmp_path / "s.sh").write_text(body)
    out = await _approved_run_rereads_itself(state_dir, tmp_path, command, "inplace")
    assert "READY" in out and "REWRITTEN" not in out, out


@pytest.mark.parametrize(("command", "body"), OPERANDS, ids=["dash", "python"])
async def test_class8_an_operand_rereading_itself_after_a_rename_over_reads_other_bytes(
    state_dir: Path, tmp_path: Path, command: str, body: str
) -> None:
    (tmp_path / "s.sh").write_text(body)
    out = await _approved_run_rereads_itself(state_dir, tmp_path, command, "rename")
    assert "READY" in out and "REWRITTEN" not in out, out


@pytest.mark.parametrize("swap", ["inplace", "rename"])
@pytest.mark.parametrize("body", [SH_READS_ITSELF, PY_READS_ITSELF], ids=["dash", "python"])
async def test_class8_a_shebang_script_run_by_path_rereads_bytes_rewritten_after_the_ask(
    state_dir: Path, tmp_path: Path, body: str, swap: str
) -> None:
    script = tmp_path / "s.sh"
    script.write_text(body)
    script.chmod(0o755)
    out = await _approved_run_rereads_itself(state_dir, tmp_path, "./s.sh", swap)
    assert "READY" in out and "REWRITTEN" not in out, out


async def test_class8_a_sub_make_reads_a_makefile_renamed_over_after_the_ask(
    state_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "Makefile").write_text(
        "all:\n\t@echo READY; read x; $(MAKE) -s second\nsecond:\n\t@echo APPROVED-SECOND\n"
    )
    rewritten = "all:\n\t@echo other\nsecond:\n\t@echo REWRITTEN\n"
    out = await _approved_run_rereads_itself(state_dir, tmp_path, "make -s", "rename", "Makefile", rewritten)
    assert "APPROVED-SECOND" in out and "REWRITTEN" not in out, out


@pytest.mark.parametrize(
    "command",
    ['bash -kc "ls LD_PRELOAD=/tmp/x.so"', "bash -k -c ls", "bash -c -e ls", "bash -ic ls", "bash -c -- ls"],
)
def test_shell_options_that_change_what_a_payload_means_are_never_plain(command: str) -> None:
    """Regression (class 5): `-k` turns `ls NAME=value` into an environment assignment (LD_PRELOAD), `-c -e`
    makes the next option-looking word an option and not the code, `-i` sources ~/.bashrc: never plain."""
    assert not analyze_command(command).ok
