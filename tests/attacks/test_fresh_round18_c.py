"""Fresh round 18 c: state, crashes, nodes and egress (classes 7, 6, 2, 3, 4)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs, hostkeeper
from engine.protocol.frames import RemoteError
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway, write_config

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs with few inodes")

OPS = """[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"

[[agents.list]]
id = "ops"
[agents.list.tools.exec]
security = "full"
ask = "off"
"""


@contextlib.contextmanager
def _small_home(where: Path) -> Iterator[Path]:
    """A home on its own tmpfs with few inodes (the operator's home disk, which the account's runs share)."""
    where.mkdir(mode=0o700)
    options = "size=4m,nr_inodes=64,mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _exhaust_inodes(directory: Path) -> list[Path]:
    """Create empty files until the filesystem has no inode left; returns them (to free them again)."""
    directory.mkdir()
    made: list[Path] = []
    for i in range(100_000):
        path = directory / f"f{i}"
        try:
            path.touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            return made
        made.append(path)
    raise AssertionError("the filesystem never ran out of inodes")


@needs_root
@needs_bwrap
@pytest.mark.parametrize(
    "disk",
    [
        "room",
        "no-inodes",
    ],
)
async def test_class7_a_retired_agents_dir_stays_covered_after_a_full_home_disk(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, disk: str
) -> None:
    """Round 17 a's cover of a retired agent's `hostWritable` dir rests on an `a-` record in the home
    written at the first view that sees the root. With the home's disk out of inodes at that moment (an
    agent's runs can fill a disk they write to), the record is lost, and never written again in the
    process once the disk has room; the operator retires ops, and main reads what ops left."""
    if hostkeeper.helper_path() is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    with _small_home(state_dir.parent / "h2") as home:
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))
        gatewaydirs.record(str(home), str(state_dir))  # the operator's state dir, recorded in this home
        work = home / "ops-work"
        work.mkdir()
        (work / "notes.txt").write_text("ops-private-5c1e\n")
        ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
        write_config(state_dir, OPS + f'hostWritable = ["{work}"]\n')
        filler = _exhaust_inodes(home / "fill") if disk == "no-inodes" else []
        seen = []
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                try:  # (on a home with no inode left the view may not be made: the call fails closed)
                    read = await op.request("exec", {"command": f"cat {work}/notes.txt", "agentId": "main"})
                except RemoteError as exc:
                    read = {"text": str(exc)}
                seen.append("ops-private-5c1e" in read["text"])
                for path in filler:  # the disk has room again: nothing brings the record back
                    path.unlink()
                write_config(state_dir, OPS + "# ops retired: its hostWritable dir is no longer named\n")
                read = await op.request("exec", {"command": f"cat {work}/notes.txt", "agentId": "main"})
                seen.append("ops-private-5c1e" in read["text"])
            finally:
                await op.close()
        assert seen == [False, False], seen


@needs_root
@needs_bwrap
@pytest.mark.parametrize(
    "disk",
    [
        "room",
        "no-inodes",
    ],
)
async def test_class7_a_gateway_started_on_a_full_home_disk_is_covered_in_the_others_views(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, disk: str
) -> None:
    """Every gateway records its state dir in ~/.exechost-gateways at its start, and every other
    gateway's host view covers what the record names (its operator token, its agents' credentials).
    A dev gateway started while the home's disk has no inode left is recorded nowhere, and nothing
    records it later: the main gateway's agent reads the dev gateway's operator token."""
    if hostkeeper.helper_path() is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    from tests.helpers.daemon import Daemon

    with _small_home(state_dir.parent / "h2") as home:
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))
        gatewaydirs.record(str(home), str(state_dir))  # the main gateway's state dir, recorded
        ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
        write_config(state_dir, OPS)
        dev = state_dir.parent / "dev"  # a second gateway's new state dir, outside the home
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                await op.request("exec", {"command": "cat /dev/null", "agentId": "main"})  # the view is made
                filler = _exhaust_inodes(home / "fill") if disk == "no-inodes" else []
                daemon = Daemon(dev, operators=False)
                try:  # its start records it, or is refused (fail closed: nothing of it is made)
                    daemon.start()
                except AssertionError as exc:
                    assert filler and "cannot record" in str(exc), exc
                    assert not (dev / "operator.json").exists()
                    for path in filler:  # room again: the next start records it
                        path.unlink()
                    daemon.start()
                try:
                    for path in filler:  # room again
                        if path.exists():
                            path.unlink()
                    token = (dev / "operator.json").read_text()
                    secret = token.split('"')[-2] if '"' in token else token.strip()
                    read = await op.request(
                        "exec", {"command": f"cat {dev}/operator.json", "agentId": "main"}
                    )
                finally:
                    daemon.stop()
            finally:
                await op.close()
        assert secret and secret not in read["text"], read["text"]


def _fill_bytes(directory: Path) -> Path:
    """One file that takes every byte the filesystem has left (its inodes stay free)."""
    path = directory / "fill"
    with open(path, "wb") as f:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
                f.flush()
    return path


@needs_root
@pytest.mark.parametrize(
    "disk",
    [
        "room",
        "full",
    ],
)
def test_class7_an_offline_revoke_on_a_full_disk_is_owed_to_the_nodes(state_dir: Path, disk: str) -> None:
    """With no gateway running, `exechost agents revoke` writes what the revoke owes each node
    (node-revocations.json) before the credential goes, and the next gateway tells every node on its
    link. The state dir's disk full (an agent's runs can fill it): the owed revocation is kept in the
    CLI's memory, the credential removed anyway, and the process ends."""
    from engine import principals
    from engine.nodes.revocations import Revocations
    from tests.helpers.gateway import cli

    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
        '\n[nodes.alpha]\nhost = "127.0.0.2"\nport = 2\nuser = "nobody"\n'
        '\n[[agents.list]]\nid = "ops"\n'
    )
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(state_dir)], check=True)
    try:
        write_config(state_dir, config)
        principals.mint(state_dir, "ops")
        filler = _fill_bytes(state_dir) if disk == "full" else None
        done = cli(state_dir, "agents", "revoke", "ops")
        if filler is not None:  # refused, the credential kept, with an error naming the file (fail closed)
            assert done.returncode != 0, done.stdout + done.stderr
            assert "node-revocations.json" in done.stderr and "credential is kept" in done.stderr, done.stderr
            assert principals.read_token(state_dir, "ops") is not None
            filler.unlink()  # room again: the operator runs the revoke again
            filler = None
            done = cli(state_dir, "agents", "revoke", "ops")
        assert done.returncode == 0, done.stdout + done.stderr
        assert principals.read_token(state_dir, "ops") is None  # the credential is gone once it is done
        owed = Revocations(state_dir).owed("alpha")
        assert [r.agent for r in owed] == ["ops"], (owed, done.stderr[-2000:])
    finally:
        subprocess.run(["umount", "-l", str(state_dir)], check=False)


