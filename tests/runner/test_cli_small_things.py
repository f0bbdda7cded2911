"""Issue 21 small things in the CLI: wrong decisions, typos in a subcommand's flags, ids after flags."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.principals import mint
from tests.helpers.gateway import FULL, cli, gateway, listed, write_config


def test_approve_with_a_wrong_decision_lists_the_valid_ones(state_dir: Path) -> None:
    proc = cli(state_dir, "approve", "deadbeef", "yes")
    assert proc.returncode == 2
    assert "'yes' is not a decision; valid decisions: allow-once|allow-always|deny" in proc.stderr
    assert "always" in proc.stderr and "reject" in proc.stderr  # the aliases too


def test_a_typo_in_a_subcommand_flag_prints_that_subcommands_usage(state_dir: Path) -> None:
    proc = cli(state_dir, "approvals", "allowlist", "add", "--agnt", "x", "/usr/bin/ls")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: exechost approvals allowlist add ")
    assert "unrecognized arguments: --agnt" in proc.stderr
    proc = cli(state_dir, "exec", "--sesion", "x", "--", "ls")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: exechost exec ")


async def test_process_takes_the_session_id_after_flags(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("x"))
    mint(state_dir, "x")  # --agent names a minted, listed agent (issue 18)
    async with gateway(state_dir):
        proc = await asyncio.to_thread(
            cli, state_dir, "process", "write", "--agent", "x", "node:abc", "--data", "hi"
        )
        # The id reached the gateway (which knows no such session) instead of being refused by argparse.
        assert "No session found for node:abc" in proc.stdout + proc.stderr, proc.stderr
        assert "unrecognized arguments" not in proc.stderr
        two = await asyncio.to_thread(cli, state_dir, "process", "write", "--agent", "x", "a", "b")
        assert two.returncode == 2 and "unrecognized arguments: a b" in two.stderr
