"""Fresh round 10, attacker c: issue 27 §3, what runs without an ask takes no influence the operator did not
grant (attack-classes.md class 4). The attempts that did not work, kept as regressions: an agent's own
/tmp (engine.commands.hostprivate) holding a workdir link that resolves to another directory on the host
than in the run's view, a make with no makefile but one it would remake from `Makefile.sh`, and inert env
keys whose values name paths."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.commands import gatewaydirs, hostprivate
from tests.attacks.harness import attempt, refused

GIT = "/usr/bin/git"
NPM = "/usr/bin/npm"
needs_bwrap = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap")


def _git(*args: str, cwd: Path) -> None:
    subprocess.run([GIT, *args], cwd=cwd, check=True, capture_output=True)


@needs_bwrap
async def test_class4_a_private_tmp_link_that_resolves_elsewhere_in_the_view_is_refused(
    state_dir: Path,
) -> None:
    """The agent's /tmp is its own copy under the state dir, and a workdir in it is decided at that copy's
    host path but entered by the path the agent named, in the view. A link planted there by an earlier
    run, `x -> ../../…/<private dir>/build` with enough `..` to reach `/` from either place, resolves on
    the host to the host's own (the operator's) `build`, an inert repository, and in the view to the
    agent's copy of `build`, whose config runs a program. The decision vets the host's; the spawn's
    check of the cwd by inode must refuse the run rather than start an allowlisted `git status` in the
    agent's repository."""
    root = state_dir.parent
    private = root / "tmp"  # the conftest's EXECHOST_HOST_PRIVATE: the dir every agent has its own of
    host_build = private / "build"
    host_build.mkdir()
    _git("init", "-q", ".", cwd=host_build)
    ((source, _dest),) = hostprivate.binds(str(state_dir), "main", (str(private),))
    evil = Path(source) / "build"
    evil.mkdir()
    _git("init", "-q", ".", cwd=evil)
    (evil / "f").write_text("x\n")
    _git("add", "f", cwd=evil)
    marker = root / "PWNED"
    _git("config", "core.fsmonitor", f"touch {marker}; false", cwd=evil)
    os.symlink("../" * 16 + str(private).lstrip("/") + "/build", Path(source) / "x")
    assert os.path.realpath(Path(source) / "x") == str(host_build)  # the host's reading: the inert one

    details = await attempt(state_dir, "git status --short", allow=[(GIT, None)], workdir=str(private / "x"))

    assert not marker.exists()
    # asked before anything starts (engine.commands.viewpaths: every word names another file in the
    # view than on the host), or refused by the spawn's check of the cwd
    stale = details["status"] == "failed" and "approval-stale" in details["_text"]
    assert refused(details) or stale, details["_text"]


async def test_class4_make_with_no_makefile_but_one_it_would_remake_asks(state_dir: Path) -> None:
    """With no default makefile, GNU make tries to remake one by its built-in rules (`%: %.sh` makes
    `Makefile` from `Makefile.sh`) and then reads it: an allowlisted bare `make` in such a tree would run
    the recipes of a file nobody named. It asks."""
    tree = state_dir.parent / "w"
    tree.mkdir()
    marker = state_dir.parent / "PWNED"
    (tree / "Makefile.sh").write_text(f"all:\n\ttouch {marker}\n")

    details = await attempt(state_dir, "make", allow=[("/usr/bin/make", None)], workdir=str(tree))

    assert refused(details), details["_text"]
    assert not marker.exists()


@pytest.mark.parametrize(
    "env",
    [
        {"LANG": "../../tmp/x"},
        {"LC_MESSAGES": "C/../../../tmp/x"},
        {"LANGUAGE": "en:../../tmp/x"},
        {"TZ": ":/tmp/zone"},
        {"tz": "../../../tmp/zone"},  # a key is inert by its name in any case, its value checked alike
        {"TERM": "x/../../tmp/t"},
        {"COLUMNS": "80;x"},
    ],
)
async def test_class4_inert_env_keys_with_path_shaped_values_ask(
    state_dir: Path, env: dict[str, str]
) -> None:
    """Locale, zone and terminal keys ride along unasked only with a value of their own grammar: a path
    in one is a catalogue, zone file or terminfo entry the agent wrote."""
    tree = state_dir.parent / "w"
    tree.mkdir()
    details = await attempt(state_dir, "ls", allow=[("/usr/bin/ls", None)], workdir=str(tree), env=env)
    assert refused(details), details["_text"]


