"""Issue 18 §1, the strong setup, with real throwaway Unix accounts: the agents' socket admits one group,
the peer's uid (SO_PEERCRED) is the agent, and an agent's account can read nothing of the operator's."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.gateway import FULL, REPO, cli, connect, gateway, listed, write_config

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd (throwaway users)"
)

# The agent side runs under the system interpreter: the venv lives under /root, which other accounts
# cannot enter. engine.protocol.client needs nothing but the standard library.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"

AGENT_SCRIPT = r"""
import asyncio, json, os, sys
from engine.protocol.client import ControlClient

async def main():
    out = {"uid": os.getuid(), "groups": sorted(os.getgroups())}
    names = ("gateway.json", "operator.json", "exec-approvals.json", "agents/victim.json", "gateway.sock")
    for name in names:
        try:
            open(os.path.join(sys.argv[1], name)).close()
            out[name] = "read"
        except OSError as exc:
            out[name] = type(exc).__name__
    try:
        client = await ControlClient.connect(client="agent", autostart=False, credential=sys.argv[2] or None)
    except Exception as exc:
        out["connect"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out)); return
    out["agent"] = client.agent
    ran = await client.request("exec", {"command": "id -u; echo ran-as-agent"})
    out["exec"] = ran["text"]
    try:
        await client.request("exec", {"command": "id", "agentId": "main"})
        out["pose"] = "accepted"
    except Exception as exc:
        out["pose"] = str(exc)
    out["sessions"] = (await client.request("sessions.list", {}))["sessions"]
    try:
        await client.request("approvals.pending", {})
        out["pending"] = "answered"
    except Exception as exc:
        out["pending"] = str(exc)
    await client.close()
    print(json.dumps(out))

asyncio.run(main())
"""


@dataclass
class Account:
    name: str
    uid: int
    gid: int
    home: Path


@dataclass
class Setup:
    group: str
    gid: int
    root: Path
    mapped: Account  # in the group, [[agents.list]] user = …
    unmapped: Account  # in the group, no agent
    outsider: Account  # not in the group


def _useradd(name: str, home: Path, group: str | None) -> Account:
    cmd = ["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", "-U"]
    subprocess.run([*cmd, *(["-G", group] if group else []), name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    home.mkdir(mode=0o700)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    return Account(name, entry.pw_uid, entry.pw_gid, home)


@pytest.fixture
def unix_agents() -> Iterator[Setup]:
    tag = secrets.token_hex(3)
    group = f"ehag{tag}"
    root = Path(tempfile.mkdtemp(prefix="ehu-", dir="/tmp"))
    os.chmod(root, 0o755)  # traversable: the agents reach their socket directory through it
    users: list[str] = []
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        accounts = []
        for role, member in (("m", True), ("u", True), ("x", False)):
            name = f"eh{role}{tag}"
            users.append(name)
            accounts.append(_useradd(name, root / name, group if member else None))
        yield Setup(group, grp.getgrnam(group).gr_gid, root, *accounts)
    finally:
        for name in users:
            subprocess.run(["userdel", name], capture_output=True)
            subprocess.run(["groupdel", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _as_agent(setup: Setup, who: Account, state: Path, credential: str = "") -> dict[str, object]:
    """Run the agent script as `who`, with exactly the groups its account has (none inherited from root)."""
    groups = [setup.gid] if who is not setup.outsider else []
    res = subprocess.run(
        [PYTHON, "-c", AGENT_SCRIPT, str(state), credential],
        user=who.uid,
        group=who.gid,
        extra_groups=groups,
        env={
            "HOME": str(who.home),
            "OPENCLAW_STATE_DIR": str(who.home / ".openclaw"),
            "EXECHOST_GATEWAY_SOCKET": str(setup.root / "sock" / "agents.sock"),
            "PYTHONPATH": str(REPO),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PATH": "/usr/bin:/bin",
        },
        cwd=str(who.home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


async def test_agents_under_their_own_accounts(state_dir: Path, unix_agents: Setup) -> None:
    setup = unix_agents
    sock = setup.root / "sock" / "agents.sock"
    write_config(
        state_dir,
        FULL
        + f'[gateway]\nagentGroup = "{setup.group}"\nagentSocket = "{sock}"\n'
        + f'[[agents.list]]\nid = "alpha"\nuser = "{setup.mapped.name}"\n'
        + listed("victim"),
    )
    from engine import principals

    victim_token = principals.mint(state_dir, "victim")
    async with gateway(state_dir):
        # The socket and its directory: the gateway's, opened to the agents' group only.
        st_dir, st_sock = os.stat(sock.parent), os.stat(sock)
        assert (st_dir.st_mode & 0o777, st_dir.st_uid, st_dir.st_gid) == (0o750, 0, setup.gid)
        assert (st_sock.st_mode & 0o777, st_sock.st_gid) == (0o660, setup.gid)
        assert os.stat(state_dir).st_mode & 0o777 == 0o700

        mapped = await asyncio.to_thread(_as_agent, setup, setup.mapped, state_dir)
        assert mapped["agent"] == "alpha"
        # Its command ran as the gateway's account, only after policy (a broker, like sudo).
        assert mapped["exec"] == "0\nran-as-agent"
        assert "not this connection's agent" in str(mapped["pose"])
        assert "needs the operator role" in str(mapped["pending"])
        # Nothing of the operator's state is readable, not even the main socket.
        for name in ("gateway.json", "operator.json", "exec-approvals.json", "agents/victim.json"):
            assert mapped[name] == "PermissionError", name
        assert mapped["gateway.sock"] == "PermissionError"

        # A credential stolen from another agent does not turn the account into that agent.
        stolen = await asyncio.to_thread(_as_agent, setup, setup.mapped, state_dir, victim_token)
        assert "present no tokens" in str(stolen["connect"])

        unmapped = await asyncio.to_thread(_as_agent, setup, setup.unmapped, state_dir)
        assert "auth" in str(unmapped["connect"]) or "not mapped to an agent" in str(unmapped["connect"])
        assert "agent" not in unmapped

        outsider = await asyncio.to_thread(_as_agent, setup, setup.outsider, state_dir)
        assert str(outsider["connect"]).startswith("GatewayUnavailable")
        assert "Permission denied" in str(outsider["connect"])

        # alpha's work is alpha's: the zero-configuration agent (gateway token) does not see it; the
        # operator does.
        main = await connect(state_dir, "main", operator=False)
        assert (await main.request("sessions.list", {}))["sessions"] == []
        await main.close()
        op = await connect(state_dir, "op")
        rows = (await op.request("sessions.list", {}))["sessions"]
        await op.close()
        assert rows == [] or all(r["scopeKey"] == "agent:alpha" for r in rows)


def test_agent_socket_config_is_checked(state_dir: Path, unix_agents: Setup) -> None:
    from engine.config.loader import load_config_text

    def problem(text: str) -> str:
        with pytest.raises(Exception) as info:
            load_config_text(text, state_dir / "config.toml")
        return str(info.value)

    assert "agentSocket is missing" in problem(f'[gateway]\nagentGroup = "{unix_agents.group}"\n')
    nogroup = '[gateway]\nagentGroup = "no-such-group-x"\nagentSocket = "/tmp/a.sock"\n'
    assert "no such group" in problem(nogroup)
    relative = f'[gateway]\nagentGroup = "{unix_agents.group}"\nagentSocket = "rel.sock"\n'
    assert "absolute path" in problem(relative)
    assert "no such user" in problem('[[agents.list]]\nid = "a"\nuser = "no-such-user-x"\n')
    assert "gateway's own account" in problem('[[agents.list]]\nid = "a"\nuid = 0\n')
    both = (
        f'[[agents.list]]\nid = "a"\nuser = "{unix_agents.mapped.name}"\n'
        f'[[agents.list]]\nid = "b"\nuid = {unix_agents.mapped.uid}\n'
    )
    assert "already agent 'a'" in problem(both)
    assert f"{state_dir / 'config.toml'}:6: agents.list[1].uid:" in problem(both)


HOLD_SCRIPT = r"""
import asyncio, json, sys
from engine.protocol.client import ControlClient

