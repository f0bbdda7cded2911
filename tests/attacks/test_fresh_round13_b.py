"""Fresh round 13 b (issue 27 §1, no ambient credentials): what an agent's command reaches once it runs
without an ask — host runs on the gateway, bubblewrap sandboxes, the egress path — that was never granted
to it explicitly."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.commands import gatewaydirs
from tests.helpers.gateway import REPO

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a private mount namespace)")
ACCOUNT_HOME = pwd.getpwuid(os.geteuid()).pw_dir
ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'

# One gateway (in-process, as tests/helpers/gateway.py makes it) in a process of its own, so that it can
# run in a private mount namespace where the test has put its own files over the account's: each command
# is one exec of agent main, its status and text printed as JSON.
_GATEWAY = r"""
import asyncio, json, os, sys
from pathlib import Path
from engine.approvals.store import ApprovalsStore
from tests.helpers.gateway import connect, gateway, write_config

state = Path(os.environ["OPENCLAW_STATE_DIR"])
config, allow, commands = json.loads(sys.argv[1])


async def main() -> None:
    write_config(state, config)
    store = ApprovalsStore(state / "exec-approvals.json")
    for pattern in allow:
        store.add_allowlist("main", pattern)
    out = []
    async with gateway(state):
        client = await connect(state)
        try:
            for command in commands:
                params = {"workdir": command[1]} if isinstance(command, list) else {}
                command = command[0] if isinstance(command, list) else command
                params.update(command=command, agentId="main", timeout=60)
                result = await client.request("exec", params)
                out.append({"status": result["details"]["status"], "text": result["text"]})
        finally:
            await client.close()
    from engine.commands import hostkeeper

    hostkeeper.stop()
    print("\0" + json.dumps(out))


asyncio.run(main())
"""


def _gateway_in_namespace(
    binds: dict[Path, str],
    config: str,
    allow: list[str],
    commands: list[Any],
    *,
    account: pwd.struct_passwd | None = None,
    groups: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    done = _run_in_namespace(binds, config, allow, commands, account=account, groups=groups)
    assert "\0" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
    return list(json.loads(done.stdout.rsplit("\0", 1)[1]))


def _run_in_namespace(
    binds: dict[Path, str],
    config: str,
    allow: list[str],
    commands: list[Any],
    *,
    account: pwd.struct_passwd | None = None,
    groups: tuple[str, ...] = (),
    unset: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `commands` (each a text, or [text, workdir]) through a real gateway whose mount namespace is a
    private copy of the host's with each test path of `binds` bound over the host path it names (the
    host's own files never change). `account`: the gateway runs as that Unix account (with `groups` as
    its supplementary groups), from the system python with the venv's packages, as an operator's
    non-root gateway does; its state dir, HOME and private dirs are handed to it first."""
    mounts = "".join(f"mount --bind {src} {dst} && " for src, dst in binds.items())
    env = {**{k: v for k, v in os.environ.items() if k not in unset}, "PYTHONPATH": str(REPO)}
    python = sys.executable
    run_as = ""
    if account is not None:
        state = Path(os.environ["OPENCLAW_STATE_DIR"])
        root = state.parent
        root.chmod(0o755)
        for path in (state, Path(os.environ["HOME"]), Path(os.environ["EXECHOST_HOST_PRIVATE"])):
            os.chown(path, account.pw_uid, account.pw_gid)
        # the record of state dirs goes with the home: that account's gateway claimed this state dir
        record = Path(os.environ["HOME"]) / gatewaydirs.NAME
        for path in (record, *record.iterdir()) if record.is_dir() else ():
            os.chown(path, account.pw_uid, account.pw_gid)
        venv_site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
        env["PYTHONPATH"] = f"{REPO}:{venv_site}"
        env["EXECHOST_HOSTENTER"] = os.path.join(
            os.path.realpath(sys.prefix), "libexec", "exechost-hostenter"
        )
        python = "/usr/bin/python3"
        extra = f"--groups={','.join(groups)}" if groups else "--clear-groups"
        run_as = f"setpriv --reuid={account.pw_uid} --regid={account.pw_gid} {extra} "
    script = f'{mounts}exec {run_as}{python} -c "$0" "$1"'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script, _GATEWAY,
         json.dumps([config, allow, commands])],
        capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300, check=False,
    )  # fmt: skip
    return done


