"""Fresh round 10 f (issue 27 §3, attack class 4): what runs without an ask takes no influence the operator
did not grant — a command an allowlist entry lets run, given options, env or a tree that make it run code
nobody approved."""

from __future__ import annotations

import glob
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from tests.attacks.harness import ALLOWLIST, attempt, refused, tool
from tests.helpers.gateway import connect, gateway, wait_until, write_config

# The toolchain's own cargo (the rustup proxy in ~/.cargo/bin needs the operator's RUSTUP_HOME, which a
# test's own HOME does not have): what an operator allowlists to let agents build.
_CARGOS = sorted(glob.glob("/root/.rustup/toolchains/stable-*/bin/cargo"))
CARGO = _CARGOS[0] if _CARGOS else None


@pytest.mark.skipif(CARGO is None, reason="needs cargo from a rustup toolchain")
async def test_cargo_config_on_its_command_line_names_a_credential_provider_it_runs(state_dir: Path) -> None:
    assert CARGO is not None
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    tool(work / "p.sh", f"#!/bin/sh\necho ran > {marker}\n")
    command = f"{CARGO} --config 'registry.global-credential-providers=[\"{work}/p.sh\"]' logout"
    details = await attempt(state_dir, command, allow=[(CARGO, None)], workdir=str(work))
    assert not marker.exists(), "the agent's credential provider ran"
    assert refused(details), details["_text"]


RUSTUP = "/root/.cargo/bin/rustup"


@pytest.mark.skipif(
    not (os.path.isfile(RUSTUP) and os.path.isdir("/root/.rustup/toolchains")), reason="needs rustup"
)
async def test_rustup_run_is_a_command_runner_the_allowlist_does_not_unwrap(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUSTUP_HOME", "/root/.rustup")  # the operator's toolchains: the test has its own HOME
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    command = f"rustup run stable sh -c 'echo ran > {marker}'"
    details = await attempt(state_dir, command, allow=[(RUSTUP, None)], workdir=str(work))
    assert not marker.exists(), "rustup ran the agent's shell command"
    assert refused(details), details["_text"]


@pytest.mark.skipif(not os.path.isfile("/usr/bin/make"), reason="needs GNU make")
async def test_make_without_a_makefile_runs_a_builtin_rule_with_the_argvs_cc(state_dir: Path) -> None:
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "foo.c").write_text("int main(void) { return 0; }\n")
    marker = work / "ran"
    command = f"make foo CC='sh -c \"echo ran > {marker}\"'"
    details = await attempt(state_dir, command, allow=[("/usr/bin/make", None)], workdir=str(work))
    assert not marker.exists(), "make's built-in rule ran the agent's CC"
    assert refused(details), details["_text"]


def _system_pip() -> bool:
    try:
        return (
            subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True).returncode
            == 0
        )
    except OSError:
        return False


def _venv_with_pip(where: Path) -> Path:
    """A venv like an operator's project venv (owned by the gateway's user, outside the home), its bin/pip
    the usual console script over the system's pip: pip's site config is `<venv>/pip.conf`."""
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", str(where)], check=True
    )
    return tool(
        where / "bin" / "pip",
        f"#!{where}/bin/python\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n",
    )


