"""The texts `exechost sandbox` prints: lists, explain and egress, every agent-given value escaped."""

from __future__ import annotations

import shlex
from typing import Any

from engine.principals import SHARED_SCOPE
from runner.cli.common import escape_controls

_DANGEROUS = (
    "dangerouslyAllowReservedContainerTargets",
    "dangerouslyAllowExternalBindSources",
    "dangerouslyAllowContainerNamespaceJoin",
)


# Session keys come from agents: never let them drive the operator's terminal.


def clean(value: Any) -> str:
    return escape_controls(str(value), keep_lines=True)


def compact(ms: int | None) -> str:
    if not isinstance(ms, int):  # None, or a node's row that says something else
        return "-"
    seconds = ms // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_list(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No sandbox runtimes found."
    lines = ["📦 Sandbox Runtimes:", ""]
    for r in rows:
        status = "🟢 running" if r["running"] else ("⚫ stopped" if r["exists"] else "⚪ missing")
        image = f"{clean(r['image'])} ✓" if r["imageMatch"] else f"{clean(r['image'])} ⚠️  mismatch"
        config = "✓" if r["configMatch"] else "⚠️  mismatch (recreate to apply)"
        lines += [
            f"  {clean(r['containerName'])}",
            f"    Status:  {status}",
            f"    Image:   {image}",
            f"    Config:  {config}",
            f"    Backend: {r['backend']}",
            f"    Age:     {compact(r['ageMs'])}",
            f"    Idle:    {compact(r['idleMs'])}",
            f"    Session: {clean(r['sessionKey'])}",
            *([f"    Node:    {clean(r['node'])}"] if r.get("node") else []),
            "",
        ]
    running = sum(1 for r in rows if r["running"])
    lines.append(f"Total: {len(rows)} ({running} running)")
    mismatched = sum(1 for r in rows if not r["imageMatch"] or not r["configMatch"])
    if mismatched:
        lines.append(f"⚠️  {mismatched} runtime(s) with config mismatch detected.")
        lines.append("   Run 'exechost sandbox recreate --all' to update all runtimes.")
    return "\n".join(lines)


