"""Fresh attacks on issue 27's constructions (classes 4, 5, 6, 8), through the real gateway.

Each test is an attack: it fails while the hole is open. An allowlisted host tool must never run code
from a tree the agent can write without a human seeing it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import ALLOWLIST, cli, connect, gateway, wait_until, write_config
from tests.helpers.race import exchange, exchange_loop, tries

GIT_ID = ["-c", "user.email=a@b", "-c", "user.name=a"]


def allow(state: Path, pattern: str, arg_pattern: str | None = None) -> None:
    args = ["approvals", "allowlist", "add", pattern]
    if arg_pattern is not None:
        args += ["--arg-pattern", arg_pattern]
    done = cli(state, *args)
    assert done.returncode == 0, done.stderr


async def agent_exec(state: Path, command: str, workdir: Path, **extra: Any) -> dict[str, Any]:
    """The agent's exec through a real gateway with nobody to approve: an ask is denied (askFallback)."""
    async with gateway(state):
        client = await connect(state, operator=False)
        try:
            return await client.request(
                "exec", {"command": command, "workdir": str(workdir), "timeout": 60, **extra}
            )
        except Exception as exc:  # a denial: the command did not run
            return {"error": str(exc)}
        finally:
            await client.close()


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True)


async def test_class4_make_remakes_a_missing_makefile_from_the_tree(state_dir: Path, tmp_path: Path) -> None:
    """No Makefile, so nothing for the tree vetting to name; but make's built-in rule `%: %.sh` remakes the
    missing default makefile from `Makefile.sh` and then runs the recipes it holds."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make", "^test$")
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    (work / "Makefile.sh").write_text(f"test:\n\ttouch {marker}\n")
    result = await agent_exec(state_dir, "make test", work)
    assert not marker.exists(), result


async def test_class5_git_recurses_into_a_submodule_no_gitmodules_names(
    state_dir: Path, tmp_path: Path
) -> None:
    """git status recurses into every gitlink of the index that holds a repository, listed in
    .gitmodules or not; the vetting followed .gitmodules only, so the submodule's filter ran unasked."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/git", "^status( --short)?$")
    top = tmp_path / "top"
    marker = tmp_path / "pwned"
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    git(top, "commit", "-q", "--allow-empty", "-m", "init")
    sub = top / "sub"
    subprocess.run(["git", "init", "-q", str(sub)], check=True)
    (sub / "f").write_text("a\n")
    git(sub, "add", "f")
    git(sub, "commit", "-q", "-m", "s")
    git(top, "add", "sub")
    git(top, "commit", "-q", "-m", "gitlink")
    assert not (top / ".gitmodules").exists()
    (sub / ".gitattributes").write_text("* filter=x\n")
    git(sub, "config", "filter.x.clean", f"sh -c 'touch {marker}; cat'")
    (sub / "f").write_text("b\n")
    os.utime(sub / "f", (1_500_000_000, 1_500_000_000))
    result = await agent_exec(state_dir, "git status --short", top)
    assert not marker.exists(), result


async def _approve_always(state: Path, command: str, workdir: Path) -> None:
    """The operator approves `command` once with allow-always, as the console would."""
    operator = await connect(state, "console")
    await operator.request("approvals.attach", {})
    agent = await connect(state, operator=False)
    try:
        run = asyncio.ensure_future(
            agent.request("exec", {"command": command, "workdir": str(workdir), "timeout": 60})
        )
        rows = await wait_until(operator.pending_approvals)
        await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-always"})
        await run
    finally:
        await agent.close()
        await operator.close()


