"""`exechost nodes list|status|ping|add|remove`: the `[nodes.<name>]` table and each node's SSH link."""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

import tomlkit

from engine.config.loader import config_path, load_config
from engine.config.model import Config, ConfigError, NodeConfig
from engine.config.write import set_config_value
from engine.nodes.link import NodeError, NodeLink
from runner.cli import UsageError
from runner.cli.common import (
    Subparsers,
    add_config_arg,
    add_json_arg,
    emit,
    escape_controls,
    node_arg,
    table,
)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "nodes",
        help="remote nodes over SSH: list, status, ping, add, remove",
        description="Nodes are [nodes.<name>] tables in config.toml; host keys are always verified.",
    )
    sub = p.add_subparsers(dest="nodes_command", metavar="VERB")
    for verb, text in (("list", "the configured nodes"), ("status", "connect to each node and report")):
        q = sub.add_parser(verb, help=text)
        add_config_arg(q)
        add_json_arg(q)
        q.set_defaults(func=cmd_list if verb == "list" else cmd_status)
    q = sub.add_parser("ping", help="connect to one node and report its round-trip time")
    q.add_argument("name", type=node_arg)
    q.add_argument("--count", type=int, default=3, help="pings after connecting (default 3)")
    add_config_arg(q)
    add_json_arg(q)
    q.set_defaults(func=cmd_ping)
    q = sub.add_parser("add", help="add [nodes.<name>] to config.toml, then check the link")
    q.add_argument("name", type=node_arg)
    q.add_argument("--host", required=True)
    q.add_argument("--port", type=int)
    q.add_argument("--user")
    q.add_argument("--identity-file", help="the key the gateway logs in with (hidden from host commands)")
    q.add_argument(
        "--identity-agent",
        help='an ssh-agent socket to log in through, or "SSH_AUTH_SOCK" (hidden from host commands)',
    )
    q.add_argument("--known-hosts")
    q.add_argument("--proxy-jump")
    q.add_argument("--exechost", help="the command on the node (default: exechost)")
    q.add_argument("--display-name")
    q.add_argument("--state-dir", help="OPENCLAW_STATE_DIR on the node (its own config and approvals)")
    q.add_argument(
        "--env", action="append", default=[], metavar="K=V", help="environment for exechost on the node"
    )
    q.add_argument("--no-check", action="store_true", help="only write the config; do not connect")
    add_config_arg(q)
    add_json_arg(q)
    q.set_defaults(func=cmd_add)
    q = sub.add_parser("remove", help="remove [nodes.<name>] from config.toml")
    q.add_argument("name", type=node_arg)
    add_config_arg(q)
    add_json_arg(q)
    q.set_defaults(func=cmd_remove)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _config(args: argparse.Namespace) -> Config:
    try:
        return load_config(config_path(args.config), required=bool(args.config))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def node_config(config: Config, name: str) -> NodeConfig:
    """The `[nodes.<name>]` table, or a usage error listing the known names."""
    cfg = config.nodes.get(name)
    if cfg is None:
        known = ", ".join(sorted(config.nodes)) or "none configured"
        raise UsageError(f"unknown node: {name} (known: {known})")
    return cfg


def _row(cfg: NodeConfig) -> dict[str, Any]:
    return {
        "name": cfg.name,
        "host": cfg.host,
        "port": cfg.port,
        "user": cfg.user,
        "displayName": cfg.display_name,
        "knownHosts": cfg.known_hosts,
        "proxyJump": cfg.proxy_jump,
        "exechost": cfg.exechost,
        "stateDir": cfg.state_dir,
        "env": dict(cfg.env),
    }


def _address(r: dict[str, Any]) -> str:
    user = f"{r['user']}@" if r.get("user") else ""
    return f"{user}{r['host']}" + (f":{r['port']}" if r.get("port") else "")


def cmd_list(args: argparse.Namespace) -> int:
    rows = [_row(cfg) for cfg in _config(args).nodes.values()]
    text = table(
        ["NAME", "ADDRESS", "EXECHOST", "STATE DIR"],
        [[r["name"], _address(r), r["exechost"], r["stateDir"] or "(node default)"] for r in rows],
    )
    emit(text if rows else "No nodes configured.", {"nodes": rows}, args.json)
    return 0