NOBODY = 65534
SANDBOXED = '\n[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
DENYING = '[tools.exec]\nhost = "sandbox"\nsecurity = "deny"\n' + SANDBOXED
FULL = '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n' + SANDBOXED


def _become_nobody() -> None:
    """In the child, before exec: the other account (nobody), with no group of ours."""
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def _as_nobody(*argv: str) -> None:
    """A command of another account on this machine (nobody): the one sharing the sticky dir."""
    subprocess.run(
        argv,
        check=True,
        preexec_fn=_become_nobody,
    )


def _config_dirs(state_dir: Path) -> tuple[Path, Path, Path]:
    """A team dir another account may write (group-writable, its group that account's: no sticky bit, so
    fs.protected_symlinks has no say), the operator's config dir, and another root-owned config's dir
    (round 17 c's premise: another gateway's config, `security = "full"`)."""
    root = state_dir.parent
    os.chmod(root, 0o755)  # (the other account must reach the team dir)
    team = root / "team"
    team.mkdir()
    os.chown(team, 0, NOBODY)
    os.chmod(team, 0o775)
    mine = root / "cfg-op"
    mine.mkdir(mode=0o700)
    (mine / "config.toml").write_text(DENYING)
    os.chmod(mine / "config.toml", 0o600)
    other = root / "cfg-other"
    other.mkdir(mode=0o700)
    (other / "config.toml").write_text(FULL)
    os.chmod(other / "config.toml", 0o600)
    return team, mine, other


