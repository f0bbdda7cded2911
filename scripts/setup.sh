#!/usr/bin/env bash
# Sets up everything exechost needs on a Debian machine: system packages (when missing) and .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v dockerd >/dev/null || need+=(docker.io)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v tmux >/dev/null || need+=(tmux)
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need+=(busybox-static)
command -v git >/dev/null || need+=(git)
# Host tools (git, make, a script re-reading "$0") run in a private mount namespace over the vetted bytes.
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
# The daemonless sandbox backend (engine.sandbox.bwrap): bubblewrap, and libseccomp for its filter.
command -v bwrap >/dev/null || need+=(bubblewrap)
[ -e /usr/lib/x86_64-linux-gnu/libseccomp.so.2 ] || ldconfig -p 2>/dev/null | grep -q libseccomp.so.2 || need+=(libseccomp2)
# The tests' real parts: a browser for the web console, a C compiler for the in-sandbox race, xz for pagers.
command -v chromium >/dev/null || need+=(chromium)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[ -x /usr/bin/xz ] || need+=(xz-utils)
# The operator's GNU screen session a host run must not reach (tests/attacks: /run/screen is the agent's own).
command -v screen >/dev/null || need+=(screen)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.exechost-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
# The host view's kept namespace is entered by a small C helper (engine/commands/hostenter/); without it
# every gateway-host run builds its view with a bwrap of its own (slower, as confining). Rebuilt when any
# file of its directory is newer than it (a header or one part changed is a new helper).
helper=.venv/libexec/exechost-hostenter
if [ ! -x "$helper" ] || [ -n "$(find engine/commands/hostenter -newer "$helper" -print -quit)" ]; then
  mkdir -p .venv/libexec
  cc -O2 -Wall -o "$helper.tmp" engine/commands/hostenter/*.c && mv "$helper.tmp" "$helper"
fi
# The egress forwarder host runs' network namespaces start (engine/sandbox/egress/heldcopy.py), built here
# once with its source's digest beside it, so no gateway compiles it on its first host run with egress.
forward=engine/sandbox/egress/forward.c
fwd=.venv/libexec/exechost-egress-forward
if [ ! -x "$fwd" ] || [ "$forward" -nt "$fwd" ]; then
  rm -f "$fwd.sha256"  # a build of another source is never vouched for by an older digest
  if cc -Os -static -s -o "$fwd.tmp" "$forward"; then
    mv "$fwd.tmp" "$fwd"
    sha256sum "$forward" | cut -d' ' -f1 > "$fwd.sha256.tmp" && mv "$fwd.sha256.tmp" "$fwd.sha256"
  else
    echo "setup: no static forwarder built; a gateway builds its own at its first host run with egress" >&2
  fi
fi
