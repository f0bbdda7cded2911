#!/usr/bin/env bash
# README command (2): set everything up, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
.venv/bin/ruff check engine runner console tests bench
.venv/bin/mypy
# The layer contracts of pyproject.toml ([tool.importlinter]): engine layers, protocol, UI-free engine.
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
# pytest exits 5 when it collects nothing: with `set -e` that fails the run, as it should.
.venv/bin/python -m pytest "$@"
# Again as the daemon runs them: gateway-host sessions in the session host (a daemon-only path the
# in-process test gateways otherwise skip). Only with no arguments: a targeted run stays targeted.
if [ $# -eq 0 ]; then
  EXECHOST_TEST_HOLD_SESSIONS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/runner/gateway tests/attacks
fi