async def test_class4_inert_env_keys_with_their_own_shape_run_unasked(state_dir: Path) -> None:
    """The control for the test above: the same allowlisted `ls` with well-shaped values runs."""
    tree = state_dir.parent / "w"
    tree.mkdir()
    env = {"LANG": "C.UTF-8", "TZ": "Europe/Paris", "TERM": "xterm-256color", "COLUMNS": "80"}
    details = await attempt(state_dir, "ls", allow=[("/usr/bin/ls", None)], workdir=str(tree), env=env)
    assert details["status"] == "completed", details["_text"]


def _agents_copy(state: Path, path: Path) -> Path:
    """`path` (in the conftest's private dir) as it is in agent main's own copy: what its runs see there."""
    private = state.parent / "tmp"
    binds = hostprivate.binds(str(state), "main", (str(private),))
    found = hostprivate.source_of(binds, str(path))
    assert found is not None
    return Path(found)


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NPM), reason="npm is not installed")
async def test_class4_npm_prefix_into_the_agents_own_tmp_runs_a_script_nobody_vetted(state_dir: Path) -> None:
    """An earlier run of the agent left `/tmp/p/package.json` in its own /tmp (every run of the agent
    shares it). The operator allowlisted npm. `npm --prefix /tmp/p test` from an empty workdir: the
    decision looks for package.json and .npmrc at the host's /tmp/p (nothing there: no finding, so it
    runs unasked), while npm in the view reads the agent's copy and runs its `test` script."""
    root = state_dir.parent
    planted = _agents_copy(state_dir, root / "tmp" / "p")
    planted.mkdir(parents=True)
    marker = root / "PWNED"
    scripts = {"test": f"touch {marker}"}
    (planted / "package.json").write_text(json.dumps({"name": "p", "version": "1.0.0", "scripts": scripts}))
    tree = root / "w"
    tree.mkdir()

    details = await attempt(
        state_dir, f"npm --prefix {root / 'tmp' / 'p'} test", allow=[(NPM, None)], workdir=str(tree)
    )

    assert not marker.exists(), "an allowlisted npm ran the agent's package.json script unasked"
    assert refused(details), details["_text"]


_HOST_PATH_VETTED = (
    "open: a path into a private dir (hostprivate: the agent's own /tmp) named in the argv is vetted at the "
    "host's path, while the run reads the agent's copy, where an earlier run planted {what}: the allowlisted "
    "{program} runs it unasked"
)


async def _plant_and_run(state: Path, files: dict[str, str], command: str, program: str) -> tuple[Path, dict]:
    """Plant `files` in agent main's own copy of <private>/p, then run `command` ({p}: that dir as the
    run names it; {link}: a link in the workdir to it) allowlisted, from an empty workdir."""
    root = state.parent
    named = root / "tmp" / "p"
    planted = _agents_copy(state, named)
    planted.mkdir(parents=True)
    marker = root / "PWNED"
    for name, body in files.items():
        (planted / name).parent.mkdir(parents=True, exist_ok=True)
        (planted / name).write_text(body.format(marker=marker))
    tree = root / "w"
    tree.mkdir()
    os.symlink(named, tree / "l")  # resolves, on the host, to the host's own (empty) <private>/p
    text = command.format(p=named, link="l")
    return marker, await attempt(state, text, allow=[(program, None)], workdir=str(tree))


_NINJA = {"build.ninja": "rule t\n  command = touch {marker}\nbuild out: t\n"}


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/ninja"), reason="ninja is not installed")
async def test_class4_ninja_dir_option_into_the_agents_own_tmp_runs_unvetted_build_commands(
    state_dir: Path,
) -> None:
    marker, details = await _plant_and_run(state_dir, _NINJA, "ninja -C {p}", "/usr/bin/ninja")
    assert not marker.exists(), "an allowlisted ninja ran the agent's build.ninja unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/ninja"), reason="ninja is not installed")
async def test_class4_a_workdir_link_into_the_agents_own_tmp_is_followed_to_the_hosts_copy(
    state_dir: Path,
) -> None:
    """The variant a check of the literal word would miss: `-C l`, where `l` in the workdir links to
    /tmp/p. The decision follows it on the host (the host's empty /tmp/p), the run in the view."""
    marker, details = await _plant_and_run(state_dir, _NINJA, "ninja -C {link}", "/usr/bin/ninja")
    assert not marker.exists(), "an allowlisted ninja ran the agent's build.ninja unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/cmake"), reason="cmake is not installed")
