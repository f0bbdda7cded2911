"""Fresh round 8, attacker q: class 6 (check, then use) and the confinement boundaries — the gateway-host
view, the bwrap and Docker sandboxes, the egress proxy. Each xfail is an attack that works today."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import pytest

from engine.commands import hostview
from tests.attacks.harness import attempt
from tests.helpers.gateway import connect, gateway, write_config

# --- the gateway-host view: the install is read-only -------------------------------------------------


def _checkout_root() -> Path:
    """The checkout the gateway runs from (runner/, console/ and engine/ side by side)."""
    return Path(hostview.__file__).resolve().parents[2]


@pytest.mark.xfail(
    strict=True,
    reason="open: the host view binds only engine/ and the venv read-only (hostview._install_root() is "
    "engine/, two dirnames up from engine/commands/hostview.py, not the checkout), so an allowlisted "
    "`tee` writes the gateway's own runner/ code, which the next gateway, session host and operator CLI run "
    "outside the view",
)
async def test_class6_an_allowlisted_tee_writes_the_gateways_runner_package(state_dir: Path) -> None:
    runner_dir = _checkout_root() / "runner"
    assert (runner_dir / "__main__.py").is_file()
    planted = runner_dir / f"zz_round8_q_{secrets.token_hex(6)}.py"
    try:
        details = await attempt(
            state_dir,
            f"echo 'import os  # agent code in the gateway' | tee {planted}",
            allow=[("/usr/bin/tee", None), ("/usr/bin/echo", None)],
            workdir="/tmp",
        )
        assert details["status"] in ("completed", "failed", "approval-pending", "denied"), details
        assert not planted.exists(), "an allowlisted command wrote into the gateway's own code"
    finally:
        planted.unlink(missing_ok=True)



# --- the Docker sandbox: no set-id file left on the host -----------------------------------------------

DOCKER_SANDBOX = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "{backend}"\nworkspaceRoot = "{root}"\n'
    '[agents.defaults.sandbox.docker]\nimage = "{image}"\n'
)


def _set_id_files(top: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(st.st_mode):
                found.append(f"{os.path.join(dirpath, name)} {oct(st.st_mode)} uid={st.st_uid}")
    return found


@pytest.mark.docker
@pytest.mark.xfail(
    strict=True,
    reason="open: a Docker sandbox runs as the workspace's owner (root under a root gateway) with Docker's "
    "default seccomp profile, and an owner may set S_ISUID with no capability: `chmod 4755` leaves a "
    "setuid-root binary in the host's workspace (the bwrap backend's filter refuses it; Docker's does not)",
)
async def test_class_confinement_a_docker_sandbox_leaves_a_setuid_root_binary_on_the_host(
    state_dir: Path,
) -> None:
    from engine.sandbox import docker_ops
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()
    root = state_dir.parent / "ws"  # an operator's workspaceRoot, e.g. /srv/sandboxes made 0755
    root.mkdir(mode=0o755)
    write_config(state_dir, DOCKER_SANDBOX.format(backend="docker", root=root, image=image))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                result = await client.request(
                    "exec",
                    {
                        "command": "cp /bin/busybox ./sh4 && chmod 4755 ./sh4 && chmod 755 . && ls -ln sh4",
                        "agentId": "main",
                    },
                )
            finally:
                await client.close()
        assert result["details"]["status"] in ("completed", "failed"), result["text"]
        assert _set_id_files(root) == [], "the sandbox left a set-id file where host users can run it"
    finally:
        for container in docker_ops.list_sandboxes():
            docker_ops.remove(container["Id"])
