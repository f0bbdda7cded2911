"""Seed 004 §6.2–6.3: skills mirrored into the sandbox workspace (no links followed), inbound media staged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.sandbox.workspace import (
    SKILLS_MAX_BYTES,
    WorkspaceError,
    has_skills,
    stage_inbound,
    sync_skills,
)
from tests.helpers.gateway import cli


def test_skills_are_mirrored_without_following_links(tmp_path: Path) -> None:
    root, agent, box = tmp_path / "root", tmp_path / "agent", tmp_path / "root" / "box"
    (agent / "skills" / "git").mkdir(parents=True)
    (agent / "skills" / "git" / "SKILL.md").write_text("use git well")
    (agent / "skills" / "top.md").write_text("top")
    secret = tmp_path / "secret.txt"
    secret.write_text("PRIVATE")
    (agent / "skills" / "leak.md").symlink_to(secret)  # a link out: never followed
    (agent / "skills" / "linked-dir").symlink_to(tmp_path)
    (agent / "skills" / "huge.bin").write_bytes(b"x" * (SKILLS_MAX_BYTES + 1))
    copied = sync_skills(str(root), str(agent), str(box)).copied
    assert sorted(copied) == ["git/SKILL.md", "top.md"]
    assert (box / "skills" / "git" / "SKILL.md").read_text() == "use git well"
    assert not (box / "skills" / "leak.md").exists() and not (box / "skills" / "linked-dir").exists()
    assert not (box / "skills" / "huge.bin").exists()
    assert sync_skills(str(root), str(agent), str(box)).copied == []  # unchanged: nothing copied again
    (agent / "skills" / "top.md").write_text("top, edited")
    os.utime(agent / "skills" / "top.md", ns=(1, 2_000_000_000_000_000_000))
    assert sync_skills(str(root), str(agent), str(box)).copied == ["top.md"]
    # A link planted where a skill copy goes is replaced, never written through.
    target = tmp_path / "victim"
    target.write_text("keep")
    (box / "skills" / "git" / "SKILL.md").unlink()
    (box / "skills" / "git" / "SKILL.md").symlink_to(target)
    sync_skills(str(root), str(agent), str(box))
    assert target.read_text() == "keep" and not (box / "skills" / "git" / "SKILL.md").is_symlink()


def test_stage_sanitises_names_and_never_overwrites(tmp_path: Path) -> None:
    root, box = tmp_path / "root", tmp_path / "root" / "box"
    first = stage_inbound(str(root), str(box), "../../etc/pass wd.txt", b"one")
    second = stage_inbound(str(root), str(box), "pass wd.txt", b"two")
    assert first == os.path.join("media", "inbound", "pass_wd.txt")
    assert second == os.path.join("media", "inbound", "pass_wd-1.txt")
    assert (box / first).read_bytes() == b"one" and (box / second).read_bytes() == b"two"
    assert stage_inbound(str(root), str(box), ".hidden", b"h").endswith("hidden")
    (box / "media" / "inbound").rename(box / "moved")
    (box / "media" / "inbound").symlink_to(tmp_path)
    with pytest.raises(WorkspaceError, match=r"refused media/inbound: .*symlink"):
        stage_inbound(str(root), str(box), "x.txt", b"x")


def test_cli_stage(state_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "photo 1.png"
    src.write_bytes(b"\x89PNG")
    proc = cli(state_dir, "sandbox", "stage", str(src), "--agent", "main", "--json")
    assert proc.returncode == 0, proc.stderr
    staged = json.loads(proc.stdout)["details"]["staged"][0]
    assert staged["path"] == "/workspace/media/inbound/photo_1.png" and staged["bytes"] == 4


def test_has_skills_only_for_a_real_skills_dir(tmp_path: Path) -> None:
    """prepare_exec skips the sync (and its thread hop) unless this says there may be skills."""
    agent = tmp_path / "agent"
    agent.mkdir()
    assert not has_skills(str(agent))
    (tmp_path / "elsewhere").mkdir()
    (agent / "skills").symlink_to(tmp_path / "elsewhere")
    assert not has_skills(str(agent))  # a link is never mirrored anyway
    (agent / "skills").unlink()
    (agent / "skills").mkdir()
    assert has_skills(str(agent))
