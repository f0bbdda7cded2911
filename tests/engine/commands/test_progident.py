"""A program is vetted as every identity it has (engine.commands.progident): git run as `git-<sub>` acts as
that subcommand, rustup's proxies read the cwd's toolchain file whatever the tool's own options say, and a
path reaching /proc through a link is a finding no bytes hold (engine.commands.procpaths)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands import procpaths, progident
from engine.commands.treecode import Finding, binding, findings_for, unbound_findings


def test_git_run_under_a_dashed_name_is_that_subcommand() -> None:
    assert progident.git_argv(["/usr/bin/git-upload-archive", "log"]) == ["git", "upload-archive", "log"]
    assert progident.git_argv(["git-receive-pack", "-C", "x"]) == ["git", "receive-pack", "-C", "x"]
    assert progident.git_argv(["git", "log"]) == ["git", "log"]
    assert progident.git_argv(["./mygit", "status"]) == ["./mygit", "status"]
    assert progident.git_argv(["git-", "status"]) == ["git-", "status"]


def test_a_rustup_proxy_is_known_by_argv0_and_its_target() -> None:
    rustup = "/h/.cargo/bin/rustup"
    assert progident.proxied_tool(["cargo", "build"], (rustup, "/h/.cargo/bin/cargo")) == "cargo"
    assert progident.proxied_tool(["/h/.cargo/bin/rust-gdb"], (rustup,)) == "rust-gdb"
    assert progident.proxied_tool(["cargo.sh"], (rustup,)) == "cargo"  # rustup takes the file stem
    assert progident.proxied_tool(["rustup", "show"], (rustup,)) is None
    assert progident.proxied_tool(["cargo"], ("/usr/bin/cargo",)) is None  # no rustup: the real cargo
    known = ["cargo", "rustup", "make"]
    assert progident.identities(["cargo"], (rustup, None), known) == ["cargo", "rustup"]
    assert progident.identities(["./make"], ("/usr/bin/cargo",), known) == ["make", "cargo"]


def _proxy(tmp_path: Path, tool: str) -> tuple[str, str]:
    """A fake rustup and a link named `tool` to it: (the link, rustup's real path)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "rustup").write_text("#!/bin/sh\n")
    (bin_ / tool).symlink_to("rustup")
    return str(bin_ / tool), str(bin_ / "rustup")


def test_cargo_through_rustups_proxy_vets_the_cwds_toolchain_file_whatever_its_dash_c(tmp_path: Path) -> None:
    link, rustup = _proxy(tmp_path, "cargo")
    work = tmp_path / "w"
    work.mkdir()
    (work / "rust-toolchain.toml").write_text('[toolchain]\npath = "/w/tc"\n')
    found = findings_for(["cargo", "-C", "/", "--version"], (rustup, link), str(work), [])
    assert any(f.path == str(work / "rust-toolchain.toml") and f.program == "rustup" for f in found), found
    # The proxy's argv is cargo's: cargo's grammar reads it, not rustup's (which would ask for all of it).
    assert not [f for f in found if f.path == "the command line"], found
    # The real cargo (no proxy) changes into -C first: / holds no toolchain file of the agent's.
    assert findings_for(["cargo", "-C", "/", "--version"], ("/usr/bin/cargo",), str(work), []) == []


def test_rust_gdb_through_rustups_proxy_asks_for_anything_but_its_version(tmp_path: Path) -> None:
    link, rustup = _proxy(tmp_path, "rust-gdb")
    root = "/"  # no tree of the agent's: only the argv decides
    assert findings_for(["rust-gdb", "--version"], (rustup, link), root, []) == []
    found = findings_for(["rust-gdb", "-batch", "-ex", "shell id"], (rustup, link), root, [])
    assert [f.path for f in found] == ["the command line"], found


def test_git_upload_archive_asks_as_the_subcommand_it_is(tmp_path: Path) -> None:
    git = os.path.realpath("/usr/bin/git")
    if not os.path.isfile(git):
        pytest.skip("needs git")
    found = findings_for(["git-upload-archive", "log"], (git, "/usr/bin/git-upload-archive"), "/", [])
    assert any("upload-archive" in f.what for f in found), found
    assert unbound_findings(binding(found))  # what git's config may name is in no bytes: never saved


def test_a_directory_option_linked_into_proc_is_a_finding_no_bytes_hold(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "sub").symlink_to("/proc/self/cwd/real")
    found = findings_for(["ninja", "-C", "sub"], ("/usr/bin/ninja",), str(tmp_path), [])
    assert Finding("ninja", str(tmp_path / "sub"), procpaths.THROUGH_PROCESS) in found, found
    assert str(tmp_path / "sub") in unbound_findings(binding(found))
    (tmp_path / "sub").unlink()
    (tmp_path / "sub").symlink_to("real")  # a link inside the tree: vetted where it leads
    assert findings_for(["ninja", "-C", "sub"], ("/usr/bin/ninja",), str(tmp_path), []) == []


def test_a_tree_file_linked_into_proc_is_a_finding_no_bytes_hold(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").symlink_to("/dev/fd/../../self/cwd/x.ninja")
    found = findings_for(["ninja"], ("/usr/bin/ninja",), str(tmp_path), [])
    assert Finding("ninja", str(tmp_path / "build.ninja"), procpaths.THROUGH_PROCESS) in found, found


def test_the_walk_follows_links_as_the_kernel_does(tmp_path: Path) -> None:
    walk = procpaths.linked_through_process
    (tmp_path / "d").mkdir()
    (tmp_path / "a").symlink_to("d")
    (tmp_path / "b").symlink_to(str(tmp_path / "a"))
    (tmp_path / "p").symlink_to("/proc/1/root")
    (tmp_path / "f").symlink_to("/dev/fd/3")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "d" / "up").symlink_to("../p")
    assert not walk("b/x", str(tmp_path))
    assert not walk("nothing/../p", str(tmp_path))  # the kernel stops at what is absent
    assert walk("p", str(tmp_path)) and walk("f", str(tmp_path)) and walk("a/up/etc", str(tmp_path))
    assert walk("loop", str(tmp_path))  # past the kernel's link limit: nothing to vet
    assert walk("/proc/self/cwd", "/")
    assert not walk("/etc/passwd", "/")
    # The cwd itself is not judged: an anchored cwd (the spawn's fd of the decided directory) is walked from.
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not walk("b/x", f"/proc/self/fd/{fd}")
        assert walk("p", f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    assert procpaths.process_linked_words(["-Cp", "--dir=f", "b", "-j4", "@p"], str(tmp_path)) == [
        "-Cp",
        "--dir=f",
        "@p",
    ]


def test_a_tree_file_under_a_directory_linked_into_proc_is_a_finding(tmp_path: Path) -> None:
    """cargo reads `.cargo/config.toml`; with `.cargo -> /proc/self/cwd/x` the gateway finds nothing there
    (its own cwd has no x), the run finds its cwd's x/config.toml."""
    (tmp_path / ".cargo").symlink_to("/proc/self/cwd/x")
    found = findings_for(["cargo", "--version"], ("/usr/bin/cargo",), str(tmp_path), [])
    where = str(tmp_path / ".cargo" / "config.toml")
    assert Finding("cargo", where, procpaths.THROUGH_PROCESS) in found, found


def test_the_spawns_anchored_re_vet_finds_what_the_decision_found(tmp_path: Path) -> None:
    """The re-vet reads the cwd through the spawn's fd (`/proc/self/fd/N`): the anchor itself is never a
    path through /proc, so an unmodelled program's tree finding is the same finding there."""
    (tmp_path / "x.py").write_text("print(1)\n")
    (tmp_path / "sub").symlink_to("/proc/self/cwd/real")
    paths = (os.path.realpath("/usr/bin/python3"),)
    decided = findings_for(["python3", "x.py"], paths, str(tmp_path), [])
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        anchored = findings_for(["python3", "x.py"], paths, f"/proc/self/fd/{fd}", [])
        assert [f.what for f in anchored] == [f.what for f in decided], (anchored, decided)
        linked = findings_for(["ninja", "-C", "sub"], ("/usr/bin/ninja",), f"/proc/self/fd/{fd}", [])
        assert Finding("ninja", f"/proc/self/fd/{fd}/sub", procpaths.THROUGH_PROCESS) in linked, linked
    finally:
        os.close(fd)


def test_a_toolchain_file_naming_a_path_is_a_directory_no_bytes_hold() -> None:
    dirs = progident.toolchain_dirs
    assert dirs("/w/rust-toolchain.toml", b'[toolchain]\nchannel = "stable"\ncomponents = ["clippy"]\n') == []
    assert dirs("/w/rust-toolchain", b"nightly-2024-01-01\n") == []
    assert dirs("/w/rust-toolchain.toml", b'[toolchain]\npath = "tc"\n') == ["/w/tc"]
    assert dirs("/w/rust-toolchain", b'[toolchain]\npath = "/opt/tc"\n') == ["/opt/tc"]
    assert dirs("/w/rust-toolchain", b"./tc\n") == ["/w"]  # not a channel name: not understood
    assert dirs("/w/rust-toolchain.toml", b'[toolchain]\nchannel = "../x"\n') == ["/w"]
    assert dirs("/w/rust-toolchain.toml", b"[toolchain]\nunknown = 1\n") == ["/w"]
    assert dirs("/w/rust-toolchain.toml", b"not = [toml") == ["/w"]


def test_a_bound_toolchain_file_does_not_bind_the_toolchain_it_names(tmp_path: Path) -> None:
    """Even where the file is bound by its bytes, the programs of the toolchain it names are not: the
    approval is for this run only."""
    (tmp_path / "rust-toolchain.toml").write_text('[toolchain]\npath = "tc"\n')
    (tmp_path / "tc" / "bin").mkdir(parents=True)
    found = findings_for(["rustup", "show"], ("/usr/bin/rustup",), str(tmp_path), [])
    assert Finding("rustup", str(tmp_path / "tc"), progident.TOOLCHAIN_DIR) in found, found
    assert str(tmp_path / "tc") in unbound_findings(binding(found))


def test_rustups_proxies_are_runners() -> None:
    from engine.commands.argvsafe import takes_no_code
    from engine.commands.interpreters import runs_others

    for name in ("rust-gdb", "rust-lldb", "rustup", "rustc", "/h/.cargo/bin/rust-gdb"):
        assert runs_others(name) and not takes_no_code(name), name