async def test_class4_cmake_script_in_the_agents_own_tmp_runs_unbound(state_dir: Path) -> None:
    """`cmake -P FILE` runs FILE: an argv-named file is bound by its bytes, but only when it exists at the
    host's path; in the view it is the agent's."""
    files = {"x.cmake": "file(TOUCH {marker})\n"}
    marker, details = await _plant_and_run(state_dir, files, "cmake -P {p}/x.cmake", "/usr/bin/cmake")
    assert not marker.exists(), "an allowlisted cmake ran the agent's script unasked"
    assert refused(details), details["_text"]


@needs_bwrap
async def test_class4_make_file_option_into_the_agents_own_tmp_stays_absent(state_dir: Path) -> None:
    """The same plant against make holds: a makefile absent when vetted, in a directory the agent can
    write, is handed to make as `/dev/null/<name>` (and the default lookup as `-f /dev/null`), so make
    never reads the agent's copy."""
    files = {"Makefile": "all:\n\ttouch {marker}\n"}
    marker, details = await _plant_and_run(state_dir, files, "make -f {p}/Makefile", "/usr/bin/make")
    assert not marker.exists(), details["_text"]
    marker.unlink(missing_ok=True)
    details = await attempt(
        state_dir, f"make -C {state_dir.parent / 'tmp' / 'p'}", allow=[("/usr/bin/make", None)]
    )
    assert not marker.exists(), details["_text"]


PIP3 = shutil.which("pip3")


@needs_bwrap
@pytest.mark.skipif(PIP3 is None, reason="pip is not installed")
async def test_class4_pip_requirements_in_the_agents_own_tmp_build_an_unvetted_project(
    state_dir: Path,
) -> None:
    """pip's requirements files are read by pip's grammar and every project they name is a finding, but
    the file is read at the host's path (absent: nothing to find), and pip in the view reads the agent's,
    which names a project whose setup.py runs as pip asks it for metadata (`--dry-run` included)."""
    assert PIP3 is not None
    named = state_dir.parent / "tmp" / "p"
    setup = 'open("{marker}", "w").close()\nfrom setuptools import setup\nsetup(name="pkg", version="1")\n'
    files = {"req.txt": f"{named}/pkg\n", "pkg/setup.py": setup}
    command = "pip3 install --dry-run --no-index --no-build-isolation -r {p}/req.txt"
    marker, details = await _plant_and_run(state_dir, files, command, PIP3)
    assert not marker.exists(), "an allowlisted pip ran the agent's setup.py unasked"
    assert refused(details), details["_text"]


@needs_bwrap
async def test_class4_git_dash_c_into_the_agents_own_tmp_runs_none_of_its_config(state_dir: Path) -> None:
    """git against the same plant holds: the repository found at the host's /tmp/p (none) is what git
    is pointed at (`GIT_DIR` that does not exist), never the agent's copy with a filter, a textconv, a
    pager and an fsmonitor in its config."""
    root = state_dir.parent
    planted = _agents_copy(state_dir, root / "tmp" / "p")
    planted.mkdir(parents=True)
    marker = root / "PWNED"
    _git("init", "-q", ".", cwd=planted)
    (planted / "f").write_text("x\n")
    (planted / ".gitattributes").write_text("* filter=evil diff=evil\n")
    _git("add", "f", cwd=planted)
    for key in ("core.fsmonitor", "filter.evil.clean", "diff.evil.textconv", "core.pager"):
        _git("config", key, f"touch {marker}; cat", cwd=planted)
    tree = root / "w"
    tree.mkdir()
    details = await attempt(
        state_dir, f"git -C {root / 'tmp' / 'p'} status", allow=[(GIT, None)], workdir=str(tree)
    )
    assert not marker.exists(), details["_text"]
    # asked first (engine.commands.viewpaths: the path is the agent's copy in the view), or run against
    # the repository vetted, which is none
    assert refused(details) or "not a git repository" in details["_text"], details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/ninja"), reason="ninja is not installed")
