"""What the operator keeps from other accounts in the home is kept from host runs (fresh round 11 a: the
browser profile's cookies; engine.commands.homeprivate): variants of the class, each by the property
(no permission for "other"), none by a name, and the trusted configs the view keeps readable on purpose."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostoutside, hostprivate
from engine.commands.pinned import pinned_view
from engine.commands.verified import Mirror
from tests.helpers.bwrap import needs_bwrap


def _run(script: str) -> str:
    view = pinned_view(None, host=True)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    return done.stdout + done.stderr


def _secret(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


@needs_bwrap
def test_a_private_file_four_dirs_deep_is_empty_and_a_public_one_beside_it_reads(state_dir: Path) -> None:
    home = Path.home()
    _secret(home / "w" / "x" / "y" / "z" / ".netrc", "machine h login op password NETRC-SECRET\n")
    _secret(home / "w" / "x" / "y" / "z" / "notes.txt", "PUBLIC-NOTE\n", 0o644)
    out = _run(f"cat {home}/w/x/y/z/.netrc; cat {home}/w/x/y/z/notes.txt")
    assert "NETRC-SECRET" not in out
    assert "PUBLIC-NOTE" in out


@needs_bwrap
def test_a_private_dir_made_after_the_view_was_built_is_empty_at_the_next_run(state_dir: Path) -> None:
    home = Path.home()
    (home / "proj").mkdir()
    assert "first" in _run("echo first")  # the kept view and the walk's cache are made
    _secret(home / ".password-store" / "bank.gpg", "PASS-STORE-SECRET", 0o644)
    (home / ".password-store").chmod(0o700)
    # a public directory chmod'ed private later (its parent unchanged): its own stat says so
    _secret(home / "proj" / "keys" / "token", "LATER-PRIVATE", 0o644)
    assert "LATER-PRIVATE" in _run(f"cat {home}/proj/keys/token")
    (home / "proj" / "keys").chmod(0o700)
    listed = _run(f"ls -A {home}/.password-store {home}/proj/keys")
    assert "bank.gpg" not in listed and "token" not in listed, listed
    out = _run(f"cat {home}/.password-store/bank.gpg {home}/proj/keys/token")
    assert "PASS-STORE-SECRET" not in out and "LATER-PRIVATE" not in out, out


@needs_bwrap
def test_a_private_file_or_dir_behind_a_link_in_the_home_is_hidden_at_its_target(state_dir: Path) -> None:
    """The home's ~/.netrc a link into a dotfiles checkout on another disk, ~/.cache a link to a 0700 dir
    there, ~/data a link to a public dir there holding a 0600 token: each hidden where it is."""
    home = Path.home()
    disk = state_dir.parent / "disk"
    _secret(disk / "dotfiles" / "netrc", "LINKED-NETRC-SECRET")
    _secret(disk / "cache" / "git" / "credential" / "token", "LINKED-CACHE-SECRET", 0o644)
    (disk / "cache").chmod(0o700)
    _secret(disk / "data" / "sub" / "api-token", "LINKED-DATA-SECRET")
    (disk / "dotfiles").chmod(0o755)
    (disk / "data").chmod(0o755)
    (home / ".netrc").symlink_to(disk / "dotfiles" / "netrc")
    (home / ".cache").symlink_to(disk / "cache")
    (home / "data").symlink_to(disk / "data")
    out = _run(
        f"cat {home}/.netrc {disk}/dotfiles/netrc {home}/.cache/git/credential/token "
        f"{disk}/cache/git/credential/token {home}/data/sub/api-token {disk}/data/sub/api-token"
    )
    assert "SECRET" not in out, out


@needs_bwrap
def test_a_public_gitconfig_is_read_by_git_and_its_private_include_is_not(state_dir: Path) -> None:
    """Trusted config the view keeps on purpose: the operator's git in a host run reads its identity from
    a config others may read; an include others may not read is hidden all the same (privacy wins, fresh
    round 14 c: the run's git lacks it, the safe side)."""
    home = Path.home()
    _secret(home / ".gitconfig", "[user]\n\tname = Op\n[include]\n\tpath = .gitconfig.mail\n", 0o644)
    _secret(home / ".gitconfig.mail", "[user]\n\temail = op@example.invalid\n")
    _secret(home / ".git-credentials", "https://op:GITCRED-SECRET@git.example.invalid\n")
    out = _run(f"cd /; git config user.name; git config user.email; cat {home}/.git-credentials")
    assert "Op" in out
    assert "op@example.invalid" not in out and "GITCRED-SECRET" not in out


@needs_bwrap
def test_ssh_keys_are_hidden_and_the_ssh_config_and_known_hosts_read(state_dir: Path) -> None:
    """In the 0700 ~/.ssh the config, its include and known_hosts others may read are shown; a private
    include is hidden though ssh reads it (privacy wins, fresh round 14 c)."""
    home = Path.home()
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    _secret(ssh / "id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY----- SSH-KEY-SECRET\n")
    _secret(ssh / "config", "Host box\n\tHostName 192.0.2.1\n\tInclude extra.conf private.conf\n", 0o644)
    _secret(ssh / "extra.conf", "Host other\n\tUser someone\n", 0o644)
    _secret(ssh / "private.conf", "Host third\n\tUser PRIVATE-INCLUDE\n")
    _secret(ssh / "known_hosts", "box ssh-ed25519 AAAAKNOWN\n", 0o644)
    shown = f"{ssh}/config {ssh}/extra.conf {ssh}/known_hosts"
    out = _run(f"cat {ssh}/id_ed25519 {ssh}/private.conf; cat {shown}")
    assert "SSH-KEY-SECRET" not in out and "PRIVATE-INCLUDE" not in out
    assert "HostName 192.0.2.1" in out and "User someone" in out and "AAAAKNOWN" in out


@needs_bwrap
def test_a_private_dir_holding_the_path_and_a_host_writable_dir_is_shown_for_them_only(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~/.local 0700 holds ~/.local/bin (on the gateway's PATH: its programs run) and a secret beside it:
    the bin dir reads, the rest of ~/.local is hidden; in the bin dir a program others may not read is
    hidden (privacy wins, fresh round 14 c). A hostWritable dir inside a private one stays the agent's to
    write."""
    home = Path.home()
    _secret(home / ".local" / "bin" / "mytool", "#!/bin/sh\necho TOOL-RAN\n", 0o755)
    _secret(home / ".local" / "bin" / "deploy", "#!/bin/sh\necho DEPLOY-SECRET\n", 0o700)
    _secret(home / ".local" / "share" / "keyrings" / "login.keyring", "KEYRING-SECRET", 0o644)
    (home / ".local").chmod(0o700)
    (home / "private" / "work").mkdir(parents=True)
    (home / "private").chmod(0o700)
    _secret(home / "private" / "diary", "DIARY-SECRET", 0o644)
    monkeypatch.setenv("PATH", f"{home}/.local/bin:{os.environ['PATH']}")
    outside = hostoutside.Outside(writable=(str(home / "private" / "work"),))
    view = pinned_view(None, host=True, outside=outside)
    try:
        script = (
            f"{home}/.local/bin/mytool; cat {home}/.local/share/keyrings/login.keyring {home}/private/diary; "
            f"echo made > {home}/private/work/f && echo write-ok"
        )
        argv = view.wrap(["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    out = done.stdout + done.stderr
    assert "TOOL-RAN" in out and "write-ok" in out, out
    assert "KEYRING-SECRET" not in out and "DIARY-SECRET" not in out
    assert "DEPLOY-SECRET" not in _run(f"cat {home}/.local/bin/deploy")


@needs_bwrap
def test_a_vetted_copy_of_a_private_file_is_not_bound_back_over_its_cover(state_dir: Path) -> None:
    """A file the decision read (a Makefile, a script that re-reads itself) is pinned at its path in the
    run's view: one the view hides stays hidden, and one beside it that is not still gets its copy."""
    home = Path.home()
    _secret(home / "w" / "secret.mk", "all:\n\techo PINNED-SECRET\n")
    _secret(home / "w" / "public.mk", "all:\n\techo changed-on-disk\n", 0o644)
    files = [
        (str(home / "w" / "secret.mk"), b"PINNED-SECRET\n"),
        (str(home / "w" / "public.mk"), b"VETTED\n"),
    ]
    view = pinned_view(None, files, host=True)
    try:
        argv = view.wrap(["/bin/sh", "-c", f"cat {home}/w/secret.mk {home}/w/public.mk"])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    out = done.stdout + done.stderr
    assert "PINNED-SECRET" not in out, out
    assert "VETTED" in out, out


@needs_bwrap
def test_a_private_script_handed_to_its_reader_is_refused_not_copied(state_dir: Path) -> None:
    """A script its reader is handed by path is a sealed copy at another path (a mirror): for a file the
    view hides, that copy would be the file itself, so the run is refused."""
    home = Path.home()
    _secret(home / "w" / "secret.py", "print('MIRRORED-SECRET')\n")
    mirror = Mirror(str(state_dir.parent / "m"), str(home / "w"), "secret.py", b"print('MIRRORED-SECRET')\n")
    with pytest.raises(hostoutside.HostViewError, match="private to the operator"):
        pinned_view(None, host=True, mirrors=[mirror]).close()
    _secret(home / "w" / "public.py", "print('ok')\n", 0o644)
    public = Mirror(str(state_dir.parent / "m"), str(home / "w"), "public.py", b"print('ok')\n")
    pinned_view(None, host=True, mirrors=[public]).close()


@needs_bwrap
def test_a_private_path_dir_in_a_private_tmp_is_empty_and_a_public_one_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh round 14 c, outside the home: a PATH dir in the agent's private /tmp is the host's (never the
    agent's copy), but a 0700 one (or one below a 0700 dir) is shown empty, as another account sees it."""
    tmp = state_dir.parent / "tmp"  # EXECHOST_HOST_PRIVATE: this test's /tmp
    _secret(tmp / "op-bin" / "deploy", "#!/bin/sh\necho TMP-DEPLOY-SECRET\n", 0o700)
    (tmp / "op-bin").chmod(0o700)
    _secret(tmp / "op" / "bin" / "tool", "#!/bin/sh\necho NESTED-SECRET\n", 0o755)
    (tmp / "op").chmod(0o700)
    _secret(tmp / "pub-bin" / "mytool", "#!/bin/sh\necho PUBLIC-TOOL-RAN\n", 0o755)
    (tmp / "pub-bin").chmod(0o755)
    path = f"{tmp}/op-bin:{tmp}/op/bin:{tmp}/pub-bin:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    private = hostprivate.binds(str(state_dir), "main", hostprivate.dests(None))
    assert any(dest == os.path.realpath(tmp) for _source, dest in private)
    view = pinned_view(None, host=True, outside=hostoutside.Outside(private=private))
    try:
        script = f"cat {tmp}/op-bin/deploy {tmp}/op/bin/tool; {tmp}/pub-bin/mytool"
        done = subprocess.run(
            view.wrap(["/bin/sh", "-c", script]), capture_output=True, text=True, pass_fds=view.fds
        )
    finally:
        view.close()
    out = done.stdout + done.stderr
    assert "TMP-DEPLOY-SECRET" not in out and "NESTED-SECRET" not in out, out
    assert "PUBLIC-TOOL-RAN" in out, out
