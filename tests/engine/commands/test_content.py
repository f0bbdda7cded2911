"""Content binding units: who can write a file, the digest cache, script operands, sealed copies."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.commands.digests import CACHE, DigestCache, digest_path, hash_fd, open_regular
from engine.commands.filetrust import system_owned
from engine.commands.rawcommand import raw_command_matches
from engine.commands.scriptfiles import parse_shebang, script_operand
from engine.commands.verified import sealed_copy


def _digest(path: Path, cache: DigestCache) -> str:
    fd, st = open_regular(str(path))
    try:
        return hash_fd(fd, st, cache)
    finally:
        os.close(fd)


def test_the_cache_serves_an_unchanged_file_and_never_a_changed_one(tmp_path: Path) -> None:
    cache = DigestCache()
    f = tmp_path / "bin"
    f.write_bytes(b"A" * 4096)
    first = _digest(f, cache)
    assert _digest(f, cache) == first and cache.hits == 1
    st = f.stat()
    # Same size, written in place, mtime put back: ctime still moves, so the key changes.
    with open(f, "r+b") as fh:
        fh.write(b"B")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = _digest(f, cache)
    assert second != first and cache.misses == 2
    # Replaced by rename (new inode), same content as before: hashed again, not served from the cache.
    g = tmp_path / "new"
    g.write_bytes(b"A" * 4096)
    os.replace(g, f)
    assert _digest(f, cache) == first and cache.misses == 3


def test_the_cache_is_bounded() -> None:
    cache = DigestCache(limit=2)
    for name in ("/bin/sh", "/usr/bin/env", "/bin/true"):
        fd, st = open_regular(os.path.realpath(name))
        try:
            hash_fd(fd, st, cache)
        finally:
            os.close(fd)
    assert len(cache._entries) == 2


def test_agent_writable_files_are_never_cached(tmp_path: Path) -> None:
    f = tmp_path / "tool"
    f.write_text("#!/bin/sh\n")
    before = len(CACHE._entries)
    _, size, writable, _ = digest_path(str(f))
    assert writable and size == 10 and len(CACHE._entries) == before
    assert not system_owned(str(f))  # /tmp is world-writable: anyone could swap it


@pytest.mark.skipif(os.stat("/usr/bin").st_uid != 0, reason="needs a root-owned /usr/bin")
def test_root_owned_system_binaries_are_system_owned() -> None:
    assert system_owned(os.path.realpath(shutil.which("true") or "/bin/true"))


@pytest.mark.parametrize(
    ("argv", "index"),
    [
        (["sh", "s.sh"], 1),
        (["bash", "-e", "./x"], 2),
        (["bash", "-o", "pipefail", "x.sh"], 3),
        (["bash", "-ec", "echo"], None),
        (["sh", "-c", "echo", "s.sh"], None),
        (["python3", "-u", "x.py", "arg"], 2),
        (["python3", "-W", "ignore", "x.py"], 3),
        (["python3", "-m", "http.server"], None),
        (["python3", "-c", "print(1)"], None),
        (["node", "--require", "r.js", "app.js"], 3),
        (["node", "-e", "1"], None),
        (["perl", "-e", "print"], None),
        (["awk", "-f", "prog.awk", "data"], 2),
        (["awk", "{print}", "data"], None),
        (["python3", "--", "x.py"], 2),
        (["ls", "x.py"], None),
        (["make", "target"], None),
    ],
)
def test_script_operand(argv: list[str], index: int | None) -> None:
    assert script_operand(argv, argv[0]) == index


def test_parse_shebang() -> None:
    assert parse_shebang(b"#!/bin/sh\necho") == ("/bin/sh",)
    assert parse_shebang(b"#! /usr/bin/env python3 \n") == ("/usr/bin/env", "python3")
    assert parse_shebang(b"#!/bin/sh -e -u\n") == ("/bin/sh", "-e -u")  # Linux: one argument
    assert parse_shebang(b"\x7fELF") is None


def test_a_sealed_copy_cannot_be_changed() -> None:
    fd = sealed_copy(b"echo sealed\n", "t")
    try:
        with pytest.raises(OSError) as exc:
            os.pwrite(fd, b"x", 0)
        assert exc.value.errno == errno.EPERM
        with pytest.raises(OSError):
            os.ftruncate(fd, 0)
        assert os.pread(fd, 100, 0) == b"echo sealed\n"
        path = f"/proc/self/fd/{fd}"
        with pytest.raises(OSError):
            open(path, "wb")  # noqa: SIM115  # reopening for write through /proc is refused too
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("argv", "raw", "ok"),
    [
        (["echo", "hi"], None, True),
        (["echo", "hi"], "  ", True),
        (["echo", "hi"], "echo hi", True),
        (["echo", "hi"], " echo hi\n", True),
        (["echo", "hi"], "echo  hi", False),
        (["echo", "hi there"], 'echo "hi there"', True),
        (["echo", "hi there"], "echo hi there", False),
        (["echo", 'a"b'], 'echo "a\\"b"', True),
        (["/bin/sh", "-lc", "echo hi"], "echo hi", True),
        (["/bin/sh", "-lc", "echo hi"], '/bin/sh -lc "echo hi"', True),
        (["/bin/sh", "-c", "echo hi", "x"], "echo hi", False),
        (["/usr/bin/env", "BASH_ENV=/tmp/p", "bash", "-lc", "echo hi"], "echo hi", False),
        (["cmd.exe", "/c", "echo", "SAFE&&whoami"], "echo", False),
    ],
)
def test_raw_command_matches(argv: list[str], raw: str | None, ok: bool) -> None:
    assert raw_command_matches(argv, raw) is ok


def test_bound_where_a_human_or_an_allowlist_decides(tmp_path: Path) -> None:
    from engine.config.loader import load_config_text
    from engine.policy.decision import evaluate
    from tests.helpers.gateway import ALLOWLIST, FULL

    always = FULL.replace('ask = "off"', 'ask = "always"')
    for config, bound in ((ALLOWLIST, True), (always, True), (FULL, False)):
        d = evaluate("true", config=load_config_text(config), cwd=str(tmp_path))
        assert (d.content is not None) is bound, config


# ------------------------------------------------------------------ a link to a system file (issue 27)


def _decide(command: str, cwd: Path) -> object:
    from engine.config.loader import load_config_text
    from engine.policy.decision import evaluate
    from tests.helpers.gateway import ALLOWLIST

    return evaluate(command, config=load_config_text(ALLOWLIST), cwd=str(cwd))


def test_a_link_in_the_agents_directory_is_the_agents_whatever_it_names(tmp_path: Path) -> None:
    from engine.commands.filetrust import links_fixed
    from engine.commands.verified import verify

    os.symlink("/usr/bin/cat", tmp_path / "mycat")
    assert not links_fixed(str(tmp_path / "mycat"))
    d = _decide("./mycat /proc/self/cmdline", tmp_path)
    content = d.content  # type: ignore[attr-defined]
    [item] = [i for i in content.items if i.role == "executable"]
    assert item.linked and item.writable and item.real == os.path.realpath("/usr/bin/cat")
    assert str(tmp_path / "mycat") in content.writable_paths
    assert item.real not in content.writable_paths  # root's file: no warning that the agent can write it
    # Allow-always saves the command bound to cat's bytes, never the agent's link as a path entry.
    assert all(p.startswith("=command:") for p in d.allow_always_patterns)  # type: ignore[attr-defined]
    assert f"{item.real}={item.sha256}" in content.durable_text()
    pinned = d.pinned_command  # type: ignore[attr-defined]
    run = verify(content, pinned, pinned)
    try:
        # The link is re-pointed after the check: the run still takes the verified real file ...
        (tmp_path / "evil").write_text("#!/bin/sh\necho evil\n")
        (tmp_path / "evil").chmod(0o755)
        os.unlink(tmp_path / "mycat")
        os.symlink("evil", tmp_path / "mycat")
        out = subprocess.run(["/bin/sh", "-c", run.command], cwd=tmp_path, capture_output=True, check=True)
    finally:
        run.close()
    # ... under the name it was typed by.
    assert out.stdout.split(b"\0")[0] == str(tmp_path / "mycat").encode()


def test_a_link_only_root_can_change_keeps_its_path_entry(tmp_path: Path) -> None:
    from engine.commands.filetrust import links_fixed
    from engine.commands.verified import verify

    link = "/usr/bin/dnsdomainname"  # -> hostname, both in root's /usr/bin
    if not os.path.islink(link) or not system_owned(os.path.realpath(link)):
        pytest.skip("no root-owned link to a system binary here")
    assert links_fixed(link)
    d = _decide(link, tmp_path)
    content = d.content  # type: ignore[attr-defined]
    [item] = [i for i in content.items if i.role == "executable"]
    assert not item.linked and not item.writable and item.path == link
    assert link not in content.writable_paths  # an allowlist entry naming it is saved and matched as a path
    pinned = d.pinned_command  # type: ignore[attr-defined]
    run = verify(content, pinned, pinned)
    try:
        assert run.command == pinned and "exec -a" not in run.command  # run by its own name, as before
    finally:
        run.close()


def test_a_script_run_through_a_link_is_named_by_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "real.sh").write_text("echo hi\n")
    os.symlink("real.sh", tmp_path / "link.sh")
    d = _decide("sh link.sh", tmp_path)
    [item] = [i for i in d.content.items if i.role == "script"]  # type: ignore[attr-defined]
    assert item.word == str(tmp_path / "real.sh")  # "$0": the file the view pins, not the agent's link


@pytest.mark.parametrize(
    ("options", "skips"),
    [
        (["-x"], True),
        (["-u", "-x"], True),
        (["-ux"], True),
        (["-X", "x"], False),  # -X's value is not a cluster
        (["-Xdev", "-x"], True),
        (["-W", "ignore"], False),
        (["--help-xoptions"], False),
        ([], False),
    ],
)
def test_python_dash_x_is_read_as_python_reads_its_options(options: list[str], skips: bool) -> None:
    from engine.commands.interpoptions import python_skips_first_line

    assert python_skips_first_line(options) is skips


def test_the_python_loader_skips_the_first_line_as_dash_x_does(tmp_path: Path) -> None:
    """`python3 -x s.py` never runs line 1 and keeps the line numbers: the sealed copy's loader alike."""
    from engine.commands.verified import read_words

    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('line 1 ran')\nimport sys; print('line', sys._getframe().f_lineno)\n")
    ran = subprocess.run(
        ["python3", *read_words("python", str(script), "s.py", skip_first=True)],
        capture_output=True,
        text=True,
        check=True,
    )
    direct = subprocess.run(["python3", "-x", str(script)], capture_output=True, text=True, check=True)
    assert ran.stdout == direct.stdout == "line 2\n"