async def _ran(op: Any) -> bool:
    """Whether an exec of main's ran (the operator's config denies every exec)."""
    try:
        read = await op.request("exec", {"command": "python3 -c 'print(6*7)'", "agentId": "main"})
    except RemoteError as exc:
        assert "security=deny" in str(exc), exc
        return False
    return bool(read["details"]["status"] == "completed" and "42" in read["text"])


@needs_root
@needs_bwrap
@pytest.mark.xfail(
    strict=True,
    reason="open: loader._check_dirs judges the realpath of the config's dir, so a link on the way "
    "(team/cfg -> the operator's own dir) is judged as its target and the team dir holding it never "
    "is: another account that may write the team dir replaces the link with one to another root-owned "
    "config (security = full) and the gateway's next reload takes that as the operator's (the host "
    "view refuses host runs through such a link; sandbox runs and every other setting follow it)",
)
async def test_class6_a_config_reached_through_a_link_in_a_team_dir_is_judged(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 17 c refused a config in a team dir another account may write. The operator keeps it in a
    dir of its own and links the team dir to it (team/cfg -> ~/cfg-op), naming team/cfg/config.toml:
    the dir holding that name is judged as the dir the link leads to, and the team dir is never looked
    at; a team member swaps the link."""
    team, mine, other = _config_dirs(state_dir)
    os.symlink(mine, team / "cfg")  # the operator's own link
    monkeypatch.setenv("EXECHOST_CONFIG", str(team / "cfg" / "config.toml"))
    seen = []
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            seen.append(await _ran(op))
            _as_nobody("ln", "-sfn", str(other), str(team / "cfg"))  # replaced by a team member
            seen.append(await _ran(op))
        finally:
            await op.close()
    assert seen == [False, False], seen


@needs_root
def test_class6_a_config_in_a_team_dir_is_refused(state_dir: Path) -> None:
    """Held (round 17 c): the config named in the team dir itself is refused."""
    from engine.config.loader import load_config
    from engine.config.model import ConfigError

    team, mine, _other = _config_dirs(state_dir)
    os.rename(mine / "config.toml", team / "config.toml")
    with pytest.raises(ConfigError, match="another account may change"):
        load_config(team / "config.toml", required=True)


@needs_root
@needs_bwrap
@pytest.mark.parametrize(
    "disk",
    [
        "room",
        "no-inodes",
    ],
)
async def test_class7_a_gateways_node_key_stays_hidden_after_a_full_home_disk(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, disk: str
) -> None:
    """A dev gateway's config names a node whose ssh key is outside the home; it records the key for
    every view of the account to hide. Started while the home has no inode left, the record is lost
    (never tried again in that process), and the main gateway's agent reads the dev gateway's node key."""
    if hostkeeper.helper_path() is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    from tests.helpers.daemon import Daemon

    root = state_dir.parent
    keys = root / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "dev_node_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (keys / "known_hosts").touch(mode=0o600)
    secret = key.read_text().splitlines()[1]
    with _small_home(root / "h2") as home:
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))
        gatewaydirs.record(str(home), str(state_dir))  # the main gateway's state dir, recorded
        write_config(state_dir, OPS)
        ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
        dev = root / "dev"
        dev.mkdir(mode=0o700)
        (dev / "config.toml").write_text(
            '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
            f'\n[nodes.box]\nhost = "127.0.0.9"\nport = 2\nuser = "nobody"\nidentityFile = "{key}"\n'
            f'knownHosts = "{keys / "known_hosts"}"\n'
        )
        os.chmod(dev / "config.toml", 0o600)
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                await op.request("exec", {"command": "cat /dev/null", "agentId": "main"})  # the view is made
                gatewaydirs.record(str(home), str(dev))  # the dev gateway's state dir, recorded
                filler = _exhaust_inodes(home / "fill") if disk == "no-inodes" else []
                daemon = Daemon(dev, operators=False)
                try:  # its start records the key, or is refused (fail closed)
                    daemon.start()
                except AssertionError as exc:
                    assert filler and "cannot record" in str(exc), exc
                    for path in filler:  # room again: the next start records it
                        path.unlink()
                    daemon.start()
                try:
                    for path in filler:  # room again
                        if path.exists():
                            path.unlink()
                    read = await op.request("exec", {"command": f"cat {key}", "agentId": "main"})
                finally:
                    daemon.stop()
            finally:
                await op.close()
    assert secret not in read["text"], read["text"][:300]


def _session_host(state: Path) -> int:
    """The pid of the session host serving `state` (it runs `host_main.py <state>/...`)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            if any(a.endswith(b"host_main.py") for a in argv) and any(
                a.startswith(os.fsencode(state)) for a in argv
            ):
                return int(entry.name)
    raise AssertionError("no session host")


async def test_class7_a_joined_allow_once_killed_before_its_spawn_runs_each_requester_once(
    state_dir: Path,
) -> None:
    """Two sessions ask the same question (one record, two requesters), one allow-once, and the gateway is
    killed -9 when both runs are noted `starting` on disk and their spawns wait on a stopped session host.
    The restart takes the ask up from the journal: neither requester's run is started again."""
    import signal

    from tests.helpers.daemon import Daemon
    from tests.helpers.gateway import ALLOWLIST, wait_until
    from tests.helpers.pending import stored_asks

    root = state_dir.parent
    fifo = root / "go"
    os.mkfifo(fifo)
    marker = root / "ran"
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/true")
    command = f"sh -c 'echo x >> {marker}; cat {fifo}'"

    def runs() -> list[Any]:
        stored = [a for a in stored_asks(state_dir) if a["id"] == aid]
        return [stored[0]["run"], *(j["run"] for j in stored[0]["joined"])] if stored else []

    daemon = Daemon(state_dir).start()
    host = 0
    try:
        op = await connect(state_dir)
        try:
            await op.request("exec", {"command": "/usr/bin/true", "agentId": "main"})  # the host is up
            host = _session_host(state_dir)
            os.kill(host, signal.SIGSTOP)
            asked = [
                await op.request("exec", {"command": command, "agentId": "main", "sessionKey": key})
                for key in ("agent:main:a", "agent:main:b")
            ]
            ids = {a["details"]["approvalId"] for a in asked}
            assert len(ids) == 1, asked  # one record, two requesters
            (aid,) = ids
            await op.request("approve", {"id": aid, "decision": "allow-once"})
            await wait_until(
                lambda: len(runs()) == 2 and all(r and r["status"] == "starting" for r in runs()), timeout=20
            )
        finally:
            await op.close()
        daemon.kill()  # SIGKILL: both runs noted `starting`, neither spawned
        os.kill(host, signal.SIGCONT)
        daemon.start()
        await wait_until(lambda: not runs(), timeout=20)  # settled by the restart (linked or reported)
        op = await connect(state_dir)
        try:
            status = await op.request("approvals.status", {"approvalId": aid})
        finally:
            await op.close()
        print(status["text"])
    finally:
        if host:
            with contextlib.suppress(OSError):
                os.kill(host, signal.SIGCONT)
        with contextlib.suppress(OSError):  # the runs' `cat`, if still there, ends
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        daemon.stop()
    ran = marker.read_text().splitlines() if marker.exists() else []
    print("ran", len(ran))
    assert len(ran) <= 2


@needs_root
@pytest.mark.parametrize(
    "disk",
    [
        "room",
        "full",
    ],
)
async def test_class7_a_nodes_id_pinned_on_a_full_disk_stays_its_own_after_a_restart(
    state_dir: Path, sshd_nodes: list[Any], disk: str
) -> None:
    """The first node to present a node id keeps it (node-keys.json), so no other node can pass itself
    off as that one, up or down. Pinned while the state disk is full, the pin lives only in the process:
    after a restart a compromised beta presents alpha's id while alpha is down, and is connected as it."""
    from engine.nodes.gateway_key import GatewayKey
    from tests.helpers.hostile_node import Hostile

    alpha, beta = sshd_nodes
    text = (state_dir / "config.toml").read_text()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state_dir)], check=True)
    try:
        write_config(state_dir, text)
        hostile = Hostile(beta, state_dir, node_id="beta-own")
        GatewayKey.load_or_create(state_dir)  # made at an earlier start (the links prove it)
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                filler = _fill_bytes(state_dir) if disk == "full" else None
                rows = (await op.request("nodes.status", {"ping": True}))["nodes"]
            finally:
                await op.close()
        by_name = {r["name"]: r for r in rows}
        if filler is not None:  # an id that cannot be pinned is not linked (fail closed)
            assert by_name["alpha"]["state"] != "connected", by_name["alpha"]
            assert "could not be pinned" in str(by_name["alpha"]), by_name["alpha"]
            filler.unlink()  # room again: the next link pins it
            async with gateway(state_dir):
                op = await connect(state_dir)
                try:
                    rows = (await op.request("nodes.status", {"ping": True}))["nodes"]
                finally:
                    await op.close()
            by_name = {r["name"]: r for r in rows}
        assert by_name["alpha"]["state"] == "connected", by_name["alpha"]
        alpha_id = by_name["alpha"]["nodeId"]
        alpha.stop()  # alpha is down
        hostile.hello(alpha_id)  # beta, compromised, now says it is alpha
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                rows = (await op.request("nodes.status", {"ping": True}))["nodes"]
            finally:
                await op.close()
        row = {r["name"]: r for r in rows}["beta"]
        assert row["nodeId"] != alpha_id, row
    finally:
        subprocess.run(["umount", "-l", str(state_dir)], check=False)


