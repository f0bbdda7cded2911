"""Fresh round 17 c: state, crashes and egress — what the gateway keeps on disk and across restarts, judged
by who may write it, and the egress proxy's names (classes 7, 2, 6 on durable state; 1 and 4 on egress)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shlex
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import principals, unixsock
from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs
from engine.config.loader import load_config
from engine.config.model import ConfigError
from engine.nodes import revoking
from engine.nodes.revocations import Revocations
from engine.protocol.frames import OPERATOR_TOKEN_NAME, read_token
from engine.sandbox.egress import forwarder
from runner.gateway.server import GatewayBusy
from tests.attacks.harness import ALLOWLIST
from tests.helpers.egress import origin
from tests.helpers.gateway import FULL, claim_state, connect, gateway, listed, wait_until, write_config
from tests.helpers.pending import stored_asks

NOBODY = 65534
PAGE = os.sysconf("SC_PAGE_SIZE")  # what a tmpfs gives a file at a time


def as_nobody(script: str) -> None:
    """Run `script` (sh) as another local account: what it does, that account could do."""
    subprocess.run(
        ["/bin/sh", "-ec", script], user=NOBODY, group=NOBODY, extra_groups=[], check=True, cwd="/"
    )


def q(path: object) -> str:
    return shlex.quote(str(path))


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another account needs root to stand in for it")


@needs_root
async def test_a_link_on_the_state_dirs_way_owned_by_another_account_is_repointed_after_adoption(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's state dir is named through a link in a sticky world-writable dir (a /tmp-like dir)
    that another account made: `judge` resolves it (the real dir is root's, in root's dirs) and the
    gateway adopts it. That account re-points its link at a dir of its own: every path the running
    gateway opens goes there (its tokens, `sandbox-bin/` whose helpers a stamp file beside them vouches
    for, `egress/`), so the operator is locked out of their own gateway at once; a forwarder planted with
    its stamp there (the source's digest is public) is what the next agent's first host run starts as
    root, when the link is moved for the moment between that run's proof check and its netkeep's exec."""
    root = state_dir.parent
    os.chmod(root, 0o755)  # traversable, not writable by others: judge accepts it
    write_config(state_dir, FULL)
    pub = root / "pub"
    pub.mkdir()
    os.chmod(pub, 0o1777)  # sticky and world-writable, as /tmp
    evil = pub / "evil"
    # The other account's link, to the operator's real (recorded) state dir's parent.
    as_nobody(f"ln -s {q(root)} {q(pub / 'l')}")
    named = pub / "l" / "s"
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(named))
    async with gateway(named):
        client = await connect(named)  # the operator's client, connected before the move
        try:
            assert (await client.request("status"))["pid"] == os.getpid()
            # the other account: a dir of its own with the operator's config linked in (still root's
            # file, so the gateway's policy reads as before), and its link moved there
            as_nobody(
                f"mkdir -p {q(evil / 's')}; chmod 777 {q(evil)}\n"
                f"ln -s {q(state_dir / 'config.toml')} {q(evil / 's' / 'config.toml')}\n"
                f"ln -s {q(evil)} {q(pub / 'l2')}; mv -T {q(pub / 'l2')} {q(pub / 'l')}\n"
            )
            assert (await client.request("status"))["pid"] == os.getpid()
        finally:
            await client.close()


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A filesystem of `size` at `where` (root only): what a full disk looks like, deterministically."""
    where.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@needs_root
async def test_class7_an_approved_run_that_fills_the_disk_and_is_removed_never_runs_again(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Held.) An allow-once run fills the filesystem the state dir is on (through a hostWritable dir
    there, as a home is), and while it still runs the agent files another ask whose journal line is
    longer than the page the journal ends in (its append fills that page and fails); the run ends, the
    agent removes its session (`process remove`: its files go), the disk is freed and the gateway
    restarts. The run's `starting` note was settled in the journal right after the spawn (a detached
    run's note is `running` then), before anything the command did, so nothing runs a second time."""
    with small_tmpfs(state_dir.parent / "t", "6m") as fs:
        state, work = fs / "s", fs / "w"
        work.mkdir()
        count, fill, gate = work / "count", work / "fill", work / "gate"
        os.mkfifo(gate)
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        state.mkdir(mode=0o700)
        claim_state(state)  # the operator's CLI, before it writes a config there
        write_config(state, ALLOWLIST + f'hostWritable = ["{work}"]\n')
        command = f"echo ran >> {count}; head -c 64M /dev/zero > {fill}; cat {gate}"
        async with gateway(state):
            agent = await connect(state, "agent", operator=False)
            operator = await connect(state, "op")
            try:
                asked = await agent.request("exec", {"command": command, "workdir": str(work)})
                aid = asked["details"]["approvalId"]
                await operator.request("approve", {"id": aid, "decision": "allow-once"})
                await wait_until(lambda: os.statvfs(fs).f_bavail == 0 and count.exists(), timeout=20)
                with contextlib.suppress(Exception):  # its answer does not matter, its journal line does
                    await agent.request("exec", {"command": "echo " + "x" * (2 * PAGE), "workdir": str(work)})
                with open(gate, "w") as g:  # the approved run ends now
                    g.write("done\n")

                async def run_over() -> dict[str, Any] | None:
                    got = await operator.request("approvals.status", {"approvalId": aid})
                    run = got["details"].get("run") or {}
                    return run if run.get("status") not in (None, "starting", "running") else None

                run = await wait_until(run_over, timeout=20)
                await agent.request("process", {"action": "remove", "sessionId": run["sessionId"]})
            finally:
                await agent.close()
                await operator.close()
        fill.unlink()
        async with gateway(state):
            operator = await connect(state, "op")
            try:
                await wait_until(lambda: not stored_asks(state), timeout=20)
                got = await operator.request("approvals.status", {"approvalId": aid})
                assert (got["details"].get("run") or {}).get("status") not in ("starting", "running")
            finally:
                await operator.close()
        assert count.read_text() == "ran\n", "the approved command ran twice"


