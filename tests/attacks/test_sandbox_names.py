"""Issue 27 (class 2): a sandbox name shared by two scope keys handed one scope the other's sandbox.

The name's hash was 32 bits after a readable part that is lowercased and cut at 32 characters: an agent
whose key shares another's first 26 characters could search ~2^32 keys for one with the same name, and the
manager took any container or bwrap keeper of that name. Now the hash is 128 bits of the exact key, and a
sandbox (and its workspace dir) is adopted only by the scope its Docker label, bwrap record or owner record
names. The collision tests narrow the
hash back (to 8 bits, so a colliding key is found in a few hundred tries) to show that second wall holds.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from engine.config.loader import load_config_text
from engine.results import ToolError
from engine.sandbox import SandboxManager, prepare_exec, settings
from engine.sandbox.settings import container_name, layout, resolve_settings, slugify
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled

__all__ = ["bwrap_mgr"]  # the fixture, used by name

PREFIX = "agent:main:team-alpha-build-runner-"  # longer than the readable part's 32 characters
VICTIM = PREFIX + "victim"


def _colliding(monkeypatch: pytest.MonkeyPatch) -> str:
    """An attacker's key that shares the victim's sandbox name once the hash is 8 bits wide."""
    monkeypatch.setattr(settings, "SLUG_HASH_HEX", 2)
    monkeypatch.setattr(settings, "_layouts", {})
    monkeypatch.setattr(settings, "_hashes", {})
    want = hashlib.sha256(VICTIM.encode()).hexdigest()[:2]
    key = next(
        k for i in range(100_000) if hashlib.sha256((k := f"{PREFIX}x{i}").encode()).hexdigest()[:2] == want
    )
    assert slugify(key) == slugify(VICTIM)  # the old kind of name: one sandbox for both
    return key


def test_names_tell_apart_keys_that_differ_in_case_or_after_the_readable_part() -> None:
    cfg = resolve_settings(
        load_config_text('[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\n'), "main"
    )
    keys = ["agent:main:Bob", "agent:main:bob", VICTIM, PREFIX + "victin", VICTIM.upper()]
    for key in keys:
        assert slugify(key).endswith("-" + hashlib.sha256(key.encode()).hexdigest()[:32])
        assert len(container_name(cfg, key)) <= 63
    assert len({container_name(cfg, k) for k in keys}) == len(keys)
    assert len({layout(cfg, "main", k).sandbox_workspace for k in keys}) == len(keys)


@needs_bwrap
async def test_a_colliding_key_never_adopts_anothers_bwrap_sandbox(
    bwrap_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    attacker = _colliding(monkeypatch)
    cfg = bwrap_config('scope = "session"')
    victim = await prepare_exec(cfg, "main", VICTIM, None, manager=bwrap_mgr)
    status, _, err = await run(victim, "echo secret > mine.txt")
    assert status == (0, None), err
    # The same manager (its in-memory "known good" cache) and a fresh one (the keeper's runtime record).
    for mgr in (bwrap_mgr, SandboxManager()):
        with pytest.raises(ToolError, match="another scope"):
            await prepare_exec(cfg, "main", attacker, None, manager=mgr)
    status, out, _ = await run(victim, "cat mine.txt")  # the victim's sandbox was left alone
    assert status == (0, None) and out.strip() == "secret"
    # Its sandbox gone (pruned, recreated), the workspace dir of that name stays the victim's.
    await asyncio.to_thread(SandboxManager().remove_runtime, victim.container)
    with pytest.raises(ToolError, match="another scope"):
        await prepare_exec(cfg, "main", attacker, None, manager=SandboxManager())


@pytest.fixture
def docker_mgr() -> Iterator[SandboxManager]:
    build_test_image()
    label = f"slug27-{hashlib.sha256(VICTIM.encode()).hexdigest()[:6]}"
    yield SandboxManager(extra_labels={"exechost.test": label})
    remove_labelled(label)


@pytest.mark.docker
async def test_a_colliding_key_never_adopts_anothers_docker_container(
    docker_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    attacker = _colliding(monkeypatch)
    cfg: Any = load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    victim = await prepare_exec(cfg, "main", VICTIM, None, manager=docker_mgr)
    status, _, err = await run(victim, "echo secret > mine.txt")
    assert status[0] == 0, err
    for mgr in (docker_mgr, SandboxManager()):
        with pytest.raises(ToolError, match="another scope"):
            await prepare_exec(cfg, "main", attacker, None, manager=mgr)
    status, out, _ = await run(victim, "cat mine.txt")
    assert status[0] == 0 and out.strip() == "secret"
