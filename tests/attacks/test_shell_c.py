"""Issue 18 part 5b: `sh -c '<one allowlisted command>'` runs exactly the analysed, pinned command.

OpenClaw matches a single-command `sh -c` against the shell binary (so it asks); exechost keeps it
satisfied only because the enforced command is the payload itself, pinned: no shell, no shell options,
no startup files. Anything else around `-c` fails the analysis closed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config_text
from engine.policy.decision import evaluate
from tests.attacks.harness import ALLOWLIST, attempt, refused

ECHO = ("/usr/bin/echo", None)
BASH = shutil.which("bash") or "/bin/bash"


def decide(command: str, cwd: Path) -> dict[str, object]:
    store = ApprovalsStore(Path(os.environ["OPENCLAW_STATE_DIR"]) / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/echo")
    return evaluate(command, config=load_config_text(ALLOWLIST), store=store, cwd=str(cwd)).to_json()


@pytest.mark.parametrize("shell", ["sh", "bash", "/bin/sh", BASH])
@pytest.mark.parametrize("flags", ["-c", "-ec", "-x -c", "-xc", "-u -c", "-lc", "-l -c"])
def test_the_enforced_command_is_the_pinned_payload_alone(
    state_dir: Path, tmp_path: Path, shell: str, flags: str
) -> None:
    d = decide(f"{shell} {flags} 'echo hi'", tmp_path)
    assert d["decision"] == "allow", d
    assert d["enforcedCommand"] == "'/usr/bin/echo' 'hi'", d
    assert d["pinnedCommand"] == "'/usr/bin/echo' 'hi'", d


def test_a_chain_payload_runs_in_a_bare_pinned_shell(state_dir: Path, tmp_path: Path) -> None:
    """`sh -x -c 'a && b'`: the pinned system shell with the pinned chain, and no option of the agent's."""
    d = decide("sh -x -c 'echo a && echo b'", tmp_path)
    enforced = str(d["enforcedCommand"])
    assert enforced.startswith("'/usr/bin/sh' '-c' '"), d  # the shell as matched, pinned; no `-x`
    assert "-x" not in enforced and enforced.count("/usr/bin/echo") == 2, d


async def test_a_login_shell_never_reads_the_profile_an_agent_wrote(state_dir: Path, tmp_path: Path) -> None:
    """`bash -lc '<allowlisted>'` sourced ~/.bash_profile (the agent can write it): the allowlisted echo
    ran, and so did the profile. Now only the echo runs."""
    marker = tmp_path / "pwned"
    home = Path(os.environ["HOME"])
    (home / ".bash_profile").write_text(f"touch {marker}\n")
    (home / ".profile").write_text(f"touch {marker}\n")
    for command in (f"{BASH} -lc 'echo hi'", "sh -l -c 'echo hi'", "bash -x -c 'echo hi'"):
        details = await attempt(state_dir, command, allow=[ECHO], workdir=str(tmp_path))
        assert details["status"] == "completed", details
        assert details["_text"].strip() == "hi", details  # no `+ echo hi` trace: -x never reached a shell
    assert not marker.exists()


@pytest.mark.parametrize(
    "command",
    [
        "sh -c 'echo hi' arg0",  # positional parameters after the payload
        "sh -c 'echo \"$@\"' arg0 x",
        "sh -c '$0 hi' /usr/bin/echo",  # a carrier: the program comes from $0
        "sh -ic 'echo hi'",  # interactive: reads $ENV / ~/.bashrc
        "bash -ic 'echo hi'",
        "sh -o errexit -c 'echo hi'",
        "sh +x -c 'echo hi'",
        "sh -- -c 'echo hi'",
        "sh -c -- 'echo hi'",
        "bash --rcfile /tmp/x -c 'echo hi'",
        "bash --login -c 'echo hi'",
        "sh -s -c 'echo hi'",
        "sh -c 'echo hi; eval x'",
        "zsh -c 'echo hi'",
        'sh -c \'sh -c "sh -c \\"sh -c echo\\""\'',  # nesting deeper than analysed
    ],
)
async def test_every_other_form_around_dash_c_asks(state_dir: Path, tmp_path: Path, command: str) -> None:
    details = await attempt(state_dir, command, allow=[ECHO], workdir=str(tmp_path))
    assert refused(details), (command, details)
