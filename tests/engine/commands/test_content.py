"""Content binding units: who can write a file, the digest cache, script operands, sealed copies."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from engine.commands.content import (
    CACHE,
    DigestCache,
    digest_path,
    hash_fd,
    open_regular,
    parse_shebang,
    script_operand,
    system_owned,
)
from engine.commands.rawcommand import raw_command_matches
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
