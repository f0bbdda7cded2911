#!/usr/bin/env bash
# Starts the local Docker engine when none answers (no bridge: tests never touch a real network).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "services: no Docker engine answers and we are not root; start dockerd yourself" >&2
  exit 0
fi
mkdir -p /var/log
# In a session of its own: the engine outlives the shell (and the process group) that started it, so a
# test run interrupted, or a job killed by its group, never takes the shared engine down with it.
setsid nohup dockerd --bridge=none --host unix:///var/run/docker.sock >>/var/log/exechost-dockerd.log 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "services: dockerd did not come up; see /var/log/exechost-dockerd.log" >&2
exit 1