@pytest.mark.parametrize(
    "argv", [["perl", "-S", "app.pl"], ["perl", "-wS", "app.pl"], ["perl", "-Sw", "app.pl"]]
)
def test_perl_dash_s_is_a_program_found_on_path_not_the_operand(argv: list[str]) -> None:
    """perlrun: -S searches PATH for the program; ./app.pl is not what runs, so nothing the text names is."""
    from engine.commands.interpoptions import MODULE, program_source

    source = program_source(argv)
    assert source is not None and source.kind == MODULE
    assert script_operand(argv, "perl") is None


def _run_verified(command: str, cwd: Path) -> tuple[object, str]:
    from engine.commands.pinned import pinned_view
    from engine.commands.verified import verify

    d = _decide(command, cwd)
    pinned = d.pinned_command  # type: ignore[attr-defined]
    run = verify(d.content, pinned, pinned)  # type: ignore[attr-defined]
    # in the run's view, as the spawn starts it: a script is read from its mirror there (verified.Mirror)
    view = pinned_view(None, run.rereads, mirrors=run.mirrors)
    try:
        out = subprocess.run(
            view.argv("/bin/sh", run.command) or ["/bin/sh", "-c", run.command],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            pass_fds=(*run.fds, *view.fds),
        )
    finally:
        view.close()
        run.close()
    return d, out.stdout


