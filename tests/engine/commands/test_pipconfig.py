"""pip's config files read as pip reads them, by the same option allowlist as its argv
(engine.commands.pipconfig; fresh round 10 f)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import gitvet, pipconfig
from engine.commands.pinned import pinned_view
from engine.commands.treecode import binding, findings_for, unbound_findings
from tests.attacks.harness import attempt, tool


def _venv(where: Path) -> Path:
    """A venv-shaped prefix (pyvenv.cfg beside bin/) and a pip console script running in it."""
    (where / "bin").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text("home = /usr/bin\n")
    os.symlink("/usr/bin/python3", where / "bin" / "python")
    return tool(where / "bin" / "pip", f"#!{where}/bin/python\nimport sys\n")


def test_the_site_config_is_the_venvs_own(tmp_path: Path) -> None:
    pip = _venv(tmp_path / "v")
    python = pipconfig.interpreter(str(pip))
    assert python == f"{tmp_path}/v/bin/python"
    assert pipconfig.site_prefixes(python) == [f"{tmp_path}/v"]
    files = pipconfig.config_files(python, {"XDG_CONFIG_DIRS": "/a:/b/"})
    assert files == ["/a/pip/pip.conf", "/b/pip/pip.conf", "/etc/pip.conf", f"{tmp_path}/v/pip.conf"]
    # no venv: the installation's prefix, by the path and by the real binary
    assert pipconfig.site_prefixes("/usr/bin/python3") == ["/usr"]


def test_an_env_shebang_is_found_on_the_path(tmp_path: Path) -> None:
    pip = tool(tmp_path / "pip", "#!/usr/bin/env -S python3\n")
    assert pipconfig.interpreter(str(pip), "/usr/bin") == "/usr/bin/python3"
    assert pipconfig.interpreter(str(tool(tmp_path / "elf", "\x7fELF"))) is None
    assert pipconfig.interpreter(str(tool(tmp_path / "sh", "#!/bin/sh\necho\n"))) is None


def test_distlibs_launcher_for_a_long_path_names_its_python(tmp_path: Path) -> None:
    long = "/very/long path/bin/python3.11"
    text = "#!/bin/sh\n'''exec' \"" + long + '" "$0" "$@"\n\' \'\'\'\nimport sys\n'
    assert pipconfig.interpreter(str(tool(tmp_path / "pip", text))) == long


def test_a_pip_that_is_no_python_script_asks(tmp_path: Path) -> None:
    pip = tool(tmp_path / "pip", '#!/bin/sh\nexec /tmp/anything "$@"\n')
    found = findings_for([str(pip), "list"], (str(pip),), str(tmp_path), [])
    assert [f.path for f in found] == [str(pip)] and unbound_findings(binding(found)) == [str(pip)]


def _read(tmp_path: Path, text: str, command: str | None) -> pipconfig.PipConfig:
    conf = tmp_path / "pip.conf"
    conf.write_text(text)
    return pipconfig.read_configs([str(conf)], command, lambda _p: True)


@pytest.mark.parametrize(
    ("text", "command", "asks"),
    [
        ("[global]\ntimeout = 5\nno-index = true\nindex-url = https://x/simple\n", "install", False),
        ("[global]\nDisable_Pip_Version_Check = 1\n", "list", False),  # pip's key spelling
        ("[global]\npython = ./py\n", "list", True),  # every command re-runs itself with it
        ("[global]\npython = ./py\n", "config", True),
        ("[global]\npython =\n", "list", False),  # an empty value: pip skips it
        ("[DEFAULT]\npython = ./py\n[global]\n", "list", True),  # [DEFAULT] keys are in every section
        ("[list]\npython = ./py\n", "install", False),  # another command's section
        ("[install]\nfrobnicate = 1\n", "install", True),  # a key a build does not model
        ("[install]\nfrobnicate = 1\n", "list", False),  # a reader's own options run nothing
        ("[install]\neditable = ./x\n", "install", True),  # a project pip builds
        ("[install]\nrequirements-from-script = x.py\n", "install", True),
        ("[global\n", "install", True),  # pip refuses it: asked, not guessed
    ],
)
def test_keys_are_judged_by_their_options_kind(tmp_path: Path, text: str, command: str, asks: bool) -> None:
    assert bool(_read(tmp_path, text, command).problems) == asks


def test_a_local_source_in_a_writable_config_asks_for_a_build_only(tmp_path: Path) -> None:
    pip = _venv(tmp_path / "v")
    (tmp_path / "pkgs").mkdir()
    (tmp_path / "v" / "pip.conf").write_text(f"[global]\nfind-links = https://x {tmp_path}/pkgs\n")
    found = findings_for([str(pip), "install", "zzpkg"], (str(pip),), str(tmp_path), [])
    assert [(f.path, f.what) for f in found] == [(f"{tmp_path}/pkgs", pipconfig.SOURCE)]
    assert unbound_findings(binding(found)) == [f"{tmp_path}/pkgs"]  # never saved
    assert findings_for([str(pip), "list"], (str(pip),), str(tmp_path), []) == []


def test_a_config_key_that_asks_is_never_bound_to_the_configs_bytes(tmp_path: Path) -> None:
    pip = _venv(tmp_path / "v")
    (tmp_path / "v" / "pip.conf").write_text("[global]\npython = /w/py\n")
    found = findings_for([str(pip), "list"], (str(pip),), str(tmp_path), [])
    assert [f.path for f in found] == [f"{tmp_path}/v/pip.conf"]
    assert unbound_findings(binding(found)) == [f"{tmp_path}/v/pip.conf"]


def test_requirement_files_a_config_names_are_read_as_the_argvs(tmp_path: Path) -> None:
    pip = _venv(tmp_path / "v")
    (tmp_path / "c.txt").write_text("torch<=2\n")
    (tmp_path / "v" / "pip.conf").write_text(f"[global]\nconstraint = {tmp_path}/c.txt\n")
    record = gitvet.Record()
    assert findings_for([str(pip), "install", "x"], (str(pip),), str(tmp_path), [], record) == []
    assert record.data[f"{tmp_path}/c.txt"] == b"torch<=2\n"  # held for the run, like the config
    (tmp_path / "c.txt").write_text("./proj\n")
    (tmp_path / "proj").mkdir()
    found = findings_for([str(pip), "install", "x"], (str(pip),), str(tmp_path), [])
    assert [f.path for f in found] == [f"{tmp_path}/proj"], found
    (tmp_path / "c.txt").unlink()  # absent: one made after the vet would be read
    assert findings_for([str(pip), "install", "x"], (str(pip),), str(tmp_path), [])


def test_the_run_reads_the_vetted_config_but_pip_config_may_write_it(tmp_path: Path) -> None:
    pip = _venv(tmp_path / "v")
    conf = tmp_path / "v" / "pip.conf"
    conf.write_text("[global]\ntimeout = 5\n")
    for command, held in (("list", True), ("config", False)):
        record = gitvet.Record()
        assert findings_for([str(pip), command], (str(pip),), str(tmp_path), [], record) == []
        assert (str(conf) in record.data) == held
    record = gitvet.Record()
    findings_for([str(pip), "list"], (str(pip),), str(tmp_path), [], record)
    view = pinned_view(record)
    try:
        assert str(conf) in view.prefix and "--ro-bind-data" in view.prefix
    finally:
        view.close()


def _system_pip() -> bool:
    try:
        return (
            subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True).returncode
            == 0
        )
    except OSError:
        return False


@pytest.mark.skipif(not _system_pip(), reason="needs the system python3's pip")
async def test_an_inert_site_config_runs_unasked_over_its_vetted_copy(state_dir: Path) -> None:
    venv = state_dir.parent / "venv"
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True
    )
    pip = tool(
        venv / "bin" / "pip",
        f"#!{venv}/bin/python\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n",
    )
    (venv / "pip.conf").write_text("[global]\ntimeout = 7\n")
    work = state_dir.parent / "w"
    work.mkdir()
    details = await attempt(state_dir, f"{pip} config list", allow=[(str(pip), None)], workdir=str(work))
    assert details["status"] == "completed", details["_text"]
    assert "global.timeout='7'" in details["_text"], details["_text"]
    details = await attempt(state_dir, f"{pip} list --local", allow=[(str(pip), None)], workdir=str(work))
    assert details["status"] == "completed" and details.get("exitCode") == 0, details


def test_the_parsed_config_cache_follows_the_files_bytes(tmp_path: Path) -> None:
    """pipconfig keeps each file's parsed items by its bytes: a rewrite is parsed again."""
    assert not _read(tmp_path, "[global]\ntimeout = 5\n", "list").problems
    assert _read(tmp_path, "[global]\npython = ./py\n", "list").problems
    assert not _read(tmp_path, "[global]\ntimeout = 5\n", "list").problems


