"""No text an agent sent is on an argv exechost makes, in every backend (engine.commands.offargv; fresh
round 12 a): while a run is live, no process of the machine shows its command's text in /proc/<pid>/cmdline
(the host's /proc holds a bwrap sandbox's, a Docker container's and a node's processes too), and the
command's own processes do not have it in their environment."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.commands.offargv import COMMAND_VAR
from engine.sandbox import SandboxManager, set_default_manager
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled
from tests.helpers.sshd import SshdNode

FULL = '[tools.exec]\nhost = "{host}"\nsecurity = "full"\nask = "off"\n'
BWRAP = '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
DOCKER = f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
DOCKER += "pool = 0\n"
RUN_ID = f"offargv-{os.getpid()}-{secrets.token_hex(3)}"


def _cmdlines() -> dict[int, bytes]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    found[int(name)] = fh.read()
            except OSError:
                continue
    return found


def _run_text() -> tuple[str, bytes]:
    """A command whose text carries a token of its own, and its sleep's argv (a length no other run
    has): the sleep runs only when the command's environment has no COMMAND_VAR."""
    token = f"offargv-token-{secrets.token_hex(6)}"
    seconds = str(300 + secrets.randbelow(600))
    command = f'[ -z "${{{COMMAND_VAR}+x}}" ] && sleep {seconds}; echo {token}'
    return command, f"{token}\n{seconds}".encode()


async def _live_and_unseen(client: Any, params: dict[str, Any], node: bool = False) -> list[str]:
    """Starts the run in the background, waits for its sleep, and returns every argv that shows its token
    and every environment of the sleep that holds it (both must be empty); the run is killed after."""
    command, tag = _run_text()
    token, seconds = tag.split(b"\n")
    started = await client.request("exec", {"command": command, "background": True, **params})
    assert "sessionId" in started["details"], started  # (what the run said instead, if it did not start)
    sid = started["details"]["sessionId"]
    try:
        sleep = b"sleep\0" + seconds + b"\0"
        found = await wait_until(
            lambda: [pid for pid, argv in _cmdlines().items() if argv.endswith(sleep)], timeout=30
        )
        seen = [argv.replace(b"\0", b" ").decode() for argv in _cmdlines().values() if token in argv]
        for pid in found:
            with open(f"/proc/{pid}/environ", "rb") as fh:  # (the test is root: any process's)
                environ = fh.read()
            if token in environ or f"{COMMAND_VAR}=".encode() in environ:
                seen.append(f"environment of {pid}")
        return seen
    finally:
        await client.request("process", {"action": "kill", "sessionId": sid, **params})


@pytest.mark.parametrize("pty", [False, True])
@pytest.mark.parametrize("where", ["host", "bwrap-sandbox"])
async def test_a_runs_text_is_on_no_argv(state_dir: Path, where: str, pty: bool) -> None:
    config = FULL.format(host="gateway") if where == "host" else FULL.format(host="sandbox") + BWRAP
    write_config(state_dir, config)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            assert await _live_and_unseen(client, {"agentId": "main", "pty": pty}) == []
        finally:
            await client.close()


@pytest.fixture
def labelled(state_dir: Path) -> Iterator[None]:
    build_test_image()
    set_default_manager(SandboxManager(extra_labels={"exechost.test": RUN_ID}))
    yield
    set_default_manager(None)
    remove_labelled(RUN_ID)


@pytest.mark.docker
@pytest.mark.parametrize("pty", [False, True])
async def test_a_docker_sandboxs_run_and_exec_carry_no_text(
    state_dir: Path, labelled: None, pty: bool
) -> None:
    """The container's processes are the host's too (above); and what Docker records of each exec (a
    terminal's `docker exec`) names no text of the command either."""
    from engine.sandbox import docker_ops

    write_config(state_dir, FULL.format(host="sandbox") + DOCKER)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            assert await _live_and_unseen(client, {"agentId": "main", "pty": pty}) == []
            command, tag = _run_text()
            token = tag.split(b"\n")[0].decode()
            started = await client.request(
                "exec", {"command": command, "background": True, "agentId": "main", "pty": pty}
            )
            api = docker_ops.client().api
            (box,) = docker_ops.list_sandboxes(f"exechost.test={RUN_ID}")
            # every process of the container, as Docker lists them
            top = await wait_until(
                lambda: [
                    p for p in api.top(box["Id"], ps_args="-eo pid,args")["Processes"] if "sleep" in p[-1]
                ]
            )
            listed = [row[-1] for row in api.top(box["Id"], ps_args="-eo pid,args")["Processes"]]
            execs = [
                api.exec_inspect(e)["ProcessConfig"]
                for e in api.inspect_container(box["Id"])["ExecIDs"] or ()
            ]
            await client.request("process", {"action": "kill", "sessionId": started["details"]["sessionId"]})
        finally:
            await client.close()
    assert top and not [args for args in listed if token in args], listed
    if pty:
        assert execs, "a terminal is a docker exec"  # control: there is one to inspect
    for config in execs:
        words = [config.get("entrypoint", ""), *config.get("arguments", [])]
        assert not [w for w in words if token in w], config


async def test_a_nodes_run_carries_no_text(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(
        FULL.format(host="node") + "".join(n.config_toml() for n in sshd_nodes)
    )
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        client = await connect(state_dir, "agent", operator=False)
        try:
            assert await _live_and_unseen(client, {"node": "alpha"}) == []
        finally:
            await client.close()
