"""exec-approvals.json: schema v1 normalisation, wildcard merge, socket token, allowlist edits."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import (
    ALLOW_ALWAYS,
    ApprovalsFileError,
    ApprovalsStore,
    generate_token,
    parse_approvals,
)
from engine.commands.allowlist import AllowlistEntry, command_hash_pattern, has_durable_approval


def write(store: ApprovalsStore, data: Any) -> None:
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(json.dumps(data))
    store.path.chmod(0o600)


def on_disk(store: ApprovalsStore) -> dict[str, Any]:
    return json.loads(store.path.read_text())


@pytest.fixture
def store(state_dir: Path) -> ApprovalsStore:
    return ApprovalsStore()


def test_default_path_is_in_state_dir(store: ApprovalsStore, state_dir: Path) -> None:
    assert store.path == state_dir / "exec-approvals.json"


def test_missing_file_is_empty_and_not_created(store: ApprovalsStore) -> None:
    view = store.agent("main")
    assert (view.security, view.ask, view.ask_fallback, view.auto_allow_skills) == (None, None, None, None)
    assert view.allowlist == []
    assert not store.path.exists()


# ---- normalisation ---------------------------------------------------------------------------------


def test_legacy_default_agent_merges_into_main_with_main_winning(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "agents": {
                "default": {"security": "deny", "ask": "always", "allowlist": ["/bin/LS", "/usr/bin/git"]},
                "main": {"security": "allowlist", "allowlist": [{"pattern": "/bin/ls"}]},
            },
        },
    )
    current = store.load()
    assert "default" not in current.agents
    main = current.agents["main"]
    assert main.security == "allowlist"  # main's own field wins
    assert main.ask == "always"  # filled from the legacy agent
    # Deduplicated exactly (matching is case-sensitive, issue 9 item 16), main's entries first.
    assert [e.pattern for e in main.allowlist] == ["/bin/ls", "/bin/LS", "/usr/bin/git"]
    store.ensure()
    assert set(on_disk(store)["agents"]) == {"main"}


def test_legacy_default_alone_becomes_main(store: ApprovalsStore) -> None:
    write(store, {"version": 1, "agents": {"default": {"ask": "on-miss"}}})
    assert store.agent("main").ask == "on-miss"
    assert store.agent("default").ask == "on-miss"  # the legacy id is an alias for main


def test_bare_strings_become_entries_and_invalid_entries_are_ignored_but_kept(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "agents": {
                "main": {
                    "allowlist": [
                        "  /usr/bin/rg  ",
                        "",
                        "   ",
                        42,
                        None,
                        ["x"],
                        {"pattern": ""},
                        {"argPattern": "x"},
                        # A non-string argPattern must not widen to "any args".
                        {"pattern": "/bin/cat", "argPattern": 7},
                        {"pattern": "/bin/echo", "commandText": "echo secret", "lastUsedAt": True},
                    ]
                }
            },
        },
    )
    entries = store.load().agents["main"].allowlist
    assert [e.pattern for e in entries] == ["/usr/bin/rg", "/bin/echo"]
    assert entries[1].last_used_at is None
    store.ensure()
    stored = on_disk(store)["agents"]["main"]["allowlist"]
    assert "commandText" not in stored[1]  # legacy plaintext stripped
    assert all(re.fullmatch(r"[0-9a-f-]{36}", e["id"]) for e in stored[:2])
    # The invalid items stay, verbatim, after the valid ones: a write never destroys a human's typo.
    assert stored[2:] == [
        "",
        "   ",
        42,
        None,
        ["x"],
        {"pattern": ""},
        {"argPattern": "x"},
        {"pattern": "/bin/cat", "argPattern": 7},
    ]


def test_missing_ids_are_generated_stably_and_duplicates_fixed(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "agents": {
                "main": {"allowlist": [{"pattern": "/a"}, {"pattern": "/b", "id": "same"}]},
                "ops": {"allowlist": [{"pattern": "/c", "id": "same"}, {"pattern": "/a"}]},
            },
        },
    )
    first = store.load()
    second = store.load()
    ids = [e.id for b in first.agents.values() for e in b.allowlist]
    assert len(set(ids)) == 4 and all(ids)
    assert ids == [e.id for b in second.agents.values() for e in b.allowlist]  # stable across loads
    assert first.agents["main"].allowlist[1].id == "same"  # the first holder keeps its id
    # An id handed out before the first write still names the same entry afterwards.
    store.record_use("main", ids[0], "/a -x", "/a")
    assert store.load().agents["main"].allowlist[0].last_used_command == "/a -x"


def test_duplicates_removed_exactly_keeping_argpattern_variants(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "agents": {
                "main": {
                    "allowlist": [
                        {"pattern": "/usr/bin/Git", "id": "one"},
                        {"pattern": "/usr/bin/git", "id": "two"},
                        {"pattern": "/usr/bin/git", "argPattern": "^status$"},
                        {"pattern": "/usr/bin/git", "argPattern": "^status$"},
                    ]
                }
            },
        },
    )
    entries = store.load().agents["main"].allowlist
    assert (entries[0].id, entries[0].arg_pattern) == ("one", None)
    # /usr/bin/Git and /usr/bin/git are different files on Linux: both kept (issue 9 item 16).
    assert [(e.pattern, e.arg_pattern) for e in entries] == [
        ("/usr/bin/Git", None),
        ("/usr/bin/git", None),
        ("/usr/bin/git", "^status$"),
    ]


def test_invalid_enums_are_dropped_from_the_view_but_kept_in_the_file(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "defaults": {
                "security": "none",
                "ask": " ON-MISS ",
                "askFallback": "Deny",
                "autoAllowSkills": "yes",
            },
            "agents": {"main": {"ask": "never", "security": None}},
        },
    )
    current = store.load()
    assert current.defaults.security is None
    # Exact lowercase only (issue 9 item 21): " ON-MISS " and "Deny" are invalid, masked, kept.
    assert current.defaults.ask is None
    assert current.defaults.ask_fallback is None
    assert current.defaults.auto_allow_skills is None
    assert current.agents["main"].ask is None
    problems = current.problems()
    assert 'defaults.security: invalid value "none" ignored' in problems
    assert 'agents.main.ask: invalid value "never" ignored' in problems
    store.add_allowlist("main", "/bin/ls")
    stored = on_disk(store)
    # The operator's typo survives a write (canonical values are written canonically).
    assert stored["defaults"] == {
        "security": "none",
        "ask": " ON-MISS ",
        "askFallback": "Deny",
        "autoAllowSkills": "yes",
    }
    assert stored["agents"]["main"]["ask"] == "never"
    assert "security" not in stored["agents"]["main"]  # null counts as unset


def test_unknown_keys_survive_a_write(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "note": "keep",
            "defaults": {"x": 1},
            "agents": {"main": {"color": "blue", "allowlist": [{"pattern": "/a", "id": "i", "tag": [1]}]}},
        },
    )
    store.add_allowlist("main", "/b")
    stored = on_disk(store)
    assert stored["note"] == "keep" and stored["defaults"]["x"] == 1
    assert stored["agents"]["main"]["color"] == "blue"
    assert stored["agents"]["main"]["allowlist"][0] == {"id": "i", "pattern": "/a", "tag": [1]}


# ---- wildcard merge ---------------------------------------------------------------------------------


def test_wildcard_merge_order_and_sources(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "defaults": {"security": "deny", "ask": "off", "askFallback": "deny", "autoAllowSkills": False},
            "agents": {
                "*": {
                    "security": "full",
                    "ask": "always",
                    "autoAllowSkills": True,
                    "allowlist": [{"pattern": "/w", "id": "w"}],
                },
                "main": {"security": "allowlist", "allowlist": [{"pattern": "/m", "id": "m"}]},
            },
        },
    )
    view = store.agent("main")
    assert (view.security, view.ask, view.ask_fallback, view.auto_allow_skills) == (
        "allowlist",
        "always",
        "deny",
        True,
    )
    assert view.sources == {
        "security": "agents.main.security",
        "ask": "agents.*.ask",
        "askFallback": "defaults.askFallback",
        "autoAllowSkills": "agents.*.autoAllowSkills",
    }
    assert [e.id for e in view.allowlist] == ["w", "m"]  # wildcard entries first
    other = store.agent("ops")  # an agent with no block of its own still gets the wildcard
    assert (other.security, [e.id for e in other.allowlist]) == ("full", ["w"])
    assert [e.id for e in store.agent("*").allowlist] == ["w"]  # not listed twice


def test_invalid_agent_field_masks_to_defaults_not_wildcard(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "defaults": {"security": "allowlist"},
            "agents": {"*": {"security": "full", "ask": "bogus"}, "main": {"security": "none"}},
        },
    )
    view = store.agent("main")
    assert view.security == "allowlist" and view.sources["security"] == "defaults.security"
    assert view.ask is None and view.sources["ask"] is None  # invalid wildcard field masks too
    # After an unrelated write the mask still holds: the invalid value was not silently dropped.
    store.add_allowlist("main", "/bin/ls")
    assert store.agent("main").security == "allowlist"


def test_null_agent_field_lets_wildcard_apply(store: ApprovalsStore) -> None:
    write(store, {"version": 1, "agents": {"*": {"ask": "always"}, "main": {"ask": None}}})
    assert store.agent("main").ask == "always"


# ---- socket and token ---------------------------------------------------------------------------------


def test_ensure_generates_socket_path_and_token(store: ApprovalsStore, state_dir: Path) -> None:
    current = store.ensure()
    assert current.socket_path == str(state_dir / "exec-approvals.sock")
    token = current.socket_token
    assert token is not None
    assert re.fullmatch(r"[A-Za-z0-9_-]{32}", token)  # base64url, no padding
    assert len(base64.urlsafe_b64decode(token + "==")) == 24
    assert on_disk(store)["socket"] == {"path": current.socket_path, "token": token}
    assert store.socket_info() == (current.socket_path, token)
    # Stable once written.
    assert store.ensure().socket_token == token


def test_tokens_are_random() -> None:
    tokens = {generate_token() for _ in range(50)}
    assert len(tokens) == 50
    assert all(len(t) == 32 and "=" not in t for t in tokens)


def test_existing_socket_settings_are_kept_and_home_expanded(store: ApprovalsStore) -> None:
    write(store, {"version": 1, "socket": {"path": "~/x.sock", "token": " tok "}})
    path, token = store.socket_info()
    assert path == str(Path.home() / "x.sock") and token == "tok"
    assert on_disk(store)["socket"] == {"path": "~/x.sock", "token": " tok "}  # nothing to write


def test_ensure_does_not_rewrite_a_normalised_file(store: ApprovalsStore) -> None:
    store.ensure()
    before = store.path.stat().st_ino
    store.ensure()
    store.add_allowlist("*", "/bin/ls")
    middle = store.path.stat().st_ino
    store.add_allowlist("*", "/bin/ls")  # already present: no write
    assert before != middle == store.path.stat().st_ino


# ---- modes and symlinks ---------------------------------------------------------------------------------


def test_modes_are_0600_and_0700(tmp_path: Path) -> None:
    store = ApprovalsStore(tmp_path / "state" / "exec-approvals.json")
    store.add_allowlist("main", "/bin/ls")
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert store.path.parent.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in store.path.parent.iterdir()) == [
        "exec-approvals.json",
        "exec-approvals.json.lock",
    ]


def test_world_readable_file_is_tightened_on_ensure(store: ApprovalsStore) -> None:
    store.ensure()
    store.path.chmod(0o644)
    store.ensure()
    assert store.path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("mode", [0o620, 0o606, 0o666])
def test_file_writable_by_others_is_refused(store: ApprovalsStore, mode: int) -> None:
    store.ensure()
    store.path.chmod(mode)
    before = store.path.read_bytes()
    with pytest.raises(ApprovalsFileError, match=r"unsafe mode .*chmod 600"):
        store.agent("main")
    with pytest.raises(ApprovalsFileError):
        store.add_allowlist("main", "/bin/sh")
    assert store.path.read_bytes() == before


def test_symlinked_file_is_refused(store: ApprovalsStore, tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text('{"version": 1}')
    victim.chmod(0o600)
    store.path.symlink_to(victim)
    with pytest.raises(ApprovalsFileError) as info:
        store.load()
    assert str(store.path) in str(info.value)
    for mutate in (store.ensure, lambda: store.add_allowlist("main", "/bin/sh")):
        with pytest.raises(ApprovalsFileError):
            mutate()
    assert victim.read_text() == '{"version": 1}'
    assert store.path.is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the file to another uid")
def test_file_owned_by_another_user_is_refused(store: ApprovalsStore) -> None:
    store.ensure()
    os.chown(store.path, 54321, -1)
    with pytest.raises(ApprovalsFileError, match="owned by uid 54321"):
        store.agent("main")


def test_fifo_is_refused_without_hanging(store: ApprovalsStore) -> None:
    os.mkfifo(store.path, 0o600)
    with pytest.raises(ApprovalsFileError, match="not a regular file"):
        store.load()
    with pytest.raises(ApprovalsFileError, match="not a regular file"):
        store.ensure()


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    store = ApprovalsStore(tmp_path / "link" / "exec-approvals.json")
    with pytest.raises(ApprovalsFileError):
        store.ensure()
    assert list(real.iterdir()) == []


# ---- unparseable files are never overwritten ---------------------------------------------------------------

BAD_FILES = {
    "json": (b'{\n  "version": 1,\n  "agents": {,\n}', "invalid JSON at line 3 column 14"),
    "array": (b"[]", "top level must be a JSON object, got array"),
    "version2": (b'{"version": 2, "agents": {}}', "unsupported version 2"),
    "version-bool": (b'{"version": true}', "unsupported version true"),
    "no-version": (b'{"agents": {}}', 'missing "version"'),
    "empty": (b"", "file is empty"),
    "nan": (b'{"version": 1, "x": NaN}', "NaN is not valid JSON"),
    "utf8": (b'{"version": 1, "\xff": 1}', "not valid UTF-8"),
    "agents-type": (b'{"version": 1, "agents": []}', "agents must be an object, got array"),
    "agent-type": (b'{"version": 1, "agents": {"main": "full"}}', "agents.main must be an object"),
    "allowlist-type": (
        b'{"version": 1, "agents": {"main": {"allowlist": "/bin/ls"}}}',
        "agents.main.allowlist must be an array, got string",
    ),
    "socket-type": (b'{"version": 1, "socket": {"token": 5}}', "socket.token must be a string"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unparseable_file_is_never_overwritten(store: ApprovalsStore, name: str) -> None:
    content, reason = BAD_FILES[name]
    store.path.write_bytes(content)
    store.path.chmod(0o600)
    with pytest.raises(ApprovalsFileError) as info:
        store.load()
    assert str(info.value).startswith(f"{store.path}: ")
    assert reason in str(info.value)
    mutations = [
        store.ensure,
        store.socket_info,
        lambda: store.add_allowlist("main", "/bin/ls"),
        lambda: store.remove_allowlist("main", "/bin/ls"),
        lambda: store.record_use("main", "x", "ls", "/bin/ls"),
        lambda: store.persist_allow_always("main", ["/bin/ls"]),
    ]
    for mutate in mutations:
        with pytest.raises(ApprovalsFileError, match=re.escape(str(store.path))):
            mutate()
    assert store.path.read_bytes() == content
    assert sorted(p.name for p in store.path.parent.iterdir()) == [
        "exec-approvals.json",
        "exec-approvals.json.lock",
    ]


def test_parse_error_names_the_file() -> None:
    with pytest.raises(ApprovalsFileError) as info:
        parse_approvals("{", "/some/exec-approvals.json")
    assert info.value.path == "/some/exec-approvals.json"
    assert "line 1 column 2" in info.value.reason


# ---- allowlist edits --------------------------------------------------------------------------------------


def test_add_allowlist_validates_and_deduplicates(store: ApprovalsStore) -> None:
    first = store.add_allowlist("main", "  /usr/bin/git ", arg_pattern=" ^status$ ")
    assert (first.pattern, first.arg_pattern, first.source, first.last_used_at) == (
        "/usr/bin/git",
        "^status$",
        None,
        None,
    )
    assert store.add_allowlist("main", "/usr/bin/git", arg_pattern="^status$").id == first.id
    # Case-sensitive paths (issue 9 item 16): /usr/bin/GIT is another file, another entry.
    assert store.add_allowlist("main", "/usr/bin/GIT", arg_pattern="^status$").id != first.id
    other = store.add_allowlist("main", "/usr/bin/git")  # another argPattern is another entry
    assert other.id != first.id
    with pytest.raises(ValueError, match=r"invalid argPattern '\(': not a valid regular expression"):
        store.add_allowlist("main", "/bin/ls", arg_pattern="(")
    with pytest.raises(ValueError, match="empty"):
        store.add_allowlist("main", "   ")
    with pytest.raises(ValueError, match="control characters"):
        store.add_allowlist("main", "/bin/ls\n/bin/sh")
    with pytest.raises(ValueError, match="agent id"):
        store.add_allowlist("ma\x1bin", "/bin/ls")
    assert len(on_disk(store)["agents"]["main"]["allowlist"]) == 3


def test_remove_allowlist_by_pattern_or_id(store: ApprovalsStore) -> None:
    a = store.add_allowlist("main", "/usr/bin/git", arg_pattern="^status$")
    store.add_allowlist("main", "/usr/bin/git")
    b = store.add_allowlist("main", "/bin/ls")
    store.add_allowlist("*", "/usr/bin/git")
    assert store.remove_allowlist("main", "/USR/BIN/GIT") is True  # every argPattern variant
    assert [e.id for e in store.load().agents["main"].allowlist] == [b.id]
    assert [e.pattern for e in store.load().agents["*"].allowlist] == ["/usr/bin/git"]
    assert store.remove_allowlist("main", a.id) is False
    assert store.remove_allowlist("main", b.id) is True
    assert "main" not in on_disk(store)["agents"]  # nothing left: the empty agent is gone
    assert store.remove_allowlist("nobody", "/bin/ls") is False


def test_entries_view_for_matching(store: ApprovalsStore) -> None:
    write(
        store,
        {
            "version": 1,
            "agents": {
                "*": {"allowlist": [{"pattern": "/bin/ls", "id": "w"}]},
                "main": {
                    "allowlist": [
                        {"pattern": "/usr/bin/git", "argPattern": "^log", "id": "g"},
                        {"pattern": "/usr/bin/env", "argPattern": "([", "id": "bad"},
                    ]
                },
            },
        },
    )
    entries = store.entries("main")
    assert all(isinstance(e, AllowlistEntry) for e in entries)
    # The entry whose argPattern cannot compile is left out rather than widened to any arguments.
    assert [(e.pattern, e.arg_pattern, e.id) for e in entries] == [
        ("/bin/ls", None, "w"),
        ("/usr/bin/git", "^log", "g"),
    ]
    assert any("argPattern '([' is not a valid regex" in p for p in store.load().problems())


def test_record_use(store: ApprovalsStore) -> None:
    own = store.add_allowlist("main", "/usr/bin/rg")
    shared = store.add_allowlist("*", "/bin/ls")
    before = int(time.time() * 1000)
    store.record_use("main", own.id, "rg -n TODO", "/usr/bin/rg")
    store.record_use("main", shared.id, "ls -la", None)  # wildcard entries match through the agent's view
    after = int(time.time() * 1000)
    current = store.load()
    rg = current.agents["main"].allowlist[0]
    assert before <= (rg.last_used_at or 0) <= after
    assert (rg.last_used_command, rg.last_resolved_path) == ("rg -n TODO", "/usr/bin/rg")
    ls = current.agents["*"].allowlist[0]
    assert ls.last_used_command == "ls -la" and ls.last_resolved_path is None
    stored = on_disk(store)["agents"]["main"]["allowlist"][0]
    assert stored["lastUsedCommand"] == "rg -n TODO" and isinstance(stored["lastUsedAt"], int)


def test_record_use_of_unknown_entry_changes_nothing(store: ApprovalsStore) -> None:
    store.add_allowlist("main", "/usr/bin/rg")
    before = store.path.read_bytes()
    store.record_use("main", "no-such-id", "rg", "/usr/bin/rg")
    store.record_use("ops", store.load().agents["main"].allowlist[0].id, "rg", None)  # not ops's entry
    assert store.path.read_bytes() == before


def test_record_use_caps_the_command(store: ApprovalsStore) -> None:
    entry = store.add_allowlist("main", "/bin/echo")
    store.record_use("main", entry.id, "echo " + "x" * 10_000, "/bin/echo")
    assert len(store.load().agents["main"].allowlist[0].last_used_command or "") == 4096


def test_persist_allow_always(store: ApprovalsStore) -> None:
    manual = store.add_allowlist("main", "/usr/bin/git")
    marker = "=command:0123456789abcdef"
    records = store.persist_allow_always("main", ["/usr/bin/rg", "/usr/bin/rg", "/usr/bin/git", marker, " "])
    assert [r.pattern for r in records] == ["/usr/bin/rg", "/usr/bin/git", marker]
    assert all(r.source == ALLOW_ALWAYS and r.last_used_at for r in records)
    assert records[1].id == manual.id  # the manual entry is upgraded, not duplicated
    again = store.persist_allow_always("main", [marker, "/usr/bin/rg"])
    assert [r.id for r in again] == [records[2].id, records[0].id]
    stored = on_disk(store)["agents"]["main"]["allowlist"]
    assert [(e["pattern"], e["source"]) for e in stored] == [
        ("/usr/bin/git", ALLOW_ALWAYS),
        ("/usr/bin/rg", ALLOW_ALWAYS),
        (marker, ALLOW_ALWAYS),
    ]
    assert store.persist_allow_always("main", []) == []


def test_persist_allow_always_with_real_command_hash(store: ApprovalsStore) -> None:
    command = "make deploy && ./run.sh"
    pattern = command_hash_pattern(command)
    assert re.fullmatch(r"=command:[0-9a-f]{64}", pattern)
    store.persist_allow_always("main", [pattern])
    assert has_durable_approval(command, store.entries("main"))
    assert not has_durable_approval(command + " x", store.entries("main"))
    assert command not in store.path.read_text()  # plaintext command never stored


def test_entries_carry_the_source(store: ApprovalsStore) -> None:
    command = "make deploy"
    store.add_allowlist("main", command_hash_pattern(command))
    [entry] = store.entries("main")
    assert entry.source is None
    assert not has_durable_approval(command, store.entries("main"))  # hand-added: not durable
    store.persist_allow_always("main", [command_hash_pattern(command)])
    [entry] = store.entries("main")
    assert entry.source == ALLOW_ALWAYS
    assert has_durable_approval(command, store.entries("main"))


def test_stored_entries_drive_the_real_matcher_and_record_use(store: ApprovalsStore) -> None:
    from engine.commands.allowlist import allow_always_patterns, evaluate_allowlist, resolve_executable
    from engine.commands.analysis import analyze_command

    env = {"PATH": "/usr/bin:/bin"}
    uname = resolve_executable("uname", cwd="/", env=env)
    assert uname is not None
    entry = store.add_allowlist("*", uname, arg_pattern="^-a$")

    def check(command: str) -> Any:
        return evaluate_allowlist(analyze_command(command), store.entries("main"), cwd="/", env=env)

    assert not check("uname -r").satisfied  # argPattern from the file is honoured
    hit = check("uname -a")
    assert hit.satisfied and hit.segments[0].entry_id == entry.id
    store.record_use("main", entry.id, "uname -a", hit.segments[0].resolved_path)
    used = store.load().agents["*"].allowlist[0]
    assert (used.last_used_command, used.last_resolved_path) == ("uname -a", uname)

    command = "uname -r"
    patterns = allow_always_patterns(command, analyze_command(command), check(command))
    store.persist_allow_always("main", patterns)
    assert check(command).satisfied


# ---- snapshot(): the cached read every exec makes ----------------------------------------------------


def test_snapshot_is_cached_until_the_file_changes(store: ApprovalsStore) -> None:
    write(store, {"version": 1, "defaults": {"security": "allowlist"}})
    first = store.snapshot()
    assert store.snapshot() is first
    # Same size, rewritten in place by "another process": seen at once.
    write(store, {"version": 1, "defaults": {"security": "full"}})
    assert store.snapshot().defaults.security == "full"


def test_snapshot_sees_a_replacement_and_a_deletion(store: ApprovalsStore) -> None:
    write(store, {"version": 1, "defaults": {"ask": "always"}})
    assert store.snapshot().defaults.ask == "always"
    other = store.path.with_name("other.json")
    other.write_text(json.dumps({"version": 1, "defaults": {"ask": "off"}}))
    other.chmod(0o600)
    os.replace(other, store.path)
    assert store.snapshot().defaults.ask == "off"
    store.path.unlink()
    assert store.snapshot().defaults.ask is None


def test_snapshot_refuses_a_chmod_or_symlink_after_caching(store: ApprovalsStore) -> None:
    write(store, {"version": 1, "defaults": {"security": "full"}})
    store.snapshot()
    store.path.chmod(0o666)  # only ctime and mode change
    with pytest.raises(ApprovalsFileError, match="unsafe mode"):
        store.snapshot()
    store.path.chmod(0o600)
    store.snapshot()
    target = store.path.with_name("forged.json")
    os.replace(store.path, target)
    store.path.symlink_to(target)
    with pytest.raises(ApprovalsFileError, match="symlink"):
        store.snapshot()
