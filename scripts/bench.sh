#!/usr/bin/env bash
# Runs every benchmark in bench/ (each measures its raw baseline in the same run) and prints the tables.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
for b in bench/bench_*.py; do
  echo "== $b"
  .venv/bin/python "$b" "$@"
done