@needs_root
@needs_bwrap
@pytest.mark.parametrize(
    "disk",
    [
        "room",
        "no-inodes",
    ],
)
async def test_class7_a_retired_agents_sandbox_workspaces_stay_covered_after_a_full_home_disk(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, disk: str
) -> None:
    """Round 15 b covers every workspace root ever used (a `w-` record written as a workspace is made),
    not only the config's now. Made while the home has no inode left, the record is lost; ops is retired
    and main's host run reads what ops's sandbox wrote in its workspace."""
    root = state_dir.parent
    ws = root / "ops-ws"
    base = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
    ops = (
        '\n[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nhost = "sandbox"\nsecurity = "full"\n'
        f'ask = "off"\n[agents.list.sandbox]\nmode = "all"\nbackend = "bwrap"\nworkspaceRoot = "{ws}"\n'
    )
    with _small_home(root / "h2") as home:
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))
        gatewaydirs.record(str(home), str(state_dir))
        ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/grep")
        write_config(state_dir, base + ops)
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                await op.request("exec", {"command": "/usr/bin/grep -c x /dev/null", "agentId": "main"})
                filler = _exhaust_inodes(home / "fill") if disk == "no-inodes" else []
                wrote = await op.request(
                    "exec", {"command": "echo ops-ws-3d9b > /workspace/notes", "agentId": "ops"}
                )
                assert wrote["details"]["status"] == "completed", wrote
                for path in filler:  # room again: nothing records the root now
                    path.unlink()
                write_config(state_dir, base + "# ops retired\n")
                read = await op.request("exec", {"command": f"grep -rs ops-ws-3d9b {ws}", "agentId": "main"})
            finally:
                await op.close()
    assert "ops-ws-3d9b" not in read["text"], read["text"][:300]


