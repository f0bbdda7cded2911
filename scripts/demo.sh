#!/usr/bin/env bash
# README command (1): set everything up, then start the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/exechost console --demo "$@"
