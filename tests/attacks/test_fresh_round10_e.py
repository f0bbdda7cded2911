"""Round 10, fresh attacker e (issue 27 §5, class 8 and the content binding of approvals): an ask is
approved, then the agent rewrites a file, and the run must still execute only the bytes that were shown."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import connect, gateway, wait_until, write_config

ASK = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


async def approved_run(
    state: Path,
    command: str,
    workdir: Path,
    rewrite: Callable[[], None],
    decision: str = "allow-once",
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent asks to run `command`; while the ask waits, `rewrite` changes the agent's files; the
    operator approves with `decision`. The ask as the operator saw it, and the run's result."""
    write_config(state, ASK)
    async with gateway(state):
        operator = await connect(state, "op")
        agent = await connect(state, "ag")
        try:
            await operator.request("approvals.attach", {})
            params: dict[str, Any] = {"command": command, "agentId": "main", "workdir": str(workdir)}
            if env:
                params["env"] = env
            run = asyncio.ensure_future(agent.request("exec", params))
            rows = await wait_until(operator.pending_approvals, 30)
            await asyncio.to_thread(rewrite)  # off the loop: it may ask the gateway itself (the CLI)
            await operator.request("approve", {"id": rows[0]["id"], "decision": decision})
            result = await asyncio.wait_for(run, 60)
        finally:
            await agent.close()
            await operator.close()
    return rows[0], result


def workdir(state: Path, files: dict[str, str]) -> Path:
    work = state.parent / "w"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    return work


def bound_paths(ask: dict[str, Any]) -> list[str]:
    return [Path(row["path"]).name for row in ask.get("contentDigests") or []]


# Fixed on this branch (interpoptions._cluster): sh/bash/dash/busybox give `-o`/`-O` the NEXT word whatever
# follows in the cluster, so `bash -ox errexit s.sh` runs s.sh; read as taking the rest of the word, the
# binder bound 'errexit' (absent) as the script and a rewrite of s.sh after allow-once ran.
@pytest.mark.parametrize(
    "command",
    [
        "bash -ox errexit s.sh",
        "sh +ox errexit s.sh",
        # bash's `-c` after the misread cluster: the analyser takes `errexit` for the script and never
        # reads the inline text, so nothing it names is bound either
        'bash -ox errexit -c "sh s.sh"',
    ],
)
def test_class5_shell_o_in_a_cluster_takes_the_next_word_so_the_script_is_unbound(
    state_dir: Path, command: str
) -> None:
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n"})

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


_PROGRAM_FILES = [
    ("awk -f a.awk -f b.awk /dev/null", "b.awk", 'BEGIN { print "PAYLOAD" }\n'),
    ("awk -fb.awk /dev/null", "b.awk", 'BEGIN { print "PAYLOAD" }\n'),
    ("awk -W exec b.awk /dev/null", "b.awk", 'BEGIN { print "PAYLOAD" }\n'),  # mawk's program file
    # GNU sed's `e` runs a shell command: approving a sed gave the agent a shell.
    ("sed -n -f a.sed -f b.sed a.sed", "b.sed", "1e echo PAYLOAD\n"),
    ("sed -n -fb.sed a.sed", "b.sed", "1e echo PAYLOAD\n"),
    ("sed -n --file=b.sed a.sed", "b.sed", "1e echo PAYLOAD\n"),
    ("sed -n -e 1p --file b.sed a.sed", "b.sed", "1e echo PAYLOAD\n"),
]


# Fixed on this branch (content.bind binds every file a segment the proof cannot prove names, whole):
# sed/awk program files spelled `-fFILE`, `--file=FILE`, `--file FILE`, a second `-f`, mawk's `-W exec FILE`
# were not bound, and allow-once ran them as rewritten after the approval (sed's `e`: any shell command).
@pytest.mark.parametrize(("command", "name", "payload"), _PROGRAM_FILES)
def test_class5_sed_awk_program_file_spellings_are_not_bound_on_allow_once(
    state_dir: Path, command: str, name: str, payload: str
) -> None:
    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    work = workdir(
        state_dir,
        {
            "a.awk": 'BEGIN { print "A" }\n',
            "b.awk": 'BEGIN { print "B" }\n',
            "a.sed": "1p\n",
            "b.sed": "1p\n",
        },
    )

    def rewrite() -> None:
        (work / name).write_text(payload)

    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


