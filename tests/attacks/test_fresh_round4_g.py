"""Fresh attacker G, issue 27 round 4, class 3/4 "what runs without asking takes no influence the operator
did not grant": env keys, config and code found from the working directory, option spellings that change
which file a program reads, and what a sandboxed command inherits.

Every attack here is the agent's: it writes files in a directory it can write (its workspace), sends one
exec, and waits for the operator's answer; the operator answers the way the ask invites them to. A test
marked xfail(strict) still works today; the others are regression tests (attempts that failed, and attacks
closed since: the host view hides the state dir and makes the trusted configs read-only)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.socket.wire import ExecHostRequest, PromptRequest
from engine.approvals.store import ApprovalsStore
from engine.protocol.frames import OPERATOR_TOKEN_NAME, RemoteError, ensure_token
from engine.sandbox import bwrap
from engine.tools.exec_host import LocalExecHost
from engine.unixsock import PeerInfo
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import REPO, connect, gateway, wait_until, write_config
from tests.helpers.race import exchange_loop, tries


async def _always_then_rewrite(
    state: Path, cwd: Path, command: str, target: Path, benign: str, evil: str, then: str | None = None
) -> dict[str, Any]:
    """The agent asks for `command` while `target` holds `benign`; the operator reads it and answers
    allow-always; the approved run happens (it leaves `cwd/ran1`). Then the agent rewrites `target` to
    `evil` and sends the same command (or `then`) again: the exec's details (status, output)."""
    write_config(state, ALLOWLIST)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(benign)
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request("exec", {"command": command, "workdir": str(cwd)})
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return {**first["details"], "_text": first["text"]}  # not saveable: not this attack
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            await wait_until(lambda: (cwd / "ran1").exists())
            store = ApprovalsStore(state / "exec-approvals.json")
            assert any(e.source == "allow-always" for e in store.snapshot().entries("main"))
            target.write_text(evil)
            second = await client.request("exec", {"command": then or command, "workdir": str(cwd)})
        finally:
            await client.close()
    details: dict[str, Any] = second["details"]
    details["_text"] = second["text"]
    return details


def _saved_allow_always(state: Path) -> bool:
    entries = ApprovalsStore(state / "exec-approvals.json").snapshot().entries("main")
    return any(e.source == "allow-always" for e in entries)


def _ran_evil(details: dict[str, Any], cwd: Path) -> bool:
    return details["status"] == "completed" and (cwd / "pwned").exists()


# ---------------------------------------------------------------------------------------------- working