async def test_class6_a_makefile_swapped_after_the_view_is_built_runs(
    state_dir: Path, tmp_path: Path
) -> None:
    """The approved Makefile is bound read-only at its path in the run's namespace; but renaming (or
    exchanging) another file over that path on the host moves the name off the mount, and make's *first*
    read of the Makefile happens after the spawn, by path. With allow-always given for the inert Makefile, a
    racer exchanging it with another one runs the other one's recipes."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make", "^test$")
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    (work / "Makefile").write_text("test:\n\t@echo fine\n")
    evil = tmp_path / "Makefile.evil"  # outside the tree: make must never see it by any name
    evil.write_text(f"test:\n\t@touch {marker}\n")
    async with gateway(state_dir):
        # make in a tree the agent can write is approved once only (treecode.RECIPE_TREE): each try is
        # asked while the inert Makefile is in place, and the racer swaps from the approval to the run.
        operator = await connect(state_dir, "console")
        await operator.request("approvals.attach", {})
        agent = await connect(state_dir, operator=False)
        seen: set[str] = set()
        try:
            for _ in tries(100):
                run = asyncio.ensure_future(
                    agent.request("exec", {"command": "make test", "workdir": str(work), "timeout": 60})
                )

                async def fresh() -> list[dict[str, Any]]:
                    return [r for r in await operator.pending_approvals() if r["id"] not in seen]

                rows = await wait_until(fresh)
                seen.add(rows[0]["id"])
                with exchange_loop(str(work / "Makefile"), str(evil)):
                    await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-once"})
                    with contextlib.suppress(Exception):  # a stale refusal is a win for the defence
                        await run
                if marker.exists():
                    break
                if "touch" in (work / "Makefile").read_text():  # the racer stopped mid-way: put it back
                    exchange(str(work / "Makefile"), str(evil))
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), "a Makefile other than the approved one ran"


async def _approve_once_after(
    state: Path, command: str, workdir: Path, meanwhile: Callable[[], None]
) -> None:
    """The agent asks; while the ask waits, `meanwhile` runs (the agent's next move); then the operator
    allows once what the ask showed."""
    operator = await connect(state, "console")
    await operator.request("approvals.attach", {})
    agent = await connect(state, operator=False)
    try:
        run = asyncio.ensure_future(
            agent.request("exec", {"command": command, "workdir": str(workdir), "timeout": 60})
        )
        rows = await wait_until(operator.pending_approvals)
        meanwhile()
        await operator.request("approve", {"id": rows[0]["id"], "decision": "allow-once"})
        with contextlib.suppress(Exception):  # refused as stale: the defence held
            await run
    finally:
        await agent.close()
        await operator.close()


async def test_class4_an_option_naming_a_file_is_bound_with_the_command(
    state_dir: Path, tmp_path: Path
) -> None:
    """`node --env-file=.env app.js`: node's option is one no grammar covers, so every file the command
    names is bound whole, but a file named inside an option word (`--env-file=.env`) was not: the agent
    put `NODE_OPTIONS=--require ./evil.js` in .env while the ask waited, and the approval ran evil.js.
    Allow-always was offered too (bound to app.js alone): an option nobody modelled can load anything."""
    write_config(state_dir, ALLOWLIST)
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    (work / "app.js").write_text("console.log('app')\n")
    (work / ".env").write_text("PORT=3000\n")
    (work / "evil.js").write_text(f"require('fs').writeFileSync({str(marker)!r}, 'x')\n")
    command = "node --env-file=.env app.js"
    done = cli(state_dir, "policy", "check", "--json", "--cwd", str(work), "--", command)
    assert "allow-always" not in json.loads(done.stdout)["allowedDecisions"]

    def rewrite() -> None:
        (work / ".env").write_text("NODE_OPTIONS=--require ./evil.js\n")

    async with gateway(state_dir):
        await _approve_once_after(state_dir, command, work, rewrite)
    assert not marker.exists(), "a rewritten --env-file ran code under an approval given for other bytes"


def test_class4_python_bytecode_from_an_option_named_dir_is_never_saved(
    state_dir: Path, tmp_path: Path
) -> None:
    """`python3 -X pycache_prefix=./pc x.py` takes the standard library's bytecode from ./pc: allow-always
    bound to x.py let the agent plant `./pc/usr/lib/python3.*/json/__init__.*.pyc` (header copied from
    the real source's mtime and size) and every later run imported it. No file holds what that option
    loads, so it must not be saved; inert -X options still are."""
    write_config(state_dir, ALLOWLIST)
    (tmp_path / "x.py").write_text("import json\n")

    def offered(command: str) -> list[str]:
        done = cli(state_dir, "policy", "check", "--json", "--cwd", str(tmp_path), "--", command)
        return list(json.loads(done.stdout)["allowedDecisions"])

    assert "allow-always" not in offered("python3 -X pycache_prefix=./pc x.py")
    assert "allow-always" not in offered("python3 -Xpresite=evil x.py")
    assert "allow-always" in offered("python3 -X utf8 x.py")


@pytest.mark.parametrize("preload", ["-r ./hook.js", "--require=./hook.js", "--import ./hook.js"])
async def test_class8_a_preloaded_module_is_bound_with_the_command(
    state_dir: Path, tmp_path: Path, preload: str
) -> None:
    """`node -r ./hook.js app.js`: node runs hook.js before app.js, but only app.js was bound; allow-always
    then held while hook.js was rewritten, and the next run ran the new hook unasked."""
    write_config(state_dir, ALLOWLIST)
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    (work / "app.js").write_text("console.log('app')\n")
    (work / "hook.js").write_text("console.log('hook')\n")
    command = f"node {preload} app.js"
    async with gateway(state_dir):
        await _approve_always(state_dir, command, work)
        assert not marker.exists()
        (work / "hook.js").write_text(f"require('fs').writeFileSync({str(marker)!r}, 'x')\n")
        agent = await connect(state_dir, operator=False)
        try:
            with contextlib.suppress(Exception):  # asked and denied: nobody approves
                await agent.request("exec", {"command": command, "workdir": str(work)})
        finally:
            await agent.close()
    assert not marker.exists(), "a rewritten preload ran under an approval given for other bytes"


def test_class8_a_preload_found_by_search_is_never_saved(state_dir: Path, tmp_path: Path) -> None:
    """`node -r hookmod app.js` loads whatever node_modules/hookmod holds up the tree: nothing to bind, so
    allow-always is not offered (as for a program read from stdin)."""
    write_config(state_dir, ALLOWLIST)
    (tmp_path / "app.js").write_text("console.log('app')\n")
    done = cli(state_dir, "policy", "check", "--json", "--cwd", str(tmp_path), "--", "node -r hookmod app.js")
    decision = json.loads(done.stdout)
    assert decision["decision"] == "ask"
    assert "allow-always" not in decision["allowedDecisions"]


async def test_class4_an_allowlisted_linter_runs_a_plugin_its_config_names(
    state_dir: Path, tmp_path: Path
) -> None:
    """mypy reads mypy.ini from the cwd and imports the plugins it names: the tree vetting knows make, npm,
    cargo, … but not mypy, so an allowlisted `mypy x.py` ran the agent's plugin without an ask."""
    mypy = str(Path(sys.executable).parent / "mypy")
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, mypy)
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    (work / "mypy.ini").write_text("[mypy]\nplugins = ./plug.py\n")
    (work / "plug.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "def plugin(version):\n    from mypy.plugin import Plugin\n    return Plugin\n"
    )
    (work / "x.py").write_text("x = 1\n")
    result = await agent_exec(state_dir, f"{mypy} x.py", work)
    assert not marker.exists(), result


@pytest.mark.parametrize("key", ["LANGUAGE", "LC_MESSAGES"])
async def test_class4_an_inert_locale_key_naming_a_path_loads_the_agents_catalogue(
    state_dir: Path, tmp_path: Path, key: str
) -> None:
    """`LANGUAGE` is on the inert list, but glibc takes a value with slashes as a path: an allowlisted `ls`
    printed the agent's .mo strings, which programs use as printf formats (`%n`, `%s` read and write the
    program's memory). An inert key is inert only with a value of its own shape."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/ls")
    catalogue = tmp_path / "cat" / "LC_MESSAGES"
    catalogue.mkdir(parents=True)
    po = tmp_path / "x.po"
    po.write_text(
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "Try \'%s --help\' for more information.\\n"\nmsgstr "HIJACKED %s\\n"\n'
    )
    subprocess.run(["msgfmt", "-o", str(catalogue / "coreutils.mo"), str(po)], check=True)
    up = "../" * 8 + str(tmp_path / "cat").lstrip("/")
    env = {"LANG": "C.UTF-8", key: up if key == "LANGUAGE" else str(tmp_path / "cat")}
    result = await agent_exec(state_dir, "ls --bogus", tmp_path, env=env)
    assert "HIJACKED" not in json.dumps(result), result


async def test_class6_the_cwd_exchanged_after_its_check_runs_another_trees_makefile(
    state_dir: Path, tmp_path: Path
) -> None:
    """An allowlisted `make test` in a directory with no makefile: nothing to ask about. The cwd's inode is
    checked and the tree re-vetted just before the spawn, but the child then changes into the cwd *by
    path*: a racer exchanging the directory with one holding a Makefile made make run that Makefile."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make", "^-r test$")
    work, other = tmp_path / "w", tmp_path / "y"
    work.mkdir()
    other.mkdir()
    marker = tmp_path / "pwned"
    (other / "Makefile").write_text(f"test:\n\t@touch {marker}\n")
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False)
        try:
            plain = await agent.request("exec", {"command": "make -r test", "workdir": str(work)})
            assert "No rule to make target" in plain["text"], plain  # it runs, in the vetted directory
            with exchange_loop(str(work), str(other)):
                for _ in tries(100):  # the old code lost within a few tries; 300 outran the timeout held
                    with contextlib.suppress(Exception):  # refused or asked: the defence held
                        # Bounded: once, under held sessions, a request here never returned (the whole test
                        # hit pytest's 300 s timeout); noted in the stop's closing note, not yet found.
                        await asyncio.wait_for(
                            agent.request("exec", {"command": "make -r test", "workdir": str(work)}), 30
                        )
                    if marker.exists():
                        break
        finally:
            await agent.close()
    assert not marker.exists(), "make ran a Makefile from a directory that was never vetted"


