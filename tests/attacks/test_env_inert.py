"""Issue 27 §3: what runs without an ask takes only inert env from the agent.

Each key below ran code (or was accepted) through an allowlisted command plus the `env` param, because the
env check was a list of refused keys. Now only keys on a short inert list (plus the operator's
`tools.exec.inertEnv`) pass unasked; any other key makes the command ask, and the ask shows the env.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config_text
from engine.config.model import ConfigError
from tests.attacks.harness import ALLOWLIST, attempt, refused, tool
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import cli, connect, write_config

PYENV_SHIM = "/root/.pyenv/shims/python3"
CARGO = "/root/.cargo/bin/cargo"


async def test_gnumakeflags_eval_with_allowlisted_make_test(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    details = await attempt(
        state_dir,
        "make -r test",
        allow=[("/usr/bin/make", None)],
        env={"GNUMAKEFLAGS": f"--eval=test:;@touch\\ {marker}"},
        workdir="/",  # no Makefile here: nothing in the tree to vet, only the env
    )
    assert refused(details), details
    assert not marker.exists()


@pytest.mark.skipif(not os.path.exists(PYENV_SHIM), reason="needs a pyenv shim")
async def test_pyenv_hook_path_with_an_allowlisted_pyenv_shim(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "hooks" / "exec" / "x.bash", f"touch {marker}\n")
    details = await attempt(
        state_dir,
        "python3 --version",
        allow=[(PYENV_SHIM, None)],
        env={"PYENV_HOOK_PATH": str(tmp_path / "hooks")},
        workdir=str(tmp_path),
        host="gateway",
    )
    assert refused(details), details
    assert not marker.exists()


@pytest.mark.skipif(not os.path.exists(CARGO), reason="needs a rustup cargo proxy")
async def test_rustup_toolchain_dir_with_allowlisted_cargo(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tool(tmp_path / "tc" / "bin" / "cargo", f"#!/bin/sh\ntouch {marker}\n")
    tool(tmp_path / "tc" / "bin" / "rustc", "#!/bin/sh\necho rustc\n")
    details = await attempt(
        state_dir,
        f"{CARGO} --version",
        allow=[(CARGO, None)],
        env={"RUSTUP_TOOLCHAIN": str(tmp_path / "tc")},
        workdir=str(tmp_path),
    )
    assert refused(details), details
    assert not marker.exists()


@pytest.mark.parametrize(
    "key", ["LOCPATH", "VIMRUNTIME", "OPENSSL_MODULES", "BASHOPTS", "PYENV_VERSION", "SOME_NEW_TOOL_HOOK"]
)
async def test_keys_outside_the_inert_list_ask(state_dir: Path, tmp_path: Path, key: str) -> None:
    details = await attempt(
        state_dir, f"printenv {key}", allow=[("/usr/bin/printenv", None)], env={key: str(tmp_path)}
    )
    assert refused(details), details
    assert key in details["_text"] or details["status"] == "approval-pending"


async def test_inert_keys_still_run_unasked(state_dir: Path) -> None:
    env = {"LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "TERM": "dumb", "COLUMNS": "80", "NO_COLOR": "1"}
    details = await attempt(state_dir, "printenv TZ", allow=[("/usr/bin/printenv", None)], env=env)
    assert details["status"] == "completed", details
    assert "UTC" in details["_text"]


async def test_the_operator_extends_the_inert_list(state_dir: Path) -> None:
    config = ALLOWLIST + 'inertEnv = ["MY_FLAG"]\n'
    env = {"MY_FLAG": "1"}
    details = await attempt(
        state_dir, "printenv MY_FLAG", allow=[("/usr/bin/printenv", None)], env=env, config=config
    )
    assert details["status"] == "completed", details


@pytest.mark.parametrize("bad", ['inertEnv = ["LD_PRELOAD"]', 'inertEnv = ["PATH"]', 'inertEnv = ["A B"]'])
def test_inert_env_config_is_validated(bad: str) -> None:
    with pytest.raises(ConfigError, match="inertEnv"):
        load_config_text(f"[tools.exec]\n{bad}\n")


async def test_the_pending_ask_shows_the_env(state_dir: Path) -> None:
    """`approvals pending` showed only `make test` and the make digest; approving ran the injected recipe."""
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/make", arg_pattern=None)
    with Daemon(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            call = {
                "command": "make test",
                "agentId": "main",
                "workdir": "/",
                "env": {"GNUMAKEFLAGS": "--eval=x"},
            }
            res = await agent.request("exec", call)
        finally:
            await agent.close()
        assert res["details"]["status"] == "approval-pending", res
        text = cli(state_dir, "approvals", "pending").stdout
        assert "GNUMAKEFLAGS=--eval=x" in text, text


def test_the_console_detail_shows_the_env() -> None:
    """The console's ask detail (the web console serves the same app) shows every env key and value."""
    from rich.console import Console

    from console.inbox import InboxItem
    from console.widgets.approvals import render_detail

    view = {"command": "make test", "env": {"GNUMAKEFLAGS": "--eval=x"}, "allowedDecisions": ["allow-once"]}
    console = Console(width=160, record=True, color_system=None)
    console.print(render_detail(InboxItem("k", "gateway", view), {}))
    assert "GNUMAKEFLAGS=--eval=x" in console.export_text()


async def test_an_exec_frame_on_the_approval_socket_asks_for_env_too(state_dir: Path, tmp_path: Path) -> None:
    from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest, request_exec
    from engine.tools.exec_host import LocalExecHost

    marker = tmp_path / "pwned"
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore().add_allowlist("main", "/usr/bin/make")
    asked: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        asked.append(request)
        return "deny"

    token = "exec-token-" + "k" * 24
    path = state_dir / "exec-approvals.sock"
    frame = {
        "command": ["make", "test"],
        "cwd": "/",
        "env": {"GNUMAKEFLAGS": f"--eval=test:;@touch\\ {marker}"},
    }
    async with ApprovalSocketServer(path, token, decider=human, exec_handler=LocalExecHost()):
        res = await request_exec(path, token, frame)
    assert res is not None and res.get("ok") is not True, res
    assert len(asked) == 1 and not marker.exists()