async def test_class2_a_nodes_session_row_names_no_agent_it_was_not_given(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The gateway files a node's notices under keys it gave that node (NodeKeys.given); its session rows
    for the operators' consoles carry the node's own scopeKey. beta, compromised, announces a session of
    `agent:ops:main`: ops is not even allowed on beta, and no run of ops ever went there."""
    from tests.helpers.gateway import wait_until
    from tests.helpers.hostile_node import Hostile, event

    _alpha, beta = sshd_nodes
    list_text = (state_dir / "config.toml").read_text() + '\n[[agents.list]]\nid = "ops"\nnodes = []\n'
    write_config(state_dir, list_text)
    hostile = Hostile(beta, state_dir)
    async with gateway(state_dir) as server:
        op = await connect(state_dir)
        try:
            await op.subscribe(["sessions"])
            rows = (await op.request("nodes.status", {"ping": True}))["nodes"]
            assert {r["name"]: r for r in rows}["beta"]["state"] == "connected", rows
            row = {"sessionId": "s1", "scopeKey": "agent:ops:main", "status": "running", "command": "make"}
            # then a frame surely dropped: once it is counted, the row before it was handled
            await hostile.inject(event("session.started", session=row), event("no.such.event"))
            await wait_until(lambda: server.services.nodes.dropped >= 1)
            await op.request("status", {})  # what the row sent this connection is before this answer
            seen = []
            while not op._events.empty():
                ev = op._events.get_nowait()
                if ev is not None and str(ev.data.get("sessionId", "")).startswith("node:beta:"):
                    seen.append(ev.data)
        finally:
            await op.close()
    assert all(r.get("scopeKey") != "agent:ops:main" for r in seen), seen


_RELAY = """
import socket, sys, threading
src, dst = sys.argv[1], sys.argv[2]
def pair(a, b):
    try:
        while (data := a.recv(65536)):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
host, port = src.rsplit(":", 1)
srv = socket.create_server((host, int(port)))
print("up", flush=True)
while True:
    c, _ = srv.accept()
    h, p = dst.rsplit(":", 1)
    u = socket.create_connection((h, int(p)))
    threading.Thread(target=pair, args=(c, u), daemon=True).start()
    threading.Thread(target=pair, args=(u, c), daemon=True).start()
"""


@needs_root
@pytest.mark.xfail(
    strict=True,
    reason="open: a node's knownHosts file is read as found, by path, whoever may write it (the config file "
    "itself is refused when another account may change it, engine.config.loader): another account that may "
    "write it puts its own server's key under the node's address, and while the node is down serves that "
    "address (an unprivileged port on loopback, or any network position), so the gateway links to its "
    "server as that node and sends it the node's runs",
)
async def test_class6_a_known_hosts_file_another_account_may_write_is_refused(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The team's known_hosts is group-writable by another account (nobody). With alpha down, nobody
    relays alpha's address to a server of its choice (an sshd that is no node of this gateway's) and
    writes that server's key for alpha's address: the gateway's link to alpha is up, to the wrong
    machine."""

    alpha, beta = sshd_nodes
    root = state_dir.parent
    kh = alpha.known_hosts
    for d in (root, kh.parent):
        os.chmod(d, 0o711)
    os.chown(kh, 0, NOBODY)
    os.chmod(kh, 0o664)
    write_config(state_dir, alpha.config_toml())  # beta is the other account's server, no node of ours
    alpha.stop()  # alpha is down (its address and port free)
    relay = subprocess.Popen(
        ["/usr/bin/python3", "-c", _RELAY, f"{alpha.addr}:{alpha.port}", f"{beta.addr}:{beta.port}"],
        stdout=subprocess.PIPE,
        preexec_fn=_become_nobody,
    )
    try:
        assert relay.stdout is not None and relay.stdout.readline() == b"up\n"
        key = (beta.root / "host_ed25519.pub").read_text().split()
        lines = (
            f"[{alpha.addr}]:{alpha.port} {key[0]} {key[1]}\n[{beta.addr}]:{beta.port} {key[0]} {key[1]}\n"
        )
        _as_nobody("sh", "-c", f"printf '%s' '{lines}' > {kh}")  # the other account's edit
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                rows = (await op.request("nodes.status", {"ping": True}))["nodes"]
            finally:
                await op.close()
    finally:
        relay.kill()
        relay.wait()
    row = {r["name"]: r for r in rows}["alpha"]
    assert row["state"] != "connected", row


@needs_root
@pytest.mark.xfail(
    strict=True,
    reason="open: a Docker sandbox's seccompProfile file is read as found, whoever may write it "
    "(docker_ops._seccomp_value opens the path at each container's creation; only the word `unconfined` "
    "is refused): another account that may write its dir swaps in an allow-all profile, and the next "
    "sandbox runs with no syscall filter (unshare of a user namespace, and the rest, allowed)",
)
async def test_class6_a_seccomp_profile_another_account_may_write_is_refused(state_dir: Path) -> None:
    """The operator's team keeps the sandboxes' seccomp profile in a team dir (group-writable by another
    account); the profile is exechost's own at first. The other account replaces it with one whose
    default action is ALLOW: the next sandbox made (a recreate) unshares a user namespace."""
    from engine.sandbox import dockerseccomp
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()  # (skips when Docker is absent)
    team, _mine, _other = _config_dirs(state_dir)
    profile = team / "seccomp.json"
    profile.write_text(dockerseccomp.profile_json())
    os.chmod(profile, 0o644)
    write_config(
        state_dir,
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "docker"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\nseccompProfile = "{profile}"\n',
    )
    seen = []
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            for turn in range(2):
                read = await op.request("exec", {"command": "unshare -U id", "agentId": "main"})
                seen.append("uid=" in read["text"])
                if turn == 0:  # the other account's swap (a rename in the team dir), then a new sandbox
                    allow = team / ".allow.json"
                    _as_nobody("sh", "-c", f'echo \'{{"defaultAction":"SCMP_ACT_ALLOW"}}\' > {allow}')
                    _as_nobody("mv", "-f", str(allow), str(profile))
                    await op.request("sandbox.recreate", {"all": True})
        finally:
            with contextlib.suppress(Exception):
                await op.request("sandbox.recreate", {"all": True})
            await op.close()
    assert seen == [False, False], seen


@needs_root
@needs_bwrap
@pytest.mark.xfail(
    strict=True,
    reason="open: a bwrap sandbox's `rootfs` tree is bound read-only as found, whoever may write it "
    "(bindsource judges the owner of writable binds only): another account that may write the tree "
    "replaces the programs every sandboxed command of the agent runs, and reads what they are handed",
)
async def test_class6_a_bwrap_rootfs_another_account_may_write_is_refused(state_dir: Path) -> None:
    """The operator's sandboxes use a rootfs tree kept in a team dir (its top dirs group-writable by
    another account, as a shared build area is). The other account puts a program of its own in the
    tree's /bin, and the agent's next sandboxed command runs it."""
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()  # (skips when Docker is absent): its busybox tree is the rootfs
    team, _mine, _other = _config_dirs(state_dir)
    tree = team / "rootfs"
    tree.mkdir()
    made = subprocess.run(["docker", "create", image, "true"], check=True, capture_output=True, text=True)
    cid = made.stdout.strip()
    try:
        exported = subprocess.run(["docker", "export", cid], check=True, capture_output=True)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], check=False, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=exported.stdout, check=True)
    os.chown(tree / "bin", 0, NOBODY)
    os.chmod(tree / "bin", 0o775)  # the team's build area: the other account may write it
    write_config(
        state_dir,
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
        f'[agents.defaults.sandbox.bwrap]\nrootfs = "{tree}"\n',
    )
    planted = tree / "bin" / "make"
    _as_nobody(
        "sh", "-c", f"printf '#!/bin/sh\\necho planted-by-nobody\\n' > {planted} && chmod 755 {planted}"
    )
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            read = await op.request("exec", {"command": "make", "agentId": "main"})
        finally:
            await op.close()
    assert "planted-by-nobody" not in read["text"], read["text"][:300]


@needs_root
async def test_class6_a_docker_bind_source_outside_the_allowed_roots_is_refused(state_dir: Path) -> None:
    """Held: binds = ["<team>/data:/data:ro"], the team's data dir in a dir another account may write
    (which could swap it for a link to the gateway's state dir before the daemon resolves it): a bind
    source outside the sandbox's allowed roots is refused without the dangerous override."""
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()  # (skips when Docker is absent)
    team, _mine, _other = _config_dirs(state_dir)
    data = team / "data"
    data.mkdir()
    write_config(
        state_dir,
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "docker"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\nbinds = ["{data}:/data:ro"]\n',
    )
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            with pytest.raises(RemoteError, match="outside allowed roots"):
                await op.request("exec", {"command": "ls /data", "agentId": "main"})
        finally:
            with contextlib.suppress(Exception):
                await op.request("sandbox.recreate", {"all": True})
            await op.close()
