"""Files a vet or a binding reads are regular files, read without blocking (engine.commands.regular), and
a word through /proc or /dev/fd is never checked or bound in the gateway's own process (protected)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands.gitvet import vet
from engine.commands.protected import process_word
from engine.commands.regular import Unreadable, read_regular
from engine.commands.treecode import Finding, binding
from engine.config.loader import load_config_text
from engine.policy.decision import evaluate

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
GIT = shutil.which("git") or "/usr/bin/git"
CAT = os.path.realpath(shutil.which("cat") or "/bin/cat")


def _decide(command: str, cwd: Path, store: ApprovalsStore | None = None):  # type: ignore[no-untyped-def]
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', Path("/c.toml"))
    return evaluate(command, config=config, store=store or ApprovalsStore(), cwd=str(cwd), env=ENV)


def test_a_fifo_is_reported_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)  # no writer: a blocking open would wait forever
    with pytest.raises(Unreadable) as caught:
        read_regular(str(fifo), 4096)
    assert caught.value.reason == "is not a regular file" and not caught.value.absent
    with pytest.raises(Unreadable) as missing:
        read_regular(str(tmp_path / "none"), 4096)
    assert missing.value.absent


def test_the_cap_and_the_prefix(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_regular(str(f), 10, prefix=True) == b"x" * 10
    with pytest.raises(Unreadable, match="over the 10-byte limit"):
        read_regular(str(f), 10)
    link = tmp_path / "l"
    link.symlink_to(f)
    assert read_regular(str(link), 100) == b"x" * 100
    with pytest.raises(Unreadable):
        read_regular(str(link), 100, follow=False)


@pytest.mark.parametrize("name", ["HEAD", "commondir"])
def test_a_fifo_in_the_git_dir_is_a_finding_not_a_hang(tmp_path: Path, name: str) -> None:
    subprocess.run([GIT, "init", "-q", str(tmp_path)], check=True)
    path = tmp_path / ".git" / name
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    found = vet(GIT, ["git", "status"], str(tmp_path))
    assert found and "is not a regular file" in found[0].what, found


def test_a_fifo_planted_as_a_tree_file_binds_as_unreadable(tmp_path: Path) -> None:
    fifo = tmp_path / "Makefile"
    os.mkfifo(fifo)
    assert binding([Finding("make", str(fifo), "recipes")]) == f"tree:{fifo}=unreadable"


@pytest.mark.parametrize(
    ("word", "cwd"),
    [
        ("/proc/self/cwd/x.sh", "/tmp"),
        ("/proc/thread-self/cwd/x", "/tmp"),
        ("/proc/1/root/etc/x", "/tmp"),
        ("/dev/fd/../../self/cwd/x.sh", "/tmp"),  # lexically /self/cwd: it goes through /dev/fd
        ("//proc/self/cwd", "/tmp"),
        ("/./proc/self", "/tmp"),
        ("/dev/../proc/self", "/tmp"),
        ("/dev/stdin", "/tmp"),
        ("proc/self/cwd/x", "/"),
        ("fd/3", "/dev"),
        ("../../proc/self/cwd", "/a/b"),
        ("--output=/proc/self/cwd/x", "/tmp"),
        ("-f/proc/self/cwd/x", "/tmp"),
        ("/usr/bin:/proc/self/cwd", "/tmp"),
        ("~/../../proc/self/cwd", "/tmp"),
        ("x.sh", "/proc/self/cwd"),
    ],
)
def test_words_through_proc_or_dev_fd(word: str, cwd: str) -> None:
    assert process_word(["prog", word], cwd) is not None


@pytest.mark.parametrize(
    "word", ["/dev/null", "src/proc.c", "/tmp/proc", "/tmp/x/../proc", "/devices/x", "process"]
)
def test_other_words_are_not(word: str) -> None:
    assert process_word(["prog", word], "/tmp") is None


def test_an_allowlisted_reader_of_a_proc_path_asks_without_allow_always(tmp_path: Path) -> None:
    store = ApprovalsStore()
    store.add_allowlist("main", CAT)
    d = _decide("cat /proc/self/cwd/x", tmp_path, store)
    assert d.verdict == "ask" and "/proc or /dev/fd" in d.reason, d.reason
    assert "allow-always" not in d.allowed_decisions
    assert _decide(f"cat {tmp_path}/x", tmp_path, store).verdict == "allow"


def test_a_fifo_script_operand_asks_without_allow_always(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "prog")
    d = _decide("python3 prog", tmp_path)
    assert d.verdict == "ask" and "allow-always" not in d.allowed_decisions
    assert any("not a regular file" in w for w in d.warnings), d.warnings


def test_a_script_operand_through_a_link_into_proc_is_not_saved(tmp_path: Path) -> None:
    """`p -> /proc/self/cwd`: the gateway resolves p/x.sh in its own process, the run in its own."""
    (tmp_path / "x.sh").write_text("echo hi\n")
    (tmp_path / "p").symlink_to("/proc/self/cwd")
    d = _decide("sh p/x.sh", tmp_path)
    assert d.verdict == "ask" and "allow-always" not in d.allowed_decisions
    assert any("/proc or /dev/fd" in w for w in d.warnings), d.warnings
    assert "allow-always" in _decide("sh x.sh", tmp_path).allowed_decisions
