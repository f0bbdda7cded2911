"""Fresh attacker round 6, letter m: check-then-use and self-reference against the sandboxes' confinement
(bubblewrap binds, the workspace, egress) and the host's pinned runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import principals, sandbox
from engine.approvals.store import ApprovalsStore
from engine.protocol.frames import RemoteError
from engine.sandbox import SandboxManager, bwrap, docker_ops, set_default_manager
from engine.sandbox import manager as sandbox_manager
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.race import exchange_loop, tries
from tests.helpers.sandbox import build_test_image, remove_labelled

ALLOWLIST_ON_MISS = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


# A racer run inside the sandbox: renameat2(RENAME_EXCHANGE) of two names of its workspace, forever.
SANDBOX_RACER = (
    "import ctypes,os,sys;l=ctypes.CDLL(None);a,b=map(os.fsencode,sys.argv[1:3])\n"
    "while True: l.renameat2(-100,a,-100,b,2)"
)


def _bwrap_rw_config(binds: list[str]) -> str:
    quoted = ", ".join(f'"{b}"' for b in binds)
    return (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nworkspaceAccess = "rw"\n'
        f"[agents.defaults.sandbox.docker]\nbinds = [{quoted}]\n"
    )


async def _exec(client: Any, command: str, **params: Any) -> dict[str, Any]:
    result = await client.request("exec", {"command": command, "agentId": "main", **params})
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


@needs_bwrap
@pytest.mark.asyncio
async def test_class6_bind_source_relinked_by_the_sandbox_reaches_the_host_in_a_terminal(
    state_dir: Path, tmp_path: Path
) -> None:
    """docker.binds may only name a source inside the workspace (validate_binds, by realpath): so every
    allowed bind source is a directory the sandbox itself can replace. The check runs when the sandbox is
    started; a PTY command is a one-shot bwrap that binds the same source again *by path*, unchecked. The
    sandbox swaps `data` for a symlink to a host directory, and its next PTY command has that host
    directory mounted read-write at /data."""
    workspace = state_dir / "workspace"
    (workspace / "data").mkdir(parents=True)
    host_dir = tmp_path / "host-secret"
    host_dir.mkdir()
    (host_dir / "secret.txt").write_text("host-only-secret\n")
    write_config(state_dir, _bwrap_rw_config([f"{workspace}/data:/data"]))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                first = await _exec(client, "echo started; ls /data")
                assert first["status"] == "completed", first
                # The sandbox, in its own workspace (/workspace/data there): exchange the bind source with
                # a symlink to a host directory, atomically, in a loop (a background command of its own).
                race = f"python3 -c '{SANDBOX_RACER}' /workspace/data /workspace/evil"
                racer = await _exec(client, f"ln -s {host_dir} /workspace/evil && {race}", background=True)
                assert racer["status"] == "running", racer
                term: dict[str, Any] = {"_text": ""}
                refused = 0
                for attempts in tries(400):  # noqa: B007 (reported below)
                    try:
                        term = await _exec(
                            client,
                            "cat /data/secret.txt; echo pwned > /data/written-from-sandbox; echo done",
                            pty=True,
                        )
                    except RemoteError:
                        refused += 1
                        continue  # the check saw the link this time: try again
                    if (host_dir / "written-from-sandbox").exists():
                        break
                print(f"tries {attempts + 1}, refused by the check {refused}")
            finally:
                await client.close()
    finally:
        bwrap.remove_all()
    leaked = "host-only-secret" in term["_text"]
    written = (host_dir / "written-from-sandbox").exists()
    assert not leaked and not written, term["_text"]


async def _approved_run(
    state: Path,
    command: str,
    cwd: Path,
    decision: str = "allow-once",
    before_approve: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Agent `main` asks for `command` in `cwd`; an attached operator approves it; the exec's details."""
    write_config(state, ALLOWLIST_ON_MISS)
    async with gateway(state):
        operator = await connect(state)
        agent = await connect(state, "agent", operator=False)
        try:
            await operator.request("approvals.attach", {})
            run = asyncio.ensure_future(
                agent.request("exec", {"command": command, "agentId": "main", "workdir": str(cwd)})
            )

            async def asked() -> list[dict[str, Any]]:
                page = await operator.request("approvals.pending", {})
                rows: list[dict[str, Any]] = page["approvals"]
                return rows

            rows = await wait_until(asked)
            if before_approve is not None:
                before_approve()
            await operator.request("approve", {"id": rows[0]["id"], "decision": decision})
            result = await asyncio.wait_for(run, 60)
        finally:
            await agent.close()
            await operator.close()
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