@needs_root
async def test_class7_a_foreground_approved_run_whose_end_was_not_saved_runs_again(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An allow-once run the caller waits for (an approver is attached): its `starting` note reaches the
    pending journal, then the command fills the filesystem the state dir is on (through a hostWritable
    dir there, as a home is). While it runs, the agent files another ask whose journal line is longer
    than the room left in the journal's last page: that append fills the page and fails. The run ends:
    its settled line finds no room and is not saved ("a write that fails counts as done"; the run's
    result was already returned). The disk is freed (the agent's own file); at the next start the
    journal says "starting" and the approved-once command runs a second time."""
    with small_tmpfs(state_dir.parent / "t", "6m") as fs:
        state, work = fs / "s", fs / "w"
        work.mkdir()
        fill, gate, runs = work / "fill", work / "gate", work / "runs"
        journal = state / "pending-approvals.json.journal"
        os.mkfifo(gate)
        runs.mkdir()  # one file per run of the approved command
        cwd = work / "cwd"  # where it runs: nothing it does changes what it was approved with
        cwd.mkdir()
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # as the daemon runs them: in the session host
        state.mkdir(mode=0o700)
        claim_state(state)  # the operator's CLI, before it writes a config there
        write_config(state, ALLOWLIST + f'hostWritable = ["{work}"]\n')
        command = (
            f"mktemp -p {runs} >/dev/null; head -c 64M /dev/zero > {fill} 2>/dev/null; echo end > {gate}"
        )
        async with gateway(state) as server:
            agent = await connect(state, "agent", operator=False)
            other = await connect(state, "agent2", operator=False)
            operator = await connect(state, "op")
            waiting: list[asyncio.Future[Any]] = []
            try:
                await operator.request("approvals.attach", {})
                run = asyncio.ensure_future(agent.request("exec", {"command": command, "workdir": str(cwd)}))
                waiting.append(run)
                pending = await wait_until(lambda: _pending(operator), timeout=20)
                aid = pending[0]["id"]
                await operator.request("approve", {"id": aid, "decision": "allow-once"})
                await wait_until(lambda: os.statvfs(fs).f_bavail == 0 and any(runs.iterdir()), timeout=20)
                before = journal.stat().st_size
                # a long ask: its journal line fills the journal's last page, and its append fails
                long = {"command": "echo " + "x" * (2 * PAGE), "workdir": str(cwd)}
                waiting.append(asyncio.ensure_future(other.request("exec", long)))
                await wait_until(
                    lambda: journal.stat().st_size > before and journal.stat().st_size % PAGE == 0
                )
                await server.services.journal.flush()  # what B's ask queued is written (or failed)
                top_up(fill)  # whatever a failed write gave back meanwhile is the agent's file's again
                with open(gate) as g:  # the approved run ends now
                    g.read()
                assert (await run)["details"]["status"] == "completed"
                await server.services.journal.flush()  # its end's line was written, or failed
            finally:
                for task in waiting:
                    task.cancel()
                for client in (agent, other, operator):
                    await client.close()
        fill.unlink()
        async with gateway(state):
            operator = await connect(state, "op")
            try:

                async def over() -> bool:
                    got = await operator.request("approvals.status", {"approvalId": aid})
                    final = (got["details"].get("run") or {}).get("status") not in (
                        None,
                        "starting",
                        "running",
                    )
                    return final or len(list(runs.iterdir())) > 1

                await wait_until(over, timeout=20)
                assert len(list(runs.iterdir())) == 1, "the approved-once command ran a second time"
            finally:
                await operator.close()
                with contextlib.suppress(OSError):  # a second run waits to write its end: let it
                    fd = os.open(gate, os.O_RDONLY | os.O_NONBLOCK)
                    os.close(fd)


def top_up(path: Path) -> None:
    """Append to `path` until its filesystem is full."""
    with contextlib.suppress(OSError), open(path, "ab", buffering=0) as f:
        while True:
            f.write(b"\0" * PAGE)


async def _pending(operator: Any) -> list[dict[str, Any]]:
    got = await operator.request("approvals.pending", {})
    return list(got.get("approvals") or [])


async def test_class4_an_unrecorded_state_dir_holding_a_config_a_host_run_planted_is_adopted(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host run of agent main writes, in a dir it may write (a hostWritable project dir), the state dir
    the operator will later give a second gateway (a project's own), holding only `config.toml` — the
    one name besides the allowlist file an unrecorded state dir may hold — with `security = "full"`,
    `ask = "off"`. Its owner is the gateway's uid, like every host run's file, so the loader takes it.
    The operator starts that gateway with no config of their own (the defaults ask): it adopts the dir,
    and every command of every agent runs unasked."""
    work = state_dir.parent / "w"
    work.mkdir(mode=0o700)
    planted = work / "project-state"
    write_config(state_dir, FULL + f'hostWritable = ["{work}"]\n')
    text = '[tools.exec]\\nhost = \\"gateway\\"\\nsecurity = \\"full\\"\\nask = \\"off\\"\\n'
    config = planted / "config.toml"
    plant = f'mkdir -m 700 {planted} && printf "{text}" > {config} && chmod 600 {config}'
    async with gateway(state_dir):
        client = await connect(state_dir, "agent", operator=False)
        try:
            done = await client.request("exec", {"command": plant, "workdir": str(work)})
        finally:
            await client.close()
    assert done["details"]["status"] == "completed", done
    assert sorted(os.listdir(planted)) == ["config.toml"]
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(planted))
    try:
        async with gateway(planted):
            client = await connect(planted, "agent", operator=False)
            try:
                ran = await client.request("exec", {"command": "echo unasked", "workdir": str(work)})
            finally:
                await client.close()
    except gatewaydirs.StateDirRefusedError:
        return  # refused at start: what a host run chose is never a gateway's policy
    assert ran["details"]["status"] in ("approval-pending", "denied"), ran["details"]


IMPOSTOR = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
open(sys.argv[2], "w").close()
while True:
    c, _ = s.accept()
    c.close()
"""


@needs_root
async def test_class1_the_agents_socket_under_a_dir_another_account_writes_is_taken_over(
    state_dir: Path,
) -> None:
    """`[gateway] agentSocket` names a path whose dir the gateway makes (0750, its own), in a dir another
    account may write. That account renames the gateway's dir (an entry of its own dir) and binds its own
    socket at the path: an agent account's client, which by design sends no token and checks no peer on
    the agents' socket, now talks to that account (its commands, its env values, the answers it trusts)."""
    root = state_dir.parent
    os.chmod(root, 0o755)
    shared = root / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)  # a dir the other account may write (its own)
    path = shared / "exechost" / "agents.sock"
    write_config(state_dir, FULL + f'\n[gateway]\nagentSocket = "{path}"\nagentGroup = "nogroup"\n')
    try:
        async with gateway(state_dir):
            assert path.exists()
            ready = shared / "ready"
            as_nobody(f"mv {q(path.parent)} {q(shared / 'old')} && mkdir {q(path.parent)}")
            impostor = subprocess.Popen(
                ["/usr/bin/python3", "-c", IMPOSTOR, str(path), str(ready)], user=NOBODY, group=NOBODY
            )
            try:
                await wait_until(ready.exists)
                with socket.socket(socket.AF_UNIX) as dial:
                    dial.connect(str(path))
                    peer = unixsock.peer_info(dial)
                assert peer is not None and peer.uid == os.geteuid(), f"the agents' socket is uid {peer}'s"
            finally:
                impostor.kill()
                impostor.wait()
    except (GatewayBusy, gatewaydirs.StateDirRefusedError):
        return  # refused at start: a dir another account may write never holds the agents' socket


