"""engine.commands.gatewaydirs: every gateway's state dir recorded for the account, what a view covers of
them, the record's cache (an entry added is seen) and the record kept from every run's writes."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import pytest

from engine.commands import gatewaydirs, hostoutside
from engine.commands.hostroots import writable_roots


def test_each_recorded_state_dir_is_another_views_cover(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    a, b, inner = tmp_path / "a", tmp_path / "b", home / ".openclaw"
    for d in (a, b, inner):
        d.mkdir(mode=0o700)
    gatewaydirs.record(str(home), str(a))
    assert gatewaydirs.others(str(home), str(a), []) == ()  # its own: covered as the state dir already
    gatewaydirs.record(str(home), str(b))  # the cache is keyed by the record's stat: the new entry shows
    gatewaydirs.record(str(home), str(inner))  # in the home: covered too (a hostWritable dir may hold it)
    gatewaydirs.record(str(home), str(a))  # again: one entry
    assert gatewaydirs.others(str(home), str(a), []) == tuple(sorted([str(b), str(inner)]))
    assert gatewaydirs.others(str(home), str(b), []) == tuple(sorted([str(a), str(inner)]))
    # not one holding what the view needs (the agent's own hostWritable dir in it)
    assert gatewaydirs.others(str(home), str(b), [str(inner / "w")]) == (str(a),)
    assert len(os.listdir(home / ".exechost-gateways")) == 3
    b.rmdir()  # judged once, present per call: a cover of a missing root would make it
    assert gatewaydirs.others(str(home), str(a), []) == (str(inner),)
    assert os.stat(home / ".exechost-gateways").st_mode & 0o777 == 0o700


def test_a_recorded_dir_holding_what_runs_need_or_gone_is_not_covered(tmp_path: Path) -> None:
    home = tmp_path / "top" / "h"
    home.mkdir(parents=True)
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    gone = tmp_path / "gone"
    gone.mkdir()
    for d in (tmp_path / "top", tools, gone, Path(os.sep)):
        gatewaydirs.record(str(home), str(d))
    gone.rmdir()
    # holds the home; holds a PATH dir; gone; `/`
    assert gatewaydirs.others(str(home), str(tmp_path / "s"), [str(tools / "bin")]) == ()


def test_a_link_in_place_of_the_record_is_not_read(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / gatewaydirs.NAME).symlink_to(elsewhere)
    other = tmp_path / "b"
    other.mkdir()
    with pytest.raises(gatewaydirs.RecordError, match="not a directory of this account"):
        gatewaydirs.record(str(home), str(other))  # not durable: refused, never written through the link
    assert os.listdir(elsewhere) == []
    assert gatewaydirs.recorded(str(home)) == ()


def test_a_record_that_cannot_be_written_is_owed_and_never_marked_done(tmp_path: Path) -> None:
    """Fresh round 18 c: a failed record raises, is not cached as done, and is written before the next
    record of the process once it can be, whatever that one names."""
    home = tmp_path / "h"
    home.mkdir()
    root = tmp_path / "agent-dir"
    root.mkdir()
    os.chmod(home, 0o500)  # the home cannot be written (as a full disk: no record dir can be made)
    try:
        if os.access(home, os.W_OK) and os.geteuid() == 0:
            (home / gatewaydirs.NAME).symlink_to(tmp_path)  # root writes anyway: a link refuses it instead
        with pytest.raises(gatewaydirs.RecordError):
            gatewaydirs.record_writable(str(home), [str(root)])
        with pytest.raises(gatewaydirs.RecordError):
            gatewaydirs.record_writable(str(home), [str(root)])  # not cached as done: tried again
    finally:
        os.chmod(home, 0o700)
        with contextlib.suppress(FileNotFoundError):
            (home / gatewaydirs.NAME).unlink()
    gatewaydirs.record_writable(str(home), [])  # the config no longer names it: still written (owed)
    assert gatewaydirs.recorded_writable(str(home)) == (str(root),)


def test_no_host_writable_dir_may_hold_the_record(state_dir: Path, tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    gatewaydirs.record(str(home), str(state_dir))
    outside = hostoutside.Outside(writable=(str(home / gatewaydirs.NAME),))
    with pytest.raises(hostoutside.HostViewError, match="holds or is inside"):
        writable_roots(str(state_dir), None, outside)


def test_every_workspace_root_ever_used_is_covered_but_the_configs_own(tmp_path: Path) -> None:
    home, state = tmp_path / "h", tmp_path / "s"
    old, new, gone = tmp_path / "sbx-old", tmp_path / "sbx-new", tmp_path / "sbx-gone"
    for d in (home, state, old, new, gone):
        d.mkdir(mode=0o700)
    gatewaydirs.record(str(home), str(tmp_path / "other-state"))
    assert gatewaydirs.old_roots(str(home), str(state), [], [str(new)]) == ()
    gatewaydirs.record_root(str(home), str(old))
    gatewaydirs.record_root(str(home), str(new))
    gatewaydirs.record_root(str(home), str(gone))  # (the cache is keyed by the record's stat: seen)
    gatewaydirs.record_root(str(home), str(old))  # again: one entry
    assert gatewaydirs.recorded(str(home)) == (str(tmp_path / "other-state"),)  # roots are not state dirs
    # the config's root now is covered as the config's; every other root ever used, besides it
    assert gatewaydirs.old_roots(str(home), str(state), [], [str(new)]) == (str(gone), str(old))
    assert gatewaydirs.old_roots(str(home), str(state), [str(old / "bin")], [str(new)]) == (str(gone),)
    gone.rmdir()  # present per call
    assert gatewaydirs.old_roots(str(home), str(state), [], [str(new)]) == (str(old),)
    assert len([n for n in os.listdir(home / ".exechost-gateways") if n.startswith("w-")]) == 3


def test_place_is_this_account_on_this_machine() -> None:
    here = gatewaydirs.place()
    assert here == gatewaydirs.place()
    assert os.path.exists("/etc/machine-id") <= (len(here) == 32)


def test_a_state_dir_outside_the_home_is_adopted_only_when_made_recorded_or_trusted(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    new, empty, configured, planted = (tmp_path / n for n in ("new", "empty", "configured", "planted"))
    empty.mkdir()
    configured.mkdir()
    # a config written before the first start: a host run may have written it (fresh round 17 c)
    (configured / "config.toml").write_text("")
    planted.mkdir(mode=0o700)
    (planted / "operator.json").write_text('{"token": "chosen"}')
    for ok in (new, empty):  # nothing in it to trust: made the gateway's
        gatewaydirs.adopt(str(home), str(ok), {})
    assert set(gatewaydirs.recorded(str(home))) == {str(new), str(empty)}
    claim = rf"configured.*holds config\.toml.*`exechost state claim {re.escape(str(configured))}`"
    with pytest.raises(gatewaydirs.StateDirRefusedError, match=claim):
        gatewaydirs.adopt(str(home), str(configured), {})
    gatewaydirs.claim(str(home), str(configured))  # any CLI verb's implicit claim: records nothing filled
    assert str(configured) not in gatewaydirs.recorded(str(home))
    assert gatewaydirs.claim_state(str(home), str(configured)) == str(configured)  # the operator's word
    gatewaydirs.adopt(str(home), str(configured), {})  # recorded from then on
    with pytest.raises(gatewaydirs.StateDirRefusedError, match=r"planted.*operator\.json.*remove it"):
        gatewaydirs.adopt(str(home), str(planted), {})
    assert str(planted) not in gatewaydirs.recorded(str(home))
    gatewaydirs.adopt(str(home), str(planted), {gatewaydirs.TRUST_ENV: str(planted)})  # the operator's word
    gatewaydirs.adopt(str(home), str(planted), {})  # recorded from then on
    inner = home / ".openclaw"  # in the home no run writes: used as it is
    inner.mkdir()
    (inner / "gateway.json").write_text("{}")
    gatewaydirs.adopt(str(home), str(inner), {})


def test_each_gateways_config_secrets_are_every_views_to_hide(tmp_path: Path) -> None:
    home, state, other = tmp_path / "h", tmp_path / "s", tmp_path / "sb"
    for d in (home, state, other):
        d.mkdir()
    keys, certs = tmp_path / "keys", tmp_path / "certs"
    keys.mkdir()
    certs.mkdir()
    (keys / "id").write_text("KEY")
    (home / "id").write_text("KEY")
    (other / "id").write_text("KEY")
    link = tmp_path / "keylink"
    link.symlink_to(keys / "id")
    gatewaydirs.record_secrets(str(home), [str(link), str(home / "id"), str(other / "id")], [str(certs)])
    files, dirs = gatewaydirs.others_secrets(str(home), str(state), [])
    assert set(files) == {str(link), str(keys / "id"), str(other / "id")}  # as named and resolved
    assert dirs == (str(certs),)
    # not in this view's own state dir (covered already), nor a dir holding what runs need
    files, dirs = gatewaydirs.others_secrets(str(home), str(other), [str(certs / "bin")])
    assert str(other / "id") not in files and dirs == ()
    (keys / "id").unlink()  # present ones only
    assert str(keys / "id") not in gatewaydirs.others_secrets(str(home), str(state), [])[0]


def test_a_state_dir_is_judged_by_who_may_write_it_and_above(tmp_path: Path) -> None:
    """StrictModes: the dir itself this account's, no group/other write on it or above it, except a sticky
    dir above an entry of ours; an unrecorded dir holds nothing, in no dir others may write."""
    home = tmp_path / "h"
    home.mkdir()
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    assert gatewaydirs.judge(str(base / "new")) == ""
    os.chmod(base, 0o775)  # its group may rename what is in it
    assert "writable by its group" in gatewaydirs.judge(str(base / "new"))
    with pytest.raises(gatewaydirs.StateDirRefusedError, match="another account may write"):
        gatewaydirs.adopt(str(home), str(base / "new"), {gatewaydirs.TRUST_ENV: str(base / "new")})
    os.chmod(base, 0o1777)  # sticky and shared, as /tmp: fine above an entry of ours...
    ours = base / "ours"
    ours.mkdir(mode=0o700)
    assert gatewaydirs.judge(str(ours / "s")) == ""
    os.chmod(ours, 0o777)  # ...that no one else may write
    assert "writable by its group or by others" in gatewaydirs.judge(str(ours / "s"))
    os.chmod(ours, 0o700)
    # present directly in a shared dir, unrecorded: whoever may write there may have made it
    with pytest.raises(gatewaydirs.StateDirRefusedError, match="a dir others may write"):
        gatewaydirs.adopt(str(home), str(ours), {})
    (ours / "s").mkdir(mode=0o700)
    for name in ("session-overrides.json", "config.toml", "exec-approvals.json"):  # any name: refused
        (ours / "s" / name).write_text("{}")
        with pytest.raises(gatewaydirs.StateDirRefusedError, match=rf"holds {re.escape(name)}"):
            gatewaydirs.adopt(str(home), str(ours / "s"), {})
        (ours / "s" / name).unlink()
    gatewaydirs.adopt(str(home), str(ours / "s"), {})  # empty: made the gateway's
    if os.geteuid() == 0:  # another account's dir, even in a tree of ours
        other = base / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 64016, 64016)
        assert "owned by uid 64016" in gatewaydirs.judge(str(other))
        assert "owned by uid 64016" in gatewaydirs.judge(str(other / "below"))


def test_a_nodes_state_dir_is_recorded_only_when_it_is_that_nodes_own(tmp_path: Path) -> None:
    """node_state_dir: a real 0700 dir of this uid holding node.json (0600, naming the node), under no dir
    another account may change and in no agent's hostWritable dir; anything else is not the node's."""
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    state = base / "node"
    state.mkdir(mode=0o700)
    ident = state / "node.json"
    ident.write_text(json.dumps({"nodeId": "n1"}))
    ident.chmod(0o600)
    assert gatewaydirs.node_state_dir(str(state), "n1", [])
    assert not gatewaydirs.node_state_dir(str(state), "n2", [])  # another node's
    assert not gatewaydirs.node_state_dir(str(state), "n1", [str(base)])  # in a run's hostWritable dir
    assert not gatewaydirs.node_state_dir(str(base), "n1", [str(state)])  # holding one
    (tmp_path / "link").symlink_to(state)
    assert not gatewaydirs.node_state_dir(str(tmp_path / "link"), "n1", [])  # a link on the way
    os.chmod(state, 0o750)
    assert not gatewaydirs.node_state_dir(str(state), "n1", [])  # open to its group
    os.chmod(state, 0o700)
    ident.chmod(0o644)
    assert not gatewaydirs.node_state_dir(str(state), "n1", [])  # its identity readable by others
    ident.chmod(0o600)
    os.chmod(base, 0o777)
    assert not gatewaydirs.node_state_dir(str(state), "n1", [])  # another account may rename it
    os.chmod(base, 0o1777)
    assert gatewaydirs.node_state_dir(str(state), "n1", [])  # sticky, as /tmp: no one else renames it
    assert not gatewaydirs.node_state_dir(str(base / "missing"), "n1", [])


def test_threads_recording_the_same_entry_never_fail_each_other(tmp_path: Path) -> None:
    """Views are made in threads: two writing one new entry at once both succeed (a shared temp name made
    the second's O_EXCL fail, and a durable record that fails refuses the view)."""
    import threading

    home = tmp_path / "h"
    home.mkdir()
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write(i: int) -> None:
        start.wait()
        try:
            for j in range(20):
                gatewaydirs.record(str(home), str(tmp_path / f"d{j}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(gatewaydirs.recorded(str(home))) == 20