@pytest.mark.asyncio
async def test_class8_python_x_skips_the_first_line_but_the_sealed_copy_runs_it(
    state_dir: Path, tmp_path: Path
) -> None:
    """`python3 -x s.py` never runs the script's first line (Python's own option: skip a non-Python first
    line). An agent-writable script runs from its sealed copy through PY_LOADER (`python3 -x -c LOADER
    s.py`), where `-x` means nothing: the copy is compiled whole, so the line the approver knows Python
    skips runs."""
    work = tmp_path / "w"
    work.mkdir()
    os.chmod(work, 0o777)  # a tree the agent can write (under a root gateway, root-only files run by path)
    script = work / "s.py"
    marker = tmp_path / "first-line-ran"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')  # -x: never run\nprint('body ran')\n")
    details = await _approved_run(state_dir, "python3 -x s.py", work)
    assert "body ran" in details["_text"], details
    assert not marker.exists(), "the line `python3 -x` skips ran"


@pytest.mark.asyncio
async def test_class8_a_sealed_bash_copy_takes_the_branch_a_sourced_script_takes(
    state_dir: Path, tmp_path: Path
) -> None:
    """`bash s.sh` of an agent-writable script runs `bash -c '. /proc/self/fd/N' s.sh`: `$0` is kept, but
    `${BASH_SOURCE[0]}` is the copy's path, so bash's own "am I sourced?" idiom (`BASH_SOURCE[0] != $0`)
    answers yes. The approver reads a script whose sourced-only branch never runs under `bash s.sh`; it
    runs."""
    work = tmp_path / "w"
    work.mkdir()
    os.chmod(work, 0o777)
    marker = tmp_path / "sourced-branch-ran"
    (work / "s.sh").write_text(
        "#!/bin/bash\n"
        f'if [[ "${{BASH_SOURCE[0]}}" != "$0" ]]; then : > {marker}; return 0; fi\n'
        "echo main ran\n"
    )
    details = await _approved_run(state_dir, "bash s.sh", work)
    assert "main ran" in details["_text"] and not marker.exists(), details["_text"]


@pytest.mark.asyncio
async def test_class6_a_perl_script_first_read_is_by_path_and_a_rename_over_reaches_it(
    state_dir: Path, tmp_path: Path
) -> None:
    """SECURITY.md: "The first read of every script, and every run of it, is the sealed copy". For sh and
    Python it is; other readers (perl, node, ruby, …) get the script's own path (verified.read_words) and
    the pinned view binds the verified bytes there. Linux detaches a bind whose mountpoint is renamed over
    from another namespace, so a racer exchanging the approved script with another file makes perl's first
    read the other file: an allow-always for `perl s.pl` runs code nobody approved."""
    work = tmp_path / "w"
    work.mkdir()
    os.chmod(work, 0o777)
    marker = tmp_path / "evil-ran"
    (work / "s.pl").write_text('print "approved\\n";\n')
    (work / "evil.pl").write_text(f'open(my $f, ">", "{marker}"); print "evil\\n";\n')
    write_config(state_dir, ALLOWLIST_ON_MISS)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        agent = await connect(state_dir, "agent", operator=False)
        try:
            await operator.request("approvals.attach", {})
            params = {"command": "perl s.pl", "agentId": "main", "workdir": str(work)}
            run = asyncio.ensure_future(agent.request("exec", params))

            async def asked() -> list[dict[str, Any]]:
                page = await operator.request("approvals.pending", {})
                rows: list[dict[str, Any]] = page["approvals"]
                return rows

            rows = await wait_until(asked)
            await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-always"})
            first = await asyncio.wait_for(run, 60)
            assert "approved" in first["text"], first
            await operator.request("approvals.detach", {})
            with exchange_loop(str(work / "s.pl"), str(work / "evil.pl")):
                for _ in tries(200):
                    with contextlib.suppress(RemoteError):
                        await agent.request("exec", params)
                    if marker.exists():
                        break
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), "a file nobody approved ran as the approved perl script"


# --- tried and held: regression tests ------------------------------------------------------------------


BWRAP_PLAIN = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
)


