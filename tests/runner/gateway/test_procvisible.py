"""The gateway tells whether /proc hides one account's processes from another (runner.gateway.procvisible)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from engine.config.loader import load_config_text
from runner.gateway import procvisible
from tests.helpers.gateway import cli, gateway, write_config

LINE = "22 27 0:21 / /proc rw,relatime - proc proc {}\n"


@pytest.mark.parametrize(
    ("options", "hides"),
    [
        ("rw", False),
        ("rw,hidepid=invisible", True),
        ("rw,hidepid=2,gid=4", True),
        ("rw,hidepid=0", False),
        ("rw,subset=pid", False),
    ],
)
def test_hidepid_is_read_from_the_proc_mounts_options(tmp_path: Path, options: str, hides: bool) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" + LINE.format(options))
    assert procvisible.hides_processes(str(info)) is hides


def test_no_proc_mount_hides_nothing(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert procvisible.proc_options(str(info)) is None
    assert not procvisible.hides_processes(str(info))


def test_this_machines_proc_is_read() -> None:
    assert procvisible.proc_options() is not None


@pytest.mark.parametrize(
    ("agents", "options", "warns"),
    [
        ('[[agents.list]]\nid = "ops"\nuid = 4242\n', "rw", True),  # mapped, /proc shows all: warned
        ('[[agents.list]]\nid = "ops"\nuid = 4242\n', "rw,hidepid=invisible", False),
        ('[[agents.list]]\nid = "ops"\n', "rw", False),  # no agent on an account of its own
    ],
)
def test_the_gateway_warns_only_for_agents_on_accounts_and_an_open_proc(
    tmp_path: Path, agents: str, options: str, warns: bool
) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(LINE.format(options))
    config = load_config_text(agents, tmp_path / "config.toml")
    said = procvisible.warning(config, str(info))
    assert (said == procvisible.WARNING) is warns
    if warns:
        assert said is not None and "hidepid=invisible" in said and "their own arguments" in said


async def test_a_gateway_with_an_agent_on_an_account_says_so_at_start(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What it logs (its stderr) is the check's answer for this machine's /proc, at every start."""
    write_config(state_dir, '[[agents.list]]\nid = "ops"\nuid = 4242\n')
    with caplog.at_level(logging.WARNING):
        async with gateway(state_dir):
            pass
    said = [r.getMessage() for r in caplog.records if r.getMessage() == procvisible.WARNING]
    assert bool(said) is not procvisible.hides_processes()


def test_gateway_status_says_it_too(state_dir: Path) -> None:
    """`exechost gateway status`, the operator's check of a running gateway, repeats the warning."""
    write_config(state_dir, '[[agents.list]]\nid = "ops"\nuid = 4242\n')
    try:
        assert cli(state_dir, "gateway", "start").returncode == 0
        status = cli(state_dir, "gateway", "status", "--json")
    finally:
        cli(state_dir, "gateway", "stop")
    warnings = json.loads(status.stdout)["details"]["warnings"]
    assert warnings == ([] if procvisible.hides_processes() else [procvisible.WARNING]), status.stdout