def _sdist(where: Path, marker: Path) -> None:
    """zzpkg-1.0.tar.gz whose in-tree build backend writes `marker` when pip asks it anything."""
    where.mkdir(parents=True)
    backend = (
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
    )
    files = {
        "zzpkg-1.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        "zzpkg-1.0/backend.py": backend,
        "zzpkg-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: zzpkg\nVersion: 1.0\n",
    }
    with tarfile.open(where / "zzpkg-1.0.tar.gz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.skipif(not _system_pip(), reason="needs the system python3's pip")
async def test_pip_config_names_a_find_links_dir_and_a_later_install_builds_from_it(state_dir: Path) -> None:
    pip = _venv_with_pip(state_dir.parent / "venv")
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    _sdist(work / "pkgs", marker)
    allow: list[tuple[str, str | None]] = [(str(pip), None)]
    for command in (
        f"{pip} config --site set global.find-links {work}/pkgs",
        f"{pip} config --site set global.no-index true",
    ):
        details = await attempt(state_dir, command, allow=allow, workdir=str(work))
        assert details["status"] == "completed", details["_text"]
    details = await attempt(state_dir, f"{pip} install zzpkg", allow=allow, workdir=str(work))
    assert not marker.exists(), "pip built the agent's package from the find-links its config names"
    assert refused(details), details["_text"]


@pytest.mark.skipif(not _system_pip(), reason="needs the system python3's pip")
async def test_pip_config_names_the_interpreter_pip_reruns_itself_with(state_dir: Path) -> None:
    pip = _venv_with_pip(state_dir.parent / "venv")
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    program = work / "py"  # written by the agent after the config names it (then no argv names it)
    allow: list[tuple[str, str | None]] = [(str(pip), None)]
    details = await attempt(
        state_dir, f"{pip} config --site set global.python {program}", allow=allow, workdir=str(work)
    )
    assert details["status"] == "completed", details["_text"]
    tool(program, f"#!/bin/sh\necho ran > {marker}\n")
    details = await attempt(state_dir, f"{pip} list", allow=allow, workdir=str(work))
    assert not marker.exists(), "pip re-ran itself with the interpreter its config names"
    assert refused(details), details["_text"]


@pytest.mark.skipif(
    not os.path.isfile("/usr/bin/make") or shutil.which("cc") is None, reason="needs make, cc"
)
async def test_make_exports_a_command_line_variable_into_the_recipes_env(state_dir: Path) -> None:
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "foo.c").write_text("int main(void) { return 0; }\n")
    marker = work / "ran"
    tool(work / "bin" / "as", f"#!/bin/sh\necho ran > {marker}\nexit 1\n")
    command = f"make foo COMPILER_PATH=/nonexistent:{work}/bin"
    details = await attempt(state_dir, command, allow=[("/usr/bin/make", None)], workdir=str(work))
    assert not marker.exists(), "cc ran the `as` of the directory make's command line exported"
    assert refused(details), details["_text"]


CARGO_PROXY = "/root/.cargo/bin/cargo"  # rustup's proxy: it picks the toolchain, then runs its cargo