@needs_bwrap
@pytest.mark.asyncio
async def test_held_a_bind_source_that_is_a_link_when_checked_is_refused(
    state_dir: Path, tmp_path: Path
) -> None:
    """The static form of the bind attack: a bind source inside the workspace that already leads out when
    the command is decided is refused by its realpath (only the swap after the check gets through)."""
    workspace = state_dir / "workspace"
    workspace.mkdir(parents=True)
    host_dir = tmp_path / "host-secret"
    host_dir.mkdir()
    (host_dir / "secret.txt").write_text("host-only-secret\n")
    os.symlink(host_dir, workspace / "data")
    write_config(state_dir, _bwrap_rw_config([f"{workspace}/data:/data"]))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                with pytest.raises(RemoteError, match="outside allowed roots"):
                    await _exec(client, "cat /data/secret.txt", pty=True)
            finally:
                await client.close()
    finally:
        bwrap.remove_all()


@needs_bwrap
@pytest.mark.asyncio
async def test_held_host_wide_proc_files_and_fchmodat2_setuid_are_refused_in_bwrap(state_dir: Path) -> None:
    """Two host-wide writes a root gateway's bwrap sandbox (uid 0, no capabilities) might still make:
    IRQ affinity (/proc/irq checks no capability, only the mode) is read-only under bwrap's own /proc; and
    fchmodat2 (Linux 6.6, a syscall newer than the filter's first list) cannot set S_ISUID."""
    write_config(state_dir, BWRAP_PLAIN)
    probe = (
        "import ctypes, os, glob\n"
        "for p in ['/proc/irq/default_smp_affinity', *glob.glob('/proc/irq/*/smp_affinity')][:3]:\n"
        "    try:\n"
        "        v = open(p).read()\n"
        "        open(p, 'w').write(v)\n"
        "        print('WROTE', p)\n"
        "    except OSError as e:\n"
        "        print('refused', p, e.errno)\n"
        "open('/workspace/f', 'w').close()\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "rc = libc.syscall(452, -100, b'/workspace/f', 0o4755, 0)\n"
        "print('fchmodat2', rc, ctypes.get_errno(), oct(os.stat('/workspace/f').st_mode))\n"
    )
    (state_dir / "probe.py").write_text(probe)
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                out = await _exec(client, f"python3 -c {shlex.quote(probe)}")
            finally:
                await client.close()
    finally:
        bwrap.remove_all()
    text = out["_text"]
    assert "fchmodat2" in text, text
    assert "WROTE" not in text, text
    mode = text.split("fchmodat2", 1)[1].split()[2]
    assert int(mode, 8) & 0o6000 == 0, text


@pytest.mark.parametrize("made_before", [False, True], ids=["new", "made-by-an-older-exechost"])
@pytest.mark.asyncio
async def test_class6_docker_restart_mounts_a_bind_source_swapped_after_the_decision(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made_before: bool
) -> None:
    """The Docker form of the bind attack. A stopped container is started again (`docker start`, which
    resolves every bind source by path then) with no check of the binds: only the decision checked them,
    by realpath. The racer exchanging `data` with a link is what any other sandbox of the agent mounting
    the same rw workspace (a session scope) can run; the stop is what a container's own commands can
    cause (killing its supervisor ends its init).

    Held by refusal (docs/SECURITY.md): Docker takes a bind source only by path, so a source inside the
    workspace the sandbox writes cannot be pinned by any check; the config is refused with its key named,
    and no container that mounts such a source is ever created or started again. `made_before`: the
    container was created before that refusal (an older exechost; the decision's check stands aside too),
    so the attack runs as first written, and the start of the stopped container must refuse it."""
    image = build_test_image()
    run_id = f"m6-{os.getpid()}"
    workspace = state_dir / "workspace"
    (workspace / "data").mkdir(parents=True)
    host_dir = tmp_path / "host-secret"
    host_dir.mkdir()
    os.chmod(host_dir, 0o777)
    (host_dir / "secret.txt").write_text("host-only-secret\n")
    os.symlink(host_dir, workspace / "evil")
    write_config(
        state_dir,
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nworkspaceAccess = "rw"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\npool = 0\n'
        f'binds = ["{workspace}/data:/data"]\n',
    )
    manager = SandboxManager(extra_labels={"exechost.test": run_id})
    set_default_manager(manager)
    command = "cat /data/secret.txt; echo pwned > /data/written-from-sandbox; echo done"
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                if made_before:
                    # The decision's check stands aside throughout, so what holds is the start's own.
                    monkeypatch.setattr(sandbox, "docker_writable", lambda settings, lay: [])
                    with monkeypatch.context() as older:
                        older.setattr(sandbox_manager, "docker_writable", lambda settings, lay: [])
                        first = await _exec(client, "ls /data; echo started")
                    assert "started" in first["_text"], first
                else:
                    with pytest.raises(RemoteError, match=r"docker\.binds.*inside the workspace"):
                        await _exec(client, "ls /data; echo started")
                with exchange_loop(str(workspace / "data"), str(workspace / "evil")):
                    for _ in tries(60):
                        for c in docker_ops.list_sandboxes(f"exechost.test={run_id}", every_install=True):
                            docker_ops.client().containers.get(c["Id"]).stop(timeout=1)
                        with contextlib.suppress(RemoteError):
                            await _exec(client, command)
                        if (host_dir / "written-from-sandbox").exists():
                            break
            finally:
                await client.close()
    finally:
        set_default_manager(None)
        remove_labelled(run_id)
    assert not (host_dir / "written-from-sandbox").exists(), "a host dir was mounted read-write"


