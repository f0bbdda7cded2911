#!/usr/bin/env bash
# Fuzz the three wires (control socket, node link, exec-approvals.sock) against real daemons, each for a
# set time (default 10 minutes): fails on any crash, hang, unanswered request, traceback or memory past the
# bound. Options: --minutes N, --wire control|node|approvals (repeatable), --seed S, --max-rss-mb M,
# --workers N, --json FILE, --keep. Figures of the last full run: docs/ROBUSTNESS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" -m tests.fuzz.wires "$@"
