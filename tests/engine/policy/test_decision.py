"""decision.evaluate: policy + real analysis + real allowlist + a real approvals file → allow/ask/deny."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsFile, ApprovalsStore
from engine.commands.allowlist import approval_binding, command_hash_pattern
from engine.commands.analysis import analyze_command
from engine.config.loader import load_config_text
from engine.config.model import Config
from engine.policy.decision import Decision, evaluate
from engine.policy.explain import explain
from engine.policy.precedence import SessionOverrides
from engine.results import ToolError

LS = os.path.realpath(shutil.which("ls") or "/bin/ls")
WC = os.path.realpath(shutil.which("wc") or "/usr/bin/wc")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}

GATEWAY_ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n'


def cfg(text: str = "") -> Config:
    return load_config_text(text, Path("/cfg/config.toml"))


def decide(
    command: str, text: str = GATEWAY_ALLOWLIST, store: ApprovalsStore | None = None, **kw: object
) -> Decision:
    return evaluate(command, config=cfg(text), store=store or ApprovalsStore(), cwd="/", env=ENV, **kw)  # type: ignore[arg-type]


def bound_hash(command: str, cwd: str = "/", env: dict[str, str] | None = None) -> str:
    """The durable pattern allow-always saves for `command` run in `cwd` with `env` (issue 9 item 7)."""
    return command_hash_pattern(command, approval_binding(analyze_command(command), cwd, env))


def test_allowlisted_chain_is_allowed_and_pinned() -> None:
    store = ApprovalsStore()
    store.add_allowlist("main", LS)
    d = decide("ls -la /tmp | wc -l", store=store)
    assert d.verdict == "allow" and d.allowlist_satisfied and not d.requires_approval
    assert d.decided_by.layer == "allowlist"
    assert LS in d.decided_by.value
    assert [s["satisfiedBy"] for s in d.segments] == ["allowlist", "safeBins"]
    assert d.segments[0]["resolvedPath"] == LS and d.segments[0]["matchedPattern"] == LS
    assert d.enforced_command is not None and d.enforced_command.startswith(f"'{LS}' '-la' '/tmp' |")
    assert d.allowed_decisions == () and d.allow_always_patterns == []


def test_miss_asks_on_miss_with_allow_always_patterns() -> None:
    d = decide("ls /tmp")
    assert d.verdict == "ask" and d.requires_approval and not d.allowlist_satisfied
    assert d.decided_by.layer == "built-in" and d.decided_by.key == "tools.exec.ask"
    assert "allowlist miss" in d.reason and LS in d.reason
    assert d.allowed_decisions == ("allow-once", "allow-always", "deny")
    assert d.allow_always_patterns == [LS]
    assert d.ask_fallback == "deny"


def test_miss_with_ask_off_is_denied() -> None:
    d = decide("ls /tmp", GATEWAY_ALLOWLIST + 'ask = "off"\n')
    assert d.verdict == "deny" and d.reason == "exec denied: allowlist miss"
    assert d.decided_by.key == "tools.exec.ask" and d.decided_by.layer == "config tools.exec"


def test_ask_always_asks_even_when_satisfied_and_offers_no_allow_always() -> None:
    store = ApprovalsStore()
    store.add_allowlist("main", LS)
    d = decide("ls", GATEWAY_ALLOWLIST + 'ask = "always"\n', store=store)
    assert d.verdict == "ask" and d.allowlist_satisfied
    assert d.allowed_decisions == ("allow-once", "deny") and d.allow_always_patterns == []
    assert "ask=always" in d.reason


def test_gateway_default_is_deny() -> None:
    d = decide("ls", '[tools.exec]\nhost = "gateway"\n')
    assert d.verdict == "deny" and d.reason == "exec denied: host=gateway security=deny"
    assert (d.decided_by.layer, d.decided_by.key, d.decided_by.value) == (
        "built-in",
        "tools.exec.security",
        "deny",
    )


def test_full_allows_everything_but_ask_always() -> None:
    full = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
    d = decide("curl http://127.0.0.1 | sh", full)
    assert d.verdict == "allow" and d.decided_by.key == "tools.exec.security"
    d = decide("ls", '[tools.exec]\nhost = "gateway"\nsecurity = "full"\n', params={"ask": "always"})
    assert d.verdict == "ask" and d.decided_by.layer == "tool param"


def test_fail_closed_analysis_never_allows() -> None:
    store = ApprovalsStore()
    store.add_allowlist("main", LS)
    store.add_allowlist("main", "**")
    for command in ("ls $(whoami)", "ls > /tmp/x", "ls `id`", "ls & ls", "(ls)"):
        d = decide(command, store=store)
        assert d.verdict == "ask" and not d.analysis_ok, command
        assert "analysis failed closed" in d.reason
        d = decide(command, GATEWAY_ALLOWLIST + 'ask = "off"\n', store=store)
        assert d.verdict == "deny", command


def test_heredoc_warning() -> None:
    # A heredoc we cannot prove to be data (an expansion in an unquoted body) asks with the warning;
    # a plain one is stdin data and needs only its command allowlisted (issue 21).
    d = decide("cat <<EOF\n$(id)\nEOF")
    assert d.verdict == "ask"
    assert "Warning: heredoc execution requires explicit approval in allowlist mode." in d.warnings
    store = ApprovalsStore()
    store.add_allowlist("main", "/usr/bin/cat")
    d = decide("cat <<'EOF'\n$(id)\nEOF", store=store)
    assert d.verdict == "allow" and not d.warnings, d.reason
    assert d.enforced_command == "'/usr/bin/cat' <<'EXECHOST_EOF_0'\n$(id)\nEXECHOST_EOF_0\n"


def test_durable_command_hash_approval() -> None:
    store = ApprovalsStore()
    command = "ls /tmp /var"
    store.persist_allow_always("main", [bound_hash(command)])
    d = decide(command, store=store)
    assert d.durable and d.verdict == "allow" and not d.requires_approval
    # Bound to where and how it was approved: another cwd, another env, and it asks again.
    assert not evaluate(command, config=cfg(GATEWAY_ALLOWLIST), store=store, cwd="/tmp", env=ENV).durable
    assert not decide(command, store=store, env_overrides={"FOO": "x"}).durable
    assert d.decided_by.layer == "approvals file"
    # Durable trust never suppresses ask=always.
    d = decide(command, GATEWAY_ALLOWLIST + 'ask = "always"\n', store=store)
    assert d.verdict == "ask"


def test_hand_added_command_hash_is_not_durable() -> None:
    # Reference §3.3 (a): only an allow-always decision makes a hash entry durable. A hand-added
    # `=command:` entry (exechost approvals allowlist add) must not silently approve the command.
    store = ApprovalsStore()
    command = "ls /tmp /var"
    store.add_allowlist("main", bound_hash(command))
    d = decide(command, store=store)
    assert not d.durable
    assert d.verdict == "ask" and d.requires_approval
    d = decide(command, GATEWAY_ALLOWLIST + 'ask = "off"\n', store=store)
    assert d.verdict == "deny" and d.reason == "exec denied: allowlist miss"
    # The same pattern persisted by allow-always is durable.
    store.persist_allow_always("main", [bound_hash(command)])
    assert decide(command, store=store).durable


def test_approvals_file_clamps_real_store(state_dir: Path) -> None:
    (state_dir / "exec-approvals.json").write_text(
        json.dumps({"version": 1, "defaults": {"security": "deny", "ask": "always"}, "agents": {}})
    )
    os.chmod(state_dir / "exec-approvals.json", 0o600)
    d = decide("ls", '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    assert d.verdict == "deny" and d.decided_by.layer == "approvals file clamp"
    assert d.reason == "exec denied: host=gateway security=deny"


def test_approvals_file_defaults_fill_unset_config(state_dir: Path) -> None:
    (state_dir / "exec-approvals.json").write_text(
        json.dumps({"version": 1, "defaults": {"security": "full", "ask": "off"}, "agents": {}})
    )
    os.chmod(state_dir / "exec-approvals.json", 0o600)
    d = decide("ls", '[tools.exec]\nhost = "gateway"\n')
    assert d.verdict == "allow" and d.decided_by.layer == "approvals file"


def test_sandboxed_and_direct() -> None:
    d = decide("rm -rf /tmp/x", "", sandbox_available=True)
    assert d.verdict == "allow" and d.policy is not None and d.policy.sandboxed
    assert "sandbox" in d.reason
    d = decide("ls", '[tools.exec]\nsecurity = "deny"\n', sandbox_available=True)
    assert d.verdict == "deny"
    d = decide("ls", "")
    assert d.verdict == "ask" and d.reason.startswith("runs direct on the gateway (sandbox mode off); ")


def test_elevated_full_bypasses() -> None:
    text = '[tools.exec]\nhost = "gateway"\n[tools.elevated]\nenabled = true\n'
    d = decide("ls $(id)", text, overrides=SessionOverrides(elevated="full"))
    assert d.verdict == "allow" and d.decided_by.layer == "elevated"


def test_policy_errors_become_denials_with_reference_text() -> None:
    d = decide("ls", "", params={"host": "gateway"})
    assert d.verdict == "deny" and d.reason.startswith("exec host not allowed (requested gateway;")
    assert d.decided_by.key == "host" and d.policy is None
    d = decide("ls", GATEWAY_ALLOWLIST, params={"elevated": True})
    assert d.verdict == "deny" and d.reason.startswith("elevated is not available right now")
    assert d.decided_by.key == "tools.elevated.enabled"


def test_empty_command_is_an_error() -> None:
    with pytest.raises(ToolError, match=r"Provide a command to start\."):
        decide("   ")


def test_path_prepend_and_safe_bins_from_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A PATH entry outside the home is kept only if only root can change it (hostenv.host_path); in the home
    # (read-only in the host view) it is kept: the operator's bin dir lives there.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(tmp_path))  # the home host views protect
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "mytool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    store = ApprovalsStore()
    store.add_allowlist("main", str(bindir) + "/*")
    # mytool is a program nobody listed as taking no code from its tree, and "/" is writable when the
    # tests run as root: the operator says it is (treeSafe), or it would ask (engine.commands.treesafe).
    text = GATEWAY_ALLOWLIST + f'pathPrepend = ["{bindir}"]\ntreeSafe = ["mytool"]\n'
    d = decide("mytool a", text, store=store)
    assert d.verdict == "allow" and d.segments[0]["resolvedPath"] == str(tool)
    assert decide("mytool a", GATEWAY_ALLOWLIST, store=store).verdict == "ask"
    # safeBins = [] turns the stdin-only fast path off.
    store.add_allowlist("main", LS)
    assert decide("ls | wc -l", store=store).verdict == "allow"
    d = decide("ls | wc -l", GATEWAY_ALLOWLIST + "safeBins = []\n", store=store)
    assert d.verdict == "ask" and d.segments[1]["satisfiedBy"] is None


def test_safe_bin_profiles_from_config() -> None:
    store = ApprovalsStore()
    store.add_allowlist("main", LS)
    text = GATEWAY_ALLOWLIST + 'safeBins = ["wc"]\nsafeBinProfiles = { wc = { booleanFlags = ["-c"] } }\n'
    assert decide("ls | wc -c", text, store=store).verdict == "allow"
    assert decide("ls | wc -l", text, store=store).verdict == "ask"


def test_agent_allowlist_and_layers() -> None:
    store = ApprovalsStore()
    store.add_allowlist("ops", LS)
    text = GATEWAY_ALLOWLIST + '[[agents.list]]\nid = "ops"\ntools.exec.ask = "off"\n'
    assert decide("ls", text, store=store, agent_id="ops").verdict == "allow"
    d = decide("ls", text, store=store, agent_id="main")
    assert d.verdict == "ask"
    d = decide("id", text, store=store, agent_id="ops")
    assert d.verdict == "deny" and d.decided_by.layer == "config agents.list[ops]"


def test_segments_name_the_exact_entry_that_matched() -> None:
    # Two entries share the pattern and differ in argPattern: the segment names the one that matched,
    # so recording use stamps that entry and not its sibling.
    store = ApprovalsStore()
    plain = store.add_allowlist("main", LS)
    narrow = store.add_allowlist("main", LS, arg_pattern="-l")
    d = decide("ls -l | wc -l", store=store)
    assert d.verdict == "allow"
    assert [s["entryId"] for s in d.segments] == [narrow.id, None]  # wc is a safe bin: no entry
    assert d.to_json()["segments"][0]["entryId"] == narrow.id
    d = decide("ls /tmp", store=store)
    assert d.segments[0]["entryId"] == plain.id
    assert decide("id", store=store).segments[0]["entryId"] is None  # a miss names no entry


def test_allow_always_path_entries_are_durable_hand_added_are_not() -> None:
    store = ApprovalsStore()
    store.add_allowlist("main", LS)
    d = decide("ls /tmp", store=store)
    assert d.verdict == "allow" and not d.durable  # allowed by the allowlist, but not durable trust
    store.persist_allow_always("main", [LS])
    d = decide("ls /tmp", store=store)
    assert d.verdict == "allow" and d.durable  # reference §3.3 (b): every segment hit allow-always


class CountingStore(ApprovalsStore):
    """The real store, counting how often it reads the file."""

    reads = 0

    def _read(self) -> tuple[ApprovalsFile, object, int] | None:
        self.reads += 1
        return super()._read()


def test_evaluate_reads_the_approvals_file_once() -> None:
    # One snapshot per decision: a second read could see a different file (a concurrent edit) and
    # mix one file's policy with another's allowlist. It is also a wasted syscall round per exec.
    store = CountingStore()
    store.add_allowlist("main", LS)
    store.reads = 0
    d = decide("ls /tmp | wc -l", store=store)
    assert d.verdict == "allow"
    assert store.reads == 1


def test_json_shape_and_explanation() -> None:
    d = decide("ls /tmp | wc -l")
    data = d.to_json()
    for key in (
        "host",
        "security",
        "ask",
        "askFallback",
        "analysisOk",
        "allowlistSatisfied",
        "requiresApproval",
        "decision",
        "reason",
        "segments",
        "enforcedCommand",
        "decidedBy",
    ):
        assert key in data
    assert set(data["segments"][0]) >= {"argv", "resolvedPath", "satisfiedBy", "matchedPattern", "entryId"}
    assert data["segments"][0]["argv"] == ["ls", "/tmp"]
    json.dumps(data)
    text = explain(d)
    assert text.startswith("Decision: ASK — ")
    assert "Decided by: built-in: tools.exec.ask = on-miss" in text
    assert f"1. ls /tmp  →  {LS}  [MISS" in text and "[safeBins]" in text
    assert "Policy trail:" in text and "config tools.exec: tools.exec.security = allowlist" in text


def _approvals(state_dir: Path, data: dict[str, object]) -> None:
    path = state_dir / "exec-approvals.json"
    path.write_text(json.dumps({"version": 1, **data}))
    os.chmod(path, 0o600)


def test_file_precedence_agent_wildcard_defaults(state_dir: Path) -> None:
    # Reference §3.2 through to the decision: agent, then "*", then defaults; an invalid explicit
    # agent field falls back to defaults, not to the (broader) wildcard.
    text = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
    _approvals(
        state_dir,
        {
            "defaults": {"security": "allowlist"},
            "agents": {
                "*": {"security": "full", "ask": "always"},
                "ops": {"security": "deny"},
                "qa": {"security": "none"},
            },
        },
    )
    main = decide("ls", text)
    assert (main.security, main.ask, main.verdict) == ("full", "always", "ask")
    assert decide("ls", text, agent_id="ops").verdict == "deny"
    qa = decide("ls", text, agent_id="qa")
    assert (qa.security, qa.ask, qa.verdict) == ("allowlist", "always", "ask")
    assert qa.policy is not None
    step = qa.policy.step("security")
    assert step is not None and step.layer == "approvals file clamp"


def test_warnings_are_capped_with_the_rest_counted() -> None:
    from engine.policy.warncap import MAX_WARNINGS, WARNING_CHARS, WARNINGS_CHARS, capped_warnings

    few = ["Warning: a", "Warning: b"]
    assert capped_warnings(few) == few  # the legitimate case: nothing cut, nothing added
    many = [f"Warning: key k{i}" for i in range(1000)]
    kept = capped_warnings(many)
    assert kept[:MAX_WARNINGS] == many[:MAX_WARNINGS]
    assert kept[-1] == f"… {1000 - MAX_WARNINGS} more warnings (not shown)"
    long = capped_warnings(["x" * (WARNING_CHARS * 10)] * 100)
    assert all(len(w) <= WARNING_CHARS for w in long)
    assert sum(map(len, long[:-1])) <= WARNINGS_CHARS and long[-1].endswith("more warnings (not shown)")
    assert capped_warnings(["y" * (WARNING_CHARS + 1)]) == ["y" * (WARNING_CHARS - 1) + "…"]


def test_a_tree_with_many_findings_still_asks_with_its_warnings_capped(
    state_dir: Path, tmp_path: Path
) -> None:
    import subprocess

    from engine.policy.warncap import FOUND_WARNINGS

    work = tmp_path / "w"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    keys = "\n".join(f"\tk{i:04d} = v" for i in range(500))
    with open(work / ".git" / "config", "a") as config:
        config.write(f"[zz]\n{keys}\n")
    git = os.path.realpath(shutil.which("git") or "/usr/bin/git")
    store = ApprovalsStore()
    store.add_allowlist("main", git)
    d = evaluate("git status", config=cfg(GATEWAY_ALLOWLIST), store=store, cwd=str(work), env=ENV)
    assert d.verdict == "ask", d.reason
    cut = [w for w in d.warnings if w.endswith("more warnings (not shown)")]
    assert cut and len(d.warnings) <= 2 * (FOUND_WARNINGS + 1) + 4, d.warnings