def format_explain(info: dict[str, Any]) -> str:
    d = info["docker"]
    lines = [
        "Effective sandbox:",
        f"  agentId: {clean(info['agentId'])}",
        f"  sessionKey: {clean(info['sessionKey'])}",
        f"  mainSessionKey: {clean(info['mainSessionKey'])}",
        f"  runtime: {info['runtime']}",
        f"  mode: {info['mode']}",
        f"  scope: {info['scope']}  (scopeKey: {clean(info['scopeKey'])})",
        f"  workspaceAccess: {info['workspaceAccess']}",
        f"  workspaceRoot: {info['workspaceRoot']}",
        f"  maxWorkspaceBytesPerAgent: {_budget(info.get('maxWorkspaceBytesPerAgent'))}",
        f"  workspaceDir: {info['workspaceDir']} -> {d['workdir']} (rw)",
    ]
    if info["agentMount"]:
        lines.append(f"  agentWorkspace: {info['agentMount']} -> /agent (ro)")
    backend = info.get("backend", "docker")
    lines += [
        f"  container: {info['containerName']}",
        f"  backend: {backend}",
        f"  configHash: {info['configHash'][:16]}",
        "",
    ]
    if backend == "bwrap" and info.get("bwrap"):
        lines += [*_bwrap_lines(info["bwrap"]), ""]
    lines += [
        "Docker:"
        if backend == "docker"
        else "Docker keys (workdir, env, tmpfs, limits, binds apply to bwrap):",
        f"  image: {d['image']}",
        f"  readOnlyRoot: {str(d['readOnlyRoot']).lower()}  network: {d['network']}  "
        f"capDrop: {','.join(d['capDrop']) or '-'}  pidsLimit: {d['pidsLimit'] or '-'}",
        f"  tmpfs: {', '.join(d['tmpfs']) or '-'}  user: {d['user'] or '(workspace owner)'}",
        f"  memory: {d['memory'] or '-'}  memorySwap: {d['memorySwap'] or '-'}  cpus: {d['cpus'] or '-'}  "
        f"ulimits: {', '.join(f'{k}={v}' for k, v in d['ulimits'].items()) or '-'}",
        f"  dns: {', '.join(d['dns']) or '-'}  extraHosts: {', '.join(d['extraHosts']) or '-'}",
        f"  binds: {', '.join(d['binds']) or '-'}",
        f"  env: {', '.join(d['envKeys']) or '-'}",
        f"  setupCommand: {d['setupCommand'] or '-'}  pool: {d.get('pool', '-')}",
        *[f"  ⚠️  {k} = true" for k in _DANGEROUS if d[k]],
        "",
        "Tool policy (tools.sandbox.tools; deny first, an empty allow allows all):",
        f"  allow: {', '.join(info['toolPolicy']['allow']) or '(all)'}",
        f"  deny: {', '.join(info['toolPolicy']['deny']) or '-'}",
        "",
        *_egress_lines(info.get("egress")),
        "Browser sandbox (sandbox.browser):",
        *_browser_lines(info["browser"]),
        "",
        "Elevated:",
        f"  enabled: {str(info['elevated']['enabled']).lower()}",
    ]
    if info.get("hostView"):
        hv = info["hostView"]
        lines += [
            "",
            "Host view (tools.exec.hostView):",
            f"  mode: {hv['mode']}  bwrap: {hv['bwrap'] or '-'}",
            f"  kept (entered per run): {hv.get('kept') or '- (a bwrap per run)'}",
            f"  gateway-host commands see {hv['gatewayHostCommandsSee']}",
            f"  processes of an agent's gateway-host commands: {hv.get('pidsCap') or '-'}",
            f"  RAM of an agent's gateway-host commands: {hv.get('memoryCap') or '-'}",
        ]
    if info["problems"]:
        lines += ["", "Problems:", *[f"  ✗ {p}" for p in info["problems"]]]
    if info["mode"] == "non-main" and info["runtime"] == "sandboxed":
        lines += [
            "",
            f"Hint: sandbox mode is non-main; use main session key to run direct: {info['mainSessionKey']}",
        ]
    lines += [
        "",
        "Fix-it:",
        '  agents.defaults.sandbox.mode = "off" | "non-main" | "all"',
        "  agents.list[].sandbox.mode   (per agent)",
        "  agents.defaults.sandbox.docker.*   then: exechost sandbox recreate --all",
        "  tools.elevated.enabled",
        "",
        "Docs: README.md#sandbox",
    ]
    return "\n".join(lines)


def _bwrap_lines(b: dict[str, Any]) -> list[str]:
    """The exact argv, one option per line, as an operator would paste it (env values redacted)."""
    out = ["Bubblewrap (no daemon; the sandbox's parent is a keeper shell, --die-with-parent):"]
    out.append(
        f"  system view: {clean(b['rootfs']) if b['rootfs'] else 'host /usr, /bin, /lib*, allowlisted /etc'}"
    )
    out.append(f"  rlimits: {', '.join(f'{k}={v}' for k, v in b['rlimits'].items()) or '-'}")
    out.append(f"  pids cap: {b.get('pidsCap') or '-'}")
    out.append(f"  landlock: {_landlock_line(b.get('landlock') or {})}")
    env = b.get("env") or {}
    out.append(f"  env (bwrap's, inherited): {' '.join(f'{k}={clean(v)}' for k, v in env.items()) or '-'}")
    out.append("  argv:")
    argv = [clean(a) for a in b["argv"]]
    line: list[str] = []
    for arg in argv:
        if arg.startswith("--") and line:
            out.append("    " + shlex.join(line) + " \\")
            line = []
        line.append(arg)
    if line:
        out.append("    " + shlex.join(line))
    return out


def _landlock_line(layer: dict[str, Any]) -> str:
    """Whether the landlock layer is on and what it allows, or why it is off."""
    if not layer.get("active"):
        return f"off (kernel ABI {layer.get('abi', 0)}): {clean(str(layer.get('reason') or '-'))}"
    rules = layer.get("rules") or {}
    writes = [p for p, r in rules.items() if "w" in r]
    execs = [p for p, r in rules.items() if "x" in r]
    tcp = layer.get("tcp") or {}
    ports = (
        tcp
        if isinstance(tcp, str)
        else f"bind {tcp.get('bind') or 'none'}, connect {tcp.get('connect') or 'none'}"
    )
    return (
        f"on (kernel ABI {layer.get('abi')}): write {' '.join(map(clean, writes))}; "
        f"execute {' '.join(map(clean, execs))}; TCP {ports}"
    )


