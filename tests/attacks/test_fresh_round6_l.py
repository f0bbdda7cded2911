"""Fresh round 6, attacker l: classes 4 (what runs unasked) and 5 (emulating another program) against the
allowlist, safe bins, allow-always, the env allow-list, content binding and the host view."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.gateway import connect, gateway, wait_until, write_config


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short root for a state dir (its sockets must stay under 107 bytes) and a home. The state dir is
    this process's too: an approved run reads its config (hostWritable) from it."""
    root = Path(tempfile.mkdtemp(prefix="l6-", dir="/tmp"))
    os.chmod(root, 0o700)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(root / "s"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _state(root: Path) -> Path:
    state = root / "s"
    state.mkdir(mode=0o700)
    return state


async def _exec(client: ControlClient, command: str, cwd: Path, **params: Any) -> dict[str, Any]:
    result = await client.request(
        "exec", {"command": command, "agentId": "main", "workdir": str(cwd), **params}
    )
    details: dict[str, Any] = result["details"]
    return details


async def _approve_and_run(client: ControlClient, command: str, cwd: Path, done: Path) -> None:
    """The operator approves `command` (always when offered, else once) and its run writes `done`."""
    asked = await _exec(client, command, cwd)
    assert asked["status"] == "approval-pending", asked
    decision = "allow-always" if "allow-always" in asked["allowedDecisions"] else "allow-once"
    await client.request("approve", {"id": asked["approvalId"], "decision": decision})
    await wait_until(done.exists, timeout=30)
    done.unlink()


# --------------------------------------------------------------------------------------------------------
# Class 4: a startup file the program reads by itself. The daemon's session host gives every background
# run one socketpair for stdin and stdout; bash started with `-c` and a socket on stdin believes rshd/sshd
# started it and sources /etc/bash.bashrc and ~/.bashrc (Debian's SSH_SOURCE_BASHRC, when SHLVL makes it a
# top-level shell: a gateway started by systemd or as a container's entrypoint has no SHLVL). A missing
# ~/.bashrc is not bound by the host view ("it runs in the operator's next login shell, not in
# exechost"), so an allowlisted writer plants one, and every later bash exechost starts runs it: here an
# allow-always `bash build.sh` (or `#!/bin/bash` tool), content-bound, re-run unasked in the background.
# Fixed where exechost itself starts bash with `-c` (a verified copy, its argv[0] bash, a `bash -c` chain:
# `--norc`); a program's own `bash -c` (make with SHELL := /bin/bash) sourced it until the home became
# read-only as a whole in the host view (nothing plants an rc file there now).


@pytest.mark.parametrize(
    "command",
    [
        # the verified copy ran as `bash -c '. COPY' build.sh`: fixed, it runs with --norc
        pytest.param("bash build.sh", id="bash-script"),
        pytest.param("./tool", id="bash-shebang"),
        # make runs each recipe as `$(SHELL) -c`, a bash of make's own: no ~/.bashrc can be planted (the
        # home is read-only in the host view)
        # (and make in a tree the agent can write is approved once only: treecode.RECIPE_TREE)
        pytest.param("make test", id="make-shell-bash"),
    ],
)
async def test_class4_allow_always_bash_script_sources_a_planted_bashrc(
    short: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # as the daemon runs host sessions
    monkeypatch.delenv("SHLVL", raising=False)  # a gateway started by systemd / a container entrypoint
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    (work / "build.sh").write_text(f"echo built > {short}/done\n")
    (work / "Makefile").write_text(f"SHELL := /bin/bash\ntest:\n\techo built > {short}/done\n")
    (work / "tool").write_text(f"#!/bin/bash -e\necho built > {short}/done\n")
    (work / "tool").chmod(0o755)
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            # The operator reads build.sh (the Makefile) and allows it always (bound to its sha256).
            await _approve_and_run(client, command, work, short / "done")
            # The agent plants ~/.bashrc with the allowlisted tee (a heredoc is data to tee): unasked.
            plant = f"tee {home}/.bashrc <<'EOF'\necho owned > {short}/pwned\nEOF"
            planted = await _exec(client, plant, work)
            assert planted["status"] == "completed", planted
            # The allow-always entry now runs unasked, in the background, and bash sources the rc file.
            again = await _exec(client, command, work, background=True)
            if not refused(again):
                await wait_until(lambda: (short / "done").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "bash sourced the agent's ~/.bashrc in an unasked run"


# The same without any approval: a `bash -c '<chain>'` whose segments are allowlisted runs the pinned
# re-rendering of the chain in the pinned shell the agent named (`'/usr/bin/bash' '-c' "'/usr/bin/ls';
# '/usr/bin/ls'"`): bash with -c, a socket on stdin, so an allowlisted `ls` chain sourced ~/.bashrc.
# Fixed for this rendering (rendering._render adds `--norc` when the pinned shell is bash); the verified
# script copy, exechost's argv[0] bash and a program's own `bash -c` (above) are still open.


async def test_class4_allowlisted_bash_c_chain_sources_a_planted_bashrc(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")
    monkeypatch.delenv("SHLVL", raising=False)
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/tee")
    store.add_allowlist("main", "/usr/bin/ls")
    store.add_allowlist("main", "/usr/bin/touch")
    async with gateway(state):
        client = await connect(state)
        try:
            plant = f"tee {home}/.bashrc <<'EOF'\necho owned > {short}/pwned\nEOF"
            assert (await _exec(client, plant, work))["status"] == "completed"
            ran = await _exec(client, f"bash -c 'ls; touch {short}/done'", work, background=True)
            assert not refused(ran), ran
            await wait_until(lambda: (short / "done").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "an allowlisted bash -c chain sourced the agent's ~/.bashrc"


# Class 4 again, without the session host: Python runs every `.pth` file of the user's site-packages at
# startup (a line starting `import` is executed). The host view makes a list of the operator's files
# read-only (git/npm/cargo config, rc files); ~/.local is not on it, so an allowlisted writer plants a
# `.pth` there, and the operator's allow-always `python3 app.py` (its bytes bound, run from a sealed copy)
# runs the agent's line first, unasked, in the foreground.


async def test_class4_allow_always_python_runs_a_planted_user_site_pth(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    python = "/usr/bin/python3"
    site = subprocess.run(
        [python, "-c", "import site; print(site.getusersitepackages())"],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout.strip()
    Path(site).mkdir(parents=True)  # the operator's own `pip install --user` made it
    work = home / "w"
    work.mkdir()
    (work / "app.py").write_text(f"open({str(short / 'done')!r}, 'w').write('ran')\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            await _approve_and_run(client, f"{python} app.py", work, short / "done")
            line = f"import os; open({str(short / 'pwned')!r}, 'w').write('owned')"
            planted = await _exec(client, f"tee {site}/zz.pth <<'EOF'\n{line}\nEOF", work)
            assert planted["status"] == "completed", planted
            again = await _exec(client, f"{python} app.py", work)
            assert refused(again) or (short / "done").exists(), again
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "python ran the agent's .pth in an unasked run"


# Class 5: how perl finds its program. `perl -S app.pl` searches PATH for app.pl (perlrun: "-S makes Perl
# use the PATH environment variable to search for the program") and never looks in the cwd; the grammar
# reads `-S` as an inert flag, so the binder binds ./app.pl in the cwd, proves it, shows its digest and
# offers allow-always. With a directory the agent can write on PATH (~/bin, which Debian's ~/.profile puts
# there), the approved run executes the agent's ~/bin/app.pl, bytes nobody was shown or bound. Closed by
# construction: no directory on a host run's PATH is the agent's to write (the home is read-only in the
# host view; a writable entry outside it is dropped, hostenv.host_path). `-S` is still read as inert.


async def test_class5_perl_dash_s_runs_a_script_found_on_path_not_the_bound_one(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    (home / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    monkeypatch.setenv("PATH", f"{home}/bin:/usr/bin:/bin")
    work = home / "w"
    work.mkdir()
    ran = f"open(F, '>', '{short}/done'); print F 'ran';\n"
    (work / "app.pl").write_text(ran)  # what the binder binds and shows
    (home / "bin" / "app.pl").write_text(ran)  # what perl -S runs
    (home / "bin" / "app.pl").chmod(0o755)
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            await _approve_and_run(client, "perl -S app.pl", work, short / "done")
            evil = f"open(F, '>', '{short}/pwned'); print F 'owned';"
            plant = f"tee {home}/bin/app.pl <<'EOF'\n{evil}\nEOF"
            assert (await _exec(client, plant, work))["status"] == "completed"
            again = await _exec(client, "perl -S app.pl", work)
            if not refused(again):
                await wait_until(lambda: (short / "done").exists() or (short / "pwned").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the saved approval ran ~/bin/app.pl, which no approval bound"


# Class 4 through class 5: the shell grammar reads `-l` / `--login` as inert flags, but a login bash reads
# /etc/profile and then the first of ~/.bash_profile, ~/.bash_login, ~/.profile, script operand or not.
# The host view binds the rc files present and leaves missing ones creatable (an empty ~/.bash_profile
# would hide ~/.profile). A default Debian home has ~/.profile and ~/.bashrc but no ~/.bash_profile: an
# allowlisted writer creates it, and an approved `bash -l build.sh` (build.sh bound, allow-always offered as
# proven) runs it first.


async def test_class4_login_bash_script_sources_an_agent_created_bash_profile(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    (home / ".profile").write_text("# the operator's\n")
    (home / ".bashrc").write_text("# the operator's\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    (work / "build.sh").write_text(f"echo built > {short}/done\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            await _approve_and_run(client, "bash -l build.sh", work, short / "done")
            plant = f"tee {home}/.bash_profile <<'EOF'\necho owned > {short}/pwned\nEOF"
            assert (await _exec(client, plant, work))["status"] == "completed"
            again = await _exec(client, "bash -l build.sh", work)
            if not refused(again):
                await wait_until(lambda: (short / "done").exists() or (short / "pwned").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the saved login bash approval ran the agent's ~/.bash_profile"


# Class 4, a PATH-like lookup: the host PATH keeps every absolute entry (hostenv.host_path) and the docs
# trust "the programs on the operator's PATH"; but an operator's PATH holds directories this user (so the
# agent, through any allowlisted writer) can write: ~/bin and ~/.local/bin (Debian's ~/.profile), cargo's,
# pyenv's shims, nvm's. git's vetting lets an ssh remote through (a transport git speaks itself) and the
# forced `core.sshCommand=ssh` is found on PATH, so an allowlisted `git fetch` runs the agent's ~/bin/ssh.


async def test_class4_allowlisted_git_fetch_runs_ssh_from_an_agent_writable_path_entry(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    (home / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    monkeypatch.setenv("PATH", f"{home}/bin:/usr/bin:/bin")
    work = home / "w"
    work.mkdir()
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=git)
    subprocess.run(
        ["git", "-C", str(work), "remote", "add", "origin", "ssh://git@localhost/r.git"], check=True, env=git
    )
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/tee")
    store.add_allowlist("main", "/usr/bin/chmod")
    store.add_allowlist("main", "/usr/bin/git", arg_pattern="fetch( origin)?")
    async with gateway(state):
        client = await connect(state)
        try:
            plant = f"tee {home}/bin/ssh <<'EOF'\n#!/bin/sh\necho owned > {short}/pwned\nexit 1\nEOF"
            assert (await _exec(client, plant, work))["status"] == "completed"
            assert (await _exec(client, f"chmod 755 {home}/bin/ssh", work))["status"] == "completed"
            await _exec(client, "git fetch origin", work)  # foreground: done when it answers
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the allowlisted git fetch ran the agent's ~/bin/ssh"


# Class 4, startup files the operator runs: the host view binds the rc files present read-only
# (hosttrust.trusted_configs: .bashrc, .bash_profile, .bash_login, .profile, .zshrc, .zshenv, .zprofile) so
# that no command changes what the operator's shells run. ~/.bash_logout (in Debian's /etc/skel, run when
# a login shell exits), ~/.zlogin and ~/.zlogout are run the same way and were not on the list: an
# allowlisted writer appended to the operator's own ~/.bash_logout. Fixed: hosttrust.RC_FILES holds them.


async def test_class4_the_operators_bash_logout_is_writable_in_the_host_view(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    for name in (".bashrc", ".profile", ".bash_logout"):
        (home / name).write_text("# the operator's\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            for name in (".bashrc", ".bash_logout"):
                await _exec(client, f"tee -a {home}/{name} <<'EOF'\ntouch /tmp/owned\nEOF", work)
        finally:
            await client.close()
    assert (home / ".bashrc").read_text() == "# the operator's\n"  # bound: this one holds
    assert (home / ".bash_logout").read_text() == "# the operator's\n", "the agent changed ~/.bash_logout"


# Class 5: what git runs in another repository. Hooks are off by the forced command-line config
# (`core.hooksPath=/dev/null` through GIT_CONFIG_COUNT/KEY/VALUE, hostenv.GIT_FORCED_CONFIG), and gitvet
# vets the repository the command runs in. But git clears GIT_CONFIG_COUNT (local_repo_env) before it
# starts `git-receive-pack` in a local destination, so a push to a path runs that repository's own hooks
# with its own config, a repository nobody vetted: an allowlisted `git push ../other.git main` runs the
# agent's pre-receive hook.


async def test_class5_allowlisted_git_push_to_a_path_runs_the_destinations_hooks(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    other = short / "other.git"  # outside the home, which is read-only in the host view
    subprocess.run(["git", "init", "-q", "--bare", str(other)], check=True, env=git)
    hook = other / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho owned > {short}/pwned\n")
    hook.chmod(0o755)
    work = home / "w"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=git)
    subprocess.run(
        ["git", "-C", str(work), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
         "--allow-empty", "-m", "x"],
        check=True,
        env=git,
    )  # fmt: skip
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/git", arg_pattern="push .*")
    async with gateway(state):
        client = await connect(state)
        try:
            await _exec(client, f"git push {other} main", work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the allowlisted push ran the destination's pre-receive hook"


# The same for `git archive --remote=<path>`: git-upload-archive runs in the remote repository with that
# repository's config, where a `tar.<format>.command` marked `tar.<format>.remote = true` is honoured.
# Fixed: `archive --remote` names a program like `--exec` (gitargv._PROGRAM_OPTIONS), so it asks.


async def test_class5_allowlisted_git_archive_remote_runs_the_remotes_tar_filter(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    other = home / "other.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(other)], check=True, env=git)
    work = home / "w"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=git)
    subprocess.run(
        ["git", "-C", str(work), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
         "--allow-empty", "-m", "x"],
        check=True,
        env=git,
    )  # fmt: skip
    subprocess.run(["git", "-C", str(work), "push", "-q", str(other), "main"], check=True, env=git)
    for key, value in (
        ("tar.evil.command", f"sh -c 'echo owned > {short}/pwned; cat'"),
        ("tar.evil.remote", "true"),
    ):
        subprocess.run(["git", "-C", str(other), "config", key, value], check=True, env=git)
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist(
        "main", "/usr/bin/git", arg_pattern="archive .*"
    )
    async with gateway(state):
        client = await connect(state)
        try:
            await _exec(client, f"git archive --remote={other} --format=evil main", work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the allowlisted archive ran the remote's tar filter"


# Class 4, the tree a build tool runs: allow-always on `make test` binds the Makefile's digest (and make
# reads its makefiles from sealed copies), but a recipe runs other files of the same tree that nothing binds
# (`sh run.sh`, `./configure`, `python3 tests.py`, the test binary it builds). After the approval the agent
# rewrites run.sh, and the saved approval runs it unasked: a human saw the Makefile, never the code.


async def test_class4_allow_always_make_runs_a_rewritten_script_its_recipe_names(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    (work / "Makefile").write_text("test:\n\tsh run.sh\n")
    (work / "run.sh").write_text(f"echo tested > {short}/done\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            await _approve_and_run(client, "make test", work, short / "done")
            plant = f"tee run.sh <<'EOF'\necho owned > {short}/pwned\nEOF"
            assert (await _exec(client, plant, work))["status"] == "completed"
            await _exec(client, "make test", work)  # a foreground run: done when it answers
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the saved make approval ran the agent's new run.sh"


# Class 5, exechost's own emulation of an interpreter: `python3 -x app.py` skips the script's first line
# (for a non-Unix `#!`); the verified run feeds the sealed copy to a fixed loader (`python3 -x -c LOADER
# app.py`), which compiles every line, so a first line the operator reads as skipped runs.


async def test_class5_python_dash_x_first_line_runs_under_the_loader(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    (work / "app.py").write_text(
        f"open({str(short / 'pwned')!r}, 'w').write('skipped line ran')\n"
        f"open({str(short / 'done')!r}, 'w').write('ran')\n"
    )
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    async with gateway(state):
        client = await connect(state)
        try:
            asked = await _exec(client, "/usr/bin/python3 -x app.py", work)
            assert asked["status"] == "approval-pending"
            await client.request("approve", {"id": asked["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: (short / "done").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the first line, which python3 -x skips, ran"


# Class 5, how git finds its repository: gitvet.discover is "only a guide" because the run is pinned to
# what was vetted, and "no repository" is a GIT_DIR that does not exist, except for init, clone, version,
# help and a bare `git` (pinned._NO_REPO), which were left to find none. `git help` (and `git --help`) does
# find one: it sets up gently and reads the repository's config (help.format, man.viewer, man.<tool>.cmd).
# Where discover and git disagreed, git read a config nobody vetted: git's validate_headref skips any
# isspace() after `ref:` (`ref:\nrefs/heads/main`), _valid_head only blanks and tabs; git takes `refs` (or
# `objects`) by access(X_OK), an executable file included, discover only a directory. Either way discover
# saw no repository, git used it, and an allowlisted `git help log` ran the man viewer its config names.
# Fixed: only init and clone are left unpinned (pinned._NO_REPO), and _valid_head reads HEAD as git does.


def _help_repo_head(git_dir: Path) -> None:
    (git_dir / "HEAD").write_text("ref:\nrefs/heads/main\n")


def _help_repo_refs_file(git_dir: Path) -> None:
    shutil.rmtree(git_dir / "refs")
    (git_dir / "refs").write_text("#!/bin/sh\n")
    (git_dir / "refs").chmod(0o755)


@pytest.mark.parametrize("layout", [_help_repo_head, _help_repo_refs_file], ids=["head-newline", "refs-file"])
@pytest.mark.parametrize("command", ["git help log", "git --help"])
async def test_class5_git_help_reads_a_repository_discover_did_not_find(
    short: Path, monkeypatch: pytest.MonkeyPatch, layout: Any, command: str
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=git)
    for key, value in (("man.viewer", "evil"), ("man.evil.cmd", f"echo owned > {short}/pwned; :")):
        subprocess.run(["git", "-C", str(work), "config", key, value], check=True, env=git)
    layout(work / ".git")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist(
        "main", "/usr/bin/git", arg_pattern=".*help.*"
    )
    async with gateway(state):
        client = await connect(state)
        try:
            await _exec(client, command, work)  # asks (the config is vetted) or runs outside any repository
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "git help ran the man viewer an unvetted repository config names"


# Class 5, exechost's own rendering read by the interpreter's grammar: a verified script runs as the
# interpreter's options, then `-c LOADER name` (python) or `-c '. COPY' name` (a POSIX shell) in place of
# the script operand. When the agent ended the options with `--` (or a shell's lone `-`), the `--` stays in
# front: `python3 -- -c LOADER app.py` would make python run a file named `-c` from the cwd, `sh -- -c …`
# the shell. `--` was handled (the copy is then named by its /proc path); a shell's lone `-`, which ends
# its options the same way, was not: `bash - app.sh` ran `bash - -c '. COPY' app.sh`, that is ./-c, a
# file nobody bound or was shown. Fixed in content.bind (a lone `-` counts as `--`).


@pytest.mark.parametrize(
    ("command", "payload"),
    [
        ("/usr/bin/python3 -- app.py", "open({pwned!r}, 'w').write('owned')\n"),
        ("sh -- app.sh", "echo owned > {pwned}\n"),
        ("bash - app.sh", "echo owned > {pwned}\n"),
        ("sh - app.sh", "echo owned > {pwned}\n"),
    ],
    ids=["python", "sh", "bash-dash", "sh-dash"],
)
async def test_class5_double_dash_before_the_script_runs_a_file_named_dash_c(
    short: Path, monkeypatch: pytest.MonkeyPatch, command: str, payload: str
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    (work / "app.py").write_text(f"open({str(short / 'done')!r}, 'w').write('ran')\n")
    (work / "app.sh").write_text(f"echo ran > {short}/done\n")
    (work / "-c").write_text(payload.format(pwned=str(short / "pwned")))
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    async with gateway(state):
        client = await connect(state)
        try:
            asked = await _exec(client, command, work)
            assert asked["status"] == "approval-pending"
            await client.request("approve", {"id": asked["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: (short / "done").exists() or (short / "pwned").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the run executed ./-c, not the verified script"


# Class 4, config a trusted config includes: gitvet trusts the operator's global config "and what they
# include", and the host view binds ~/.gitconfig read-only, but not a file it includes. The dotfiles idiom
# `[include] path = ~/.gitconfig.local` (machine-local settings, often absent) names a file any allowlisted
# writer creates; a diff driver defined there is selected by the tree's own .gitattributes (data), and an
# allowlisted `git diff` runs its command (the forced `diff.external=` covers only the global one). Nothing
# is asked at any step.


async def test_class4_allowlisted_git_diff_runs_a_driver_from_a_planted_global_include(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[include]\n\tpath = ~/.gitconfig.local\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=git)
    (work / ".gitattributes").write_text("*.txt diff=x\n")
    (work / "a.txt").write_text("one\n")
    subprocess.run(["git", "-C", str(work), "add", "."], check=True, env=git)
    (work / "a.txt").write_text("two\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/tee")
    store.add_allowlist("main", "/usr/bin/git", arg_pattern="diff")
    driver = f'[diff "x"]\n\tcommand = "echo owned > {short}/pwned; :"'
    async with gateway(state):
        client = await connect(state)
        try:
            planted = await _exec(client, f"tee {home}/.gitconfig.local <<'EOF'\n{driver}\nEOF", work)
            assert planted["status"] == "completed", planted
            await _exec(client, "git diff", work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the allowlisted git diff ran a driver the agent defined"


# Class 4, the same without the home directory: a project's virtualenv is part of the agent's tree, and
# its python runs every `.pth` of the venv's own site-packages at start. The binder binds app.py (and the
# interpreter, a link to the system's python); nothing binds or names the venv's site-packages (the
# imports note skips dot directories), so after an allow-always `.venv/bin/python app.py` the agent's
# `.pth` runs unasked.


async def test_class4_allow_always_venv_python_runs_a_pth_in_the_venvs_site_packages(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(work / ".venv")], check=True)
    site = subprocess.run(
        [
            str(work / ".venv" / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (work / "app.py").write_text(f"open({str(short / 'done')!r}, 'w').write('ran')\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    async with gateway(state):
        client = await connect(state)
        try:
            await _approve_and_run(client, ".venv/bin/python app.py", work, short / "done")
            line = f"import os; open({str(short / 'pwned')!r}, 'w').write('owned')"
            planted = await _exec(client, f"tee {site}/zz.pth <<'EOF'\n{line}\nEOF", work)
            assert planted["status"] == "completed", planted
            again = await _exec(client, ".venv/bin/python app.py", work)
            assert refused(again) or (short / "done").exists(), again
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the venv's python ran the agent's .pth in an unasked run"


# Class 5, how pip finds what it builds: pip's argv is read by its own grammar and the requirement files
# it names are bound, but the lines of those files are pip's argv too (`./pkg`, `-e ./sub`, `-r more.txt`,
# `--find-links ./dir`). A local project named only inside requirements.txt is a tree pip builds (its
# setup.py runs to prepare metadata) that nothing binds: after an allow-always of `pip download -r
# requirements.txt`, the agent rewrites pkg/setup.py and the saved approval runs it.


async def test_class5_pip_builds_a_project_a_requirements_line_names_unbound(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    (work / "pkg").mkdir(parents=True)
    setup = "from setuptools import setup\nsetup(name='pkg', version='1')\n"
    (work / "pkg" / "setup.py").write_text(f"open({str(short / 'done')!r}, 'w').write('ran')\n{setup}")
    (work / "requirements.txt").write_text("./pkg\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/tee")
    command = "/usr/bin/pip download --no-index --no-build-isolation --no-deps -d dl -r requirements.txt"
    async with gateway(state):
        client = await connect(state)
        try:
            await _approve_and_run(client, command, work, short / "done")
            evil = f"open({str(short / 'pwned')!r}, 'w').write('owned')"
            plant = f"tee pkg/setup.py <<'EOF'\n{evil}\n{setup}EOF"
            assert (await _exec(client, plant, work))["status"] == "completed"
            await _exec(client, command, work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "the saved pip approval ran the agent's new pkg/setup.py"


# Class 5, how git parses its options: gitvet asks for the few options that name a program
# (`fetch|ls-remote --upload-pack`, `push --receive-pack|--exec`, `rebase --exec`, …) and for those that
# enter submodules, matching each word whole (or `option=`). git's parse-options takes any unique prefix
# of a long option: `--upload-pa=CMD` is `--upload-pack=CMD`, run through the shell for a local remote,
# so an allowlisted `git ls-remote` (or fetch, clone, push, rebase) ran the agent's command. Fixed:
# gitargv._long reads a long option as parse-options does (any prefix), for these and the submodule ones;
# a short one counts anywhere in a cluster (`git clone -qu CMD` ran CMD too).


@pytest.mark.parametrize(
    "command",
    [
        "git ls-remote --upload-pa='touch {pwned}; git-upload-pack' .",
        "git fetch --upload-pac='touch {pwned}; git-upload-pack' .",
        "git fetch --upload-pack='touch {pwned}; git-upload-pack' .",
        # a short option clustered behind another: `-qu CMD` is `-q -u CMD`
        "git -C {home} clone -qu 'touch {pwned}; git-upload-pack' file://{work} {home}/dst",
    ],
    ids=["ls-remote", "fetch", "fetch-whole", "clone-cluster"],
)
async def test_class5_git_takes_an_abbreviated_program_option(
    short: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    subprocess.run(
        ["git", "init", "-q", str(work)], check=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"}
    )
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist(
        "main", "/usr/bin/git", arg_pattern="(-C \\S+ )?(ls-remote|fetch|clone) .*"
    )
    async with gateway(state):
        client = await connect(state)
        try:
            await _exec(client, command.format(pwned=short / "pwned", work=work, home=home), work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "git ran the command an abbreviated --upload-pack named"


# Class 5, which git subcommands run programs: gitvet asks for `git submodule` unless its first word is
# status or summary, so an operator's `submodule .*` argPattern (for `git submodule status`) looks safe.
# git's internal builtins are subcommands as well: `git submodule--helper foreach CMD` runs CMD in every
# checked-out submodule, and it was on no list. Fixed: every `<x>--<y>` subcommand (git's internal helpers)
# asks (gitargv.argv_programs).


async def test_class5_git_internal_submodule_helper_foreach_runs_a_command(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=git)
    subprocess.run(["git", "init", "-q", str(work / "sub")], check=True, env=git)
    subprocess.run(
        ["git", "-C", str(work / "sub"), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
         "--allow-empty", "-m", "s"],
        check=True,
        env=git,
    )  # fmt: skip
    (work / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n')
    subprocess.run(
        ["git", "-C", str(work), "add", "sub", ".gitmodules"], check=True, env=git, capture_output=True
    )
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist(
        "main", "/usr/bin/git", arg_pattern="submodule.*"
    )
    async with gateway(state):
        client = await connect(state)
        try:
            await _exec(client, f"git submodule--helper foreach 'touch {short}/pwned'", work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "git submodule--helper foreach ran the agent's command"


# The same list misses `git upload-archive <repo>` (upload-pack and receive-pack are on it): it enters the
# named repository and serves an archive request read from stdin, with that repository's config, where a
# `tar.<format>.command` marked `remote = true` runs. git reads its input as data (stdindata), so the
# request comes in a heredoc. Fixed: upload-archive is on gitargv._PROGRAM_SUBCOMMANDS.


async def test_class5_git_upload_archive_runs_the_named_repositorys_tar_filter(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    other = home / "other.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(other)], check=True, env=git)
    work = home / "w"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=git)
    subprocess.run(
        ["git", "-C", str(work), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
         "--allow-empty", "-m", "x"],
        check=True,
        env=git,
    )  # fmt: skip
    subprocess.run(["git", "-C", str(work), "push", "-q", str(other), "main"], check=True, env=git)
    for key, value in (
        ("tar.evil.command", f"sh -c 'echo owned > {short}/pwned; cat'"),
        ("tar.evil.remote", "true"),
    ):
        subprocess.run(["git", "-C", str(other), "config", key, value], check=True, env=git)
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/git")
    request = "001bargument --format=evil\n0012argument main\n0000"
    async with gateway(state):
        client = await connect(state)
        try:
            # from a directory that is no repository (in one, the pinned GIT_COMMON_DIR hides other's config)
            await _exec(client, f"git upload-archive {other} <<'EOF'\n{request}\nEOF", home)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "git upload-archive ran the repository's tar filter"


# `git for-each-repo --config=<key> -- <args>` runs `git -C <value> <args>` for every value of a config
# key: its arguments are a git command line of their own, whose `-c alias.x=!CMD x` no vet reads (gitvet
# vets `-c` before the subcommand), and the key can be any inert one the repository sets
# (`branch.x.description = .`). It was on no list of subcommands that run programs; fixed: it is.


async def test_class5_git_for_each_repo_runs_an_unvetted_git_command_line(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    git = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=git)
    subprocess.run(["git", "-C", str(work), "config", "branch.x.description", "."], check=True, env=git)
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/git")
    command = f"git for-each-repo --config=branch.x.description -- -c 'alias.x=!touch {short}/pwned' x"
    async with gateway(state):
        client = await connect(state)
        try:
            await _exec(client, command, work)
        finally:
            await client.close()
    assert not (short / "pwned").exists(), "git for-each-repo ran an alias from its own argv"


# ---------------------------------------------------------------------------------------------- held: tried
# and did not work; kept as regressions.


async def test_class4_allowlisted_less_reads_no_lesskey_from_home_or_argv(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lesskey source's `#env` section sets LESSOPEN (a program less runs on every file): planted as
    ~/.lesskey, or named by `--lesskey-src=`. Every host run has LESSSECURE=1, under which less reads no
    lesskey file at all, so an allowlisted `less` runs neither."""
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    work.mkdir()
    (work / "f.txt").write_text("data\n")
    lesskey = f"#env\nLESSOPEN=|touch {short}/pwned; cat %s\n"
    (home / ".lesskey").write_text(lesskey)
    (work / "k.src").write_text(lesskey)
    state = _state(short)
    for command in ("less f.txt", "less --lesskey-src=k.src f.txt", "less -k k.src f.txt"):
        details = await attempt(
            state,
            command,
            allow=[("/usr/bin/less", None)],
            workdir=str(work),
        )
        assert details["status"] == "completed", (command, details)
        assert not (short / "pwned").exists(), command


async def test_class5_rbash_is_read_as_bash_and_its_script_is_bound(short: Path) -> None:
    """`rbash x.sh`: a shell under a name no list holds. It is resolved to the bash it is and its script
    operand is bound (digest shown), not left as a plain operand of an unknown program."""
    work = short / "w"
    work.mkdir()
    (work / "x.sh").write_text("echo hi\n")
    state = _state(short)
    write_config(state, ALLOWLIST)
    async with gateway(state):
        client = await connect(state)
        try:
            asked = await _exec(client, "rbash x.sh", work)
            assert asked["status"] == "approval-pending"
            pending = await client.request("approvals.pending", {})
        finally:
            await client.close()
    digests = pending["approvals"][-1]["contentDigests"]
    assert ("script", str(work / "x.sh")) in [(d["role"], d["path"]) for d in digests]


async def test_class5_python_loader_imports_no_customize_module_from_the_cwd(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verified run starts python with `-c LOADER`, where sys.path[0] is the cwd ('') until the
    loader replaces it. `site` imports sitecustomize/usercustomize before that: one planted in the cwd
    (the script lives in sub/) must not be imported."""
    home = short / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    work = home / "w"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "app.py").write_text(f"open({str(short / 'done')!r}, 'w').write('ran')\n")
    for name in ("usercustomize.py", "sitecustomize.py"):
        (work / name).write_text(f"open({str(short / 'pwned')!r}, 'w').write({name!r})\n")
    state = _state(short)
    write_config(state, f'{ALLOWLIST}hostWritable = ["{work}"]\n')
    async with gateway(state):
        client = await connect(state)
        try:
            asked = await _exec(client, "/usr/bin/python3 sub/app.py", work)
            assert asked["status"] == "approval-pending"
            await client.request("approve", {"id": asked["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: (short / "done").exists(), timeout=30)
        finally:
            await client.close()
    assert not (short / "pwned").exists()


async def test_class4_java_from_a_writable_tree_is_never_offered_allow_always(short: Path) -> None:
    """`java Main` loads Main.class from the cwd (classpath "."), `java App.java` compiles and runs the
    source: nothing binds those bytes, so allow-always (which would hold while the agent rewrote them)
    is not offered."""
    if shutil.which("java") is None:
        pytest.skip("no java here")
    work = short / "w"
    work.mkdir()
    (work / "App.java").write_text("class App { public static void main(String[] a) {} }\n")
    state = _state(short)
    for command in ("java Main", "java App.java"):
        details = await attempt(state, command, workdir=str(work))
        assert details["status"] == "approval-pending", command
        assert "allow-always" not in details["allowedDecisions"], command


async def test_class4_an_agents_stdbuf_link_preloads_no_library_from_its_directory(short: Path) -> None:
    """GNU stdbuf preloads libstdbuf.so from the directory of its argv[0] first when argv[0] has a slash.
    `./stdbuf -oL ls` (the agent's link to the real stdbuf, a transparent wrapper by name) beside the
    agent's libstdbuf.so: the wrapper runs by its resolved path, so the system library is preloaded."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler here")
    work = short / "w"
    work.mkdir()
    pwned = short / "pwned"
    source = work / "evil.c"
    source.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void init(void) {\n"
        f'  FILE *f = fopen("{pwned}", "w"); if (f) {{ fputs("owned", f); fclose(f); }}\n}}\n'
    )
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(work / "libstdbuf.so"), str(source)], check=True)
    os.symlink("/usr/bin/stdbuf", work / "stdbuf")
    details = await attempt(
        _state(short), "./stdbuf -oL ls", allow=[("/usr/bin/ls", None)], workdir=str(work)
    )
    assert details["status"] in ("completed", "approval-pending", "denied"), details
    assert not pwned.exists()


async def test_class5_a_wrapper_name_on_another_program_is_not_unwrapped(short: Path) -> None:
    """`./timeout 5 ls` where ./timeout is the agent's link to bash: read as the transparent wrapper by
    its name it would run `bash 5 ls`, the agent's ./5. A wrapper is known by what it resolves to: it
    asks."""
    work = short / "w"
    work.mkdir()
    os.symlink("/usr/bin/bash", work / "timeout")
    (work / "5").write_text(f"echo owned > {short}/pwned\n")
    details = await attempt(_state(short), "./timeout 5 ls", allow=[("/usr/bin/ls", None)], workdir=str(work))
    assert refused(details), details
    assert not (short / "pwned").exists()
