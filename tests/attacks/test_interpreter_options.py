"""Issue 27 §5: what was approved is what runs, in every spelling of an interpreter run and every read.

Options made analysis fail and nothing was digested: the script rewritten after the ask ran on allow-once,
and allow-always saved an `=command:` with no content. A script that re-read itself ("$0", __file__) got
the live file. Now each interpreter's options are read the way it reads them, what cannot be parsed is
bound whole (or allow-always is not offered), and the script's own path shows the approved bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import ALLOWLIST
from tests.attacks.test_content_binding import _outcome, _rewrite_in_place, approve_after
from tests.helpers.gateway import connect, gateway, wait_until, write_config


@pytest.fixture(autouse=True)
def where() -> None:
    """test_content_binding's fixture runs each attack twice; once (the daemon's way) is enough here."""


CASES = [
    ("bash -e x.sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("sh -x x.sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("sh -- x.sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("bash --norc x.sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("bash -o pipefail x.sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("sh < x.sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("cat x.sh | sh", "x.sh", "echo approved-bytes\n", "touch {m}\n"),
    ("python3 - < x.py", "x.py", "print('approved-bytes')\n", "open({m!r}, 'w')\n"),
    ("python3 -W ignore x.py", "x.py", "print('approved-bytes')\n", "open({m!r}, 'w')\n"),
    ("python3 -Wignore -u x.py", "x.py", "print('approved-bytes')\n", "open({m!r}, 'w')\n"),
    ("perl -w x.pl", "x.pl", "print qq(approved-bytes\\n);\n", "open(F, '>', {m!r});\n"),
    ("perl -l -w x.pl", "x.pl", "print qq(approved-bytes);\n", "open(F, '>', {m!r});\n"),
]


@pytest.mark.parametrize(("command", "name", "good", "bad"), CASES)
async def test_a_rewrite_after_the_ask_never_runs(
    state_dir: Path, tmp_path: Path, command: str, name: str, good: str, bad: str
) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / name).write_text(good)
    payload = bad.format(m=str(marker))
    text = await approve_after(
        state_dir, command, tmp_path, lambda: _rewrite_in_place(tmp_path / name, payload)
    )
    assert not marker.exists(), text
    assert "approval-stale" in text and name in text, text


@pytest.mark.parametrize("command", ["sh < x.sh", "python3 - < x.py"])
async def test_a_program_redirected_from_a_file_is_bound_once_never_saved(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    """Unparsed text (a redirection): the named file is bound for this run (the test above), but the binder
    cannot prove it bound every code source, so allow-always is not offered (issue 27 §5, round 4)."""
    (tmp_path / "x.sh").write_text("echo approved-bytes\n")
    (tmp_path / "x.py").write_text("print('approved-bytes')\n")

    def shown(view: dict[str, Any]) -> None:
        assert "allow-always" not in view["allowedDecisions"], view

    await approve_after(state_dir, command, tmp_path, lambda: None, decision="deny", shown=shown)


@pytest.mark.parametrize("command", ["bash -e x.sh", "sh -x x.sh"])
async def test_allow_always_binds_the_script_content(state_dir: Path, tmp_path: Path, command: str) -> None:
    """Allow-always once, rewrite the script, run again: it must ask, not run the new bytes."""
    marker = tmp_path / "pwned"
    py = command.startswith("python")
    name = "x.py" if py else "x.sh"
    (tmp_path / name).write_text("print('approved-bytes')\n" if py else "echo approved-bytes\n")
    text = await approve_after(state_dir, command, tmp_path, lambda: None, decision="allow-always")
    assert "approved-bytes" in text, text
    _rewrite_in_place(tmp_path / name, f"open({str(marker)!r}, 'w')\n" if py else f"touch {marker}\n")
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        try:
            res = await agent.request("exec", {"command": command, "workdir": str(tmp_path)})
        finally:
            await agent.close()
    assert res["details"]["status"] == "approval-pending", res
    assert not marker.exists()


@pytest.mark.parametrize("command", ["bash -s", "sh", "python3 -", "python3 -m helper"])
async def test_a_program_from_stdin_or_a_search_is_never_saved(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    (tmp_path / "helper.py").write_text("print('x')\n")

    def shown(view: dict[str, Any]) -> None:
        assert "allow-always" not in view["allowedDecisions"], view
        assert not any(p.startswith("=command:") for p in view["allowAlwaysPatterns"]), view

    await approve_after(state_dir, command, tmp_path, lambda: None, decision="deny", shown=shown)


SH_SELF = """touch ready
while [ ! -e go ]; do sleep 0.01; done
sed -n '/^#PAYLOAD$/,$p' "$0" | tail -n +2 > payload.sh
sh payload.sh
exit 0
#PAYLOAD
echo approved-payload
"""
PY_SELF = """import os, time
open('ready', 'w').close()
while not os.path.exists('go'):
    time.sleep(0.01)