async def test_class4_an_allowlist_a_host_run_planted_in_an_unrecorded_state_dir_is_adopted(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but the operator writes their own config (allowlist, ask on miss) into the dir before the
    start: the allowlist file the host run planted beside it (`exec-approvals.json`, the other name an
    unrecorded state dir may hold, owned by the gateway's uid as every host run's file is) is the
    gateway's allowlist, and agent main's `id` runs unasked."""
    work = state_dir.parent / "w"
    work.mkdir(mode=0o700)
    planted = work / "project-state"
    scratch = state_dir.parent / "scratch"
    scratch.mkdir()
    ApprovalsStore(scratch / "exec-approvals.json").add_allowlist("main", "/usr/bin/id")
    blob = base64.b64encode((scratch / "exec-approvals.json").read_bytes()).decode()
    approvals = planted / "exec-approvals.json"
    plant = f"mkdir -m 700 {planted} && echo {blob} | base64 -d > {approvals} && chmod 600 {approvals}"
    write_config(state_dir, FULL + f'hostWritable = ["{work}"]\n')
    async with gateway(state_dir):
        client = await connect(state_dir, "agent", operator=False)
        try:
            done = await client.request("exec", {"command": plant, "workdir": str(work)})
        finally:
            await client.close()
    assert done["details"]["status"] == "completed", done
    assert sorted(os.listdir(planted)) == ["exec-approvals.json"]
    write_config(planted, ALLOWLIST)  # the operator's own config for the new gateway
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(planted))
    try:
        async with gateway(planted):
            client = await connect(planted, "agent", operator=False)
            try:
                ran = await client.request("exec", {"command": "id", "workdir": str(work)})
            finally:
                await client.close()
    except gatewaydirs.StateDirRefusedError:
        return  # refused at start: what a host run chose is never a gateway's policy
    assert ran["details"]["status"] in ("approval-pending", "denied"), ran["details"]


@needs_root
async def test_class4_a_config_in_a_dir_another_account_writes_is_swapped_for_another_root_file(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator keeps the gateway's config outside the state dir ($EXECHOST_CONFIG) in a dir another
    account may write (the config file itself is root's, 0600: the loader takes it). That account
    renames it aside and puts a link in its place to a file the operator keeps elsewhere for another
    gateway (root's too, `security = "full"`): the link is followed, the target's owner is root, and the
    running gateway's next look at its config (a stat per request) loads it: an agent's command that
    asked before runs unasked."""
    root = state_dir.parent
    os.chmod(root, 0o755)
    shared = root / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)  # the other account's dir (a team dir, a group-writable /srv)
    config = shared / "config.toml"
    config.write_text(ALLOWLIST)
    os.chmod(config, 0o600)
    other = root / "dev-gateway"
    other.mkdir(mode=0o700)
    (other / "config.toml").write_text(FULL)  # the operator's other gateway's config
    os.chmod(other / "config.toml", 0o600)
    monkeypatch.setenv("EXECHOST_CONFIG", str(config))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, "agent", operator=False)
            try:
                before = await client.request("exec", {"command": "id", "workdir": str(root)})
                assert before["details"]["status"] == "approval-pending"
                as_nobody(
                    f"mv {q(config)} {q(shared / 'old')} && ln -s {q(other / 'config.toml')} {q(config)}"
                )
                after = await client.request("exec", {"command": "id", "workdir": str(root)})
            finally:
                await client.close()
    except ConfigError as exc:
        assert "another account may change" in str(exc), exc
        return  # refused at start: a config in a dir another account may write is never read
    assert after["details"]["status"] in ("approval-pending", "denied"), after["details"]


