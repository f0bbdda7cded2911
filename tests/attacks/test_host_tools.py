"""Issue 18 part 3: host programs never run code from a tree the agent can write.

Each git case plants a payload that creates a marker, proves with plain git that the payload runs, then
sends the same command through the real gateway with git allowlisted: the marker must not appear and the
command must ask (no approver is attached, so it waits) instead of running.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.config.loader import load_config_text
from engine.policy.decision import evaluate
from tests.attacks.harness import ALLOWLIST, attempt, refused

GIT_ANY = ("/usr/bin/git", None)  # the broadest entry an operator could write: every argv allowed
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def raw_env() -> dict[str, str]:
    """Plain git, as a host shell would run it without exechost: the control that proves each payload."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ["HOME"],
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        **IDENTITY,
    }


def git(work: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(work), *args], check=True, env=raw_env(), capture_output=True, input=stdin
    )
    return done.stdout.decode().strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "f.txt").write_text("one\n")
    git(path, "add", "f.txt")
    git(path, "commit", "-qm", "one")
    return path


def config(work: Path, key: str, value: str) -> None:
    git(work, "config", key, value)


def script(path: Path, marker: Path) -> Path:
    path.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    path.chmod(0o755)
    return path


def signed_head(work: Path, armor: str) -> None:
    """Make HEAD a commit carrying a `gpgsig` header of the given armour (PGP, SSH or X.509)."""
    tree = git(work, "rev-parse", "HEAD^{tree}")
    parent = git(work, "rev-parse", "HEAD")
    sig = "\n ".join([f"-----BEGIN {armor}-----", "", "AAAA", f"-----END {armor}-----"])
    body = (
        f"tree {tree}\nparent {parent}\nauthor t <t@x> 0 +0000\ncommitter t <t@x> 0 +0000\n"
        f"gpgsig {sig}\n\nsigned\n"
    )
    sha = git(work, "hash-object", "-t", "commit", "-w", "--stdin", "--literally", stdin=body.encode())
    git(work, "update-ref", "HEAD", sha)


@pytest.fixture
def http_401() -> Iterator[str]:
    """An HTTP remote that wants credentials: git then asks its credential helper."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="x"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/r.git"
    finally:
        server.shutdown()
        server.server_close()


Setup = Callable[[Path, Path, Path, str], str]  # (work, marker, tmp, url) -> command


def filter_process(work: Path, m: Path, tmp: Path, url: str) -> str:
    (work / ".gitattributes").write_text("*.txt filter=x\n")
    config(work, "filter.x.process", f"touch {m}; false")
    (work / "f.txt").write_text("two\n")
    return "git add f.txt"


def filter_clean(work: Path, m: Path, tmp: Path, url: str) -> str:
    (work / ".gitattributes").write_text("*.txt filter=x\n")
    config(work, "filter.x.clean", f"touch {m}; cat")
    (work / "f.txt").write_text("two\n")
    return "git add f.txt"


def filter_smudge(work: Path, m: Path, tmp: Path, url: str) -> str:
    (work / ".git" / "info" / "attributes").write_text("*.txt filter=x\n")
    config(work, "filter.x.smudge", f"touch {m}; cat")
    (work / "f.txt").unlink()
    return "git checkout -- f.txt"


def diff_textconv(work: Path, m: Path, tmp: Path, url: str) -> str:
    (work / ".gitattributes").write_text("*.txt diff=x\n")
    config(work, "diff.x.textconv", f"touch {m}; cat")
    (work / "f.txt").write_text("two\n")
    return "git diff"


def diff_command(work: Path, m: Path, tmp: Path, url: str) -> str:
    (work / ".gitattributes").write_text("*.txt diff=x\n")
    config(work, "diff.x.command", f"touch {m}; true")
    (work / "f.txt").write_text("two\n")
    return "git diff"


def merge_driver(work: Path, m: Path, tmp: Path, url: str) -> str:
    git(work, "checkout", "-q", "-b", "other")
    (work / "f.txt").write_text("other\n")
    git(work, "commit", "-qam", "other")
    git(work, "checkout", "-q", "main")
    (work / "f.txt").write_text("main\n")
    git(work, "commit", "-qam", "main")
    (work / ".git" / "info" / "attributes").write_text("*.txt merge=x\n")
    config(work, "merge.x.driver", f"touch {m}; false")
    return "git merge -q --no-edit other"


def gpg_show_signature_config(work: Path, m: Path, tmp: Path, url: str) -> str:
    """The issue's own case: `log.showSignature` and `gpg.program`, then a plain `git log`."""
    signed_head(work, "PGP SIGNATURE")
    config(work, "gpg.program", str(script(tmp / "gpg", m)))
    config(work, "log.showSignature", "true")
    return "git log -1"