def _browser_lines(b: dict[str, Any]) -> list[str]:
    if not b["enabled"]:
        return ["  enabled: false  (agents.defaults.sandbox.browser.enabled = true turns it on)"]
    display = "headless" if b["headless"] else "Xvfb" + (" + noVNC" if b["enableNoVnc"] else "")
    return [
        f"  enabled: true  container: {clean(b['containerName'])}",
        f"  image: {clean(b['image'])}  network: {clean(b['network'])}  display: {display}",
        f"  ports in the container: cdp {b['cdpPort']}, vnc {b['vncPort']}, noVNC {b['noVncPort']} "
        "(none published)",
        f"  access: {b['access']}",
        f"  autoStart: {str(b['autoStart']).lower()} (waits {b['autoStartTimeoutMs']} ms for CDP)",
        f"  binds: {', '.join(clean(x) for x in b['binds']) or '-'}",
        "  browser tool: "
        + ("allowed" if b["toolAllowed"] else "denied by tools.sandbox.tools in sandboxed sessions"),
    ]


def _egress_lines(e: dict[str, Any] | None) -> list[str]:
    if not e:  # (a node that predates egress)
        return []
    lines = ["Egress (sandbox.egress; names decided by the gateway's proxy):", f"  mode: {e['mode']}"]
    if e["mode"] != "none":
        lines += [
            f"  allow: {', '.join(e['allow']) or '-'}",
            f"  deny: {', '.join(e['deny']) or '-'}",
            f"  ask: {str(e['ask']).lower()}  resolve: "
            + (", ".join(f"{k}={v}" for k, v in e["resolve"].items()) or "-"),
            f"  maxConnections: {e.get('maxConnections', '-')}",
            f"  proxy: {e['proxy']} inside, {e['socket']} on the host",
        ]
    return [*lines, ""]


def format_egress(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No egress connections recorded."
    lines = []
    for r in rows:
        mark = "✅" if r.get("decision") == "allowed" else "⛔"
        target = f"{r.get('name')}:{r.get('port')}" if r.get("name") else "(bad request)"
        size = f"↑{_bytes(r.get('bytesUp'))} ↓{_bytes(r.get('bytesDown'))}"
        who = f"agent {clean(r.get('agentId'))}"
        if r.get("principal") == SHARED_SCOPE:  # any agent's command there, decided as agentId
            who = f"shared (settings of {clean(r.get('agentId'))})"
        lines.append(
            f"{mark} {clean(r.get('method') or '-'):7} {clean(target)}  {r.get('decision')} by "
            f"{clean(r.get('decidedBy') or '-')}  {size}  {who} sandbox {clean(r.get('sandbox'))}"
        )
        error = f" — {clean(r['error'])}" if r.get("error") else ""
        lines.append(f"     {clean(r.get('rule') or '')}{error}")
    return "\n".join(lines)


def _bytes(value: Any) -> str:
    n = float(value or 0)
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f}{unit}"
        n /= 1024
    return f"{n:.1f}GiB"


def format_browsers(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No browser sandboxes found."
    lines = ["🌐 Browser Sandboxes:", ""]
    for r in rows:
        lines.append(f"  {clean(r['containerName'])}")
        lines.append(f"    Status:  {'🟢 running' if r['running'] else '⚫ stopped'}")
        lines.append(f"    Image:   {clean(r['image'])}")
        lines.append(f"    CDP:     {'answers' if r.get('cdp') else '-'}")
        lines.append(f"    noVNC:   {'yes' if r.get('noVnc') else '-'}")
        lines.append(f"    Page:    {clean(r.get('title') or '-')} {clean(r.get('url') or '')}".rstrip())
        lines.append(f"    Session: {clean(r['sessionKey'])}")
        lines.append("")
    running = sum(1 for r in rows if r["running"])
    lines.append(f"Total: {len(rows)} ({running} running)")
    return "\n".join(lines)


def _budget(value: object) -> str:
    """An agent's workspace budget as explain shows it (engine.sandbox.wsbudget)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value} bytes"
    return "unset (a quarter of the filesystem the workspaces are on)"
