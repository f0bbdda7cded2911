"""`exechost sandbox list|explain|recreate|prune|setup`: the operator's view of sandboxes (reference §6.5)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from engine.config.loader import load_config
from engine.config.model import ConfigError
from engine.config.schema import BUSYBOX_SANDBOX_IMAGE
from engine.errors import ExecHostError
from engine.principals import valid_name
from engine.protocol.requests import (
    BrowserStart,
    BrowserStatus,
    BrowserStop,
    BrowserUrl,
    Message,
    SandboxEgress,
    SandboxList,
)
from engine.sandbox import admin, wsbudget, wsfs
from engine.sandbox.docker_ops import SandboxUnavailable
from engine.sandbox.images import DEBIAN_SUITE
from engine.sandbox.settings import DEFAULT_IMAGE, layout, main_session_key, resolve_settings
from engine.sandbox.workspace import WorkspaceError, stage_inbound
from runner.cli import UsageError
from runner.cli.common import (
    Subparsers,
    add_config_arg,
    add_json_arg,
    agent_arg,
    emit,
    escape_controls,
    node_arg,
)
from runner.cli.gateway import call, run_verb
from runner.cli.sandboxtext import clean, format_browsers, format_egress, format_explain, format_list


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="list, explain, recreate and prune Docker sandboxes",
        description="Docker sandboxes: containers per agent/session that host=sandbox commands run in.",
    )
    actions = parser.add_subparsers(dest="sandbox_action", metavar="ACTION", required=True)

    p = actions.add_parser("list", help="sandbox containers with status, image, age, idle, config match")
    add_config_arg(p)
    p.add_argument("--browser", action="store_true", help="the browser sandboxes instead")
    p.add_argument("--json", action="store_true", help="print {containers: [...], browsers: [...]} as JSON")
    _node_arg(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("explain", help="the effective sandbox config for an agent/session")
    add_config_arg(p)
    p.add_argument(
        "--agent",
        type=agent_arg,
        default=None,
        metavar="ID",
        help="agent id (default: from --session, else main)",
    )
    p.add_argument("--session", default=None, metavar="KEY", help="session key (default: the main session)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    _node_arg(p)
    p.set_defaults(func=cmd_explain)

    p = actions.add_parser("recreate", help="remove containers so they are recreated with the current config")
    add_config_arg(p)
    p.add_argument("--all", action="store_true", help="every sandbox container")
    p.add_argument("--session", metavar="KEY", help="the container of this scope/session key")
    p.add_argument("--agent", type=agent_arg, metavar="ID", help="the containers of this agent")
    p.add_argument("--force", action="store_true", help="do not ask for confirmation")
    _node_arg(p)
    p.set_defaults(func=cmd_recreate)

    p = actions.add_parser(
        "stage", help="copy files into a sandbox workspace's media/inbound/ (safe names, never overwriting)"
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--agent", type=agent_arg, default="main", metavar="ID")
    p.add_argument("--session", metavar="KEY", help="session key (default: the agent's main session)")
    add_config_arg(p)
    add_json_arg(p)
    p.set_defaults(func=cmd_stage)

    p = actions.add_parser("prune", help="remove containers idle past idleHours or older than maxAgeDays now")
    add_config_arg(p)
    p.add_argument("--agent", type=agent_arg, default="main", metavar="ID", help="whose prune settings apply")
    p.add_argument(
        "--workspaces",
        action="store_true",
        help="then remove the workspaces of sandboxes that no longer exist (their files too), so agents' "
        "workspace budgets (maxWorkspaceBytesPerAgent) have room again",
    )
    _node_arg(p)
    p.set_defaults(func=cmd_prune)

    p = actions.add_parser(
        "browser",
        help="the browser sandbox: start, stop, status, url (through the gateway)",
        description="Browser sandboxes: a Chromium per scope in its own hardened container. CDP and noVNC "
        "are reachable only through the gateway's token-protected loopback door; `url` prints its links.",
    )
    verbs = p.add_subparsers(dest="browser_action", metavar="VERB", required=True)
    for verb, text in (
        ("start", "start the agent/session's browser and wait until CDP answers"),
        ("stop", "remove the browser container (the next start recreates it)"),
        ("status", "every browser sandbox: running, CDP, page URL and title"),
        ("url", "the CDP and noVNC URLs of a running browser (they carry its token: keep them private)"),
    ):
        q = verbs.add_parser(verb, help=text)
        if verb != "status":
            q.add_argument("--agent", type=agent_arg, default="main", metavar="ID", help="agent id")
            q.add_argument("--session", default="", metavar="KEY", help="session key (default: main)")
        add_json_arg(q)
        q.set_defaults(func=run_verb(cmd_browser))

    p = actions.add_parser(
        "egress",
        help="recent connections through the sandboxes' egress proxy (allowed, refused, asked)",
        description="Every connection a sandbox made through its egress proxy, newest first: agent, "
        "sandbox, name and port, decision and who made it, bytes each way "
        "([agents.defaults.sandbox.egress]).",
    )
    p.add_argument("--agent", type=agent_arg, default=None, metavar="ID", help="only this agent's")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N rows (default 50)")
    add_json_arg(p)
    p.set_defaults(func=run_verb(cmd_egress))

    p = actions.add_parser(
        "setup",
        help=f"build the sandbox image ({DEFAULT_IMAGE}) with no registry; --busybox, --browser",
        description="Build the configured image (agents.defaults.sandbox.docker.image, default "
        f"{DEFAULT_IMAGE}) with no registry: a Debian {DEBIAN_SUITE} root with bash, git, python3, curl, jq "
        "and ripgrep (mmdebstrap + docker import, about 35 s); --busybox builds the minimal FROM scratch + "
        f"static busybox image ({BUSYBOX_SANDBOX_IMAGE} unless the config names another); --browser builds "
        "the browser image (agents.defaults.sandbox.browser.image: Chromium, Xvfb, x11vnc, noVNC, "
        "websockify, socat; about 60 s). --from-registry uses the seed's Dockerfiles instead (needs a "
        "registry for debian:bookworm-slim). Setup never overwrites an image it did not build.",
    )
    flavour = p.add_mutually_exclusive_group()
    flavour.add_argument("--debian", action="store_const", const="debian", dest="flavour", help="Debian")
    flavour.add_argument("--busybox", action="store_const", const="busybox", dest="flavour", help="busybox")
    flavour.add_argument(
        "--browser", action="store_const", const="browser", dest="flavour", help="the browser image"
    )
    p.add_argument(
        "--from-registry", action="store_true", help="docker build the seed's Dockerfile (needs a registry)"
    )
    p.add_argument("--rebuild", action="store_true", help="build again even if setup already built it")
    add_config_arg(p)
    p.set_defaults(func=cmd_setup)


def _node_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node",
        type=node_arg,
        metavar="NAME",
        help="on this node's Docker ([nodes.NAME]), over its own SSH link (no gateway needed)",
    )


def _node_call(args: argparse.Namespace, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One sandbox verb answered by the node's runner with the node's own config and Docker."""
    from engine import statefs
    from engine.nodes.gateway_key import GatewayKey
    from engine.nodes.link import NodeError, NodeLink
    from runner.cli.nodes import node_config

    cfg = node_config(_config(args), args.node)
    # The operator of this state dir acts as its gateway: the link proves the gateway's key, so a node
    # shared by several gateways answers with this gateway's sandboxes only (runner.node.sandboxes).
    key = GatewayKey.load_or_create(statefs.ensure_private_dir(statefs.state_dir()))

    async def go() -> dict[str, Any]:
        link = NodeLink(cfg, reconnect=False, gateway_key=key)
        try:
            res = await link.call(method, params, timeout=120)
        finally:
            await link.close()
        if not res.ok:
            err = res.error or {}
            why = escape_controls(str(err.get("message") or err.get("code") or "failed"))
            raise NodeError(f"node {cfg.name}: {why}")
        return res.payload or {}

    return asyncio.run(go())