def gpg_verify_commit(work: Path, m: Path, tmp: Path, url: str) -> str:
    signed_head(work, "PGP SIGNATURE")
    config(work, "gpg.program", str(script(tmp / "gpg", m)))
    return "git verify-commit HEAD"


def gpg_ssh_program(work: Path, m: Path, tmp: Path, url: str) -> str:
    signed_head(work, "SSH SIGNATURE")
    (tmp / "signers").write_text("t@x ssh-ed25519 AAAA\n")
    config(work, "gpg.ssh.allowedSignersFile", str(tmp / "signers"))
    config(work, "gpg.ssh.program", str(script(tmp / "ssh-keygen", m)))
    return "git log --show-signature -1"


def gpg_x509_program(work: Path, m: Path, tmp: Path, url: str) -> str:
    signed_head(work, "SIGNED MESSAGE")
    config(work, "gpg.x509.program", str(script(tmp / "gpgsm", m)))
    return "git log --show-signature -1"


def gpg_sign_on_commit(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "commit.gpgSign", "true")
    config(work, "gpg.program", str(script(tmp / "gpg", m)))
    return "git commit -q --allow-empty -m signed"


def fsmonitor(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "core.fsmonitor", f"touch {m}; false")
    return "git status"


def hook_in_git_dir(work: Path, m: Path, tmp: Path, url: str) -> str:
    script(work / ".git" / "hooks" / "post-checkout", m)
    return "git checkout -q -b side"


def hooks_path(work: Path, m: Path, tmp: Path, url: str) -> str:
    (tmp / "hooks").mkdir()
    script(tmp / "hooks" / "post-checkout", m)
    config(work, "core.hooksPath", str(tmp / "hooks"))
    return "git checkout -q -b side"


def ssh_command(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "core.sshCommand", f"touch {m}; false")
    return "git ls-remote ssh://127.0.0.1/nowhere.git"


def credential_helper(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "credential.helper", f"!touch {m}; true")
    return f"git ls-remote {url}"


def bang_alias(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "alias.st", f"!touch {m}")
    return "git st"


def include_path(work: Path, m: Path, tmp: Path, url: str) -> str:
    (tmp / "evil.cfg").write_text(f'[core]\n\tfsmonitor = "touch {m}; false"\n[alias]\n\tst = "!touch {m}"\n')
    config(work, "include.path", str(tmp / "evil.cfg"))
    return "git st"


def include_if(work: Path, m: Path, tmp: Path, url: str) -> str:
    (tmp / "evil.cfg").write_text(f'[alias]\n\tst = "!touch {m}"\n')
    config(work, "includeIf.gitdir:/.path", str(tmp / "evil.cfg"))
    return "git st"


def core_editor(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "core.editor", f"touch {m}; true")
    return "git commit -q --allow-empty"


def upload_pack(work: Path, m: Path, tmp: Path, url: str) -> str:
    make_repo(tmp / "src")
    config(work, "remote.origin.url", str(tmp / "src"))
    config(work, "remote.origin.uploadpack", f"touch {m}; git-upload-pack")
    return "git fetch -q origin"


def ext_transport(work: Path, m: Path, tmp: Path, url: str) -> str:
    config(work, "protocol.ext.allow", "always")
    config(work, "remote.evil.url", f"ext::sh -c touch% {m}")
    return "git fetch -q evil"