@pytest.mark.skipif(
    not (os.path.isfile(CARGO_PROXY) and os.path.isdir("/root/.rustup/toolchains")), reason="needs rustup"
)
async def test_cargo_dash_c_elsewhere_leaves_the_cwds_toolchain_file_unvetted(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUSTUP_HOME", "/root/.rustup")  # the operator's toolchains: the test has its own HOME
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    tool(work / "tc" / "bin" / "cargo", f"#!/bin/sh\necho ran > {marker}\n")
    (work / "rust-toolchain.toml").write_text(f'[toolchain]\npath = "{work}/tc"\n')
    details = await attempt(state_dir, "cargo -C / --version", allow=[(CARGO_PROXY, None)], workdir=str(work))
    assert not marker.exists(), "rustup's proxy ran the toolchain the cwd's rust-toolchain.toml names"
    assert refused(details), details["_text"]


RUSTC_PROXY = "/root/.cargo/bin/rustc"


@pytest.mark.skipif(
    not (os.path.isfile(RUSTC_PROXY) and os.path.isdir("/root/.rustup/toolchains")), reason="needs rustup"
)
async def test_rustc_behind_rustups_proxy_is_vetted_as_rustup_and_runs_a_linker(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUSTUP_HOME", "/root/.rustup")  # the operator's toolchains: the test has its own HOME
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    tool(work / "ld", f"#!/bin/sh\necho ran > {marker}\nexit 1\n")
    command = f"rustc --crate-type cdylib -C linker={work}/ld -"
    details = await attempt(state_dir, command, allow=[(RUSTC_PROXY, None)], workdir=str(work), timeout=120)
    assert not marker.exists(), "rustc ran the agent's linker"
    assert refused(details), details["_text"]


def _pkt(text: str) -> str:
    return f"{len(text) + 4:04x}{text}"


@pytest.mark.skipif(not os.path.islink("/usr/bin/git-upload-archive"), reason="needs git's linked programs")
async def test_git_upload_archive_is_vetted_as_git_its_repository_read_as_a_subcommand(
    state_dir: Path,
) -> None:
    work = state_dir.parent / "w"
    repo = work / "log"
    marker = work / "ran"
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a").write_text("a\n")
    subprocess.run([*git, "add", "a"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    subprocess.run([*git, "config", "tar.evil.remote", "true"], check=True)
    subprocess.run(
        [*git, "config", "tar.evil.command", f"sh -c 'echo ran > {marker}; cat >/dev/null'"], check=True
    )
    allow = "/usr/bin/git-upload-archive"
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", allow)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            started = await client.request(
                "exec",
                {
                    "command": "git-upload-archive log",
                    "agentId": "main",
                    "workdir": str(work),
                    "background": True,
                },
            )
            details = started["details"]
            if details["status"] != "running":  # closed (fixF10b): vetted as `git upload-archive log`,
                assert refused(details), started["text"]  # whose repository's config names a command
                assert not marker.exists()
                return
            request = _pkt("argument --format=evil\n") + _pkt("argument HEAD\n") + "0000"
            await client.request(
                "process",
                {
                    "action": "write",
                    "sessionId": details["sessionId"],
                    "data": request,
                    "eof": True,
                    "agentId": "main",
                },
            )

            async def ended() -> bool:
                polled = await client.request(
                    "process",
                    {"action": "poll", "sessionId": details["sessionId"], "timeout": 1000, "agentId": "main"},
                )
                return bool(polled["details"].get("status") != "running")

            await wait_until(ended, timeout=60)
        finally:
            await client.close()
    assert not marker.exists(), "upload-archive ran the tar command of the repository it served"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
async def test_cmake_find_package_mode_runs_a_config_file_from_a_prefix_the_argv_names(
    state_dir: Path,
) -> None:
    work = state_dir.parent / "w"
    marker = work / "ran"
    config = work / "pfx" / "lib" / "cmake" / "Zz" / "ZzConfig.cmake"
    config.parent.mkdir(parents=True)
    config.write_text(f'execute_process(COMMAND sh -c "echo ran > {marker}")\nset(Zz_FOUND TRUE)\n')
    cmake = os.path.realpath(shutil.which("cmake") or "cmake")
    command = (
        "cmake --find-package -DNAME=Zz -DCOMPILER_ID=GNU -DLANGUAGE=C -DMODE=EXIST "
        f"-DCMAKE_PREFIX_PATH={work}/pfx"
    )
    details = await attempt(state_dir, command, allow=[(cmake, None)], workdir=str(work))
    assert not marker.exists(), "find_package ran the agent's package config"
    assert refused(details), details["_text"]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
async def test_cmake_script_operand_linked_through_proc_self_is_no_finding(state_dir: Path) -> None:
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    assert not os.path.exists("real.cmake")  # the gateway's cwd (this process's) has none
    (work / "real.cmake").write_text(f'execute_process(COMMAND sh -c "echo ran > {marker}")\n')
    (work / "s.cmake").symlink_to("/proc/self/cwd/real.cmake")
    cmake = os.path.realpath(shutil.which("cmake") or "cmake")
    details = await attempt(state_dir, "cmake -P s.cmake", allow=[(cmake, None)], workdir=str(work))
    assert not marker.exists(), "cmake ran the script its operand's link leads to in its own cwd"
    assert refused(details), details["_text"]


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja")
async def test_ninja_dash_c_linked_through_proc_self_is_vetted_in_the_gateways_cwd(state_dir: Path) -> None:
    work = state_dir.parent / "w"
    marker = work / "ran"
    (work / "real").mkdir(parents=True)
    assert not os.path.exists("real")  # the gateway's cwd (this process's) has none
    (work / "real" / "build.ninja").write_text(f"rule r\n  command = echo ran > {marker}\nbuild x: r\n")
    (work / "sub").symlink_to("/proc/self/cwd/real")
    ninja = os.path.realpath(shutil.which("ninja") or "ninja")
    details = await attempt(state_dir, "ninja -C sub", allow=[(ninja, None)], workdir=str(work))
    assert not marker.exists(), "ninja ran the build.ninja its -C link leads to in its own cwd"
    assert refused(details), details["_text"]


RUST_GDB = "/root/.cargo/bin/rust-gdb"


@pytest.mark.skipif(
    not (os.path.isfile(RUST_GDB) and shutil.which("gdb") and os.path.isdir("/root/.rustup/toolchains")),
    reason="needs rustup's rust-gdb and gdb",
)
async def test_allow_always_of_rust_gdb_saves_a_debugger_by_its_bare_path(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUSTUP_HOME", "/root/.rustup")  # the operator's toolchains: the test has its own HOME
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            params = {"agentId": "main", "workdir": str(work), "timeout": 60}
            first = await client.request("exec", {"command": "rust-gdb --version", **params})
            assert first["details"]["status"] == "approval-pending", first["text"]
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            store = ApprovalsStore(state_dir / "exec-approvals.json")
            saved = await wait_until(
                lambda: [e.pattern for e in store.snapshot().entries("main")], timeout=60
            )
            # was the bare path (every later rust-gdb ran unasked); now the exact command (fixF10b)
            assert RUST_GDB not in saved, saved
            command = f"rust-gdb -batch -nx -ex 'shell echo ran > {marker}'"
            second = await client.request("exec", {"command": command, **params})
        finally:
            await client.close()
    assert not marker.exists(), "the saved rust-gdb ran a gdb shell command"
    assert refused(second["details"]), second["text"]


# ---- attempts that failed (passing regressions) ---------------------------------------------------------


async def _background_with_stdin(
    state: Path, command: str, work: Path, allow: str, data: str
) -> dict[str, Any]:
    """Run `command` in the background as agent main (only `allow` on its allowlist), write `data` to its
    stdin and close it, and wait for it to end: the first exec's details."""
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", allow)
    async with gateway(state):
        client = await connect(state)
        try:
            started = await client.request(
                "exec", {"command": command, "agentId": "main", "workdir": str(work), "background": True}
            )
            details: dict[str, Any] = started["details"]
            details["_text"] = started["text"]
            if details["status"] != "running":
                return details
            sid = details["sessionId"]
            await client.request(
                "process", {"action": "write", "sessionId": sid, "data": data, "eof": True, "agentId": "main"}
            )

            async def ended() -> bool:
                polled = await client.request(
                    "process", {"action": "poll", "sessionId": sid, "timeout": 1000, "agentId": "main"}
                )
                return bool(polled["details"].get("status") != "running")

            await wait_until(ended, timeout=60)
            return details
        finally:
            await client.close()


@pytest.mark.skipif(not os.path.isfile("/usr/bin/make"), reason="needs GNU make")
async def test_a_default_makefile_linked_to_stdin_is_run_as_absent(state_dir: Path) -> None:
    """A Makefile that is a link to /dev/stdin is no regular file, so treecode finds no makefile (the
    command runs unasked), but the spawn hands make `-f /dev/null` for a makefile decided absent: the
    recipe the agent writes to the session's stdin is never read."""
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    (work / "Makefile").symlink_to("/dev/stdin")
    recipe = f"all:\n\techo ran > {marker}\n"
    await _background_with_stdin(state_dir, "make", work, "/usr/bin/make", recipe)
    assert not marker.exists()


async def test_a_link_in_the_tree_named_like_a_tree_program_does_not_satisfy_the_allowlist(
    state_dir: Path,
) -> None:
    """`./make` linked to an allowlisted interpreter would be vetted as make (no makefile: no finding) if
    the allowlist took the link's target: it matches the executable's own path, so it asks."""
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    (work / "make").symlink_to("/usr/bin/python3")
    details = await attempt(
        state_dir,
        f'./make -c \'open({str(marker)!r}, "w").write("ran")\'',
        allow=[(os.path.realpath("/usr/bin/python3"), None)],
        workdir=str(work),
    )
    assert refused(details), details["_text"]
    assert not marker.exists()


async def test_a_repository_config_linked_through_proc_self_asks(state_dir: Path) -> None:
    """gitvet reads .git/config in the gateway, where /proc/self/cwd is the gateway's cwd: the link reads
    nothing there, and a config that cannot be read is a finding (it asks), not an empty config."""
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "cfg").write_text(
        f'[core]\n\trepositoryformatversion = 0\n[filter "x"]\n\tclean = sh -c "echo ran > {marker}"\n'
    )
    (work / ".git" / "config").unlink()
    (work / ".git" / "config").symlink_to("/proc/self/cwd/cfg")
    (work / ".gitattributes").write_text("* filter=x\n")
    (work / "a").write_text("a\n")
    details = await attempt(state_dir, "git status", allow=[("/usr/bin/git", None)], workdir=str(work))
    assert refused(details), details["_text"]
    assert not marker.exists()


async def test_a_zone_name_with_a_path_is_not_inert(state_dir: Path) -> None:
    """TZ names a file under the system's zone directory only by a plain zone name: `:/path` (glibc reads
    any TZif file there) is not shaped like one, so an allowlisted `date` given it asks."""
    work = state_dir.parent / "w"
    work.mkdir()
    details = await attempt(
        state_dir,
        "date",
        allow=[(os.path.realpath("/usr/bin/date"), None)],
        workdir=str(work),
        env={"TZ": f":{work}/zone"},
    )
    assert refused(details), details["_text"]


@pytest.mark.skipif(CARGO is None, reason="needs cargo from a rustup toolchain")
async def test_a_cargo_config_file_on_the_argv_is_bound_and_asks(state_dir: Path) -> None:
    """`cargo --config FILE` (a file, not inline TOML) is an argv-named file: bound by its bytes, and a
    tree the agent can write holds it, so it asks (the inline form is the open hole above)."""
    assert CARGO is not None
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    tool(work / "p.sh", f"#!/bin/sh\necho ran > {marker}\n")
    (work / "c.toml").write_text(f'[registry]\nglobal-credential-providers = ["{work}/p.sh"]\n')
    details = await attempt(
        state_dir, f"{CARGO} --config c.toml logout", allow=[(CARGO, None)], workdir=str(work)
    )
    assert refused(details), details["_text"]
    assert not marker.exists()