def _node_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The node's rows, only the well-formed ones (a node's answer is not trusted to be)."""
    got = _node_call(args, "sandbox.list", {}).get("containers")
    return [
        {**r, "node": args.node, "running": r.get("running") is True, "exists": r.get("exists") is True}
        for r in (got if isinstance(got, list) else [])
        if isinstance(r, dict)
        and isinstance(r.get("containerName"), str)
        and isinstance(r.get("sessionKey"), str)
    ]


def _config(args: argparse.Namespace) -> Any:
    try:
        return load_config(args.config, required=bool(args.config))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _fail(exc: Exception) -> int:
    print(f"exechost: {exc}", file=sys.stderr)
    return 1


def _connected_node_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every connected node's sandboxes, as the console lists them: through the running gateway (never
    started for this, and a down node is never dialled). ([], []) when no gateway runs."""
    from runner.cli.gateway import CliFailure

    try:
        got = call(SandboxList(), autostart=False)
    except CliFailure:
        return [], []
    blank = {"image": "?", "imageMatch": False, "configMatch": False, "backend": "?", "sessionKey": "?"}
    blank["exists"] = False
    rows = [
        {**blank, "ageMs": None, "idleMs": None, **r, "running": r.get("running") is True}
        for r in got.get("containers") or []
        if isinstance(r, dict) and isinstance(r.get("node"), str) and isinstance(r.get("containerName"), str)
    ]
    errors = [e for e in got.get("errors") or [] if isinstance(e, dict) and e.get("node")]
    return rows, errors


