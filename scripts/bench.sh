#!/usr/bin/env bash
# Runs every benchmark in bench/ (each measures its raw baseline in the same run) and prints ONE table:
# metric, exechost, baseline, ratio, goal (bench/table.py collects the rows each bench records).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
rows="$(mktemp /tmp/exechost-bench-rows.XXXXXX)"
trap 'rm -f "$rows"' EXIT
export EXECHOST_BENCH_ROWS="$rows"
for b in bench/bench_*.py; do
  echo "== $b"
  .venv/bin/python "$b" "$@" || echo "!! $b failed (exit $?)" >&2
done
echo
echo "== results ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
.venv/bin/python bench/table.py "$rows"