exec(open(__file__).read().split('#PAYLOAD' + chr(10))[1])
#PAYLOAD
print('approved-payload')
"""


@pytest.mark.parametrize(("command", "name", "body", "evil"), [
    ("sh s.sh", "s.sh", SH_SELF, "touch {m}\n"),
    ("sh -e s.sh", "s.sh", SH_SELF, "touch {m}\n"),
    ("python3 x.py", "x.py", PY_SELF, "open({m!r}, 'w')\n"),
])  # fmt: skip
async def test_a_script_re_reading_itself_gets_the_approved_bytes(
    state_dir: Path, tmp_path: Path, command: str, name: str, body: str, evil: str
) -> None:
    """The script waits (for a file, not a time), the agent rewrites it, the script re-reads its own path."""
    marker = tmp_path / "pwned"
    script = tmp_path / name
    script.write_text(body)
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        operator = await connect(state_dir, "operator")
        try:
            res = await agent.request(
                "exec", {"command": command, "workdir": str(tmp_path), "sessionKey": "k"}
            )
            assert res["details"]["status"] == "approval-pending", res
            await operator.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-once"})
            await wait_until(lambda: (tmp_path / "ready").exists(), timeout=20)
            _rewrite_in_place(script, body.replace("#PAYLOAD\n", "#PAYLOAD\n" + evil.format(m=str(marker))))
            (tmp_path / "go").touch()
            text = await _outcome(agent, "k")
        finally:
            await agent.close()
            await operator.close()
    assert not marker.exists(), text
    assert "approved-payload" in text, text


async def test_the_ask_names_workspace_code_a_python_run_can_import(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("import helper\n")
    (tmp_path / "helper.py").write_text("print('x')\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")

    def shown(view: dict[str, Any]) -> None:
        assert any("2 agent-writable Python files under ./" in w for w in view["warnings"]), view["warnings"]

    await approve_after(state_dir, "python3 x.py", tmp_path, lambda: None, decision="deny", shown=shown)


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
@pytest.mark.parametrize("command", ["node app.js", "perl app.pl"])
async def test_an_approved_script_of_another_interpreter_runs_under_its_own_name(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    """Found by the fresh attack round: node ran the sealed copy as `/proc/self/fd/N`, which its
    realpath resolves to `/memfd:app.js (deleted)`, so every approved `node app.js` failed. In the
    pinned view the approved bytes sit under the script's own file name, beside links to its siblings:
    it requires them, and a rewrite after the ask still never runs."""
    marker = tmp_path / "pwned"
    if command.startswith("node"):
        (tmp_path / "lib.js").write_text("module.exports = 'sibling-ok';\n")
        (tmp_path / "app.js").write_text("console.log('approved-' + require('./lib.js'), __filename);\n")
        evil = f"require('fs').writeFileSync({str(marker)!r}, 'x');\n"
        name = "app.js"
    else:
        (tmp_path / "app.pl").write_text("print qq(approved-sibling-ok $0\\n);\n")
        evil = f"open(F, '>', {str(marker)!r});\n"
        name = "app.pl"
    text = await approve_after(state_dir, command, tmp_path, lambda: None)
    assert "approved-sibling-ok" in text, text
    # Its own file name, not /proc/self/fd/N: the copy sits in a directory of the view beside links to its
    # siblings (verified.Mirror), since a bind at the script's own path is detached by a rename over it
    # (test_fresh_round6_m.py::test_class6_a_perl_script_first_read_is_by_path_and_a_rename_over_reaches_it).
    assert f"/{name}" in text and "/proc/self/fd" not in text and "memfd" not in text, text
    text = await approve_after(state_dir, command, tmp_path, lambda: _rewrite_in_place(tmp_path / name, evil))
    assert not marker.exists(), text
    assert "approval-stale" in text, text


@pytest.mark.parametrize("command", ["bash s.sh", "./s.sh"])
async def test_a_bash_script_testing_whether_it_is_sourced_runs_its_main(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    """Round 6 m: bash's own "am I sourced?" idiom answers as under `bash s.sh` (BASH_SOURCE[0] == $0) for
    the operand and the `#!/bin/bash` spelling alike: the copy runs from its directory in the view."""
    script = tmp_path / "s.sh"
    script.write_text(
        '#!/bin/bash\nif [[ "${BASH_SOURCE[0]}" != "$0" ]]; then echo sourced-branch; return 0; fi\n'
        'echo "main ran: $(cat "$(dirname "${BASH_SOURCE[0]}")/sibling.txt")"\n'
    )
    script.chmod(0o755)
    (tmp_path / "sibling.txt").write_text("sibling-ok\n")
    text = await approve_after(state_dir, command, tmp_path, lambda: None)
    assert "main ran: sibling-ok" in text and "sourced-branch" not in text, text


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
async def test_an_approved_node_script_in_a_subdirectory_requires_from_its_parent(
    state_dir: Path, tmp_path: Path
) -> None:
    """The copy's directory in the view mirrors every level above it (links to the real entries), so a
    `require('../lib.js')` of `node scripts/app.js` reaches the project as it would by the script's path."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "lib.js").write_text("module.exports = 'parent-ok';\n")
    (tmp_path / "scripts" / "app.js").write_text("console.log('approved-' + require('../lib.js'));\n")
    text = await approve_after(state_dir, "node scripts/app.js", tmp_path, lambda: None)
    assert "approved-parent-ok" in text, text