async def test_class4_ninja_reads_its_file_option_from_its_dir_option_not_the_cwd(state_dir: Path) -> None:
    """treecode names the files a tree program reads: `-C` values as directories holding the default
    build.ninja, `-f` values joined to the cwd. ninja applies `-C` first (its chdir comes before it opens
    the manifest), so the manifest it runs is the one in the -C directory, which nobody vetted."""
    root = state_dir.parent
    tree = root / "w"
    (tree / "sub").mkdir(parents=True)
    marker = root / "PWNED"
    (tree / "sub" / "o.ninja").write_text(f"rule t\n  command = touch {marker}\nbuild out: t\n")

    details = await attempt(
        state_dir, "ninja -C sub -f o.ninja", allow=[("/usr/bin/ninja", None)], workdir=str(tree)
    )

    assert not marker.exists(), "an allowlisted ninja ran sub/o.ninja's commands unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NPM), reason="npm is not installed")
async def test_class4_npm_abbreviated_prefix_runs_a_script_nobody_vetted(state_dir: Path) -> None:
    """treecode's option table for npm matches `--prefix` and `--prefix=` as written; npm expands
    `--prefi` (and `--prefi=sub`) to `--prefix`, as nopt expands every unambiguous abbreviation."""
    root = state_dir.parent
    tree = root / "w"
    (tree / "sub").mkdir(parents=True)
    marker = root / "PWNED"
    scripts = {"test": f"touch {marker}"}
    (tree / "sub" / "package.json").write_text(
        json.dumps({"name": "s", "version": "1.0.0", "scripts": scripts})
    )

    details = await attempt(state_dir, "npm --prefi sub test", allow=[(NPM, None)], workdir=str(tree))

    assert not marker.exists(), "an allowlisted npm ran sub/package.json's script unasked"
    assert refused(details), details["_text"]


MVN = "/usr/bin/mvn"
_AGENT_C = (
    "#include <stdio.h>\n"
    '__attribute__((constructor)) static void hit(void) {{ fclose(fopen("{marker}", "w")); }}\n'
)


@needs_bwrap
@pytest.mark.skipif(
    not os.path.exists(MVN) or shutil.which("java") is None or shutil.which("cc") is None,
    reason="needs maven, a JVM and a C compiler",
)
@pytest.mark.parametrize(
    ("base", "workdir", "command"),
    [
        ("", "sub", "mvn --version"),  # the nearest ancestor with .mvn/
        ("sub", "", "mvn -f sub --version"),  # -f: the POM's directory is where the walk starts
    ],
)
async def test_class4_mvn_reads_jvm_config_from_an_ancestor_nobody_vetted(
    state_dir: Path, base: str, workdir: str, command: str
) -> None:
    """Maven's launcher script (find_maven_basedir) starts at the cwd, or at the directory `-f` names,
    takes the nearest directory up from there with a `.mvn` directory as the project's base and puts its
    `.mvn/jvm.config` on java's command line before Maven reads any POM: `-agentpath:` there loads a
    shared library of the agent's into the JVM of `mvn --version`."""
    root = state_dir.parent
    tree = root / "w"
    mvn = tree / base / ".mvn"
    mvn.mkdir(parents=True)
    (tree / "sub").mkdir(exist_ok=True)
    marker = root / "PWNED"
    source = mvn / "a.c"
    source.write_text(_AGENT_C.format(marker=marker))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(mvn / "a.so"), str(source)], check=True)
    (mvn / "jvm.config").write_text(f"-agentpath:{mvn / 'a.so'}\n")

    details = await attempt(state_dir, command, allow=[(MVN, None)], workdir=str(tree / workdir))

    assert not marker.exists(), "an allowlisted mvn loaded the agent's library unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/cmake"), reason="cmake is not installed")
@pytest.mark.parametrize(
    ("workdir", "command", "script"),
    [
        ("build", "cmake ..", "CMakeLists.txt"),
        ("", "cmake --install b", "b/cmake_install.cmake"),
        ("", "cmake -Hsub -Bb", "sub/CMakeLists.txt"),  # -H: cmake's old spelling of -S, still read
    ],
)
async def test_class4_cmake_runs_a_script_from_a_directory_nobody_vetted(
    state_dir: Path, workdir: str, command: str, script: str
) -> None:
    """`cd build && cmake ..`: cmake takes a path operand as the source (or an existing build) directory
    and runs its CMakeLists.txt; `cmake --install b` runs b/cmake_install.cmake. execute_process there
    runs any program."""
    root = state_dir.parent
    tree = root / "w"
    (tree / "build").mkdir(parents=True)
    (tree / script).parent.mkdir(parents=True, exist_ok=True)
    marker = root / "PWNED"
    (tree / script).write_text(
        f"cmake_minimum_required(VERSION 3.10)\nexecute_process(COMMAND touch {marker})\n"
    )

    details = await attempt(state_dir, command, allow=[("/usr/bin/cmake", None)], workdir=str(tree / workdir))

    assert not marker.exists(), f"an allowlisted cmake ran {script} unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(PIP3 is None, reason="pip is not installed")