_UNWRAPPED = [
    "nohup sh s.sh",
    "setsid -w sh s.sh",
    "busybox sh s.sh",
    "ionice -c 3 sh s.sh",
    "taskset 1 sh s.sh",
    "chrt -o 0 sh s.sh",
    "env X=1 sh s.sh",  # env with an assignment or an option (-i, -u, -S) is not unwrapped either
    "env -i sh s.sh",
    'env -S "sh s.sh"',
    'setsid sh -c "sh s.sh"',  # the name inside a quoted shell text a blocked wrapper runs
    'script -qc "sh s.sh" /dev/null',
    "echo s.sh | xargs sh",  # xargs builds `sh s.sh` from its stdin: the binder sees no operand at all
]


# Fixed on this branch (the same change): a wrapper exechost does not unwrap (nohup, setsid, busybox, ionice,
# taskset, chrt, `env X=1`, `env -i`, `env -S`, script -c, xargs) hid its interpreter's script from the
# binder; the ask bound only the wrapper and allow-once ran s.sh as rewritten after the approval.
@pytest.mark.parametrize("command", _UNWRAPPED)
def test_class5_a_wrapper_not_unwrapped_leaves_its_script_unbound_on_allow_once(
    state_dir: Path, command: str
) -> None:
    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n"})

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


_PRIVATE_TMP = [
    ("sh {T}/s.sh", False),  # the ask says s.sh does not exist; the run finds the agent's own
    ("cat {T}/s.sh | sh", True),  # the ask binds the machine's /tmp/s.sh; the run reads the agent's
    ("(sh {T}/s.sh)", True),
]


# Found open (fresh round 10 e): the binder read a path under a hostPrivate dir (/tmp, /var/tmp, /dev/shm…)
# in the gateway's namespace while the run's view shows the agent's private copy there: the ask bound the
# machine's /tmp/s.sh (or said it is absent), and the approved run executed the agent's own file. Closed
# (fixDE10, viewpaths.reader): every spelling binds the agent's copy, and the ask says so; what the
# operator approves is the digest of what runs, never the machine's file of that name.
@pytest.mark.parametrize(("command", "machine_has_it"), _PRIVATE_TMP)
def test_class8_a_path_in_the_agents_private_tmp_is_bound_from_the_machines_tmp(
    state_dir: Path, command: str, machine_has_it: bool
) -> None:
    from engine.commands import hostprivate

    shared = Path(os.environ["EXECHOST_HOST_PRIVATE"])  # the machine's /tmp, as the test suite's view has it
    ((source, _dest),) = hostprivate.binds(str(state_dir), "main", (os.path.realpath(shared),))
    # The agent wrote /tmp/s.sh in one of its own earlier runs: it landed in its private /tmp.
    Path(source, "s.sh").write_text("echo PAYLOAD\n")
    if machine_has_it:
        (shared / "s.sh").write_text("echo APPROVED\n")  # what the operator inspects at /tmp/s.sh
    work = workdir(state_dir, {})
    ask, result = asyncio.run(approved_run(state_dir, command.format(T=shared), work, lambda: None))
    payload = hashlib.sha256(b"echo PAYLOAD\n").hexdigest()
    approved = hashlib.sha256(b"echo APPROVED\n").hexdigest()
    digests = [row["sha256"] for row in ask.get("contentDigests") or []]
    # the ask binds what the run reads (the agent's copy), never the machine's file the operator may open
    assert payload in digests and approved not in digests, ask.get("contentDigests")
    assert any("own copy of a private dir" in w and "not the file of that name" in w for w in ask["warnings"])
    assert "allow-always" not in ask["allowedDecisions"]
    assert "PAYLOAD" in result["text"]  # what ran is what was bound and approved


# Characters the analyser accepts (not in categories C/Z) and engine.display leaves as they are, while a
# terminal draws them as nothing (combining/variation marks, Khmer inherent vowel) or as a blank.
_INVISIBLE = ["\u034f", "\u17b4", "\u180b", "\U000e0100", "\u2800", "\uffa0"]


# Fixed on branch fixE10 (engine.display: an allow-list of what draws as itself, all else escaped).
@pytest.mark.parametrize("char", _INVISIBLE, ids=[f"U+{ord(c):04X}" for c in _INVISIBLE])
def test_class8_an_invisible_letter_makes_the_ask_show_another_script(state_dir: Path, char: str) -> None:
    from tests.helpers.gateway import cli

    work = workdir(state_dir, {"s.sh": "echo APPROVED\n", f"s.sh{char}": "echo PAYLOAD\n"})
    shown: list[str] = []

    def look() -> None:
        shown.append(cli(state_dir, "approvals", "pending").stdout)

    _ask, result = asyncio.run(approved_run(state_dir, f"sh s.sh{char}", work, look))
    assert "PAYLOAD" in result["text"]  # what ran: the agent's file, not s.sh
    assert f"s.sh{char}" not in shown[0], shown[0]  # the operator must be able to see it is not s.sh