def _other_account() -> pwd.struct_passwd | None:
    """A non-root account of this machine with a home directory of its own, to run a gateway as."""
    if not os.path.isfile("/usr/bin/python3"):
        return None
    for entry in pwd.getpwall():
        usable = entry.pw_uid >= 1000 and entry.pw_uid != 65534 and os.path.isdir(entry.pw_dir)
        if usable and entry.pw_dir not in ("/", "/nonexistent"):
            return entry
    return None


OTHER = _other_account()
needs_other_account = pytest.mark.skipif(
    OTHER is None or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root, setpriv, /usr/bin/python3 and a non-root account with a home",
)


# ---------------------------------------------------------------------------------------------------------
# 1. The home a view protects is $HOME, not the account's home.


@needs_other_account
@needs_bwrap
def test_class1_the_accounts_own_home_is_open_when_home_names_another_dir(state_dir: Path) -> None:
    """Every host view is built around `os.environ["HOME"]`: read-only, private files hidden, sockets
    behind a layer. The gateway's HOME is whatever its starting client had (an agent harness that starts
    `exechost mcp` with HOME at a scratch dir autostarts the daemon with it; a unit's `Environment=HOME=`;
    this test suite). The account's own home (its passwd entry) is then a plain directory of the
    account's: writable, every 0600 file readable. The gateway runs as an ordinary account; the test's own
    dir, bound over that account's home in a private mount namespace, holds its ~/.bashrc and a gh token
    (0600, in 0700 dirs).

    Closed (session 10): such a gateway refuses to start (engine.commands.hostoutside.home_refused), unless
    the operator named $HOME in EXECHOST_HOST_HOME (this suite does: tests/conftest.py; unset here, as a
    client that chose another HOME has it): no host run is made around the wrong home."""
    assert OTHER is not None
    root = state_dir.parent
    home = root / "acct"
    (home / ".config" / "gh").mkdir(parents=True)
    bashrc = home / ".bashrc"
    bashrc.write_text("# the operator's bashrc\n")
    token = home / ".config" / "gh" / "hosts.yml"
    token.write_text("github.com:\n    oauth_token: gho_R13B_OPERATORS_TOKEN\n")
    # the operator's own gateway, at the default state dir (~/.openclaw), as `exechost` makes it
    (home / ".openclaw").mkdir()
    operator = home / ".openclaw" / "operator.json"
    operator.write_text('{"token": "R13B-OPERATOR-ROLE"}\n')
    for path in (
        home,
        bashrc,
        home / ".config",
        home / ".config" / "gh",
        token,
        home / ".openclaw",
        operator,
    ):
        os.chown(path, OTHER.pw_uid, OTHER.pw_gid)
    for path in (token, operator):
        path.chmod(0o600)
    for path in (home / ".config", home / ".config" / "gh", home / ".openclaw"):
        path.chmod(0o700)
    done = _run_in_namespace(
        {home: OTHER.pw_dir},
        ALLOWLIST,
        ["/usr/bin/cat", "/usr/bin/tee", "/usr/bin/echo"],
        [
            f"cat {OTHER.pw_dir}/.config/gh/hosts.yml {OTHER.pw_dir}/.openclaw/operator.json",
            f"echo 'alias ls=r13b' | tee -a {OTHER.pw_dir}/.bashrc",
        ],
        account=OTHER,
        unset=("EXECHOST_HOST_HOME",),
    )
    leaked = "gho_R13B_OPERATORS_TOKEN" in done.stdout or "R13B-OPERATOR-ROLE" in done.stdout
    planted = "alias ls=r13b" in bashrc.read_text()
    assert not leaked and not planted, (done.stdout[-2000:], bashrc.read_text())
    assert "\0" not in done.stdout and "not this account's home" in done.stderr, done.stderr[-2000:]