@pytest.mark.parametrize("spelling", ["file://{pkg}", "'pkg @ file://{pkg}'"])
async def test_class4_pip_local_project_as_a_file_url_builds_unasked(state_dir: Path, spelling: str) -> None:
    """`pip install ./pkg` asks (a project pip builds, its backend runs what the tree holds); the same
    project named by a file: URL, bare or as a PEP 508 direct reference, is not looked at."""
    assert PIP3 is not None
    root = state_dir.parent
    tree = root / "w"
    (tree / "pkg").mkdir(parents=True)
    marker = root / "PWNED"
    (tree / "pkg" / "setup.py").write_text(
        f'open("{marker}", "w").close()\nfrom setuptools import setup\nsetup(name="pkg", version="1")\n'
    )
    operand = spelling.format(pkg=tree / "pkg")
    command = f"pip3 install --dry-run --no-index --no-build-isolation {operand}"

    details = await attempt(state_dir, command, allow=[(PIP3, None)], workdir=str(tree))

    assert not marker.exists(), "an allowlisted pip ran the project's setup.py unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(PIP3 is None, reason="pip is not installed")
async def test_class4_pip_local_project_as_a_path_asks(state_dir: Path) -> None:
    """The control for the test above: the same project named as a path is a finding and asks."""
    assert PIP3 is not None
    root = state_dir.parent
    tree = root / "w"
    (tree / "pkg").mkdir(parents=True)
    marker = root / "PWNED"
    (tree / "pkg" / "setup.py").write_text(f'open("{marker}", "w").close()\n')
    command = "pip3 install --dry-run --no-index --no-build-isolation ./pkg"
    details = await attempt(state_dir, command, allow=[(PIP3, None)], workdir=str(tree))
    assert refused(details), details["_text"]
    assert not marker.exists()


NPX = "/usr/bin/npx"


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NPX), reason="npm's npx is not installed")
@pytest.mark.parametrize(
    ("program", "command", "manifest"),
    [
        (NPX, "npx --yes --cache ./c ./pkg", {"bin": {"pkg": "x.sh"}}),
        (NPM, "npm install --cache ./c ./pkg", {"scripts": {"postinstall": "sh x.sh"}}),
    ],
)
async def test_class4_npm_local_package_directory_runs_its_code_unasked(
    state_dir: Path, program: str, command: str, manifest: dict[str, object]
) -> None:
    """(`--cache ./c`: npm's default cache is under the home, read-only in the host view.)"""
    root = state_dir.parent
    tree = root / "w"
    (tree / "pkg").mkdir(parents=True)
    marker = root / "PWNED"
    (tree / "pkg" / "package.json").write_text(json.dumps({"name": "pkg", "version": "1.0.0", **manifest}))
    (tree / "pkg" / "x.sh").write_text(f"#!/bin/sh\ntouch {marker}\n")

    details = await attempt(state_dir, command, allow=[(program, None)], workdir=str(tree))

    assert not marker.exists(), "an allowlisted npm ran the agent's package code unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/cmake"), reason="cmake is not installed")
async def test_class4_cmake_user_preset_builds_a_directory_nobody_vetted(state_dir: Path) -> None:
    """An earlier run configured src/ into b/ (its CMakeLists.txt adds a target that runs a program);
    the workdir holds only CMakeUserPresets.json naming b/. The cwd has no CMakeLists.txt,
    CMakeCache.txt or CMakePresets.json: nothing for treecode to find."""
    root = state_dir.parent
    tree = root / "w"
    (tree / "src").mkdir(parents=True)
    marker = root / "PWNED"
    (tree / "src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(x NONE)\n"
        f"add_custom_target(t ALL COMMAND touch {marker})\n"
    )
    subprocess.run(["cmake", "-S", "src", "-B", "b"], cwd=tree, check=True, capture_output=True)
    presets = {
        "version": 3,
        "configurePresets": [{"name": "c", "binaryDir": "${sourceDir}/b"}],
        "buildPresets": [{"name": "p", "configurePreset": "c"}],
    }
    (tree / "CMakeUserPresets.json").write_text(json.dumps(presets))

    details = await attempt(
        state_dir, "cmake --build --preset p", allow=[("/usr/bin/cmake", None)], workdir=str(tree)
    )

    assert not marker.exists(), "an allowlisted cmake built b/ and ran its recipe unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.parametrize("url", ["{dest}", "file://{dest}"])
