"""npm's project files are named the way npm finds them: up to a workspace root above the package."""

from __future__ import annotations

import os
from pathlib import Path

from engine.commands.treecode import MANIFEST_TREE, binding, findings_for, unbound_findings

NPM = ("/usr/bin/npm",)


def test_a_package_alone_names_its_own_files(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "package.json").write_text('{"scripts": {"test": "echo ok"}}\n')
    found = findings_for(["npm", "test"], NPM, str(pkg), [])
    assert [f.path for f in found if f.what != MANIFEST_TREE] == [str(pkg / "package.json")]
    # What its scripts run (`node t.js`) is not bound: the tree is named, allow-always is not offered.
    assert [f.path for f in found if f.what == MANIFEST_TREE] == [str(pkg)]
    assert unbound_findings(binding(found)) == [str(pkg)]


def test_every_ancestor_npm_may_take_for_a_workspace_root_is_named(tmp_path: Path) -> None:
    root = tmp_path / "w"
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    (root / "package.json").write_text('{"workspaces": ["pkg"]}\n')
    (pkg / "package.json").write_text("{}\n")
    before = {f.path for f in findings_for(["npm", "test"], NPM, str(pkg), []) if f.what != MANIFEST_TREE}
    assert before == {str(pkg / "package.json"), str(root / "package.json")}
    (root / ".npmrc").write_text("script-shell=/bin/sh\n")  # what npm reads for a workspace
    after = {
        os.path.basename(os.path.dirname(f.path)) + "/" + os.path.basename(f.path)
        for f in findings_for(["npm", "test"], NPM, str(pkg), [])
    }
    assert "w/.npmrc" in after