def test_a_linked_python_runs_under_its_real_path_and_a_venvs_keeps_its_venv(tmp_path: Path) -> None:
    """The agent's link to root's python runs as the real path (sys.executable is no link the agent can
    re-point); a virtualenv's keeps the link's name (or it loses the venv) and is never proven bound."""
    real = os.path.realpath("/usr/bin/python3")
    (tmp_path / "bin").mkdir()
    os.symlink(real, tmp_path / "bin" / "python")
    probe = "import sys; print(sys.executable, sys.prefix)"
    d, out = _run_verified(f"bin/python -c '{probe}'", tmp_path)
    prefix = subprocess.run([real, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    assert out.split() == [real, prefix.stdout.strip()], out
    assert d.content.proven  # type: ignore[attr-defined]
    (tmp_path / "pyvenv.cfg").write_text(f"home = {os.path.dirname(real)}\n")
    d, out = _run_verified(f"bin/python -c '{probe}'", tmp_path)
    assert out.split() == [str(tmp_path / "bin" / "python"), str(tmp_path)], out
    assert not d.content.proven  # type: ignore[attr-defined]
    assert any("virtualenv" in why for why in d.content.unproven)  # type: ignore[attr-defined]
    same = tmp_path / "bin" / os.path.basename(real)  # `.venv/bin/python3.11`: the real file's own name
    os.symlink(real, same)
    d, out = _run_verified(f"bin/{same.name} -c '{probe}'", tmp_path)
    assert out.split() == [str(same), str(tmp_path)], out


def test_a_shebang_through_the_agents_link_runs_its_interpreter_by_the_real_path(tmp_path: Path) -> None:
    real = os.path.realpath("/usr/bin/python3")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    link = tmp_path / "venv" / "bin" / "python"
    os.symlink(real, link)
    (tmp_path / "tool").write_text(f"#!{link}\nimport sys; print(sys.executable)\n")
    (tmp_path / "tool").chmod(0o755)
    d, out = _run_verified("./tool", tmp_path)
    [interp] = [i for i in d.content.items if i.role == "interpreter"]  # type: ignore[attr-defined]
    assert interp.linked and interp.path == str(link) and interp.real == real
    assert out.strip() == real


def test_an_unparsed_text_binds_its_files_where_its_cd_leads(tmp_path: Path) -> None:
    """`cd sub && sh s.sh` reads sub/s.sh: bound there too (and a name found in one place must stay
    absent in the other); a cd nobody can follow is said, never shown as bound."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "s.sh").write_text("echo approved\n")
    (tmp_path / "s.sh").write_text("echo decoy\n")
    (tmp_path / "t.sh").write_text("echo t\n")
    d = _decide("cd sub && sh s.sh; sh t.sh", tmp_path)
    content = d.content  # type: ignore[attr-defined]
    bound = {i.path: i.sha256 for i in content.items if i.role == "file"}
    assert bound[str(tmp_path / "sub" / "s.sh")] and bound[str(tmp_path / "s.sh")]
    assert bound[str(tmp_path / "sub" / "t.sh")] is None  # absent there: it must stay so
    assert not content.proven
    d = _decide("cd ~ && sh s.sh", tmp_path)
    assert any("cd ~" in p for p in d.content.problems)  # type: ignore[attr-defined]


# ------------------------------------------------------------ the cap on what binding reads (round 18 b)


def test_a_file_over_the_cap_is_not_hashed_and_the_binding_says_why(tmp_path: Path) -> None:
    """One byte over SCRIPT_MAX_BYTES: hash_fd refuses it unread (a 1 TiB root file would hold a decision
    worker for the length of the read), and `sh big.sh` is bound unreadable, refused with the reason."""
    from engine.commands.digests import SCRIPT_MAX_BYTES, UNREADABLE, ContentError

    big = tmp_path / "big.sh"
    big.write_text("echo hi\n")
    os.truncate(big, SCRIPT_MAX_BYTES + 1)  # sparse: nothing is spent on disk
    cache = DigestCache()
    fd, st = open_regular(str(big))
    try:
        with pytest.raises(ContentError, match=f"over the {SCRIPT_MAX_BYTES}-byte limit") as caught:
            hash_fd(fd, st, cache, SCRIPT_MAX_BYTES, str(big))
        assert caught.value.over
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0 and cache.misses == 0  # not one byte read, nothing kept
    finally:
        os.close(fd)
    with pytest.raises(ContentError, match="limit"):
        digest_path(str(big), cache)
    d = _decide("sh big.sh", tmp_path)
    content = d.content  # type: ignore[attr-defined]
    [script] = [i for i in content.items if i.real == str(big)]
    assert script.sha256 == UNREADABLE  # bound as unreadable: never left unbound, never run
    assert any(f"{SCRIPT_MAX_BYTES + 1} bytes, over the" in p for p in content.problems)
    assert any("larger than content binding reads" in n for n in content.notes)
    assert "allow-always" not in d.allowed_decisions  # type: ignore[attr-defined]
    # At the cap exactly it is still a script: bound by its digest.
    os.truncate(big, SCRIPT_MAX_BYTES)
    [script] = [i for i in _decide("sh big.sh", tmp_path).content.items if i.real == str(big)]  # type: ignore[attr-defined]
    assert script.sha256 not in (None, UNREADABLE)


def test_a_file_bound_over_the_cap_is_refused_at_the_spawn_unread(tmp_path: Path) -> None:
    from engine.commands.digests import SCRIPT_MAX_BYTES
    from engine.commands.verified import StaleContent, verify

    big = tmp_path / "big.sh"
    big.write_text("echo hi\n")
    os.truncate(big, SCRIPT_MAX_BYTES + 1)
    d = _decide("sh big.sh", tmp_path)
    with pytest.raises(StaleContent, match="could not be bound"):
        verify(d.content, d.pinned_command, d.pinned_command)  # type: ignore[attr-defined]