@pytest.mark.parametrize(
    "command",
    ["sed -n -fx.sed in.txt", "sed -n --file=x.sed in.txt", "awk -fx.sed in.txt"],
    ids=["sed-attached", "sed-long", "awk-attached"],
)
async def test_class5_sed_program_in_an_attached_option_is_not_bound(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    if command.startswith("awk"):
        benign = 'BEGIN { printf "" > "ran1" } { print }\n'
        evil = 'BEGIN { system("touch pwned") } { print }\n'
    else:
        benign = "w ran1\np\n"
        evil = "1e touch pwned\np\n"
    details = await _always_then_rewrite(state_dir, tmp_path, command, tmp_path / "x.sed", benign, evil)
    assert not _ran_evil(details, tmp_path), details["_text"]


# `-C /proc/self/…` (resolved in the gateway) is closed too: a word through /proc asks, never allow-always.
@pytest.mark.parametrize(
    ("command", "makefile"),
    [
        ("make --dir=sub", "sub/Makefile"),
        ("make -C a -C b", "a/b/Makefile"),
        ("make -sfx/e.mk", "x/e.mk"),
        ("make -C /proc/self/cwd/sub", "sub/Makefile"),
    ],
)
async def test_class5_make_options_spelled_as_make_reads_them_escape_the_tree_vet(
    state_dir: Path, tmp_path: Path, command: str, makefile: str
) -> None:
    benign = f"all:\n\t@touch {tmp_path}/ran1\n"
    evil = f"all:\n\t@touch {tmp_path}/pwned\n"
    details = await _always_then_rewrite(state_dir, tmp_path, command, tmp_path / makefile, benign, evil)
    assert not _ran_evil(details, tmp_path), details["_text"]


async def test_class4_cmake_script_mode_file_is_not_bound(state_dir: Path, tmp_path: Path) -> None:
    benign = f'file(WRITE {tmp_path}/ran1 "")\n'
    evil = f'file(WRITE {tmp_path}/pwned "")\n'
    details = await _always_then_rewrite(
        state_dir, tmp_path, "cmake -P x.cmake", tmp_path / "x.cmake", benign, evil
    )
    assert not _ran_evil(details, tmp_path), details["_text"]


async def test_class4_a_response_file_is_options_read_at_run_time(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "m.c").write_text("int main(void) { return 0; }\n")
    benign = "-o ran1\n"
    evil = '-o ran1 -wrapper /bin/sh,-c,touch${IFS}pwned;exec${IFS}"$0"${IFS}"$@"\n'
    details = await _always_then_rewrite(
        state_dir, tmp_path, "gcc @b.rsp -c m.c", tmp_path / "b.rsp", benign, evil
    )
    assert not _ran_evil(details, tmp_path), details["_text"]


@pytest.mark.skipif(shutil.which("npx") is None, reason="npm's npx is not installed")
async def test_class4_npx_runs_a_program_it_finds_in_the_tree(state_dir: Path, tmp_path: Path) -> None:
    hello = tmp_path / "node_modules" / ".bin" / "hello"
    hello.parent.mkdir(parents=True)
    hello.write_text("#!/bin/sh\n")
    hello.chmod(0o755)
    details = await _always_then_rewrite(
        state_dir,
        tmp_path,
        "npx --offline hello",
        hello,
        f"#!/bin/sh\ntouch {tmp_path}/ran1\n",
        f"#!/bin/sh\ntouch {tmp_path}/pwned\n",
    )
    assert not _ran_evil(details, tmp_path), details["_text"]


SAFE_ED = (
    ALLOWLIST
    + 'safeBins = ["ed", "sqlite3"]\n[tools.exec.safeBinProfiles.ed]\nbooleanFlags = ["-s"]\n'
    + ('[tools.exec.safeBinProfiles.sqlite3]\nbooleanFlags = ["-batch"]\n')
)


@pytest.mark.parametrize(
    "command",
    ["ed -s <<'EOF'\n!touch pwned\nq\nEOF", "sqlite3 <<'EOF'\n.shell touch pwned\nEOF"],
    ids=["ed", "sqlite3"],
)
async def test_class4_a_stdin_only_safe_bin_that_runs_commands(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    details = await attempt(state_dir, command, config=SAFE_ED, workdir=str(tmp_path))
    assert refused(details) or not (tmp_path / "pwned").exists(), details["_text"]


@pytest.mark.parametrize(
    ("first", "file", "then"),
    [
        ("pydoc3 json", "json.py", "pydoc3 evilmod"),
        ("ctest", "CTestTestfile.cmake", "ctest"),
        ("prove", "t/a.t", "prove"),
    ],
    ids=["pydoc3", "ctest", "prove"],
)
async def test_class4_programs_that_load_code_from_the_cwd_get_a_bare_path_entry(
    state_dir: Path, tmp_path: Path, first: str, file: str, then: str
) -> None:
    if shutil.which(first.split()[0]) is None:
        pytest.skip(f"{first.split()[0]} is not installed")
    ran1, pwned = tmp_path / "ran1", tmp_path / "pwned"
    code = {
        "json.py": f'open("{ran1}", "w")\n',
        "CTestTestfile.cmake": f"add_test(t1 touch {ran1})\n",
        "t/a.t": f'system("touch {ran1}"); print "1..1\\nok 1\\n";\n',
    }[file]
    evil = code.replace(str(ran1), str(pwned))
    if file == "json.py":  # the second run names another module: the entry holds for any
        (tmp_path / "evilmod.py").write_text(evil)
    details = await _always_then_rewrite(state_dir, tmp_path, first, tmp_path / file, code, evil, then)
    assert not _ran_evil(details, tmp_path), details["_text"]


async def test_class6_an_operand_swapped_for_a_link_into_the_state_dir_after_its_check(
    state_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    write_config(state_dir, ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"'))
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
    leaked = None
    async with gateway(state_dir):
        token = (state_dir / "operator.json").read_text()
        (work / "x").write_text("notes\n")
        os.symlink(state_dir / "operator.json", work / "y")
        client = await connect(state_dir)
        try:
            with exchange_loop(str(work / "x"), str(work / "y")):
                for _ in tries(2000):  # one win is enough; it wins several times in 200 tries here
                    try:
                        result = await client.request("exec", {"command": "cat x", "workdir": str(work)})
                    except RemoteError:
                        continue  # decided while x was the link: refused
                    if result["details"]["status"] == "completed" and "token" in result["text"]:
                        leaked = result["text"]
                        break
        finally:
            await client.close()
    assert leaked is None or leaked.strip() not in token, leaked


async def test_class4_allowlisted_git_writes_the_trusted_global_config(
    state_dir: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", shutil.which("git") or "git")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            for command in (f"git config --global alias.st '!touch {tmp_path}/pwned'", "git st"):
                await client.request("exec", {"command": command, "workdir": str(repo)})
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


def _sdist(path: Path, marker: Path) -> None:
    """An sdist whose setup.py touches `marker` when pip prepares its metadata."""
    setup = f'import os\nos.system("touch {marker}")\nfrom setuptools import setup\nsetup(name="sub")\n'
    data = setup.encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("sub-1/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.mark.skipif(shutil.which("pip3") is None, reason="pip is not installed")
async def test_class5_pip_builds_an_sdist_archive_operand(state_dir: Path, tmp_path: Path) -> None:
    archive = tmp_path / "sub-1.tar.gz"
    command = "pip3 install --no-index --no-build-isolation --no-cache-dir --dry-run sub-1.tar.gz"
    write_config(state_dir, ALLOWLIST)
    _sdist(archive, tmp_path / "ran1")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            first = await client.request("exec", {"command": command, "workdir": str(tmp_path)})
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return  # refused, or nothing an allow-always could save: not this attack
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            await wait_until(lambda: (tmp_path / "ran1").exists(), timeout=120)
            _sdist(archive, tmp_path / "pwned")
            second = await client.request("exec", {"command": command, "workdir": str(tmp_path)})
        finally:
            await client.close()
    assert not _ran_evil({**second["details"], "status": "completed"}, tmp_path), second["text"]


async def test_class4_an_empty_path_entry_makes_the_cwd_a_program_dir(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("lzip", path=os.environ["PATH"]) is not None:
        pytest.skip("lzip is installed: tar finds it before the cwd")
    monkeypatch.setenv("PATH", os.environ["PATH"].rstrip(":") + ":")  # `PATH=$PATH:$EMPTY` in a profile
    (tmp_path / "x.tar").write_bytes(b"LZIP\x01\x0c" + bytes(100))
    lzip = tmp_path / "lzip"
    lzip.write_text(f"#!/bin/sh\ntouch {tmp_path}/pwned\n")
    lzip.chmod(0o755)
    details = await attempt(state_dir, "tar -tf x.tar", allow=[("/usr/bin/tar", None)], workdir=str(tmp_path))
    assert refused(details) or not (tmp_path / "pwned").exists(), details["_text"]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="sqlite3 is not installed")
async def test_class4_a_heredoc_to_a_command_reader_is_code(state_dir: Path, tmp_path: Path) -> None:
    command = "sqlite3 app.db <<'EOF'\n.shell touch pwned\nEOF"
    allow: list[tuple[str, str | None]] = [(shutil.which("sqlite3") or "sqlite3", "app\\.db")]
    details = await attempt(state_dir, command, allow=allow, workdir=str(tmp_path))
    assert refused(details) or not (tmp_path / "pwned").exists(), details["_text"]


NOBODY = 65534


def _as_nobody(state: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`exechost ARGS` as uid 65534 (a gateway that is not root), with the system Python and this venv's
    packages (the venv's own interpreter lives under /root, which that uid cannot reach)."""
    site = (
        Path(sys.prefix)
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "site-packages"
    )
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "OPENCLAW_STATE_DIR": str(state),
        "PYTHONPATH": f"{REPO}:{site}",
    }
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3"]
    return subprocess.run([*argv, "-m", "runner", *args], capture_output=True, text=True, env=env, cwd="/")


def _system_python_fits() -> bool:
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3"):
        return False
    probe = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    return probe.stdout.strip() == str(tuple(sys.version_info[:2]))


@pytest.mark.skipif(not _system_python_fits(), reason="needs root, setpriv and a system Python like this one")
def test_class4_a_read_only_makefile_of_the_gateways_own_user_is_trusted() -> None:
    root = Path(tempfile.mkdtemp(prefix="ehg-", dir="/tmp"))
    try:
        state, home, tree = root / "s", root / "h", root / "t"
        for d in (state, home, tree):
            d.mkdir()
        os.chmod(state, 0o700)
        write_config(state, ALLOWLIST)
        (tree / "Makefile").write_text("all:\n\t@touch pwned\n")
        for path in (root, state, home, tree, state / "config.toml", tree / "Makefile"):
            os.chown(path, NOBODY, NOBODY)
        os.chmod(tree / "Makefile", 0o444)
        os.chmod(tree, 0o555)
        added = _as_nobody(state, home, "approvals", "allowlist", "add", "/usr/bin/make")
        assert added.returncode == 0, added.stderr
        check = _as_nobody(state, home, "policy", "check", "--json", "--cwd", str(tree), "--", "make")
        assert check.returncode == 0, check.stderr
        decision = json.loads(check.stdout)
        assert decision["decision"] != "allow", decision["text"]
    finally:
        os.chmod(root / "t", 0o755)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(not _system_python_fits(), reason="needs root, setpriv and a system Python like this one")
def test_a_makefile_only_root_can_change_is_trusted_by_a_gateway_that_is_not_root() -> None:
    """The legitimate side of ownership: a root-owned Makefile in a root-owned 0755 dir is one the
    gateway's (non-root) user cannot change, so allowlisted `make` runs there unasked."""
    root = Path(tempfile.mkdtemp(prefix="ehg-", dir="/tmp"))
    try:
        state, home, tree = root / "s", root / "h", root / "t"
        for d in (state, home, tree):
            d.mkdir()
        os.chmod(state, 0o700)
        os.chmod(tree, 0o755)
        # the tree is in the machine's /tmp, which the default makes each agent's own copy (its runs would
        # not see this Makefile): here /tmp is shared, as it is where hostPrivate is []
        write_config(state, ALLOWLIST + "hostPrivate = []\n")
        (tree / "Makefile").write_text("all:\n\t@true\n")
        for path in (root, state, home, state / "config.toml"):
            os.chown(path, NOBODY, NOBODY)
        added = _as_nobody(state, home, "approvals", "allowlist", "add", "/usr/bin/make")
        assert added.returncode == 0, added.stderr
        check = _as_nobody(state, home, "policy", "check", "--json", "--cwd", str(tree), "--", "make")
        assert check.returncode == 0, check.stderr
        decision = json.loads(check.stdout)
        assert decision["decision"] == "allow", decision["text"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_class4_git_log_output_writes_the_trusted_global_config(
    state_dir: Path, tmp_path: Path
) -> None:
    home = Path(os.environ["HOME"])
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / ".gitattributes").write_text("* diff=x\n")
    (repo / "a.txt").write_text("hi\n")
    ident = ["-c", "user.name=a", "-c", "user.email=a@b"]
    for argv in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True)
    write_config(state_dir, ALLOWLIST)
    git = shutil.which("git") or "git"
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", git, arg_pattern="log( .*)?")
    fmt = f'[diff "x"]%n textconv = "touch {tmp_path}/pwned; cat"'
    commands = (f"git log -1 '--format={fmt}' --output={home}/.gitconfig", "git log -p -1")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            for command in commands:
                await client.request("exec", {"command": command, "workdir": str(repo)})
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(shutil.which("rustup") is None, reason="rustup is not installed")
async def test_class4_a_rustup_toolchain_path_in_the_argv_is_not_bound(
    state_dir: Path, tmp_path: Path
) -> None:
    cargo = tmp_path / "tc" / "bin" / "cargo"
    cargo.parent.mkdir(parents=True)
    cargo.write_text("#!/bin/sh\n")
    cargo.chmod(0o755)
    details = await _always_then_rewrite(
        state_dir,
        tmp_path,
        f"cargo +{tmp_path}/tc --version",
        cargo,
        f"#!/bin/sh\ntouch {tmp_path}/ran1\n",
        f"#!/bin/sh\ntouch {tmp_path}/pwned\n",
    )
    assert not _ran_evil(details, tmp_path), details["_text"]


@pytest.mark.skipif(shutil.which("more") is None, reason="util-linux more is not installed")
async def test_class4_keystrokes_into_an_allowlisted_pager_run_a_shell(
    state_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("".join(f"line {i}\n" for i in range(500)))
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", shutil.which("more") or "more")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            call = {"command": "more big.txt", "workdir": str(tmp_path), "pty": True, "background": True}
            started = await client.request("exec", {**call, "env": {"TERM": "xterm"}})
            if refused(started["details"]):
                return  # it asks (its tree is one the agent can write): nothing started unasked
            sid = started["details"]["sessionId"]

            async def log() -> str:
                return str((await client.request("process", {"action": "log", "sessionId": sid}))["text"])

            async def shows(pattern: str) -> bool:
                return re.search(pattern, await log()) is not None

            await wait_until(lambda: shows(r"--More--\(\d+%\)"))
            wrote = await client.request("process", {"action": "write", "sessionId": sid, "data": "!"})
            if wrote["details"]["status"] == "failed":  # refused: no keys reach an unasked pager
                assert "takes no input from the agent" in wrote["text"], wrote["text"]
                await client.request("process", {"action": "kill", "sessionId": sid})
                return
            await wait_until(lambda: shows(r"--More--\(\d+%\)\r!"))  # more prompts for the command
            command = f"touch {tmp_path}/pwned\r"
            await client.request("process", {"action": "write", "sessionId": sid, "data": command})
            with contextlib.suppress(AssertionError):
                await wait_until(lambda: (tmp_path / "pwned").exists(), timeout=5)
            await client.request("process", {"action": "kill", "sessionId": sid})
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(shutil.which("bc") is None, reason="bc is not installed")
async def test_keystrokes_into_an_unasked_command_reader_are_refused_and_into_a_data_reader_taken(
    state_dir: Path, tmp_path: Path
) -> None:
    """The gate itself, where the tree rule does not ask first: the operator lists `bc` as tree-safe (it
    takes no code from its tree) and allowlists it, so `bc` with pty=true starts unasked; the agent's
    keys into it are input no entry described (bc reads them as programs): refused. `cat` reads its input
    as data: its keys are taken, as before. The operator may always type, into bc too."""
    write_config(state_dir, ALLOWLIST + 'treeSafe = ["bc"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    for name in ("bc", "cat"):
        store.add_allowlist("main", shutil.which(name) or name)
    async with gateway(state_dir):
        client = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir)
        try:
            sids = {}
            for command in ("bc -q", "cat"):
                call = {"command": command, "workdir": str(tmp_path), "pty": True, "background": True}
                started = await client.request("exec", call)
                assert started["details"]["status"] == "running", started["text"]
                sids[command] = started["details"]["sessionId"]
            keys = {"action": "write", "sessionId": sids["bc -q"], "data": "2+3\r"}
            wrote = await client.request("process", keys)
            assert wrote["details"]["status"] == "failed", wrote["text"]
            assert "takes no input from the agent" in wrote["text"] and "bc" in wrote["text"]
            keys = {"action": "write", "sessionId": sids["cat"], "data": "hello-data\r"}
            wrote = await client.request("process", keys)
            assert wrote["details"]["status"] == "running", wrote["text"]

            async def shows() -> bool:
                log = await client.request("process", {"action": "log", "sessionId": sids["cat"]})
                return "hello-data" in str(log["text"])

            await wait_until(shows)
            keys = {"action": "write", "sessionId": sids["bc -q"], "data": "40+2\r"}
            wrote = await operator.request("process", keys)
            assert wrote["details"]["status"] == "running", wrote["text"]

            async def answered() -> bool:
                log = await operator.request("process", {"action": "log", "sessionId": sids["bc -q"]})
                return "42" in str(log["text"])

            await wait_until(answered)
            for sid in sids.values():
                await client.request("process", {"action": "kill", "sessionId": sid})
        finally:
            await client.close()
            await operator.close()


@pytest.mark.parametrize(
    ("command", "script", "code"),
    [
        ("python3 -i x.py", "open({ran1!r}, 'w')\n", "import os; os.system('touch {pwned}')\n"),
        ("perl -d x.py", 'open(my $f, ">", "{ran1}");\n', 'system("touch {pwned}")\n'),
    ],
    ids=["python-i", "perl-d"],
)
async def test_class5_an_interpreter_flag_that_reads_code_from_stdin_after_the_bound_script(
    state_dir: Path, tmp_path: Path, command: str, script: str, code: str
) -> None:
    ran1, pwned = str(tmp_path / "ran1"), str(tmp_path / "pwned")
    (tmp_path / "x.py").write_text(script.format(ran1=ran1))
    write_config(state_dir, ALLOWLIST)
    call = {"command": command, "workdir": str(tmp_path)}
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            first = await client.request("exec", call)
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return  # refused, or nothing an allow-always could save: not this attack
            answer = {"id": first["details"]["approvalId"], "decision": "allow-always"}
            await client.request("approve", answer)
            store = ApprovalsStore(state_dir / "exec-approvals.json")
            await wait_until(
                lambda: any(e.source == "allow-always" for e in store.snapshot().entries("main"))
            )
            again = await client.request("exec", {**call, "background": True})
            if again["details"]["status"] == "running":
                sid = again["details"]["sessionId"]
                data = code.format(pwned=pwned)
                await client.request(
                    "process", {"action": "write", "sessionId": sid, "data": data, "eof": True}
                )
                with contextlib.suppress(AssertionError):
                    await wait_until(lambda: (tmp_path / "pwned").exists(), timeout=5)
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(shutil.which("unzip") is None, reason="unzip is not installed")
async def test_class4_an_allowlisted_extractor_writes_the_approvals_file_through_its_own_link(
    state_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    write_config(state_dir, ALLOWLIST)
    approvals = state_dir / "exec-approvals.json"
    ApprovalsStore(approvals).add_allowlist(
        "main", shutil.which("unzip") or "unzip", arg_pattern=r"-o \S+\.zip"
    )
    forged = tmp_path / "forged.json"  # the agent's own file: it never read the real one
    ApprovalsStore(forged).add_allowlist("main", "/usr/bin/touch")
    with zipfile.ZipFile(work / "a.zip", "w") as archive:
        link = zipfile.ZipInfo("s")
        link.create_system = 3  # unix: external_attr holds the mode
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, str(state_dir))
    with zipfile.ZipFile(work / "b.zip", "w") as archive:
        archive.writestr("s/exec-approvals.json", forged.read_bytes())  # mode 0600, as the store wants
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            for command in ("unzip -o a.zip", "unzip -o b.zip", f"touch {work}/pwned"):
                with contextlib.suppress(RemoteError):
                    await client.request("exec", {"command": command, "workdir": str(work)})
        finally:
            await client.close()
    assert not (work / "pwned").exists()


async def test_class5_a_perl_preload_named_in_the_argv_is_not_bound(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.pl").write_text('print "x\\n";\n')
    details = await _always_then_rewrite(
        state_dir,
        tmp_path,
        "perl -I. -Mevil x.pl",
        tmp_path / "evil.pm",
        f'package evil; open(my $f, ">", "{tmp_path}/ran1"); 1;\n',
        f'package evil; system("touch {tmp_path}/pwned"); 1;\n',
    )
    assert not _ran_evil(details, tmp_path), details["_text"]


@pytest.mark.parametrize(
    ("command", "makefile"),
    [("make test 2>&1", "Makefile"), ("cd sub && make test", "sub/Makefile")],
    ids=["fd-redirection", "cd-builtin"],
)
async def test_class5_a_command_the_analysis_cannot_prove_plain_skips_the_tree_vet(
    state_dir: Path, tmp_path: Path, command: str, makefile: str
) -> None:
    benign = f"test:\n\t@touch {tmp_path}/ran1\n"
    evil = f"test:\n\t@touch {tmp_path}/pwned\n"
    details = await _always_then_rewrite(state_dir, tmp_path, command, tmp_path / makefile, benign, evil)
    assert not _ran_evil(details, tmp_path), details["_text"]


async def test_class5_git_vetting_is_skipped_for_a_redirected_git(state_dir: Path, tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "a.txt").write_text("hi\n")
    ident = ["-c", "user.name=a", "-c", "user.email=a@b"]
    for argv in (["init", "-q"], ["add", "a.txt"], [*ident, "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True)
    write_config(state_dir, ALLOWLIST)
    call = {"command": "git status 2>&1", "workdir": str(repo)}
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            first = await client.request("exec", call)
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return  # refused, or nothing an allow-always could save: not this attack
            answer = {"id": first["details"]["approvalId"], "decision": "allow-always"}
            await client.request("approve", answer)
            await wait_until(lambda: _saved_allow_always(state_dir))
            with open(repo / ".git" / "config", "a") as config:
                config.write(f'[filter "x"]\n\tclean = "touch {tmp_path}/pwned; cat"\n')
            (repo / ".gitattributes").write_text("*.txt filter=x\n")
            (repo / "a.txt").write_text("ho\n")  # same size: git must read it through the filter
            with contextlib.suppress(RemoteError):
                await client.request("exec", call)
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


async def test_class3_an_approval_socket_exec_asks_without_showing_the_env(
    state_dir: Path, tmp_path: Path
) -> None:
    """OpenClaw's `system.run` arrives as an approval-socket `exec` frame and runs in LocalExecHost; its ask
    (PromptRequest, relayed to the gateway by the console as approvals.relay) carries the command and the
    decision's warnings, never the env. The operator sees `make` and a key name, approves, and
    GNUMAKEFLAGS=--eval=… runs: issue 27 §3's own attack, on the socket path."""
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/make")
    value = f"--eval=all:;@touch$$$${{IFS}}{tmp_path}/pwned"  # make's flag words split at blanks
    request = ExecHostRequest(command=("make",), cwd=str(tmp_path), env={"GNUMAKEFLAGS": value})
    shown: list[PromptRequest] = []

    async def operator(prompt: PromptRequest) -> str:
        shown.append(prompt)
        return "allow-once"  # what the operator answers to the `make` they were shown

    host = LocalExecHost(state_dir / "config.toml", state_dir / "exec-approvals.json")
    await host(request, operator, PeerInfo(os.getpid(), os.getuid(), os.getgid()))
    assert shown, "the env should have made it ask"
    visible = " ".join([shown[0].command, *shown[0].warnings])
    assert value in visible or not (tmp_path / "pwned").exists(), visible


async def test_an_approval_socket_exec_relays_its_env_and_warnings_and_inert_env_runs_unasked(
    state_dir: Path, tmp_path: Path
) -> None:
    """The legitimate side: the ask the console relays to the gateway carries the env and the warnings
    (the gateway decides on that env and shows it), and an inert key still rides along unasked."""
    from console.socket_asks import relay_params
    from engine.protocol.requests import ApprovalsRelay

    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/make")
    host = LocalExecHost(state_dir / "config.toml", state_dir / "exec-approvals.json")
    shown: list[PromptRequest] = []

    async def operator(prompt: PromptRequest) -> str:
        shown.append(prompt)
        return "deny"

    peer = PeerInfo(os.getpid(), os.getuid(), os.getgid())
    injected = ExecHostRequest(command=("make", "-v"), cwd="/", env={"GNUMAKEFLAGS": "-s"})
    await host(injected, operator, peer)
    relayed = ApprovalsRelay.decode(relay_params(shown[0]).params())
    assert relayed.env == {"GNUMAKEFLAGS": "-s"}
    assert any("Env: GNUMAKEFLAGS=-s" in w for w in relayed.warnings or []), relayed.warnings
    inert = ExecHostRequest(command=("make", "-v"), cwd="/", env={"LC_ALL": "C.UTF-8"})
    outcome = await host(inert, operator, peer)
    assert len(shown) == 1, shown  # no second ask: an inert key is no influence
    assert outcome.ok, outcome


@pytest.mark.parametrize(
    ("command", "entry", "code"),
    [
        ("python3 app", "__main__.py", "open({path!r}, 'w')\n"),
        ("node app", "index.js", "require('fs').writeFileSync({path!r}, '')\n"),
    ],
    ids=["python-main", "node-index"],
)
async def test_class5_a_directory_operand_is_a_program_the_interpreter_finds(
    state_dir: Path, tmp_path: Path, command: str, entry: str, code: str
) -> None:
    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    program = tmp_path / "app" / entry
    program.parent.mkdir()
    benign = code.format(path=str(tmp_path / "ran1"))
    evil = code.format(path=str(tmp_path / "pwned"))
    details = await _always_then_rewrite(state_dir, tmp_path, command, program, benign, evil)
    assert not _ran_evil(details, tmp_path), details["_text"]


def _feed(fifo: Path, code: str) -> None:
    """Open the FIFO for writing (this waits for its reader) and write `code`."""
    with open(fifo, "w") as pipe:
        pipe.write(code)


async def test_class5_a_fifo_script_operand_is_left_unbound(state_dir: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "prog"
    os.mkfifo(fifo)
    write_config(state_dir, ALLOWLIST)
    call = {"command": "python3 prog", "workdir": str(tmp_path), "background": True}
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            first = await client.request("exec", call)
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return  # refused, or nothing an allow-always could save: not this attack
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            await asyncio.wait_for(
                asyncio.to_thread(_feed, fifo, f"open({str(tmp_path / 'ran1')!r}, 'w')\n"), 60
            )
            await wait_until(lambda: (tmp_path / "ran1").exists())
            again = await client.request("exec", call)
            if again["details"]["status"] == "running":
                evil = f"open({str(tmp_path / 'pwned')!r}, 'w')\n"
                await asyncio.wait_for(asyncio.to_thread(_feed, fifo, evil), 60)
                await wait_until(lambda: (tmp_path / "pwned").exists())
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


async def test_class5_proc_self_names_another_process_at_the_check(state_dir: Path, tmp_path: Path) -> None:
    work = state_dir.parent / "w"  # the state dir's sibling: `..` from the command's cwd is its parent
    work.mkdir()
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    command = f"cat /proc/self/cwd/../{state_dir.name}/operator.json"
    try:
        details = await attempt(
            state_dir, command, allow=[("/usr/bin/cat", None)], config=config, workdir=str(work)
        )
    except RemoteError:
        return  # refused: the operand named the state dir
    token = (state_dir / "operator.json").read_text()
    assert token.strip() not in details["_text"], details["_text"]


async def test_class5_a_proc_self_script_operand_is_bound_in_the_wrong_process(
    state_dir: Path, tmp_path: Path
) -> None:
    details = await _always_then_rewrite(
        state_dir,
        tmp_path,
        "python3 /proc/self/cwd/x.py",
        tmp_path / "x.py",
        f"open({str(tmp_path / 'ran1')!r}, 'w')\n",
        f"open({str(tmp_path / 'pwned')!r}, 'w')\n",
    )
    assert not _ran_evil(details, tmp_path), details["_text"]


async def test_class5_an_attached_short_option_value_into_the_state_dir(
    state_dir: Path, tmp_path: Path
) -> None:
    approvals = state_dir / "exec-approvals.json"
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(approvals).add_allowlist("main", shutil.which("curl") or "curl")
    forged = tmp_path / "forged.json"  # the agent's own file: it never read the real one
    ApprovalsStore(forged).add_allowlist("main", "/usr/bin/touch")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            for command in (f"curl -so{approvals} file://{forged}", f"touch {tmp_path}/pwned"):
                with contextlib.suppress(RemoteError):
                    await client.request("exec", {"command": command, "workdir": str(tmp_path)})
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("program", ["strings", "nm", "size"])
async def test_class5_a_response_file_reads_the_state_dir(
    state_dir: Path, tmp_path: Path, program: str
) -> None:
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"{program} is not installed")
    # A token starting with `-` (1 in 64) is read as an option and echoed only in part: keep the test exact.
    while ensure_token(state_dir, OPERATOR_TOKEN_NAME).startswith("-"):
        (state_dir / OPERATOR_TOKEN_NAME).unlink()
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    command = f"{program} @{state_dir}/operator.json"
    allow: list[tuple[str, str | None]] = [(path, None)]
    try:
        details = await attempt(state_dir, command, allow=allow, config=config, workdir=str(tmp_path))
    except RemoteError:
        return  # refused: the @file was seen to name the state dir
    token = json.loads((state_dir / "operator.json").read_text())["token"]
    assert token not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_class5_a_file_url_reads_the_state_dir(state_dir: Path, tmp_path: Path) -> None:
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    allow: list[tuple[str, str | None]] = [(shutil.which("curl") or "curl", None)]
    command = f"curl -s file://{state_dir}/operator.json"
    try:
        details = await attempt(state_dir, command, allow=allow, config=config, workdir=str(tmp_path))
    except RemoteError:
        return
    token = json.loads((state_dir / "operator.json").read_text())["token"]
    assert token not in details["_text"], details["_text"]


async def test_class4_a_recursive_reader_walks_into_the_state_dir(state_dir: Path) -> None:
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    allow: list[tuple[str, str | None]] = [(shutil.which("grep") or "grep", None)]
    try:
        details = await attempt(
            state_dir, "grep -r token .", allow=allow, config=config, workdir=str(state_dir.parent)
        )
    except RemoteError:
        return
    token = json.loads((state_dir / "operator.json").read_text())["token"]
    assert token not in details["_text"], details["_text"]


@pytest.mark.parametrize("how", ["pth", "pyvenv-home"])
async def test_class4_a_tree_venv_runs_startup_code_before_the_bound_script(
    state_dir: Path, tmp_path: Path, how: str
) -> None:
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    touch = f"import os; os.system('touch {tmp_path}/pwned')\n"
    if how == "pth":
        (venv / "lib" / version / "site-packages" / "evil.pth").write_text(touch)
    else:
        stdlib = tmp_path / "evil" / "lib" / version
        (stdlib / "encodings").mkdir(parents=True)
        (stdlib / "encodings" / "__init__.py").write_text(touch)
        (stdlib / "os.py").write_text("")  # the landmark getpath looks for
        (tmp_path / "evil" / "bin").mkdir()
        (venv / "pyvenv.cfg").write_text(
            f"home = {tmp_path}/evil/bin\ninclude-system-site-packages = false\n"
        )
    (tmp_path / "x.py").write_text("print('x')\n")
    allow: list[tuple[str, str | None]] = [(str(venv / "bin" / "python"), r"x\.py")]
    details = await attempt(state_dir, "v/bin/python x.py", allow=allow, workdir=str(tmp_path))
    assert refused(details) or not (tmp_path / "pwned").exists(), details["_text"]


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
async def test_class4_a_file_the_program_reads_names_the_state_dir(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.1").write_text(f".TH X 1\n.SH NAME\nx\n.so {state_dir}/operator.json\n")
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    allow: list[tuple[str, str | None]] = [(shutil.which("man") or "man", None)]
    try:
        details = await attempt(state_dir, "man ./x.1", allow=allow, config=config, workdir=str(tmp_path))
    except RemoteError:
        return
    token = json.loads((state_dir / "operator.json").read_text())["token"]
    assert token not in details["_text"], details["_text"]


async def test_class4_git_log_output_forges_the_allowlist(state_dir: Path) -> None:
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "a").write_text("a\n")
    ident = ["-c", "user.name=a", "-c", "user.email=a@b"]
    for argv in (["init", "-q"], ["add", "a"], [*ident, "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(work), *argv], check=True)
    write_config(state_dir, ALLOWLIST)
    git = shutil.which("git") or "git"
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", git, arg_pattern="log( .*)?")
    forged = state_dir.parent / "forged.json"
    ApprovalsStore(forged).add_allowlist("main", "/usr/bin/touch")
    text = json.dumps(json.loads(forged.read_text())).replace("%", "%%")
    target = f"/proc/self/cwd/../{state_dir.name}/exec-approvals.json"
    write = f"git log -1 {shlex.quote('--format=tformat:' + text)} --output={target}"
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            for command in (write, f"touch {work}/pwned"):
                with contextlib.suppress(RemoteError):
                    await client.request("exec", {"command": command, "workdir": str(work)})
        finally:
            await client.close()
    assert not (work / "pwned").exists()


@pytest.mark.skipif(
    shutil.which("ssh-keygen") is None or shutil.which("gcc") is None, reason="needs ssh-keygen and gcc"
)
async def test_class4_a_bare_path_entry_for_a_program_that_loads_a_library(
    state_dir: Path, tmp_path: Path
) -> None:
    source = tmp_path / "e.c"
    source.write_text(
        "#include <stdlib.h>\n"
        f'__attribute__((constructor)) static void f(void) {{ system("touch {tmp_path}/pwned"); }}\n'
        "int C_GetFunctionList(void *p) { return 1; }\n"
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "e.so"), str(source)], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            call = {"command": "ssh-keygen -l -f k.pub", "workdir": str(tmp_path)}
            first = await client.request("exec", call)
            if "allow-always" not in first["details"].get("allowedDecisions", ()):
                return
            answer = {"id": first["details"]["approvalId"], "decision": "allow-always"}
            await client.request("approve", answer)
            await wait_until(lambda: _saved_allow_always(state_dir))
            with contextlib.suppress(RemoteError):
                await client.request("exec", {**call, "command": "ssh-keygen -D ./e.so"})
        finally:
            await client.close()
    assert not (tmp_path / "pwned").exists()


# ------------------------------------------------------------------------ attempts that failed (regressions)


@pytest.mark.parametrize(
    "command",
    ["timeout 5 make", "nice -n 5 make", "stdbuf -o0 make", "env make", "env -- make"],
)
async def test_a_transparent_wrapper_does_not_hide_the_makefile(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    (tmp_path / "Makefile").write_text(f"all:\n\t@touch {tmp_path}/pwned\n")
    details = await attempt(state_dir, command, allow=[("/usr/bin/make", None)], workdir=str(tmp_path))
    assert refused(details), details["_text"]
    assert "Makefile" in details["_text"]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "env",
    [{"language": "../../x"}, {"Lc_All": "../x"}, {"TERM": "../x"}, {"TZ": "/x"}, {"GNUMAKEFLAGS": "-s"}],
    ids=["lowercase-language-path", "mixed-case-lc-all-path", "term-path", "tz-path", "gnumakeflags"],
)
async def test_an_inert_key_in_another_case_or_shape_still_asks(
    state_dir: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    details = await attempt(state_dir, "head -n 1", workdir=str(tmp_path), env=env)
    assert refused(details), details["_text"]


async def test_inert_locale_keys_ride_along_unasked(state_dir: Path, tmp_path: Path) -> None:
    env = {"LC_ALL": "C.UTF-8", "TZ": "Europe/Paris", "TERM": "xterm-256color", "COLUMNS": "80"}
    details = await attempt(state_dir, "head -n 1 <<'EOF'\nhello\nEOF", workdir=str(tmp_path), env=env)
    assert details["status"] == "completed", details["_text"]
    assert "hello" in details["_text"]


async def test_an_assignment_prefix_never_rides_an_allowlist_entry(state_dir: Path, tmp_path: Path) -> None:
    command = f"GNUMAKEFLAGS='--eval=$(shell touch {tmp_path}/pwned)' make -v"
    details = await attempt(state_dir, command, allow=[("/usr/bin/make", None)], workdir=str(tmp_path))
    assert refused(details), details["_text"]
    assert not (tmp_path / "pwned").exists()


async def test_a_link_into_the_state_dir_is_refused_when_it_is_there_at_the_decision(
    state_dir: Path, tmp_path: Path
) -> None:
    os.symlink(state_dir / "operator.json", tmp_path / "notes")
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    with pytest.raises(RemoteError):
        await attempt(
            state_dir, "cat notes", allow=[("/usr/bin/cat", None)], config=config, workdir=str(tmp_path)
        )


@needs_bwrap
async def test_a_bwrap_sandbox_inherits_nothing_of_the_gateways_env(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sekrit-gateway-env")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-gateway/agent.1")
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN", "agent-token-of-the-autostarter")
    config = '[tools.exec]\nhost = "sandbox"\n[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
    try:
        details = await attempt(state_dir, "env; ls -a /", config=config)
    finally:
        bwrap.remove_all()
    text = details["_text"]
    assert details["status"] == "completed", text
    for leaked in ("sekrit-gateway-env", "ssh-gateway", "agent-token-of", str(state_dir.parent)):
        assert leaked not in text


async def test_keystrokes_into_an_allowlisted_less_find_its_shell_escape_off(
    state_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("".join(f"line {i}\n" for i in range(500)))
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", shutil.which("less") or "less")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            call = {"command": "less big.txt", "workdir": str(tmp_path), "pty": True, "background": True}
            started = await client.request("exec", {**call, "env": {"TERM": "xterm"}})
            sid = started["details"]["sessionId"]

            async def shows(text: str) -> bool:
                return text in str(
                    (await client.request("process", {"action": "log", "sessionId": sid}))["text"]
                )

            await wait_until(lambda: shows("line 5\n"))
            await client.request("process", {"action": "write", "sessionId": sid, "data": "!"})
            await wait_until(
                lambda: shows("Command not available")
            )  # LESSSECURE=1, forced on every host exec
            await client.request("process", {"action": "kill", "sessionId": sid})
        finally:
            await client.close()