async def main():
    client = await ControlClient.connect(client="agent", autostart=False)
    print(json.dumps({"agent": client.agent}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the operator revokes meanwhile
    try:
        ran = await client.request("exec", {"command": "echo after-revoke", "ask": "always"})
        print(json.dumps({"after": ran["text"]}), flush=True)
    except Exception as exc:
        print(json.dumps({"after": f"{type(exc).__name__}: {exc}"}), flush=True)

asyncio.run(main())
"""


async def test_revoking_an_agent_mapped_to_an_account_ends_its_connections_and_says_why(
    state_dir: Path, unix_agents: Setup
) -> None:
    """A revoke of an agent whose credential is its Unix account: there is no credential to remove, so the
    answer says so and names the account and the entry that keeps mapping it; but its live connections are
    stopped as a credentialed agent's are (before: left open, acted upon, and the answer said only "has no
    credential")."""
    setup = unix_agents
    sock = setup.root / "sock" / "agents.sock"
    write_config(
        state_dir,
        FULL
        + f'[gateway]\nagentGroup = "{setup.group}"\nagentSocket = "{sock}"\n'
        + f'[[agents.list]]\nid = "alpha"\nuser = "{setup.mapped.name}"\n',
    )
    who = setup.mapped
    async with gateway(state_dir) as server:
        agent = await asyncio.create_subprocess_exec(
            PYTHON,
            "-c",
            HOLD_SCRIPT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            user=who.uid,
            group=who.gid,
            extra_groups=[setup.gid],
            env={
                "HOME": str(who.home),
                "OPENCLAW_STATE_DIR": str(who.home / ".openclaw"),
                "EXECHOST_GATEWAY_SOCKET": str(sock),
                "PYTHONPATH": str(REPO),
                "PYTHONDONTWRITEBYTECODE": "1",
                "PATH": "/usr/bin:/bin",
            },
            cwd=str(who.home),
        )
        assert agent.stdin is not None and agent.stdout is not None
        try:
            hello = json.loads(await asyncio.wait_for(agent.stdout.readline(), 60))
            assert hello == {"agent": "alpha"}  # control: the account is the agent, connected
            revoked = await asyncio.to_thread(cli, state_dir, "agents", "revoke", "alpha")
            agent.stdin.write(b"go\n")
            await agent.stdin.drain()
            after = json.loads(await asyncio.wait_for(agent.stdout.readline(), 60))
        finally:
            if agent.returncode is None:
                agent.kill()
            await agent.wait()
        assert [c for c in server.connections if c.agent == "alpha"] == []
        assert [r for r in server.services.approvals.pending() if "after-revoke" in r.request.command] == []
    assert revoked.returncode == 1, revoked
    assert f"the Unix account {who.name} (uid {who.uid}) is its credential" in revoked.stdout, revoked
    assert "its 1 live connection(s)" in revoked.stdout and "until that entry is removed" in revoked.stdout
    assert "after-revoke" not in str(after["after"]), after  # nothing it sent after the revoke ran