@pytest.mark.asyncio
async def test_class8_python_under_a_linked_name_re_execs_the_agents_link(
    state_dir: Path, tmp_path: Path
) -> None:
    """`.venv/bin/python x.py` where the venv's python is the agent's link to the system python: the run
    is pinned to the real path (a link is the agent's to re-point), but started as `exec -a
    .venv/bin/python` so the program sees its typed name. Python takes sys.executable from argv[0], so
    the approved script's `subprocess.run([sys.executable, …])` (multiprocessing's spawn, a re-exec of
    itself, pip's own re-runs) goes through the link again; the agent re-points it meanwhile and its own
    program runs as the approved interpreter's child."""
    work = tmp_path / "w"
    (work / ".venv" / "bin").mkdir(parents=True)
    os.chmod(work, 0o777)
    real = os.path.realpath("/usr/bin/python3")
    link = work / ".venv" / "bin" / "python"
    os.symlink(real, link)
    go, done, marker = tmp_path / "go", tmp_path / "done", tmp_path / "evil-ran"
    (work / "x.py").write_text(
        "import os, subprocess, sys, time\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.01)\n"
        "subprocess.run([sys.executable, '-c', 'print(1)'])\n"
        f"open({str(done)!r}, 'w').close()\n"
    )
    evil = work / "evil"
    evil.write_text(f"#!/bin/sh\n: > {marker}\n")
    os.chmod(evil, 0o755)
    write_config(state_dir, ALLOWLIST_ON_MISS)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        agent = await connect(state_dir, "agent", operator=False)
        try:
            await operator.request("approvals.attach", {})
            params = {
                "command": ".venv/bin/python x.py",
                "agentId": "main",
                "workdir": str(work),
                "yieldMs": 10,
            }
            run = asyncio.ensure_future(agent.request("exec", params))

            async def asked() -> list[dict[str, Any]]:
                page = await operator.request("approvals.pending", {})
                rows: list[dict[str, Any]] = page["approvals"]
                return rows

            rows = await wait_until(asked)
            await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-once"})
            started = await asyncio.wait_for(run, 60)
            assert started["details"]["status"] == "running", started
            # The agent, meanwhile (any writer of its tree): the venv's python is now its own program.
            os.symlink(evil, work / "relink")
            os.replace(work / "relink", link)
            go.touch()
            await wait_until(lambda: done.exists(), timeout=30)
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), "the agent's program ran as the approved interpreter's re-exec"


@pytest.mark.asyncio
async def test_class6_a_shebang_interpreter_reached_through_the_agents_link_is_run_by_that_link(
    state_dir: Path, tmp_path: Path
) -> None:
    """`./tool` whose `#!` names the agent's link to the system python (`#!/w/venv/bin/python`, as every
    venv's scripts do). The content binder binds the interpreter by its real path (root's, digest cached)
    but the run names it by the shebang's word, the link: re-pointed after the ask, the approval runs the
    agent's program, and the spawn's check (the real file's digest) never notices."""
    work = tmp_path / "w"
    (work / "venv" / "bin").mkdir(parents=True)
    os.chmod(work, 0o777)
    link = work / "venv" / "bin" / "python"
    os.symlink(os.path.realpath("/usr/bin/python3"), link)
    tool = work / "tool"
    tool.write_text(f"#!{link}\nprint('approved tool ran')\n")
    os.chmod(tool, 0o755)
    marker = tmp_path / "evil-ran"
    evil = work / "evil"
    evil.write_text(f"#!/bin/sh\n: > {marker}\n")
    os.chmod(evil, 0o755)

    def repoint() -> None:  # what the agent does while the operator reads the ask
        os.symlink(evil, work / "relink")
        os.replace(work / "relink", link)

    details = await _approved_run(state_dir, "./tool", work, before_approve=repoint)
    assert not marker.exists(), details["_text"]