@needs_root
async def test_class4_a_config_linked_into_a_dir_another_account_writes_is_refused(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour: $EXECHOST_CONFIG names a link in a dir of the operator's whose target lives in a dir
    another account may write (a team dir): that account swaps the target as above. The dir the file
    resolves to is judged as the one holding its name: the config is refused, at start and at reload."""
    root = state_dir.parent
    os.chmod(root, 0o755)
    shared = root / "shared"
    shared.mkdir()
    os.chown(shared, NOBODY, NOBODY)
    target = shared / "config.toml"
    target.write_text(ALLOWLIST)
    os.chmod(target, 0o600)
    mine = root / "etc"
    mine.mkdir(mode=0o700)
    (mine / "config.toml").symlink_to(target)
    with pytest.raises(ConfigError, match="another account may change"):
        load_config(mine / "config.toml", required=True)
    os.chown(shared, 0, 0)  # the same dir, root's alone: read
    assert load_config(mine / "config.toml", required=True).exec.security == "allowlist"


@pytest.mark.xfail(
    strict=True,
    reason="open (a limit docs/SECURITY.md states): the record of state dirs is kept in each gateway's "
    "$HOME, and a gateway may run with another HOME (EXECHOST_HOST_HOME names it): a second "
    "gateway of this account recorded under its own HOME is no state dir the first one's views "
    "cover, and the first one's host run reads its tokens.",
)
async def test_class1_a_gateway_of_this_account_under_another_home_is_not_covered(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gateways of one account, each a service with a HOME of its own (named in EXECHOST_HOST_HOME, as
    the docs allow): the second records its state dir in its own home's `~/.exechost-gateways`, which the
    first gateway's views never read. A host run of the first reads the second's operator token."""
    root = state_dir.parent
    first_home = Path(os.environ["HOME"])
    other_home, other_state = root / "h2", root / "s2"
    other_home.mkdir(mode=0o700)
    other_state.mkdir(mode=0o700)
    with monkeypatch.context() as other:
        for key, value in (("HOME", other_home), ("EXECHOST_HOST_HOME", other_home)):
            other.setenv(key, str(value))
        other.setenv("OPENCLAW_STATE_DIR", str(other_state))
        claim_state(other_state)  # B's operator's CLI, in B's home
        write_config(other_state, ALLOWLIST)
        async with gateway(other_state):
            pass
    token = read_token(other_state, OPERATOR_TOKEN_NAME)
    assert token and Path(os.environ["HOME"]) == first_home
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        client = await connect(state_dir, "agent", operator=False)
        try:
            got = await client.request(
                "exec", {"command": f"cat {other_state}/operator.json", "workdir": str(root)}
            )
        finally:
            await client.close()
    assert token not in got["text"], "a host run read the other gateway's operator token"


async def test_class6_a_helper_planted_in_an_uncovered_state_dir_runs_outside_every_view(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gateway B (a service with a HOME of its own) keeps its state dir in a project dir that gateway A's
    agent may write (A's `hostWritable`). B's record is in B's home, so A's views show the dir as it is,
    writable. A's agent writes B's forwarder and its stamp (the digest of the public source). B's next
    host run starts its agent's network namespace, whose forwarder was that file: it ran as the gateway's
    uid in the host's mount namespace, outside every view. Now the forwarder started there is the
    gateway's own build, from its memfd, whatever sandbox-bin holds."""
    root = state_dir.parent
    project = root / "proj"
    project.mkdir(mode=0o700)
    other_home, other_state = root / "h2", project / "gw2"
    other_home.mkdir(mode=0o700)
    other_state.mkdir(mode=0o700)
    marker = root / "outside"

    def as_other(patch: pytest.MonkeyPatch) -> None:
        for key, value in (("HOME", other_home), ("EXECHOST_HOST_HOME", other_home)):
            patch.setenv(key, str(value))
        patch.setenv("OPENCLAW_STATE_DIR", str(other_state))

    with monkeypatch.context() as other:
        as_other(other)
        claim_state(other_state)  # B's operator's CLI, in B's home
        write_config(other_state, FULL)
        async with gateway(other_state):
            pass
    write_config(state_dir, FULL + f'hostWritable = ["{project}"]\n')
    bin_dir = other_state / "sandbox-bin"
    helper = bin_dir / "egress-forward"
    plant = (
        f"mkdir -p {bin_dir} && printf '#!/bin/sh\\nid -u > {marker}\\nexec sleep 600\\n' > {helper} "
        f"&& chmod 755 {helper} && echo {forwarder.source_digest()} > {helper}.sha"
    )
    async with gateway(state_dir):
        client = await connect(state_dir, "agent", operator=False)
        try:
            done = await client.request("exec", {"command": plant, "workdir": str(project)})
        finally:
            await client.close()
    if done["details"]["status"] != "completed" or not helper.exists():
        return  # B's state dir was covered: nothing of A's agent reaches B's helpers
    with monkeypatch.context() as other:
        as_other(other)
        async with gateway(other_state):
            client = await connect(other_state, "agent", operator=False)
            try:
                await client.request("exec", {"command": "true", "workdir": str(root)})
            finally:
                await client.close()
            started = await wait_until(lambda: forwarders_of(other_state))
            programs = [os.readlink(f"/proc/{pid}/exe") for pid in started]
    assert not marker.exists(), "A's agent's program ran as B, outside views"
    assert all(p.startswith(f"/memfd:{forwarder.NAME}") for p in programs), programs


def forwarders_of(state: Path) -> list[int]:
    """The forwarders the netkeep holders of `state`'s host runs started (their children), by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            if b"netkeep" not in words or not any(w.startswith(str(state).encode()) for w in words):
                continue
            children = (entry / "task" / entry.name / "children").read_text().split()
        except (OSError, ValueError):
            continue
        found += [int(c) for c in children]
    return found


@needs_root
async def test_class7_a_revoke_on_a_full_disk_still_reaches_the_nodes(
    state_dir: Path, sshd_nodes: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent ops runs a long command on a node; its host runs fill the filesystem the gateway's state dir
    is on; the operator revokes ops. What the revoke owes the nodes cannot be written down first (a revoke
    never waits on what it owes), and the nodes are told from that record: the node must still end what
    ops left running there, at least while it is connected."""
    node = sshd_nodes[0]
    nodes_text = (state_dir / "config.toml").read_text()
    write_config(node.state_dir, FULL)  # the node runs what it is sent
    pid_file = node.marks / "pid"
    with small_tmpfs(state_dir.parent / "t", "8m") as fs:
        state = fs / "s"
        state.mkdir(mode=0o700)
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        write_config(state, FULL.replace('"gateway"', '"auto"') + nodes_text + listed("ops"))
        gatewaydirs.record(os.environ["HOME"], str(state))  # the operator's, as `agents add` records it
        token = principals.mint(state, "ops")
        async with gateway(state):
            agent = await connect(state, "ops", operator=False, credential=token)
            operator = await connect(state, "op")
            try:
                command = f"echo started > {pid_file}; exec sleep {NAP}"
                started = await agent.request(
                    "exec", {"command": command, "host": "node", "node": node.name, "background": True}
                )
                assert started["details"]["status"] == "running", started["details"]
                await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30)
                pid = await wait_until(_napping)
                top_up(fs / "fill")  # what the agent's host runs wrote (a hostWritable dir on this disk)
                revoked = await operator.request("agents.revoke", {"agent": "ops"})
                assert revoked["revoked"] is True
                alive = _running_pid(pid)  # (the answer waits for the connected nodes to act)
            finally:
                await agent.close()
                await operator.close()
                for left in [_napping()]:
                    if left:
                        os.kill(left, 9)
        assert not alive, "ops's command on the node outlived its revoke"


def test_class7_a_revocation_the_disk_refuses_stays_owed_until_every_node_answered(tmp_path: Path) -> None:
    """The neighbour on any disk that says no (not only a full one): a state dir under which nothing can be
    written (a file stands where it should be). The revoke's revocation is still owed to each node, from
    this process, until each configured node answered it; the host kill the disk refused costs it nothing."""
    state = tmp_path / "not-a-dir"
    state.write_text("")
    revoking.owe(state, "ops", "old-token", nodes=True)
    [owed] = Revocations(state).owed("alpha")
    assert owed.agent == "ops" and Revocations(state).pending() == 1
    Revocations(state).acked("alpha", owed.revocation, ["alpha", "beta"])
    assert not Revocations(state).owed("alpha")
    assert [w.revocation for w in Revocations(state).owed("beta")] == [owed.revocation]
    Revocations(state).acked("beta", owed.revocation, ["alpha", "beta"])
    assert Revocations(state).pending() == 0


NAP = "600.1717"  # the node command's own mark in the process table


def _napping() -> int:
    """The pid of the node command (`sleep NAP`) still running, else 0."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", NAP.encode()] and _running_pid(int(entry.name)):
                    return int(entry.name)
    return 0


def _running_pid(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


@needs_root
async def test_class3_an_agents_socket_in_a_shared_sticky_dir_takes_the_dir_over(state_dir: Path) -> None:
    """A root gateway's `agentSocket` directly in a shared sticky dir (a /tmp stand-in): the dir is root's,
    so it counts as the gateway's own and is made 0750 for the agents' group: the sticky, world-writable
    dir every account uses is gone for all of them while the gateway runs, and after it."""
    shared = state_dir.parent / "tmp-like"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    write_config(
        state_dir, FULL + f'\n[gateway]\nagentSocket = "{shared}/agents.sock"\nagentGroup = "nogroup"\n'
    )
    try:
        async with gateway(state_dir):
            pass
    except (GatewayBusy, gatewaydirs.StateDirRefusedError):
        pass  # refused at start: a dir the gateway does not own alone never holds the agents' socket
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777, oct(os.stat(shared).st_mode)


async def test_class1_a_state_dir_holding_this_gateways_own_is_not_covered(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's main gateway keeps its state in /srv-like `main`, and a second (a dev gateway) in a
    dir inside it, `main/dev`. Both are recorded; the dev gateway's views cover every other recorded state
    dir except one that holds their own, so a host run of the dev gateway's agent reads the main
    gateway's operator token."""
    root = state_dir.parent
    main, dev = root / "main", root / "main" / "dev"
    main.mkdir(mode=0o700)
    claim_state(main)  # the operator's CLI, before it writes a config there
    write_config(main, ALLOWLIST)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(main))
    async with gateway(main):
        pass
    token = read_token(main, OPERATOR_TOKEN_NAME)
    assert token
    dev.mkdir(mode=0o700)
    write_config(dev, FULL)
    gatewaydirs.record(os.environ["HOME"], str(dev))
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(dev))
    async with gateway(dev):
        client = await connect(dev, "agent", operator=False)
        try:
            got = await client.request(
                "exec", {"command": f"cat {main}/operator.json; echo ran-$?", "workdir": str(root)}
            )
        finally:
            await client.close()
    assert "ran-" in got["text"], got  # the run ran in its view (the cover hid nothing it needs)
    assert token not in got["text"], "a host run of the dev gateway read the main gateway's operator token"