async def _probe(cfg: NodeConfig, pings: int) -> dict[str, Any]:
    link = NodeLink(cfg, reconnect=False)
    try:
        await link.ensure()
        rtts = [await link.ping() for _ in range(max(0, pings))]
        status = link.status()
        if rtts:
            status["rttMs"] = round(sorted(rtts)[len(rtts) // 2], 2)
        return status
    except NodeError:
        return link.status()
    finally:
        await link.close()


STATUS_HEADERS = ["NAME", "STATE", "RTT", "NODE ID", "EXECHOST", "ERROR"]


def _cells(s: dict[str, Any]) -> list[Any]:
    if s["state"] == "connected":
        version = f"{s['version']} ({s['platform']})"
        return [s["name"], "connected", f"{s['rttMs']} ms", s["nodeId"], version, ""]
    return [s["name"], s["state"], "", "", "", s["lastError"]]


def _status_table(rows: list[dict[str, Any]]) -> str:
    return table(STATUS_HEADERS, [_cells(r) for r in rows])


def cmd_status(args: argparse.Namespace) -> int:
    nodes = list(_config(args).nodes.values())

    async def go() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(_probe(cfg, 1) for cfg in nodes)))

    rows = asyncio.run(go())
    text = _status_table(rows) if rows else "No nodes configured."
    emit(text, {"nodes": rows}, args.json)
    return 0 if all(r["state"] == "connected" for r in rows) else 1


def cmd_ping(args: argparse.Namespace) -> int:
    cfg = node_config(_config(args), args.name)
    row = asyncio.run(_probe(cfg, args.count))
    emit(_status_table([row]), row, args.json)
    return 0 if row["state"] == "connected" else 1


def cmd_add(args: argparse.Namespace) -> int:
    if not _NAME.match(args.name):
        raise UsageError(f"node name {args.name!r}: use letters, digits, '-' and '_' (at most 64)")
    path = config_path(args.config)
    entry = tomlkit.table()
    entry["host"] = args.host
    for key, value in (
        ("port", args.port),
        ("user", args.user),
        ("identityFile", args.identity_file),
        ("identityAgent", args.identity_agent),
        ("knownHosts", args.known_hosts),
        ("proxyJump", args.proxy_jump),
        ("exechost", args.exechost),
        ("displayName", args.display_name),
        ("stateDir", args.state_dir),
    ):
        if value is not None:
            entry[key] = value
    env = tomlkit.inline_table()
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env expects KEY=VALUE, got {item!r}")
        env[key] = value
    if env:
        entry["env"] = env
    if args.name in _config(args).nodes:
        raise UsageError(f"node {args.name} already exists in {path}; remove it first")
    try:
        config = set_config_value(path, f"nodes.{args.name}", entry)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    cfg = config.nodes[args.name]
    if args.no_check:
        emit(f"Added node {args.name} to {path} (not checked).", _row(cfg), args.json)
        return 0
    row = asyncio.run(_probe(cfg, 1))
    if row["state"] != "connected":
        said = escape_controls(f"Added node {args.name} to {path}, but it cannot be used yet:")
        emit(f"{said}\n{_status_table([row])}", row, args.json)
        return 1
    said = escape_controls(f"Added node {args.name} to {path}.")
    nxt = escape_controls(_next_step(config, args.name, str(path)))
    emit(f"{said}\n{_status_table([row])}\n{nxt}", row, args.json)
    return 0


def _next_step(config: Config, name: str, path: str) -> str:
    """What runs a command on the new node, with the settings it still needs (the main agent's policy in
    config.toml): a call naming a node is refused, never run here, when the host or security disallows it."""
    from dataclasses import replace

    from engine.policy.precedence import PolicyError, resolve_policy

    run = f"exechost exec --node {name} -- uname -a"
    sandboxed = config.sandbox_for("main").mode == "all"
    fixes = []
    try:
        policy = resolve_policy(config, "main", {"node": name}, sandbox_available=sandboxed)
    except PolicyError as exc:
        wanted = "node" if sandboxed else "auto"  # auto keeps a sandboxed agent in its sandbox
        fixes.append(f'{exc.step.key} = "{wanted}" (it is "{exc.step.value}")')
        config = replace(config, exec=replace(config.exec, host=wanted))
        try:
            policy = resolve_policy(config, "main", {"node": name}, sandbox_available=sandboxed)
        except PolicyError:
            return f"Next: set {fixes[0]} in {path}, then: {run}"
    if policy.security == "deny":
        fixes.append(
            'tools.exec.security = "allowlist" (host=node is denied; the node\'s own policy decides)'
        )
    return f"Next: set {' and '.join(fixes)} in {path}, then: {run}" if fixes else f"Next: {run}"


def cmd_remove(args: argparse.Namespace) -> int:
    path = config_path(args.config)
    node_config(_config(args), args.name)
    try:
        set_config_value(path, f"nodes.{args.name}", None)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    emit(f"Removed node {args.name} from {path}.", {"name": args.name, "removed": True}, args.json)
    return 0