def submodule_config(work: Path, m: Path, tmp: Path, url: str) -> str:
    """A submodule's own config (`.git/modules/<name>/config`): `git status` recurses into it."""
    make_repo(tmp / "subsrc")
    git(work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(tmp / "subsrc"), "sub")
    git(work, "commit", "-qm", "sub")
    sub = work / "sub"
    (sub / ".gitattributes").write_text("*.txt filter=x\n")
    git(work / ".git" / "modules" / "sub", "config", "filter.x.clean", f"touch {m}; cat")
    (sub / "f.txt").write_text("one\n")
    os.utime(sub / "f.txt", (1, 1))  # stat-dirty: status must re-hash it through the clean filter
    return "git status"


CASES: list[Setup] = [
    filter_process,
    filter_clean,
    filter_smudge,
    diff_textconv,
    diff_command,
    merge_driver,
    gpg_show_signature_config,
    gpg_verify_commit,
    gpg_ssh_program,
    gpg_x509_program,
    gpg_sign_on_commit,
    fsmonitor,
    hook_in_git_dir,
    hooks_path,
    ssh_command,
    credential_helper,
    bang_alias,
    include_path,
    include_if,
    core_editor,
    upload_pack,
    ext_transport,
    submodule_config,
]
# Hooks live where core.hooksPath says: exechost forces it to /dev/null for every host git, so a hook in
# .git/hooks never runs and needs no ask; a repository that sets core.hooksPath itself asks.
NEUTRALISED = {hook_in_git_dir}


@pytest.mark.parametrize("setup", CASES, ids=[c.__name__ for c in CASES])
async def test_repository_code_paths_never_run_from_an_allowlisted_git(
    state_dir: Path, tmp_path: Path, setup: Setup, http_401: str
) -> None:
    marker = tmp_path / "pwned"
    work = make_repo(tmp_path / "r")
    command = setup(work, marker, tmp_path, http_401)
    # The control: plain git runs the payload (so the test can fail), on a copy of the same repository.
    twin = tmp_path / "twin"
    shutil.copytree(work, twin, symlinks=True)
    subprocess.run(
        ["sh", "-c", command], cwd=twin, env=raw_env(), capture_output=True, timeout=60, check=False
    )
    assert marker.exists(), f"the payload did not run under plain git: {command}"
    marker.unlink()

    details = await attempt(state_dir, command, allow=[GIT_ANY], workdir=str(work), env=IDENTITY)
    assert not marker.exists(), details
    if setup in NEUTRALISED:
        return  # nothing in the config names it: git runs, with hooks switched off (core.hooksPath forced)
    assert details["status"] == "approval-pending", details
    assert "would run it on the host" in details["_text"], details