async def test_class4_a_host_runs_egress_to_an_allowed_names_address_in_other_spellings_is_refused(
    state_dir: Path,
) -> None:
    """(Held.) Host runs go out through the egress proxy under the agent's `[sandbox.egress]`. The operator
    allows one name, mapped to a loopback origin by `resolve`: the name in any case and with a trailing dot
    gets through; its address as a literal, `127.1`, `localhost` and a SOCKS5 name of it do not (a literal
    must be allowed by exactly that spelling, and must be public), nor a tunnel (CONNECT, SOCKS5) to the
    allowed name and port, which the entry's `http://` keeps to plain requests."""
    with origin() as served:
        port = served.port
        write_config(
            state_dir,
            FULL
            + "\n[agents.defaults.sandbox.egress]\n"
            + f'mode = "allowlist"\nask = false\nallow = ["http://origin.test:{port}"]\n'
            + 'resolve = { "origin.test" = "127.0.0.1" }\n',
        )
        tries = {
            "name": f"curl -sS --max-time 10 http://ORIGIN.test.:{port}/x",
            "literal": f"curl -sS --max-time 10 http://127.0.0.1:{port}/x",
            "short": f"curl -sS --max-time 10 http://127.1:{port}/x",
            "localhost": f"curl -sS --max-time 10 http://localhost:{port}/x",
            "socks": f"curl -sS --max-time 10 --socks5-hostname 127.0.0.1:3128 http://localhost:{port}/x",
            # the entry is `http://`: plain requests the proxy reads, never a tunnel to the same port
            "tunnel": f"curl -sS --max-time 10 -p http://origin.test:{port}/x",
            "socks-name": f"curl -sS --max-time 10 --socks5-hostname 127.0.0.1:3128 http://origin.test:{port}/x",
        }
        got = {}
        async with gateway(state_dir):
            client = await connect(state_dir, "agent", operator=False)
            try:
                for key, command in tries.items():
                    got[key] = (await client.request("exec", {"command": command}))["text"]
            finally:
                await client.close()
    assert "origin says hello" in got["name"], got["name"]
    for key in ("literal", "short", "localhost", "socks", "tunnel", "socks-name"):
        assert "origin says hello" not in got[key], (key, got[key])