@pytest.mark.parametrize(
    ("argv", "conf", "held"),
    [
        (["list"], "[global]\ntimeout = 5\n", "1"),
        (["config", "set", "global.timeout", "6"], "", "1"),  # pip config too (its file is not held)
        (["list"], "[global]\npython = /w/py\n", ""),  # decided to re-run (asked): not held off
        (["--python", "/w/py", "list"], "", ""),
    ],
)
def test_a_pip_decided_not_to_rerun_itself_is_held_to_that(
    tmp_path: Path, argv: list[str], conf: str, held: str
) -> None:
    pip = _venv(tmp_path / "v")
    if conf:
        (tmp_path / "v" / "pip.conf").write_text(conf)
    record = gitvet.Record()
    findings_for([str(pip), *argv], (str(pip),), str(tmp_path), [], record)
    assert record.env == {pipconfig.NO_RERUN: held}
    # a later pip of the same command does not undo a hold-off (nor set one)
    findings_for([str(pip), "list"], (str(pip),), str(tmp_path / "elsewhere"), [], record)
    assert record.env == {pipconfig.NO_RERUN: held}


@pytest.mark.skipif(not _system_pip(), reason="needs the system python3's pip")
def test_a_python_key_written_after_the_vet_is_never_followed(tmp_path: Path) -> None:
    """The site config was absent at the vet (nothing to hold); a racer writes `python = …` before pip
    reads it: pip, told it is a re-run already, runs no other interpreter."""
    venv = tmp_path / "venv"
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True
    )
    pip = tool(
        venv / "bin" / "pip",
        f"#!{venv}/bin/python\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n",
    )
    record = gitvet.Record()
    assert findings_for([str(pip), "list"], (str(pip),), str(tmp_path), [], record) == []
    marker = tmp_path / "ran"
    program = tool(tmp_path / "py", f"#!/bin/sh\necho ran > {marker}\n")
    (venv / "pip.conf").write_text(f"[global]\npython = {program}\n")
    view = pinned_view(record)
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **view.env}
        done = subprocess.run(
            [*view.prefix, str(pip), "list"], env=env, capture_output=True, pass_fds=view.fds
        )
    finally:
        view.close()
    assert not marker.exists(), done.stderr
    assert done.returncode == 0, done.stderr


def test_the_rerun_guard_needs_no_view_of_its_own() -> None:
    """Env alone is no pin: a run with nothing else to hold keeps the kept host view (or none)."""
    record = gitvet.Record(env={pipconfig.NO_RERUN: "1"})
    view = pinned_view(record)
    assert view.prefix == () and view.env == {pipconfig.NO_RERUN: "1"}
    assert pinned_view(gitvet.Record(env={pipconfig.NO_RERUN: ""})).env == {}