# ---------------------------------------------------------------------------------------------------------
# 2. /dev is the host's: every device the account may open.


@needs_other_account
@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/dev/kvm"), reason="needs /dev/kvm")
@pytest.mark.skipif(shutil.which("getent") is None, reason="needs getent")
def test_class1_a_device_the_accounts_group_opens_is_a_host_runs(state_dir: Path) -> None:
    """The operator's account is in group kvm (0660 root:kvm /dev/kvm), as a developer's is; another
    account is not, and an agent is another principal. An allowlisted `cat /dev/kvm` in a non-root
    gateway's host run opens the device: the read fails with EINVAL (the device has no read), where a
    refused open says EACCES. Closed (session 10): the view's /dev is bwrap's minimal one
    (hostview.DEV_OPS): there is no /dev/kvm to open."""
    assert OTHER is not None
    if subprocess.run(["getent", "group", "kvm"], capture_output=True, check=False).returncode:
        pytest.skip("no kvm group")
    results = _gateway_in_namespace(
        {}, ALLOWLIST, ["/usr/bin/cat"], [["cat /dev/kvm", "/"]], account=OTHER, groups=("kvm",)
    )
    (ran,) = results
    assert "No such file" in ran["text"] or "Permission denied" in ran["text"], ran
    assert "Invalid argument" not in ran["text"], ran


# ---------------------------------------------------------------------------------------------------------
# 3. A network namespace holds only the families that are namespaced.

_VSOCK = (
    "import socket; s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); "
    "s.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY)); s.listen(1); "
    "print('VSOCK-LISTENING-r13b', s.getsockname()[1] > 0)"
)


@needs_bwrap
@pytest.mark.skipif(not hasattr(__import__("socket"), "AF_VSOCK"), reason="no AF_VSOCK in this Python")
@pytest.mark.skipif(not os.path.isdir("/sys/module/vsock"), reason="the kernel has no vsock loaded")
async def test_class1_a_host_run_listens_on_the_machines_vsock(state_dir: Path) -> None:
    """No traffic is sent: the run only binds and listens (a connect to CID 2 would leave this machine).
    A run that can listen can also connect; that is the hypervisor's and its guest agents' door, outside
    the egress proxy that `hostNetwork = "own"` makes the only way out. The construction that would close
    it: a list of the socket families a host run may make (unix, inet, inet6, netlink), refused by the
    seccomp filter exechost-hostenter installs anyway, as Docker's default profile refuses AF_VSOCK.
    Closed so (session 10): `refuse_beyond_namespaces` in engine/commands/hostenter/confine.c."""
    from tests.helpers.gateway import FULL, connect, gateway, write_config

    write_config(state_dir, FULL)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            python = shutil.which("python3") or "/usr/bin/python3"
            result = await client.request(
                "exec", {"command": f'{python} -c "{_VSOCK}"', "agentId": "main", "timeout": 60}
            )
        finally:
            await client.close()
    assert result["details"]["status"] == "completed", result
    assert "VSOCK-LISTENING-r13b True" not in result["text"], result["text"]


SANDBOX_FULL = (
    '[tools.exec]\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
)


@needs_bwrap
@pytest.mark.skipif(not hasattr(__import__("socket"), "AF_VSOCK"), reason="no AF_VSOCK in this Python")
async def test_a_bwrap_sandbox_opens_no_vsock(state_dir: Path) -> None:
    """The control: a bwrap sandbox's seccomp filter allows only the socket families a network namespace
    confines (engine/sandbox/seccomprules.py), so the same program is refused EAFNOSUPPORT there."""
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state_dir, SANDBOX_FULL)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            result = await client.request(
                "exec", {"command": f'python3 -c "{_VSOCK}"', "agentId": "main", "timeout": 60}
            )
        finally:
            await client.close()
    assert "VSOCK-LISTENING-r13b" not in result["text"], result["text"]
    assert "Address family not supported" in result["text"], result["text"]
