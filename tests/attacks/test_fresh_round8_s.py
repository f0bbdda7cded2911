"""Fresh round 8, attacker s: exechost's emulation of interpreters' option parsing (class 5), sealed copies of
approved scripts and what re-reads them (classes 6 and 8), and exechost's own durable state."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import ALLOWLIST
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import claim_state, connect, gateway, wait_until, write_config

pytestmark = needs_bwrap


@pytest.fixture
def tree() -> Iterator[Path]:
    """The agent's work tree: outside the state dir and every workspace, owned by the gateway's user."""
    path = Path(tempfile.mkdtemp(prefix="r8s-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _always_then_again(
    state: Path, tree: Path, command: str, ran: Path, rewrite: Any
) -> dict[str, Any] | None:
    """Ask for `command`, have the operator answer allow-always, wait for the approved run (it makes `ran`),
    let the agent `rewrite()` its files, and run `command` again: its result's details (None when
    allow-always is not offered: nothing can be saved, the operator decides each run)."""
    claim_state(state)  # the operator's CLI, before it writes a config there
    write_config(state, ALLOWLIST)
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request(
                "exec", {"command": command, "workdir": str(tree), "agentId": "main"}
            )
            assert first["details"]["status"] == "approval-pending", first["text"]
            if "allow-always" not in first["details"]["allowedDecisions"]:
                return None
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            await wait_until(ran.exists, timeout=60)
            rewrite()
            again = await client.request(
                "exec", {"command": command, "workdir": str(tree), "agentId": "main"}
            )
        finally:
            await client.close()
    details: dict[str, Any] = again["details"]
    details["_text"] = again["text"]
    return details


def _unapproved_ran(details: dict[str, Any] | None) -> bool:
    return (
        details is not None
        and details["status"] == "completed"
        and "UNAPPROVED" in details.get("aggregated", "")
    )


async def test_class5_shebang_preload_of_an_executable_script_is_not_bound(
    tmp_path: Path, tree: Path
) -> None:
    """Was open (fixed on this branch, bindproof): a `#!/usr/bin/node --require=./hook.js` line preloads
    hook.js, but the binder reads a #! line's option only through bindproof (which finds a FILE source
    and proves it bound), never through loaded_values as it does `node -r ./hook.js s.js` in the argv:
    hook.js is not bound, allow-always is offered, and a rewritten hook.js runs unasked under the saved
    approval."""
    script = tree / "s.js"
    script.write_text("#!/usr/bin/node --require=./hook.js\nconsole.log('approved s.js')\n")
    os.chmod(script, 0o755)
    hook = tree / "hook.js"
    hook.write_text("require('fs').writeFileSync('ran', 'x')\n")

    def rewrite() -> None:
        hook.write_text("console.log('hook UNAPPROVED')\n")

    details = await _always_then_again(tmp_path, tree, "./s.js", tree / "ran", rewrite)
    assert not _unapproved_ran(details), details


async def test_class5_shebang_dash_m_runs_a_module_the_approval_never_bound(
    tmp_path: Path, tree: Path
) -> None:
    """Was open (fixed on this branch, bindproof): a `#!/usr/bin/python3 -mevilmod` line makes python
    run the module evilmod (from the cwd, sys.path[0] under -m) and never the script; in the argv
    `python3 -m x` is a program from a search path (no allow-always), but a #! line's MODULE source is
    read by nobody: allow-always is offered bound to s.py's bytes, which never run, and a rewritten
    evilmod.py runs unasked."""
    script = tree / "s.py"
    script.write_text("#!/usr/bin/python3 -mevilmod\nprint('approved s.py')\n")
    os.chmod(script, 0o755)
    module = tree / "evilmod.py"
    module.write_text("import pathlib\npathlib.Path('ran').write_text('x')\n")

    def rewrite() -> None:
        module.write_text("print('evilmod UNAPPROVED')\n")

    details = await _always_then_again(tmp_path, tree, "./s.py", tree / "ran", rewrite)
    assert not _unapproved_ran(details), details


async def test_class5_perl_runs_the_interpreter_its_scripts_shebang_names(tmp_path: Path, tree: Path) -> None:
    """Was open (fixed on this branch, bindproof): `perl x.pl` execs the interpreter x.pl's own #! line
    names when that line does not say `perl` (perlrun: `#!./helper` runs ./helper x.pl); the binder
    reads a #! line only of an executable, never of a script operand: ./helper is not bound, allow-
    always is offered, and a rewritten helper runs unasked under the saved approval."""
    (tree / "x.pl").write_text('#!./helper\nprint "approved x.pl\\n";\n')
    helper = tree / "helper"
    helper.write_text("#!/bin/sh\necho v1 > ran\n")
    os.chmod(helper, 0o755)

    def rewrite() -> None:
        helper.write_text("#!/bin/sh\necho helper UNAPPROVED\n")

    details = await _always_then_again(tmp_path, tree, "perl x.pl", tree / "ran", rewrite)
    assert not _unapproved_ran(details), details


def _cc(out: Path, source: str, *flags: str) -> None:
    """Compile `source` (C) to `out`; the test is skipped where no C compiler can."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    src = out.with_suffix(".c")
    src.write_text(source)
    done = subprocess.run([cc, *flags, "-o", str(out), str(src)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cc failed: {done.stderr[-300:]}")
    src.unlink()


async def test_class6_an_approved_elfs_own_loader_is_not_bound(tmp_path: Path, tree: Path) -> None:
    """Was open (fixed on this branch, bindproof reads PT_INTERP from the bound bytes): an ELF's
    PT_INTERP is the #! line of a binary: the kernel maps the loader it names by path at exec, before a
    byte of the program runs. The binder follows a #! interpreter down its chain and runs it by its
    verified path, but an ELF's loader (`-Wl,--dynamic-linker=/w/ld.so`) is neither bound nor pinned:
    allow-always on ./prog holds while the agent replaces /w/ld.so, which runs unasked."""
    if not os.path.exists("/lib64/ld-linux-x86-64.so.2"):
        pytest.skip("x86-64 only (the loader copied and the raw syscalls)")
    loader = tree / "ld.so"
    _cc(tree / "prog", '#include <stdio.h>\nint main(void){fopen("ran","w");puts("prog");return 0;}\n',
        f"-Wl,--dynamic-linker={loader}")  # fmt: skip
    shutil.copy(os.path.realpath("/lib64/ld-linux-x86-64.so.2"), loader)
    # The agent's loader: raw syscalls, no libc, position-independent (the kernel maps it beside prog).
    evil = (
        'void _start(void){static const char m[]="loader UNAPPROVED\\n";long r;'
        '__asm__ volatile("syscall":"=a"(r):"a"(1),"D"(1),"S"(m),"d"(sizeof m-1):"rcx","r11","memory");'
        '__asm__ volatile("syscall"::"a"(231),"D"(0));for(;;);}\n'
    )
    _cc(tree / "evil", evil, "-nostdlib", "-static-pie", "-fPIE")

    def rewrite() -> None:
        os.replace(tree / "evil", loader)

    details = await _always_then_again(tmp_path, tree, "./prog", tree / "ran", rewrite)
    assert not _unapproved_ran(details), details


def _system_script() -> str:
    for path in ("/usr/bin/which.debianutils", "/usr/bin/ldd", "/usr/bin/zdiff", "/usr/bin/gzexe"):
        if os.path.isfile(path) and os.stat(path).st_uid == 0:
            return path
    pytest.skip("no root-owned shell script found")


async def test_class5_bash_plus_s_reads_its_program_from_stdin(tmp_path: Path, tree: Path) -> None:
    """Was open (fixed on this branch): bash reads `+s` as `-s` (shell.c sets read_from_stdin for either
    sign), so `bash +s /usr/bin/ldd` runs its program from stdin with the file as $1, while interpoptions
    took `+s` for an option turned off and the file for the program: allow-always bound the root-owned
    script's digest, and a background run under it ran whatever the agent wrote to its stdin."""
    command = f"bash +s {_system_script()}"
    claim_state(tmp_path)  # the operator's CLI, before it writes a config there
    write_config(tmp_path, ALLOWLIST)
    marker = tree / "marker"
    async with gateway(tmp_path):
        client = await connect(tmp_path)
        try:
            params = {"command": command, "workdir": str(tree), "agentId": "main"}
            first = await client.request("exec", params)
            assert first["details"]["status"] == "approval-pending", first["text"]
            if "allow-always" not in first["details"]["allowedDecisions"]:
                return  # stdin is a program no digest holds: nothing can be saved
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            approvals = tmp_path / "exec-approvals.json"
            await wait_until(lambda: approvals.exists() and "=command:" in approvals.read_text())
            again = await client.request("exec", {**params, "background": True})
            if again["details"]["status"] == "running":
                sid = again["details"]["sessionId"]
                code = f"echo UNAPPROVED > {marker}\n"
                await client.request(
                    "process", {"action": "write", "sessionId": sid, "data": code, "eof": True}
                )

                async def ended() -> bool:
                    polled = await client.request("process", {"action": "poll", "sessionId": sid})
                    return polled["details"]["status"] != "running"

                await wait_until(ended, timeout=60)
        finally:
            await client.close()
    assert again["details"]["status"] != "running" or not marker.exists(), again["text"]


# Two commands whose `=command:` patterns are equal (sha256 of text + binding, cut to 64 bits), found
# offline by a distinguished-point rho search (~7e9 sha256, ~10 CPU-minutes of C with SHA-NI): the first is an
# empty listing, the second deletes a directory. Bound to cwd `/` and no env (the binding's only parts
# here: find is a system binary, so no content digest joins it).
_BENIGN = "find /tmp/r8s-none -name _ekvew8GzCD"
_HARMFUL = "find /tmp/r8sv -delete -name xlYee3ZRMXC"
_VICTIM = Path("/tmp/r8sv")


async def test_class2_a_64_bit_command_hash_collision_runs_another_command_unasked(tmp_path: Path) -> None:
    from engine.commands.durable import command_hash_pattern

    empty_env = "cwd=/\nenv=" + hashlib.sha256(b"").hexdigest()

    def digest(text: str) -> str:
        return hashlib.sha256(f"{text}\0{empty_env}".encode()).hexdigest()

    # Was open: the pattern kept 16 hex digits, and these two collide there; it now keeps the whole digest.
    assert digest(_BENIGN)[:16] == digest(_HARMFUL)[:16]
    assert command_hash_pattern(_BENIGN, empty_env) != command_hash_pattern(_HARMFUL, empty_env)
    shutil.rmtree(_VICTIM, ignore_errors=True)
    _VICTIM.mkdir()
    (_VICTIM / "keep").write_text("the operator's file\n")
    try:
        claim_state(tmp_path)  # the operator's CLI, before it writes a config there
        write_config(tmp_path, ALLOWLIST)
        async with gateway(tmp_path):
            client = await connect(tmp_path)
            try:
                first = await client.request("exec", {"command": _BENIGN, "workdir": "/", "agentId": "main"})
                assert first["details"]["status"] == "approval-pending", first["text"]
                await client.request(
                    "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
                )
                approvals = tmp_path / "exec-approvals.json"
                await wait_until(lambda: approvals.exists() and "=command:" in approvals.read_text())
                again = await client.request("exec", {"command": _HARMFUL, "workdir": "/", "agentId": "main"})
            finally:
                await client.close()
        assert again["details"]["status"] == "approval-pending", again["text"]
        assert (_VICTIM / "keep").exists()
    finally:
        shutil.rmtree(_VICTIM, ignore_errors=True)


async def test_class5_glob_expansion_lists_what_the_host_view_covers(
    tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: the glob was expanded in a bwrap that hid only the state dir, so the ask listed another
    agent's sandbox files; it is now expanded in the run's own host view (workspace roots covered)."""
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path))  # the gateway's config is this state dir's
    root = tree / "wsroot"
    (root / "agent-other").mkdir(parents=True)
    (root / "agent-other" / "secret-plan-q3.txt").write_text("theirs\n")
    work = tree / "work"
    work.mkdir()
    claim_state(tmp_path)  # the operator's CLI, before it writes a config there
    write_config(tmp_path, ALLOWLIST + f'\n[agents.defaults.sandbox]\nworkspaceRoot = "{root}"\n')
    async with gateway(tmp_path):
        agent = await connect(tmp_path, operator=False)
        try:
            params = {"command": f"ls {root}/*/*", "workdir": str(work), "agentId": "main"}
            answer = await agent.request("exec", params)
        finally:
            await agent.close()
    assert "secret-plan-q3" not in answer["text"], answer["text"]


# ---- attempts that did not work: kept as regressions


async def test_class5_argv_preload_is_bound_so_a_rewritten_hook_asks_again(
    tmp_path: Path, tree: Path
) -> None:
    """The counterpart of the #! preload above: given in the argv, `node -r ./hook.js s.js` binds hook.js
    (content.loaded_values), so the saved approval stops matching once hook.js changes."""
    (tree / "s.js").write_text("console.log('approved s.js')\n")
    hook = tree / "hook.js"
    hook.write_text("require('fs').writeFileSync('ran', 'x')\n")

    def rewrite() -> None:
        hook.write_text("console.log('hook UNAPPROVED')\n")

    details = await _always_then_again(tmp_path, tree, "node -r ./hook.js s.js", tree / "ran", rewrite)
    assert details is not None and details["status"] == "approval-pending", details


async def test_class5_node_resolving_a_missing_name_to_name_js_offers_no_allow_always(
    tmp_path: Path, tree: Path
) -> None:
    """`node app` runs app.js (node's main resolution adds the extension): the binder records `app` as
    absent, and bindproof refuses to call that bound, so only allow-once is offered."""
    (tree / "app.js").write_text("console.log('app.js')\n")
    claim_state(tmp_path)  # the operator's CLI, before it writes a config there
    write_config(tmp_path, ALLOWLIST)
    async with gateway(tmp_path):
        client = await connect(tmp_path)
        try:
            asked = await client.request(
                "exec", {"command": "node app", "workdir": str(tree), "agentId": "main"}
            )
        finally:
            await client.close()
    assert asked["details"]["status"] == "approval-pending", asked["text"]
    assert "allow-always" not in asked["details"]["allowedDecisions"]


def test_class5_a_shells_plus_c_is_not_read_as_a_file_run() -> None:
    """bash reads `+c` as `-c` too (the sign is ignored for c, s and l): the grammar must not take the
    word after `+c` for a script file it binds. It answers "unknown" (every named file bound whole, no
    allow-always); `+s` is the open case above."""
    from engine.commands.interpoptions import FILE, program_source

    source = program_source(["bash", "+c", "./x.sh"])
    assert source is not None and source.kind != FILE