def decide(command: str, cwd: Path, ask: str = "on-miss") -> dict[str, object]:
    from engine.approvals.store import ApprovalsStore

    config = load_config_text(ALLOWLIST.replace('ask = "on-miss"', f'ask = "{ask}"'))
    store = ApprovalsStore(Path(os.environ["OPENCLAW_STATE_DIR"]) / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/git", arg_pattern=None)
    store.add_allowlist("main", "/usr/bin/make", arg_pattern=None)
    return evaluate(command, config=config, store=store, cwd=str(cwd)).to_json()


def test_the_ask_names_the_key_and_is_never_satisfied_by_the_allowlist(
    state_dir: Path, tmp_path: Path
) -> None:
    """What the approver sees names the key; askFallback=allowlist has nothing to run on a timeout."""
    work = make_repo(tmp_path / "r")
    config(work, "filter.lfs2.process", "git-lfs2 filter-process")
    decision = decide("git status", work)
    assert decision["decision"] == "ask"
    assert decision["allowlistSatisfied"] is False and decision["enforcedCommand"] is None
    assert any("filter.lfs2.process" in w and "git would run it" in w for w in decision["warnings"])  # type: ignore[union-attr]
    off = decide("git status", work, ask="off")
    assert off["decision"] == "deny" and "filter.lfs2.process" in str(off["reason"]), off


def test_a_clean_repository_still_runs_without_asking(state_dir: Path, tmp_path: Path) -> None:
    work = make_repo(tmp_path / "r")
    config(work, "remote.origin.url", "https://example.invalid/r.git")
    config(work, "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")
    config(work, "branch.main.remote", "origin")
    config(work, "branch.main.merge", "refs/heads/main")
    assert decide("git status", work)["decision"] == "allow"
    assert decide("git -C sub/.. log -1", work)["decision"] == "allow"


async def test_allowlisted_make_asks_naming_the_makefile(state_dir: Path, tmp_path: Path) -> None:
    """A Makefile the agent (or an rw sandbox) wrote is code: an allowlisted `make` asks, naming it."""
    marker = tmp_path / "pwned"
    work = tmp_path / "w"
    work.mkdir()
    (work / "Makefile").write_text(f"all:\n\ttouch {marker}\n")
    subprocess.run(["make", "-s"], cwd=work, env=raw_env(), check=True, capture_output=True)
    assert marker.exists()
    marker.unlink()
    details = await attempt(state_dir, "make -s", allow=[("/usr/bin/make", None)], workdir=str(work))
    assert refused(details) and not marker.exists(), details
    assert "Makefile" in details["_text"], details


def test_allow_always_on_make_binds_the_makefile_content(state_dir: Path, tmp_path: Path) -> None:
    """A make in a tree the agent can write is never saved: its recipes run files nobody bound (issue 27
    §4), so allow-always is not offered, and a pattern saved anyway holds for nothing."""
    from engine.approvals.store import ApprovalsStore

    work = tmp_path / "w"
    work.mkdir()
    (work / "Makefile").write_text("all:\n\ttrue\n")
    first = decide("make all", work)
    assert first["decision"] == "ask"
    assert "allow-always" not in first["allowedDecisions"], first
    assert any("this run only" in w for w in first["warnings"]), first["warnings"]  # type: ignore[attr-defined]
    store = ApprovalsStore(Path(os.environ["OPENCLAW_STATE_DIR"]) / "exec-approvals.json")
    store.persist_allow_always("main", first["allowAlwaysPatterns"] or ["make all"])  # type: ignore[arg-type]
    assert decide("make all", work)["decision"] == "ask"


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed on this machine")
async def test_allowlisted_npm_asks_naming_package_json(state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    work = tmp_path / "w"
    (work / "deep").mkdir(parents=True)
    (work / "package.json").write_text(
        f'{{"name": "x", "version": "1.0.0", "scripts": {{"test": "touch {marker}"}}}}'
    )
    npm = shutil.which("npm") or "npm"
    subprocess.run(
        [npm, "test", "--silent"], cwd=work / "deep", env=raw_env(), capture_output=True, check=False
    )
    assert marker.exists()
    marker.unlink()
    details = await attempt(
        state_dir, f"{npm} test --silent", allow=[(npm, None)], workdir=str(work / "deep")
    )
    assert refused(details) and not marker.exists(), details
    assert "package.json" in details["_text"], details


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed on this machine")
def test_cargo_names_build_rs_and_cargo_config_up_the_tree(state_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "src").mkdir(parents=True)
    (work / ".cargo").mkdir()
    (work / "Cargo.toml").write_text('[package]\nname = "x"\nversion = "0.1.0"\n')
    (work / "build.rs").write_text("fn main() {}\n")
    (work / ".cargo" / "config.toml").write_text('[target.x86_64-unknown-linux-gnu]\nrunner = "sh"\n')
    cargo = shutil.which("cargo") or "cargo"
    from engine.approvals.store import ApprovalsStore

    store = ApprovalsStore(Path(os.environ["OPENCLAW_STATE_DIR"]) / "exec-approvals.json")
    store.add_allowlist("main", cargo, arg_pattern=None)
    d = evaluate(
        f"{cargo} build", config=load_config_text(ALLOWLIST), store=store, cwd=str(work / "src")
    ).to_json()
    assert d["decision"] == "ask"
    text = "\n".join(d["warnings"])
    assert "build.rs" in text and ".cargo/config.toml" in text and "Cargo.toml" in text


def test_direnv_and_sh_c_payloads_are_vetted_too(state_dir: Path, tmp_path: Path) -> None:
    """The payload of an allowlisted `sh -c` is vetted like a top-level command."""
    work = make_repo(tmp_path / "r")
    config(work, "alias.st", "!true")
    decision = decide("sh -c 'git status'", work)
    assert decision["decision"] == "ask"
    assert any("alias.st" in w for w in decision["warnings"])  # type: ignore[union-attr]


async def test_config_written_while_the_ask_waits_is_refused_at_the_spawn(
    state_dir: Path, tmp_path: Path
) -> None:
    """An ask shown for a clean repository; the agent then adds a clean filter; the operator approves:
    the approval is stale (the tree changed), git never runs, the filter never runs."""
    from engine.approvals.store import ApprovalsStore
    from tests.helpers.gateway import connect, gateway, wait_until, write_config

    marker = tmp_path / "pwned"
    work = make_repo(tmp_path / "r")
    (work / ".gitattributes").write_text("*.txt filter=x\n")
    (work / "f.txt").write_text("two\n")
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/git", r"^status$")
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        res = await agent.request(
            "exec", {"command": "git add f.txt", "workdir": str(work), "sessionKey": "a", "env": IDENTITY}
        )
        assert res["details"]["status"] == "approval-pending", res
        config(work, "filter.x.clean", f"touch {marker}; cat")
        operator = await connect(state_dir, "operator")
        await operator.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-once"})

        async def denied() -> str | None:
            events = (await agent.request("events", {"sessionKey": "a"}))["events"]
            return next((e["text"] for e in events if e["text"].startswith("Exec denied")), None)

        text = await wait_until(denied)
        assert "filter.x.clean" in text, text
        await agent.close()
        await operator.close()
    assert not marker.exists()


async def test_an_exec_frame_on_the_approval_socket_is_vetted_too(state_dir: Path, tmp_path: Path) -> None:
    """The approval socket's `exec` frame (OpenClaw's client) runs on this host: an allowlisted git there
    asks the human, who is shown the key, instead of running the repository's filter."""
    from engine.approvals.socket.server import (
        ApprovalSocketServer,
        PromptRequest,
        request_exec,
    )
    from engine.approvals.store import ApprovalsStore
    from engine.tools.exec_host import LocalExecHost
    from tests.helpers.gateway import write_config

    marker = tmp_path / "pwned"
    work = make_repo(tmp_path / "r")
    (work / ".gitattributes").write_text("*.txt filter=x\n")
    config(work, "filter.x.clean", f"touch {marker}; cat")
    (work / "f.txt").write_text("two\n")
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore().add_allowlist("main", "/usr/bin/git")
    asked: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        asked.append(request)
        return "deny"

    token = "exec-token-" + "k" * 24
    path = state_dir / "exec-approvals.sock"
    async with ApprovalSocketServer(path, token, decider=human, exec_handler=LocalExecHost()):
        res = await request_exec(path, token, {"command": ["git", "add", "f.txt"], "cwd": str(work)})
    assert res is not None and res.get("ok") is not True, res
    [prompt] = asked
    assert any("filter.x.clean" in w for w in prompt.warnings), prompt
    assert not marker.exists()


def test_allow_always_on_git_is_not_offered_for_a_config_key_not_known_inert(
    state_dir: Path, tmp_path: Path
) -> None:
    """A key not known inert may name any program (`filter.x.process = sh ./clean.sh`, an alias's `!sh
    t.sh`): the config's bytes are bound, the program they name is not, so an approval of it is for this
    run only (round 8: allow-always on it ran a rewritten t.sh unasked). A saved entry never matches."""
    work = make_repo(tmp_path / "r")
    config(work, "filter.lfs2.process", "git-lfs2 filter-process")
    first = decide("git status", work)
    assert first["decision"] == "ask"
    assert "allow-always" not in first["allowedDecisions"], first
    assert first["allowAlwaysPatterns"] == [], first