@pytest.mark.asyncio
async def test_held_a_wrapper_reached_through_the_agents_link_is_checked_at_the_spawn(
    state_dir: Path, tmp_path: Path
) -> None:
    """The executable form of the shebang-link attack holds: `./wrap sh s.sh` with `wrap` the agent's link
    to /usr/bin/nice, re-pointed after the ask, is refused as approval-stale (pinned executables are
    re-resolved at the spawn; only a #! interpreter is not)."""
    work = tmp_path / "w"
    work.mkdir()
    os.chmod(work, 0o777)
    (work / "s.sh").write_text("echo approved\n")
    os.symlink("/usr/bin/nice", work / "wrap")
    marker = tmp_path / "evil-ran"
    (work / "evil").write_text(f"#!/bin/sh\n: > {marker}\n")
    os.chmod(work / "evil", 0o755)

    def repoint() -> None:
        os.symlink(work / "evil", work / "relink")
        os.replace(work / "relink", work / "wrap")

    details = await _approved_run(state_dir, "./wrap sh s.sh", work, before_approve=repoint)
    assert not marker.exists()
    assert "approval-stale" in details["_text"], details["_text"]


@pytest.mark.asyncio
async def test_class8_a_pth_file_in_the_operators_user_site_runs_in_an_approved_python(
    state_dir: Path, tmp_path: Path
) -> None:
    """Python imports every `.pth` line starting with `import` from the user's site-packages
    (`~/.local/lib/pythonX.Y/site-packages`) at startup, before the script. exechost trusts the operator's
    home like ~/.gitconfig but binds only a short list read-only in the host view; the user site is not on
    it. An allowlisted writer (`tee`) plants a .pth there, and a `python3 x.py` the operator approved for
    good (bound to x.py's bytes) runs the agent's code at its next, unasked, run."""
    home = Path(os.environ["HOME"])
    site_dir = subprocess.run(
        ["python3", "-c", "import site; print(site.getusersitepackages())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert site_dir.startswith(str(home)), site_dir
    work = tmp_path / "w"
    work.mkdir()
    (work / "x.py").write_text("print('approved script ran')\n")
    marker = tmp_path / "pth-ran"
    write_config(state_dir, ALLOWLIST_ON_MISS)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/tee", arg_pattern=None)
    store.add_allowlist("main", "/usr/bin/mkdir", arg_pattern=None)
    first = await _approved_run(state_dir, "python3 x.py", work, decision="allow-always")
    assert "approved script ran" in first["_text"], first
    pth = f"import os; open({str(marker)!r}, 'w').close()"
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            made = await _exec(agent, f"mkdir -p {site_dir}")
            assert made["status"] == "completed", made["_text"]
            planted = await _exec(agent, f"tee {site_dir}/zz.pth <<'EOF'\n{pth}\nEOF")
            assert planted["status"] == "completed", planted["_text"]
            again = await _exec(agent, "python3 x.py", workdir=str(work))
        finally:
            await agent.close()
    assert "approved script ran" in again["_text"], again
    assert not marker.exists(), "a .pth the agent planted ran in an approved python"


@pytest.mark.asyncio
async def test_class6_files_of_an_unparsed_command_are_bound_from_the_wrong_directory(
    state_dir: Path, tmp_path: Path
) -> None:
    """Text that fails the analysis (`cd` is a builtin it does not model) runs whole, and the files it names
    are "checked by digest just before the spawn". They are resolved against the decision's cwd, but the
    text cd's first: the ask lists `<cwd>/s.sh … agent-writable: runs from a sealed copy`, and what runs is
    `<cwd>/sub/s.sh`, checked nowhere, rewritten after the ask."""
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    os.chmod(work, 0o777)
    (work / "s.sh").write_text("echo decoy\n")
    (work / "sub" / "s.sh").write_text("echo approved\n")
    marker = tmp_path / "evil-ran"

    def rewrite() -> None:  # the agent, while the operator reads the ask
        (work / "sub" / "s.sh").write_text(f": > {marker}\n")

    await _approved_run(state_dir, "cd sub && sh s.sh", work, before_approve=rewrite)
    assert not marker.exists(), "a script nobody saw ran"


@pytest.mark.asyncio
async def test_class8_the_ask_names_where_a_linked_script_imports_from(
    state_dir: Path, tmp_path: Path
) -> None:
    """Imports are not bound, so the ask must at least name where they come from ("x.py can import code
    from N agent-writable Python files under ../other/"). Python's sys.path[0] is the directory of the
    script's real path (and the sealed copy runs under that real path too), but the note scans beside the
    link: for `python3 link.py` it names nothing, and the module the approved script imports is changed
    after the ask unseen."""
    other, work = tmp_path / "other", tmp_path / "w"
    other.mkdir()
    work.mkdir()
    os.chmod(other, 0o777)
    os.chmod(work, 0o777)
    (other / "x.py").write_text("import helper_m6\n")
    (other / "helper_m6.py").write_text("print('helper')\n")
    os.symlink(other / "x.py", work / "link.py")
    write_config(state_dir, ALLOWLIST_ON_MISS)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir)
        try:
            asked = await _exec(agent, "python3 link.py", workdir=str(work))
            assert asked["status"] == "approval-pending", asked
            page = await operator.request("approvals.pending", {})
        finally:
            await agent.close()
            await operator.close()
    shown = json.dumps(page["approvals"])
    assert str(other) in shown or "../other" in shown, shown


@needs_bwrap
@pytest.mark.asyncio
async def test_class6_a_sandbox_started_again_binds_a_source_another_scope_swapped(
    state_dir: Path, tmp_path: Path
) -> None:
    """The start path of the same race, no PTY needed: with `scope = "session"` and `workspaceAccess =
    "rw"` every session's sandbox mounts the agent workspace. Session b runs the racer; session a ends its
    own sandbox (its supervisor killed) and its next command starts a new one: validate_docker (realpath)
    then bwrap, which resolves the source again."""
    workspace = state_dir / "workspace"
    (workspace / "data").mkdir(parents=True)
    host_dir = tmp_path / "host-secret"
    host_dir.mkdir()
    write_config(
        state_dir,
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nscope = "session"\n'
        'workspaceAccess = "rw"\n'
        f'[agents.defaults.sandbox.docker]\nbinds = ["{workspace}/data:/data"]\n',
    )
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                first = await _exec(client, "echo a", sessionKey="agent:main:a")
                assert first["status"] == "completed", first
                race = f"python3 -c '{SANDBOX_RACER}' /workspace/data /workspace/evil"
                racer = await _exec(
                    client,
                    f"ln -s {host_dir} /workspace/evil && {race}",
                    sessionKey="agent:main:b",
                    background=True,
                )
                assert racer["status"] == "running", racer
                for _ in tries(200):
                    with contextlib.suppress(RemoteError):  # its own end: the command may not report
                        await _exec(client, "kill -9 -1", sessionKey="agent:main:a")
                    with contextlib.suppress(RemoteError):  # the check saw the link: try again
                        await _exec(
                            client, "echo pwned > /data/written-from-sandbox", sessionKey="agent:main:a"
                        )
                    if (host_dir / "written-from-sandbox").exists():
                        break
            finally:
                await client.close()
    finally:
        bwrap.remove_all()
    assert not (host_dir / "written-from-sandbox").exists(), "a restarted sandbox got a host dir read-write"


@pytest.mark.asyncio
async def test_class6_an_external_config_file_is_writable_from_the_host_view(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host view hides the state dir and binds the operator's trusted configs read-only, but the
    gateway's own config may live elsewhere (`--config FILE`, `$EXECHOST_CONFIG`, README) and is read live
    (LiveConfig: the config as it is on disk now). An allowlisted writer rewrites it in place (owner and
    mode kept, so the file checks pass) and the next command runs under `security = "full"`."""
    home = tmp_path / "opconf"
    home.mkdir(mode=0o700)
    config = home / "exechost.toml"
    config.write_text(ALLOWLIST_ON_MISS)
    os.chmod(config, 0o600)
    monkeypatch.setenv("EXECHOST_CONFIG", str(config))
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee", arg_pattern=None)
    marker = tmp_path / "ran-unasked"
    full = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"'
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            before = await _exec(agent, f"touch {marker}")
            assert before["status"] == "approval-pending" and not marker.exists(), before
            wrote = await _exec(agent, f"tee {config} <<'EOF'\n{full}\nEOF")
            assert wrote["status"] == "completed", wrote["_text"]
            await _exec(agent, f"touch {marker}")
        finally:
            await agent.close()
    assert not marker.exists(), "the agent rewrote the gateway's config and ran a command unasked"


@needs_bwrap
@pytest.mark.asyncio
async def test_class8_the_gateway_runs_a_program_an_agent_planted_on_its_path(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway looks its own helpers up on its PATH at use: `prlimit` for every PTY command of a bwrap
    sandbox (bwrapterm.terminal), `cc` for the static helpers, `busybox` for the bin mount. A PATH that starts
    in the operator's home (~/.local/bin, ~/.cargo/bin, ~/.pyenv/shims: this machine's own PATH starts
    with /root/.cargo/bin) is a directory the host view leaves writable. Allowlisted `mkdir`, `cp` and
    `tee` (tee keeps the copied file's mode) plant `prlimit` there; the next sandboxed PTY command runs it
    outside any sandbox, with nobody asked."""
    home_bin = Path(os.environ["HOME"]) / ".local" / "bin"
    monkeypatch.setenv("PATH", f"{home_bin}:{os.environ['PATH']}")
    marker = tmp_path / "planted-prlimit-ran"
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    for program in ("/usr/bin/mkdir", "/usr/bin/cp", "/usr/bin/tee"):
        store.add_allowlist("main", program, arg_pattern=None)
    write_config(state_dir, ALLOWLIST_ON_MISS)
    planted = f'#!/bin/sh\n: > {marker}\nexec /usr/bin/prlimit "$@"'
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            for command in (
                f"mkdir -p {home_bin}",
                f"cp /usr/bin/true {home_bin}/prlimit",
                f"tee {home_bin}/prlimit <<'EOF'\n{planted}\nEOF",
            ):
                done = await _exec(agent, command)
                assert done["status"] == "completed", done["_text"]
        finally:
            await agent.close()
    assert not marker.exists()
    write_config(state_dir, BWRAP_PLAIN)  # the same agent, sandboxed (another agent's config alike)
    try:
        async with gateway(state_dir):
            agent = await connect(state_dir, "agent", operator=False)
            try:
                term = await _exec(agent, "echo in the sandbox", pty=True)
            finally:
                await agent.close()
    finally:
        bwrap.remove_all()
    assert "in the sandbox" in term["_text"], term["_text"]
    assert not marker.exists(), "the gateway ran a program the agent planted on its PATH"


@needs_bwrap
@pytest.mark.asyncio
async def test_sandbox_workspaces_under_a_configured_root_are_another_agents_to_read(
    state_dir: Path, tmp_path: Path
) -> None:
    """The host view hides the state dir, where sandbox workspaces live by default. `workspaceRoot` (a
    documented key) moves them anywhere, and nothing hides them there: agent main's host command reads
    what agent bob's sandbox wrote (and could write into it: the sandbox's files, its bind sources)."""
    root = tmp_path / "sbx"
    write_config(
        state_dir,
        '[tools.exec]\nhost = "auto"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[agents.defaults.sandbox]\nworkspaceRoot = "{root}"\nbackend = "bwrap"\n'
        '[[agents.list]]\nid = "bob"\n[agents.list.sandbox]\nmode = "all"\n'
        '[[agents.list]]\nid = "main"\n',
    )
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/grep", arg_pattern=None)
    principals.mint(state_dir, "bob")
    try:
        async with gateway(state_dir):
            bob = await connect(state_dir, "bob", operator=False, agent="bob")
            main = await connect(state_dir, "main-agent", operator=False)
            try:
                wrote = await bob.request(
                    "exec", {"command": "echo bob-private-note > /workspace/notes.txt", "agentId": "bob"}
                )
                assert wrote["details"]["status"] == "completed", wrote
                read = await _exec(main, f"grep -r bob-private {root}")
            finally:
                await bob.close()
                await main.close()
    finally:
        bwrap.remove_all()
    assert read["status"] == "completed", read["_text"]
    assert "bob-private-note" not in read["_text"], read["_text"]