@pytest.mark.parametrize("ignore_none", [False, True])
async def test_class6_a_gitlink_added_after_the_re_vet_is_entered(
    state_dir: Path, tmp_path: Path, ignore_none: bool
) -> None:
    """The spawn's re-vet reads the index for gitlinks, and git reads it again after the spawn, by path: a
    racer exchanging the index with one that holds a gitlink (to a repository whose filter leaves a
    marker) made an allowlisted `git status` enter a submodule nobody vetted. Variant: a second racer
    swaps in a `.gitmodules` giving that path `ignore = none`, which overrides a config default."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/git", "^status( --short)?$")
    top = tmp_path / "top"
    marker = tmp_path / "pwned"
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    git(top, "commit", "-q", "--allow-empty", "-m", "init")
    sub = top / "sub"
    subprocess.run(["git", "init", "-q", str(sub)], check=True)
    (sub / "f").write_text("a\n")
    git(sub, "add", "f")
    git(sub, "commit", "-q", "-m", "s")
    git(top, "add", "sub")
    with_gitlink = tmp_path / "index-with-gitlink"
    with_gitlink.write_bytes((top / ".git" / "index").read_bytes())
    git(top, "update-index", "--force-remove", "sub")
    (sub / ".gitattributes").write_text("* filter=x\n")
    git(sub, "config", "filter.x.clean", f"sh -c 'touch {marker}; cat'")
    (sub / "f").write_text("b\n")
    os.utime(sub / "f", (1_500_000_000, 1_500_000_000))
    (top / ".gitmodules").write_text("")
    evil_modules = tmp_path / "gitmodules"
    evil_modules.write_text('[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n')
    modules = exchange_loop(str(top / ".gitmodules"), str(evil_modules)) if ignore_none else None
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False)
        try:
            with (
                exchange_loop(str(top / ".git" / "index"), str(with_gitlink)),
                modules or contextlib.nullcontext(),
            ):
                for _ in tries(100):  # on the old code the racer won within the first few
                    with contextlib.suppress(Exception):  # refused as stale, or asked: the defence held
                        await asyncio.wait_for(
                            agent.request("exec", {"command": "git status --short", "workdir": str(top)}), 30
                        )
                    if marker.exists():
                        break
        finally:
            await agent.close()
    assert not marker.exists(), "git entered a submodule whose gitlink appeared after the re-vet"