async def test_class4_git_push_into_the_agents_own_tmp_runs_its_hooks(state_dir: Path, url: str) -> None:
    root = state_dir.parent
    tree = root / "w"
    tree.mkdir()
    _git("init", "-q", ".", cwd=tree)
    (tree / "f").write_text("x\n")
    _git("add", "f", cwd=tree)
    _git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x", cwd=tree)
    named = root / "tmp" / "dest"
    planted = _agents_copy(state_dir, named)
    _git("init", "-q", "--bare", str(planted), cwd=root)
    marker = root / "PWNED"
    hook = planted / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)

    command = f"git push {url.format(dest=named)} HEAD:refs/heads/x"
    details = await attempt(state_dir, command, allow=[(GIT, None)], workdir=str(tree))

    assert not marker.exists(), "an allowlisted git push ran the agent's pre-receive hook unasked"
    assert refused(details), details["_text"]


@pytest.mark.skipif(not os.path.exists(MVN) or not os.path.exists("/usr/bin/ninja"), reason="maven, ninja")
@pytest.mark.parametrize("argv", ["mvn --version", "ninja --version"])
def test_class4_allow_always_of_a_build_tools_harmless_argv_saves_the_exact_command(
    state_dir: Path, argv: str
) -> None:
    """ninja, npm, cmake and git get the exact command saved (`=command:`); a program that runs what its
    tree or argv names must get the same, whether or not someone listed it."""
    from engine.approvals.store import ApprovalsStore
    from engine.config.loader import load_config
    from engine.policy.decision import evaluate
    from tests.helpers.gateway import ALLOWLIST, write_config

    tree = state_dir.parent / "w"
    tree.mkdir()
    write_config(state_dir, ALLOWLIST)
    config = load_config(state_dir / "config.toml")
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    decision = evaluate(argv, config=config, store=store, cwd=str(tree), params={"host": "gateway"})
    assert decision.verdict == "ask" and "allow-always" in decision.allowed_decisions
    assert all(p.startswith("=command:") for p in decision.allow_always_patterns), (
        decision.allow_always_patterns
    )


