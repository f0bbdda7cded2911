"""engine.commands.configprograms: the programs the operator's git and ssh configs run, found as the tools
read them (every path a command line names, not only its first word)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.commands import configprograms

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_every_path_of_a_command_line_is_a_program(tmp_path: Path) -> None:
    line = "python3 /opt/team/proxy.py %h; ~/bin/after && /usr/local/bin/x|/opt/y --flag=/opt/z"
    assert configprograms.paths_in(line, "/home/op") == [
        "/opt/team/proxy.py", "/home/op/bin/after", "/usr/local/bin/x", "/opt/y", "/opt/z",
    ]  # fmt: skip
    assert configprograms.paths_in(f"tool {tmp_path}", "/h") == []  # a directory is an argument's


def test_ssh_commands_match_exec_and_libraries(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        'Match host a exec "/opt/a/on-vpn %h"\n  ProxyCommand /usr/bin/nc -X 5 -x /opt/b/sock %h %p\n'
        "Host *\n  LocalCommand=/opt/c/notify\n  KnownHostsCommand /opt/d/kh %H\n"
        "  PKCS11Provider /opt/e/p11.so\n"
        "  RemoteCommand /opt/runs/remotely\n  IdentityFile /opt/key\n"
    )
    found = configprograms.ssh_programs([str(config)], "/h")
    assert found == [
        "/opt/a/on-vpn", "/usr/bin/nc", "/opt/b/sock", "/opt/c/notify", "/opt/d/kh", "/opt/e/p11.so",
    ]  # fmt: skip


@needs_git
def test_git_command_keys_of_any_subsection(tmp_path: Path) -> None:
    config = tmp_path / "gitconfig"
    config.write_text(
        "[credential]\n\thelper = /opt/cred\n"
        '[credential "https://x.example"]\n\thelper = "!/opt/cred2 --x"\n'
        "[core]\n\tsshCommand = ssh -i /opt/key -o ProxyCommand=/opt/px\n\tpager = /opt/pager\n"
        '[diff "pdf"]\n\ttextconv = /opt/pdf2txt\n[alias]\n\tst = status /opt/notrun\n\tx = !/opt/alias\n'
        "[safe]\n\tdirectory = /opt/project\n"
    )
    found = configprograms.git_programs([str(config)], "/h")
    assert found == [
        "/opt/cred", "/opt/cred2", "/opt/key", "/opt/px", "/opt/pager", "/opt/pdf2txt", "/opt/alias",
    ]  # fmt: skip


@needs_git
def test_the_git_cache_follows_the_files_bytes(tmp_path: Path) -> None:
    config = tmp_path / "gitconfig"
    config.write_text("[core]\n\teditor = /opt/one\n")
    assert configprograms.git_programs([str(config)], "/h") == ["/opt/one"]
    assert configprograms.git_known([str(config)])
    config.write_text("[core]\n\teditor = /opt/two\n")
    assert not configprograms.git_known([str(config)])
    assert configprograms.git_programs([str(config)], "/h") == ["/opt/two"]


def test_npm_and_cargo_programs(tmp_path: Path) -> None:
    npmrc = tmp_path / ".npmrc"
    npmrc.write_text("registry=https://r.example/\nscript-shell = /opt/npm/sh\neditor=vim /opt/notes\n")
    assert configprograms.npm_programs([str(npmrc)], "/h") == ["/opt/npm/sh", "/opt/notes"]
    cargo = tmp_path / "config.toml"
    cargo.write_text(
        '[build]\nrustc-wrapper = "/opt/sccache"\ntarget-dir = "/opt/target"\n'
        '[target.x86_64-unknown-linux-gnu]\nlinker = "/opt/ld"\nrunner = ["/opt/run", "--x"]\n'
        '[registry]\nglobal-credential-providers = ["/opt/cred a"]\n'
    )
    assert configprograms.cargo_programs([str(cargo)], "/h") == [
        "/opt/sccache",
        "/opt/ld",
        "/opt/run",
        "/opt/cred",
    ]
    cargo.write_text("not toml [")
    assert configprograms.cargo_programs([str(cargo)], "/h") == []


def test_a_fifo_at_a_configs_path_is_never_opened(tmp_path: Path) -> None:
    """Reading the configs never opens anything but a regular file: a FIFO there would have held the
    decision until someone wrote it, and taken a reader's open from the program it was meant for."""
    import os
    import stat

    fifo = tmp_path / ".npmrc"
    os.mkfifo(fifo)
    assert configprograms.npm_programs([str(fifo)], str(tmp_path)) == []  # returns at once
    link = tmp_path / "cfg"
    link.symlink_to(fifo)
    assert configprograms.npm_programs([str(link)], str(tmp_path)) == []
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