async def test_class2_an_egress_allow_always_of_one_agent_is_not_anothers(state_dir: Path) -> None:
    """(Held.) Agent main's host run asks for a name; the operator allows it always (saved for main). Agent
    ops's host run to the same name asks anew: what the operator approved for one principal is not
    another's, in the approvals file as in the live decision."""
    with origin() as served:
        port = served.port
        write_config(
            state_dir,
            FULL
            + "\n[agents.defaults.sandbox.egress]\n"
            + 'mode = "allowlist"\nask = true\nresolve = { "origin.test" = "127.0.0.1" }\n'
            + listed("ops"),
        )
        token = principals.mint(state_dir, "ops")
        command = {"command": f"curl -sS --max-time 60 http://origin.test:{port}/x"}
        async with gateway(state_dir):
            main = await connect(state_dir, "main", operator=False)
            ops = await connect(state_dir, "ops", operator=False, credential=token)
            operator = await connect(state_dir, "op")
            try:
                first = asyncio.ensure_future(main.request("exec", command))
                asked = await wait_until(lambda: _pending(operator))
                assert asked[0]["agentId"] == "main", asked[0]
                await operator.request("approve", {"id": asked[0]["id"], "decision": "allow-always"})
                assert "origin says hello" in (await first)["text"]
                second = asyncio.ensure_future(ops.request("exec", command))
                asked = await wait_until(lambda: _pending(operator))
                assert asked[0]["agentId"] == "ops", asked[0]
                await operator.request("approve", {"id": asked[0]["id"], "decision": "deny"})
                assert "origin says hello" not in (await second)["text"]
            finally:
                for client in (main, ops, operator):
                    await client.close()