@needs_bwrap
async def test_class4_a_home_inside_a_private_dir_is_the_agents(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hostprivate.ops puts a private dir that is the home (or holds it) after the home's read-only
    bind, so the view's home is the agent's writable copy: its ~/.gitconfig (trusted as the operator's
    global config, never vetted) and every rc file and PATH entry under it."""
    root = state_dir.parent
    private = root / "tmp"
    monkeypatch.setenv("HOME", str(private))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(private))  # the home host views protect
    gatewaydirs.record(str(private), str(state_dir))  # the operator's, in the home as it is now
    tree = root / "w"
    tree.mkdir()
    ident = ("-c", "user.name=a", "-c", "user.email=a@b")
    _git("init", "-q", ".", cwd=tree)
    (tree / "f").write_text("x\n")
    _git(*ident, "add", "f", cwd=tree)
    _git(*ident, "commit", "-qm", "x", cwd=tree)
    (tree / ".gitattributes").write_text("* filter=x\n")
    (tree / "f").write_text("y\n")
    marker = root / "PWNED"
    _agents_copy(state_dir, private).mkdir(parents=True, exist_ok=True)
    (_agents_copy(state_dir, private) / ".gitconfig").write_text(f'[filter "x"]\n\tclean = tee {marker}\n')

    details = await attempt(state_dir, "git status --short", allow=[(GIT, None)], workdir=str(tree))

    assert not marker.exists(), f"an allowlisted git status ran the agent's ~/.gitconfig filter: {details}"


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NPX), reason="npm's npx is not installed")
async def test_class4_npx_prefix_runs_a_bin_from_a_node_modules_nobody_vetted(state_dir: Path) -> None:
    root = state_dir.parent
    tree = root / "w"
    bin_dir = tree / "sub" / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    marker = root / "PWNED"
    (bin_dir / "evil").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (bin_dir / "evil").chmod(0o755)

    details = await attempt(state_dir, "npx --prefix sub evil", allow=[(NPX, None)], workdir=str(tree))

    assert not marker.exists(), "an allowlisted npx ran sub/node_modules/.bin/evil unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NPX) or not os.path.exists("/usr/bin/cmake"), reason="npm, cmake")
@pytest.mark.parametrize(
    ("program", "command"),
    [
        (NPX, "npx --cache ./c -c 'touch {marker}'"),
        (NPM, "npm exec --cache ./c -c 'touch {marker}'"),
        ("/usr/bin/cmake", "cmake -E env touch {marker}"),
    ],
)
async def test_class4_a_build_tools_argv_runs_a_command_line_unasked(
    state_dir: Path, program: str, command: str
) -> None:
    root = state_dir.parent
    tree = root / "w"
    tree.mkdir()
    marker = root / "PWNED"
    details = await attempt(
        state_dir, command.format(marker=marker), allow=[(program, None)], workdir=str(tree)
    )
    assert not marker.exists(), "an allowlisted build tool ran the agent's command line unasked"
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists("/usr/bin/ninja"), reason="ninja is not installed")
@pytest.mark.parametrize(
    ("program", "manifest", "body"),
    [
        ("/usr/bin/ninja", "build.ninja", "rule t\n  command = touch {marker}\nbuild out: t\n"),
        ("/usr/bin/make", "Makefile", "all:\n\ttouch {marker}\n"),
    ],
)
async def test_class4_a_manifest_link_into_the_agents_own_tmp_asks(
    state_dir: Path, program: str, manifest: str, body: str
) -> None:
    """The same plant reached through a link in the workdir (`build.ninja -> /tmp/p/build.ninja`) holds:
    treecode counts a manifest that exists as a link whatever it resolves to on the host (lexists), and
    a link whose target the host lacks is unreadable, so unbound: ninja asks. make's default lookup finds
    no regular makefile there and is handed `-f /dev/null`: it runs, reading nothing."""
    root = state_dir.parent
    named = root / "tmp" / "p" / manifest
    planted = _agents_copy(state_dir, named)
    planted.parent.mkdir(parents=True)
    marker = root / "PWNED"
    planted.write_text(body.format(marker=marker))
    tree = root / "w"
    tree.mkdir()
    os.symlink(named, tree / manifest)
    details = await attempt(state_dir, os.path.basename(program), allow=[(program, None)], workdir=str(tree))
    assert not marker.exists(), details["_text"]
    if manifest == "build.ninja":
        assert refused(details), details["_text"]
    else:  # make runs, reading /dev/null: "No targets"
        assert "No targets" in details["_text"], details["_text"]


CARGO = shutil.which("cargo")
RUSTUP_HOME = os.environ.get("RUSTUP_HOME") or os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".rustup")


@needs_bwrap
@pytest.mark.skipif(
    CARGO is None or not os.path.isdir(os.path.join(RUSTUP_HOME, "toolchains")) or shutil.which("cc") is None,
    reason="needs cargo with a rustup toolchain and a C linker",
)
async def test_class4_cargo_install_path_runs_a_build_script_nobody_vetted(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CARGO is not None
    monkeypatch.setenv(
        "RUSTUP_HOME", RUSTUP_HOME
    )  # the gateway's own toolchains (the test's HOME is its own)
    root = state_dir.parent
    sub = root / "w" / "sub"
    (sub / "src").mkdir(parents=True)
    marker = root / "PWNED"
    (sub / "Cargo.toml").write_text('[package]\nname = "x"\nversion = "0.1.0"\nedition = "2021"\n')
    (sub / "build.rs").write_text(f'fn main() {{ std::fs::write("{marker}", "x").unwrap(); }}\n')
    (sub / "src" / "main.rs").write_text("fn main() {}\n")

    command = "cargo install --offline --path sub --root ./out"
    details = await attempt(state_dir, command, allow=[(CARGO, None)], workdir=str(root / "w"))

    assert not marker.exists(), "an allowlisted cargo ran sub/build.rs unasked"
    assert refused(details), details["_text"]