def _without_docker(listing: Callable[[], list[Any]]) -> list[Any]:
    """Browser sandboxes and pool spares are Docker's: none where no engine answers (a bwrap-only host,
    whose sandboxes list_runtimes found without it)."""
    try:
        return listing()
    except SandboxUnavailable:
        return []


def cmd_list(args: argparse.Namespace) -> int:
    node_errors: list[dict[str, Any]] = []
    spares: list[str] = []
    try:
        if args.node:
            # Browser sandboxes stay on the gateway's machine: a node lists its exec sandboxes only.
            rows = _node_rows(args)
            browsers: list[dict[str, Any]] = []
        else:
            config = _config(args)
            try:
                rows = [{**r, "node": None} for r in admin.list_runtimes(config)]
            except SandboxUnavailable as exc:
                if not config.nodes:
                    raise
                rows, node_errors = [], [{"node": None, "error": str(exc)}]
            browsers = _without_docker(admin.list_browsers) if not node_errors else []
            spares = _without_docker(admin.list_spares) if not node_errors else []
            if config.nodes and not args.browser:
                more, failed = _connected_node_rows()
                rows += more
                node_errors += failed
    except (SandboxUnavailable, ExecHostError) as exc:
        return _fail(exc)
    if args.json:
        out: dict[str, Any] = {"containers": rows, "browsers": browsers, "spares": spares}
        if node_errors:
            out["errors"] = node_errors
        print(json.dumps(out, ensure_ascii=False))
    elif args.browser:
        print(format_browsers(browsers))
    elif args.node:
        return _print_from_node(args, lambda: f"On node {args.node}:\n" + format_list(rows))
    else:
        print(format_list(rows))
        if spares:  # no agent's yet, so not rows (docs/SANDBOX-POOL.md)
            print(f"Pool: {len(spares)} ready container(s) for new scopes (not listed above).")
        for err in node_errors:
            where = f"node {err['node']}" if err.get("node") else "this machine"
            print(f"⚠️  {clean(where)}: {clean(str(err.get('error')))}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    config = _config(args)
    agent = args.agent
    if agent is None and args.session and args.session.startswith("agent:"):
        agent = args.session.split(":")[1] or None
        if agent is not None and not valid_name(agent):
            raise UsageError(f"invalid agent id {agent!r} in --session")
    if args.node:
        params = {"agentId": agent or "main", **({"sessionKey": args.session} if args.session else {})}
        try:
            info = _node_call(args, "sandbox.explain", params)
        except ExecHostError as exc:
            return _fail(exc)
    else:
        info = admin.explain(config, agent or "main", args.session)
    if args.json:
        print(json.dumps(info, ensure_ascii=False))
    elif args.node:
        return _print_from_node(args, lambda: format_explain(info))
    else:
        print(format_explain(info))
    return 0


def _print_from_node(args: argparse.Namespace, render: Callable[[], str]) -> int:
    """A node's answer is its runner's word, not this machine's config: rendered as inert text, and a
    malformed one is an error rather than a traceback."""
    try:
        text = render()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return _fail(ExecHostError(f"node {args.node} sent a malformed answer ({type(exc).__name__}: {exc})"))
    print(escape_controls(text, keep_lines=True))
    return 0


def cmd_recreate(args: argparse.Namespace) -> int:
    chosen = [bool(args.all), args.session is not None, args.agent is not None]
    if not any(chosen):
        raise UsageError("Please specify --all, --session <key>, or --agent <id>")
    if sum(chosen) > 1:
        raise UsageError("Please specify only one of: --all, --session, --agent")
    config = _config(args)
    try:
        every = (
            _node_call(args, "sandbox.list", {})["containers"] if args.node else admin.list_runtimes(config)
        )
        rows = admin.select(every, all=args.all, session=args.session, agent=args.agent)
    except (SandboxUnavailable, ExecHostError) as exc:
        return _fail(exc)
    rows = [r for r in rows if r["exists"]] or rows
    if not rows:
        print("No sandbox runtimes found matching the criteria.")
        return 0
    print("Sandbox runtimes to be recreated:")
    for r in rows:
        print(f"  - {clean(r['containerName'])} [docker] ({'running' if r['running'] else 'stopped'})")
    print(f"Total: {len(rows)} runtime(s)")
    if not args.force:
        try:
            answer = input("This will stop and remove these containers. Continue? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("Cancelled.")
            return 0
    if args.node:
        return _recreate_on_node(args)
    removed = failed = 0
    for r in rows:
        try:
            if admin.remove(r["containerName"]):
                print(f"✓ Removed {clean(r['containerName'])}")
                removed += 1
            else:
                raise RuntimeError("docker rm -f failed")
        except Exception as exc:
            print(f"✗ Failed to remove {clean(r['containerName'])}: {exc}")
            failed += 1
    print(f"Done: {removed} removed, {failed} failed")
    print("Runtimes will be automatically recreated when the agent is next used.")
    return 1 if failed else 0


def _recreate_on_node(args: argparse.Namespace) -> int:
    chosen = {"all": args.all, "sessionKey": args.session, "agentId": args.agent}
    try:
        res = _node_call(
            args, "sandbox.recreate", {k: v for k, v in chosen.items() if v not in (None, False)}
        )
    except ExecHostError as exc:
        return _fail(exc)
    for name in res.get("removed") or []:
        print(f"✓ Removed {clean(name)}")
    for row in res.get("failed") or []:
        print(f"✗ Failed to remove {clean(row.get('containerName'))}: {clean(row.get('error'))}")
    print(f"Done: {len(res.get('removed') or [])} removed, {len(res.get('failed') or [])} failed")
    print("Runtimes will be automatically recreated when the agent is next used.")
    return 1 if res.get("failed") else 0


def cmd_stage(args: argparse.Namespace) -> int:
    """Seed 004 §6.3 inbound media: each FILE lands in the sandbox workspace the agent's commands see."""
    config = _config(args)
    settings = resolve_settings(config, args.agent)
    lay = layout(settings, args.agent, args.session or main_session_key(args.agent))
    staged = []
    try:  # its own filesystem mounted first (after a reboot): never files written under the mount
        wsfs.ensure(
            settings.workspace_root,
            lay.sandbox_workspace,
            wsbudget.for_scope(settings, lay.scope_key, args.agent),
        )
    except (OSError, WorkspaceError) as exc:
        return _fail(exc)
    for name in args.files:
        try:
            with open(name, "rb") as fh:
                data = fh.read()
            inside = stage_inbound(settings.workspace_root, lay.sandbox_workspace, name, data)
        except (OSError, WorkspaceError) as exc:
            return _fail(exc)
        staged.append({"file": name, "path": f"{settings.docker.workdir}/{inside}", "bytes": len(data)})
    text = "\n".join(f"{clean(s['file'])} -> {clean(s['path'])} ({s['bytes']} bytes)" for s in staged)
    emit(text, {"staged": staged, "workspace": lay.sandbox_workspace}, args.json)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if args.workspaces and args.node:
        return _fail(
            ExecHostError(
                "--workspaces removes this machine's workspaces: run it on the node (without --node)"
            )
        )
    try:
        if args.node:
            got = _node_call(args, "sandbox.prune", {"agentId": args.agent}).get("removed")
            removed = [str(name) for name in got] if isinstance(got, list) else []
        else:
            removed = admin.prune(_config(args), args.agent)
    except (SandboxUnavailable, ExecHostError) as exc:
        return _fail(exc)
    for name in removed:
        print(f"✓ Removed {clean(name)}")
    print(f"Pruned {len(removed)} runtime(s).")
    if args.workspaces:
        return _prune_workspaces(args)
    return 0


def _prune_workspaces(args: argparse.Namespace) -> int:
    """After the runtimes: the workspaces of sandboxes that no longer exist (engine.sandbox.wsprune)."""
    try:
        gone = admin.prune_workspaces(_config(args))
    except (SandboxUnavailable, ExecHostError, OSError) as exc:
        return _fail(exc)
    for ws in gone:
        print(
            f"✓ Removed workspace {clean(ws.path)} ({ws.size} bytes of its agent's budget, {ws.disk} on disk)"
        )
    print(f"Pruned {len(gone)} workspace(s): {sum(ws.size for ws in gone)} bytes of budgets freed.")
    return 0


def cmd_setup(args: argparse.Namespace) -> int:
    config = _config(args)

    def progress(line: str) -> None:
        print(f"  {clean(line)}", flush=True)

    tag = admin.setup_target(config, args.flavour)
    flavour = args.flavour or admin.setup_flavour(tag)
    if args.from_registry and flavour != "busybox":
        what = "(docker build, from a registry)"
    elif flavour == "busybox":
        what = "(FROM scratch + static busybox)"
    else:
        what = f"({DEBIAN_SUITE}, mmdebstrap)"
    print(f"Building the {flavour} sandbox image {tag} {what}…", flush=True)
    try:
        tags = admin.setup_image(
            config, progress, flavour, from_registry=args.from_registry, rebuild=args.rebuild
        )
    except SandboxUnavailable as exc:
        return _fail(exc)
    print(f"Sandbox image built: {', '.join(tags)}")
    return 0


def cmd_browser(args: argparse.Namespace) -> int:
    verb = args.browser_action
    msg: Message = BrowserStatus()
    if verb != "status":
        kinds: dict[str, type[BrowserStart | BrowserStop | BrowserUrl]]
        kinds = {"start": BrowserStart, "stop": BrowserStop, "url": BrowserUrl}
        msg = kinds[verb](agent_id=args.agent, session_key=args.session)
    result = call(msg, operator=verb != "status")
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return 0
    if verb == "status":
        print(format_browsers(result.get("browsers") or []))
    elif verb == "start":
        for warning in result.get("warnings") or []:
            print(f"⚠️  {clean(warning)}")
        print(f"Browser sandbox {clean(result['containerName'])} is running (CDP answers).")
    elif verb == "stop":
        done = "Removed" if result.get("removed") else "No container"
        print(f"{done}: {clean(result['containerName'])}")
    else:
        print(f"CDP:   {result.get('cdpUrl')}")
        print(f"noVNC: {result.get('noVncUrl') or '- (headless or enableNoVnc = false)'}")
        print("Each link opens once, within 60 s (CDP: one /json answer and one websocket from it, as")
        print("Playwright's connect_over_cdp uses it); run this again for new ones.")
    return 0


def cmd_egress(args: argparse.Namespace) -> int:
    result = call(SandboxEgress(limit=args.limit, agent_id=args.agent or None))
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return 0
    print(format_egress(result.get("connections") or []))
    return 0