def test_class5_a_perl_launcher_under_another_name_leaves_its_script_unbound(state_dir: Path) -> None:
    launcher = next(iter(sorted(Path("/usr/bin").glob("perl5*-*-linux-gnu*"))), None)
    if launcher is None:
        pytest.skip("no Debian perl launcher here")
    work = workdir(state_dir, {"x.pl": 'print "APPROVED\\n";\n'})

    def rewrite() -> None:
        (work / "x.pl").write_text('print "PAYLOAD\\n";\n')

    ask, result = asyncio.run(approved_run(state_dir, f"{launcher.name} x.pl", work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


_DATA_INTO_A_SHELL = [
    "cat s.s? | sh",
    "cat s.s[h] | bash -s",
    "for f in s.s?; do cat $f; done | sh",
]


# Fixed on branch fixE10 (engine.commands.stdinprogram: a program on an interpreter's stdin only from
# literal files read by cat; any other producer refused).
@pytest.mark.parametrize("command", _DATA_INTO_A_SHELL)
def test_class5_a_glob_in_a_data_position_piped_into_a_shell_is_unbound(
    state_dir: Path, command: str
) -> None:
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n"})

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


def test_class4_a_pyenv_shim_lets_the_tree_pick_the_interpreter_after_the_approval(state_dir: Path) -> None:
    shim = shutil.which("python3")
    if shim is None or "/shims/" not in shim:
        pytest.skip("python3 is not a pyenv shim here")
    versions = Path(shim).parent.parent / "versions"
    installed = sorted(p.name for p in versions.glob("3.*") if (p / "bin" / "python3").exists())
    if len(installed) < 2:
        pytest.skip("pyenv has fewer than two Python 3 versions")
    work = workdir(state_dir, {"x.py": "import sys\nprint('RUNBY', sys.executable)\n"})
    decided = {"exe": ""}

    def rewrite() -> None:
        import subprocess

        decided["exe"] = subprocess.run(
            ["python3", "-c", "import sys; print(sys.executable)"], cwd=work, capture_output=True, text=True
        ).stdout.strip()
        other = next(v for v in installed if v not in decided["exe"])
        (work / ".python-version").write_text(other + "\n")

    _ask, result = asyncio.run(approved_run(state_dir, "python3 x.py", work, rewrite))
    assert "RUNBY" in result["text"], result["text"]
    assert f"RUNBY {decided['exe']}" in result["text"], (decided, result["text"])


def test_class5_node_require_of_a_bare_name_binds_the_cwd_file_node_never_loads(state_dir: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    work = workdir(state_dir, {"app.js": 'console.log("app")\n', "h.js": 'console.log("decoy")\n'})
    (work / "node_modules").mkdir()
    preload = work / "node_modules" / "h.js"
    preload.write_text('console.log("APPROVED")\n')
    command = "node -r h.js app.js"

    async def scenario() -> dict[str, Any]:
        write_config(state_dir, ASK)
        async with gateway(state_dir):
            operator = await connect(state_dir, "op")
            agent = await connect(state_dir, "ag")
            try:
                await operator.request("approvals.attach", {})
                params = {"command": command, "agentId": "main", "workdir": str(work)}
                run = asyncio.ensure_future(agent.request("exec", params))
                rows = await wait_until(operator.pending_approvals, 30)
                if "allow-always" not in rows[0]["allowedDecisions"]:  # the preload is a search: not saved
                    await operator.request("approve", {"id": rows[0]["id"], "decision": "deny"})
                    await asyncio.wait_for(run, 60)
                    return {"text": ""}
                await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-always"})
                await asyncio.wait_for(run, 60)
                await operator.request("approvals.detach", {})  # a later ask would wait for nobody
                preload.write_text('console.log("PAYLOAD")\n')
                return await asyncio.wait_for(agent.request("exec", params), 60)
            finally:
                await agent.close()
                await operator.close()

    again = asyncio.run(scenario())
    assert "PAYLOAD" not in again["text"], again["text"]


def _no_suffix(work: Path) -> str:
    (work / "run").write_text("import helper\n")
    (work / "helper.py").write_text("print('helper')\n")
    return "python3 run"


def _linked_package(work: Path) -> str:
    elsewhere = work.parent / "elsewhere" / "pkg"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("print('pkg')\n")
    (work / "pkg").symlink_to(elsewhere)
    (work / "x.py").write_text("import pkg\n")
    return "python3 x.py"


# Fixed on branch fixE10 (textnames.imports_note: the script subtracted only when counted; links followed).
@pytest.mark.parametrize("layout", [_no_suffix, _linked_package], ids=["no-suffix", "linked-package"])
def test_class8_the_imports_note_misses_code_the_script_imports(
    state_dir: Path, layout: Callable[[Path], str]
) -> None:
    work = workdir(state_dir, {})
    command = layout(work)
    ask, result = asyncio.run(approved_run(state_dir, command, work, lambda: None))
    assert "helper" in result["text"] or "pkg" in result["text"]  # it ran, and imported the unbound file
    assert any("import code" in w for w in ask.get("warnings") or []), ask.get("warnings")


_PRODUCERS = [
    "git show HEAD:s.sh | sh",  # the program is a git blob: a commit after the approval changes it
    "git cat-file -p HEAD:s.sh | sh",
    "curl -s file://{W}/s.sh | sh",  # a file named inside a URL
    "dd if=s.sh status=none | sh",  # a file named inside an operand's `=value`
]


# Fixed on branch fixE10 (engine.commands.stdinprogram: a program on an interpreter's stdin only from
# literal files read by cat; any other producer refused).
@pytest.mark.parametrize("command", _PRODUCERS)
def test_class5_a_shell_fed_by_a_producer_the_binder_cannot_read_is_unbound(
    state_dir: Path, command: str
) -> None:
    import subprocess

    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n"})
    git = ["git", "-c", "user.email=a@b.c", "-c", "user.name=a"]
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "s.sh"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=work, check=True)

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")
        subprocess.run([*git, "commit", "-qam", "two"], cwd=work, check=True)

    ask, result = asyncio.run(approved_run(state_dir, command.format(W=work), work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


# A loader with no libc: the kernel maps it as the program's PT_INTERP and jumps to it; it says PAYLOAD.
_LOADER_C = r"""
void _start(void) {
    static const char m[] = "PAYLOAD\n";
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(1), "D"(1), "S"(m), "d"(8) : "rcx", "r11", "memory");
    __asm__ volatile("syscall" : : "a"(60), "D"(0) : "rcx", "r11", "memory");
    for (;;) {}
}
"""


def test_class6_an_elf_loader_the_agent_writes_is_unbound_on_allow_once(state_dir: Path) -> None:
    import platform
    import subprocess

    system_loader = Path("/lib64/ld-linux-x86-64.so.2")
    if platform.machine() != "x86_64" or not system_loader.exists() or shutil.which("gcc") is None:
        pytest.skip("needs gcc and x86_64 glibc")
    work = workdir(state_dir, {"t.c": '#include <stdio.h>\nint main(void) { puts("APPROVED"); return 0; }\n'})
    (work / "pay.c").write_text(_LOADER_C)
    shutil.copy(system_loader, work / "ld.so")
    subprocess.run(
        ["gcc", "-o", str(work / "tool"), str(work / "t.c"), f"-Wl,--dynamic-linker={work}/ld.so"], check=True
    )
    subprocess.run(
        ["gcc", "-nostdlib", "-static", "-no-pie", "-O1", "-o", str(work / "pay"), str(work / "pay.c")],
        check=True,
    )

    def rewrite() -> None:
        os.replace(work / "pay", work / "ld.so")

    ask, result = asyncio.run(approved_run(state_dir, "./tool", work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


_INLINE_RUNS_A_FILE = [
    ("python3 -c 'import runpy,sys; runpy.run_path(sys.argv[1])' s.py", "s.py", 'print("PAYLOAD")\n'),
    ("perl -e 'do \"./$ARGV[0]\"' s.pl", "s.pl", 'print "PAYLOAD\\n";\n'),
    ("node -e 'require(process.argv[1])' ./s.js", "s.js", 'console.log("PAYLOAD")\n'),
]


# Fixed on branch fixE10 (content.bind: inline code with argv words after it binds every file the text names).
@pytest.mark.parametrize(("command", "name", "payload"), _INLINE_RUNS_A_FILE)
def test_class5_inline_code_running_a_file_its_argv_names_leaves_it_unbound(
    state_dir: Path, command: str, name: str, payload: str
) -> None:
    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    work = workdir(
        state_dir,
        {
            "s.py": 'print("APPROVED")\n',
            "s.pl": 'print "APPROVED\\n";\n',
            "s.js": 'console.log("APPROVED")\n',
        },
    )

    def rewrite() -> None:
        (work / name).write_text(payload)

    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


def test_class5_the_approval_sockets_request_grant_is_not_bound_to_content(state_dir: Path) -> None:
    import uuid

    from engine.approvals.socket.server import (
        ApprovalSocketServer,
        exec_frame,
        request_decision,
        request_exec,
    )
    from engine.tools.exec_host import LocalExecHost

    write_config(state_dir, ASK)
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n"})
    asked: list[str] = []

    async def human(prompt: Any) -> str:
        asked.append((work / "s.sh").read_text())  # what the operator inspects when asked
        return "allow-once" if len(asked) == 1 else "deny"

    async def scenario() -> dict[str, Any] | None:
        path, token = state_dir.parent / "a.sock", "k" * 32
        host = LocalExecHost(
            config_path=state_dir / "config.toml", approvals_path=state_dir / "exec-approvals.json"
        )
        async with ApprovalSocketServer(path, token, decider=human, exec_handler=host):
            rid = str(uuid.uuid4())
            ask = {"command": "sh s.sh", "cwd": str(work), "agentId": "main"}
            assert await request_decision(path, token, ask, request_id=rid) == "allow-once"
            (work / "s.sh").write_text("echo PAYLOAD\n")
            run = {
                "command": ["sh", "s.sh"],
                "rawCommand": "sh s.sh",
                "cwd": str(work),
                "agentId": "main",
                "approvalDecision": "allow-once",
            }
            return await request_exec(path, token, run, frame=exec_frame(token, run, request_id=rid))

    answer = asyncio.run(scenario())
    assert answer is not None
    assert "PAYLOAD" not in json.dumps(answer), (asked, answer)


def test_class5_perl_hands_a_script_to_its_shebang_interpreter_which_is_unbound(state_dir: Path) -> None:
    if shutil.which("perl") is None:
        pytest.skip("perl is not installed")
    work = workdir(state_dir, {"x.pl": '#!./evil\nprint "perl\\n";\n', "evil": "#!/bin/sh\necho APPROVED\n"})
    os.chmod(work / "evil", 0o755)

    def rewrite() -> None:
        (work / "evil").write_text("#!/bin/sh\necho PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, "perl x.pl", work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


def test_class5_a_perl_script_whose_shebang_says_d_reads_debugger_code_unasked(state_dir: Path) -> None:
    if shutil.which("perl") is None:
        pytest.skip("perl is not installed")
    work = workdir(state_dir, {"d.pl": '#!/usr/bin/perl -d\nprint "hi\\n";\n'})
    params = {
        "command": "perl d.pl",
        "agentId": "main",
        "workdir": str(work),
        "background": True,
        "pty": True,
    }

    async def scenario() -> str:
        write_config(state_dir, ASK)
        async with gateway(state_dir):
            operator = await connect(state_dir, "op")
            agent = await connect(state_dir, "ag")
            try:
                await operator.request("approvals.attach", {})
                first = asyncio.ensure_future(agent.request("exec", params))
                rows = await wait_until(operator.pending_approvals, 30)
                if "allow-always" not in rows[0]["allowedDecisions"]:
                    await operator.request("approve", {"id": rows[0]["id"], "decision": "deny"})
                    await first
                    return ""
                await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-always"})
                await asyncio.wait_for(first, 60)
                await operator.request("approvals.detach", {})  # no human from here on
                again = await asyncio.wait_for(agent.request("exec", params), 60)
                sid = again["details"].get("sessionId")
                if not sid:
                    return again["text"]
                code = 'system("echo PAY" . "LOAD")\n'
                await agent.request("process", {"action": "write", "sessionId": sid, "data": code})

                async def log() -> str:
                    text = (await agent.request("process", {"action": "log", "sessionId": sid}))["text"]
                    return text if "PAYLOAD" in text else ""

                shown = await wait_until(log, 30)
                await agent.request("process", {"action": "kill", "sessionId": sid})
                return str(shown)
            finally:
                await agent.close()
                await operator.close()

    assert "PAYLOAD" not in asyncio.run(scenario())


def test_class5_the_65th_file_an_unparsed_text_names_is_unbound(state_dir: Path) -> None:
    names = [f"f{i:02d}" for i in range(64)]
    work = workdir(state_dir, {**dict.fromkeys(names, ""), "s.sh": "echo APPROVED\n"})

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")

    command = f"cat {' '.join(names)} s.sh | sh"
    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], ("s.sh" in bound_paths(ask), result["text"][-300:])


# Fixed on this branch (the same change): `tclsh -encoding utf-8 x.tcl` bound 'utf-8' (absent) as the
# script (the `other` family's options are read by a guess) and left x.tcl unbound on allow-once.
def test_class5_tclsh_encoding_value_is_read_as_the_script(state_dir: Path) -> None:
    if shutil.which("tclsh") is None:
        pytest.skip("tclsh is not installed")
    work = workdir(state_dir, {"x.tcl": "puts APPROVED\n"})

    def rewrite() -> None:
        (work / "x.tcl").write_text("puts PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, "tclsh -encoding utf-8 x.tcl", work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


# Spellings that held (round 10 e): each names s.sh in a way the binder reads, so a rewrite between the
# ask and the run is refused as approval-stale.
_HELD = [
    "timeout 5 sh s.sh",
    "nice -n 3 bash s.sh",
    "command -p sh s.sh",
    "cat s''.sh | sh",
    "sh 3<s.sh <&3",
    ". ./s.sh x",
    'trap "sh s.sh" EXIT',
    "ulimit -t 5; sh s.sh",
    "sed -n -s -f s.sed s.sh",
]


@pytest.mark.parametrize("command", _HELD)
def test_round10_e_spellings_that_bind_the_script_refuse_a_rewrite(state_dir: Path, command: str) -> None:
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n", "s.sed": "1p\n"})

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")
        (work / "s.sed").write_text("1e echo PAYLOAD\n")

    _ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], result["text"]
    assert "approval-stale" in result["text"], result["text"]


_BUILT_COMMANDS = [
    'env -S"sh s.sh"',  # -S's string attached: no word of it names sh or s.sh to bindproof or file_words
    'env --split-string="sh s.sh"',
    "xargs -a list sh",  # the script's name is in `list` (bound), s.sh itself is not
]


@pytest.mark.parametrize("command", _BUILT_COMMANDS)
def test_class5_a_command_built_from_a_string_or_file_leaves_its_script_unbound(
    state_dir: Path, command: str
) -> None:
    work = workdir(state_dir, {"s.sh": "echo APPROVED\n", "list": "s.sh\n"})

    def rewrite() -> None:
        (work / "s.sh").write_text("echo PAYLOAD\n")

    ask, result = asyncio.run(approved_run(state_dir, command, work, rewrite))
    assert "PAYLOAD" not in result["text"], (bound_paths(ask), result["text"])


def test_class5_the_approval_sockets_grant_without_a_cwd_runs_in_any_directory(state_dir: Path) -> None:
    import uuid

    from engine.approvals.socket.server import (
        ApprovalSocketServer,
        exec_frame,
        request_decision,
        request_exec,
    )
    from engine.tools.exec_host import LocalExecHost

    write_config(state_dir, ASK)
    elsewhere = state_dir.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "s.sh").write_text("echo PAYLOAD\n")
    asked: list[str] = []

    async def human(prompt: Any) -> str:
        asked.append(prompt.command)
        return "allow-once" if len(asked) == 1 else "deny"

    async def scenario() -> dict[str, Any] | None:
        path, token = state_dir.parent / "a.sock", "k" * 32
        host = LocalExecHost(
            config_path=state_dir / "config.toml", approvals_path=state_dir / "exec-approvals.json"
        )
        async with ApprovalSocketServer(path, token, decider=human, exec_handler=host):
            rid = str(uuid.uuid4())
            ask = {"command": "sh s.sh", "agentId": "main"}
            assert await request_decision(path, token, ask, request_id=rid) == "allow-once"
            run = {
                "command": ["sh", "s.sh"],
                "rawCommand": "sh s.sh",
                "cwd": str(elsewhere),
                "agentId": "main",
                "approvalDecision": "allow-once",
            }
            return await request_exec(path, token, run, frame=exec_frame(token, run, request_id=rid))

    answer = asyncio.run(scenario())
    assert answer is not None
    assert "PAYLOAD" not in json.dumps(answer), (asked, answer)
