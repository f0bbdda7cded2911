"""The policy pane: effective policy per agent and the layer that set each value; allowlist editor."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from console.dialogs import ConfirmDialog, TextDialog
from console.text import plain
from engine.display import visible
from engine.policy.precedence import SessionOverrides
from engine.protocol import requests
from engine.protocol.frames import RemoteError
from engine.protocol.requests import (
    AllowlistAdd,
    AllowlistRemove,
    GrantsList,
    GrantsRevoke,
    PolicyAgents,
    PolicyCheck,
    PolicyOverrides,
)

# The fields of a session override (`/exec …`, `/elevated …`) as the gateway reports them.
SESSION_OVERRIDE_KEYS = ("host", "security", "ask", "node", "elevated")


@dataclass
class AgentPolicy:
    """One row of the gateway's `policy.agents`: the policy it enforces for one agent."""

    agent_id: str
    policy: dict[str, Any]
    trail: list[dict[str, str]]
    allowlist: list[dict[str, Any]]
    error: str | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> AgentPolicy:
        return cls(
            agent_id=str(row.get("agentId") or "?"),
            policy=dict(row.get("policy") or {}),
            trail=list(row.get("trail") or []),
            allowlist=list(row.get("allowlist") or []),
            error=row.get("error"),
            overrides=dict(row.get("overrides") or {}),
        )


def fmt_ms(ms: Any) -> str:
    if not isinstance(ms, int | float):
        return ""
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


def render_policy(agent: AgentPolicy | None) -> RenderableType:
    if agent is None:
        return Text("No agents.", style="dim")
    if agent.error:
        return Text(f"{agent.agent_id}: {agent.error}", style="red")
    p = agent.policy
    head = Text.assemble(
        (f"agent {agent.agent_id}: ", "bold"),
        f"host={p['host']} security={p['security']} ask={p['ask']} "
        f"askFallback={p['askFallback']} elevated={p['elevated']}",
    )
    parts: list[RenderableType] = [head]
    if p.get("direct"):
        parts.append(
            Text(
                "host=sandbox without a sandbox runtime: commands run directly on this machine.",
                style="yellow",
            )
        )
    trail = Table.grid(padding=(0, 2))
    trail.add_column(style="cyan")
    trail.add_column()
    trail.add_column(style="dim")
    for step in agent.trail:
        trail.add_row(
            *(plain(x) for x in (step.get("key", ""), step.get("value", ""), f"← {step.get('layer', '')}"))
        )
    parts.extend([Text("why (last layer wins):", style="bold"), trail])
    for key, values in agent.overrides.items():
        set_values = " ".join(f"{k}={v}" for k, v in values.items() if v)
        parts.append(Text(f"override {key}: {set_values or '(none)'}", style="magenta"))
    return Group(*parts)


class PolicyPane(Horizontal):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "edit('add')", "Add pattern"),
        Binding("delete", "edit('remove')", "Remove pattern"),
        Binding("c", "edit('check')", "Check command"),
        Binding("r", "revoke_grant", "Revoke grant"),
    ]

    class Changed(Message):
        """The session overrides the gateway reported changed (the app keeps them for directives)."""

        def __init__(self, overrides: dict[str, SessionOverrides]) -> None:
            super().__init__()
            self.overrides = overrides

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.agents: list[AgentPolicy] = []
        self.grants: list[dict[str, Any]] = []  # live allow-always grants with limits (all agents)

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="agent-list", cursor_type="row")
        table.add_columns("agent", "host", "security", "ask", "fallback")
        yield table
        with Vertical(id="policy-view"):
            yield Static(id="policy-detail")
            allow: DataTable[Any] = DataTable(id="allowlist", cursor_type="row", zebra_stripes=True)
            allow.add_columns("scope", "pattern", "argPattern", "last used", "last command")
            yield allow
            grants: DataTable[Any] = DataTable(id="grants", cursor_type="row", zebra_stripes=True)
            grants.add_columns("grant", "patterns", "left", "approved command")
            yield grants
            yield Static(id="policy-check")

    @property
    def selected(self) -> AgentPolicy | None:
        table = self.query_one("#agent-list", DataTable)
        if not self.agents:
            return None
        return self.agents[min(max(table.cursor_row, 0), len(self.agents) - 1)]

    def show(self, agents: list[AgentPolicy]) -> None:
        keep = self.selected.agent_id if self.selected else None
        self.agents = agents
        table: DataTable[Any] = self.query_one("#agent-list", DataTable)
        table.clear()
        for agent in agents:
            p = agent.policy
            table.add_row(  # Text, never str: DataTable parses str cells as markup
                plain(agent.agent_id),
                *(plain(p.get(k, "!")) for k in ("host", "security", "ask", "askFallback")),
                key=agent.agent_id,
            )
        for index, agent in enumerate(agents):
            if agent.agent_id == keep:
                table.move_cursor(row=index)
        self._detail()

    def _detail(self) -> None:
        agent = self.selected
        self.query_one("#policy-detail", Static).update(render_policy(agent))
        allow: DataTable[Any] = self.query_one("#allowlist", DataTable)
        allow.clear()
        for entry in agent.allowlist if agent else []:
            pattern = str(entry["pattern"])
            if pattern.startswith("=command:"):  # a hash: say which command it stands for
                pattern += f" = {entry.get('lastUsedCommand') or '(an exact command approved always)'}"
            allow.add_row(
                plain(entry.get("scope") or ""),
                plain(pattern),
                plain(entry.get("argPattern") or ""),
                fmt_ms(entry.get("lastUsedAt")),
                plain(str(entry.get("lastUsedCommand") or "")[:60]),
            )

        self._grants()

    def agent_grants(self) -> list[dict[str, Any]]:
        agent = self.selected
        return [g for g in self.grants if agent is not None and g.get("agentId") == agent.agent_id]

    def _grants(self) -> None:
        table: DataTable[Any] = self.query_one("#grants", DataTable)
        table.clear()
        for grant in self.agent_grants():
            table.add_row(
                plain(grant.get("id") or ""),
                plain(", ".join(grant.get("patterns") or [])[:60]),
                plain(grant.get("left") or ""),
                plain(str(grant.get("command") or "")[:60]),
            )

    def show_grants(self, grants: list[dict[str, Any]]) -> None:
        self.grants = grants
        self._grants()

    def show_check(self, renderable: RenderableType) -> None:
        self.query_one("#policy-check", Static).update(renderable)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "agent-list":
            event.stop()
            self._detail()

    # -- requests and flows: everything goes through the gateway, which enforces this policy

    @work(group="policy", exclusive=True, exit_on_error=False)
    async def reload(self) -> None:
        """The gateway's overrides and each agent's effective policy, as it enforces them."""
        link = self.app.link  # type: ignore[attr-defined]
        if not link.connected.is_set():
            return
        try:
            live: dict[str, Any] = {}
            after: str | None = None
            while True:  # paged: the gateway answers at most OVERRIDES_PAGE_BYTES at a time
                page = await link.request(PolicyOverrides(after=after))
                live.update(page.get("overrides") or {})
                after = page.get("next")
                if not isinstance(after, str):
                    break
            rows = (await link.request(PolicyAgents())).get("agents", [])
            grants = (await link.request(GrantsList())).get("grants", [])
        except (RemoteError, ConnectionError) as exc:
            self.show_check(Text(f"policy unavailable: {exc}", style="red"))
            return
        overrides = {
            key: SessionOverrides(**{k: v for k, v in values.items() if k in SESSION_OVERRIDE_KEYS})
            for key, values in live.items()
            if isinstance(values, dict)
        }
        self.post_message(self.Changed(overrides))
        self.show([AgentPolicy.from_json(row) for row in rows if isinstance(row, dict)])
        self.show_grants([g for g in grants if isinstance(g, dict)])

    async def _request(self, msg: requests.Message) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self.app.link.request(msg)  # type: ignore[attr-defined]
            return result
        except (RemoteError, ConnectionError) as exc:
            self.notify(str(exc), severity="error", markup=False)
            return None

    def action_edit(self, verb: str) -> None:
        agent = self.selected
        if agent is None:
            return
        if verb == "remove" and not agent.allowlist:
            self.notify("No allowlist entry to remove.", severity="warning")
            return
        self.edit_flow(verb, agent)

    def action_revoke_grant(self) -> None:
        grants = self.agent_grants()
        if not grants:
            self.notify("No grant to revoke.", severity="warning")
            return
        table = self.query_one("#grants", DataTable)
        self.revoke_flow(grants[min(max(table.cursor_row, 0), len(grants) - 1)])

    @work(group="dialog", exit_on_error=False)
    async def revoke_flow(self, grant: dict[str, Any]) -> None:
        patterns = ", ".join(grant.get("patterns") or [])
        body = f"{visible(grant.get('id'))}: {visible(patterns)} ({visible(grant.get('left'))})"
        if not await self.app.push_screen_wait(ConfirmDialog("Revoke grant?", body, yes="Revoke")):
            return
        if await self._request(GrantsRevoke(id=str(grant.get("id")))) is not None:
            self.notify(f"Revoked grant {grant.get('id')}", markup=False)
        self.reload()

    @work(group="dialog", exit_on_error=False)
    async def edit_flow(self, verb: str, agent: AgentPolicy) -> None:
        name = agent.agent_id
        if verb == "add":
            text = await self.app.push_screen_wait(
                TextDialog(
                    f"Add allowlist pattern for {visible(name)}",
                    placeholder="/usr/bin/git   or   ~/bin/*   [ :: argPattern regex]",
                )
            )
            if not text:
                return
            pattern, _, arg = (p.strip() for p in text.partition("::"))
            added = await self._request(AllowlistAdd(agent_id=name, pattern=pattern, arg_pattern=arg or None))
            if added and added.get("pattern") != pattern:
                self.notify(f"{pattern} resolved to {added.get('pattern')}", markup=False)
            for warning in (added or {}).get("warnings") or []:  # e.g. a file the agent can write
                self.notify(visible(str(warning)), severity="warning", markup=False, timeout=15)
        elif verb == "remove":
            allow = self.query_one("#allowlist", DataTable)
            entry = agent.allowlist[min(max(allow.cursor_row, 0), len(agent.allowlist) - 1)]
            body = f"{visible(name)}: {visible(entry['pattern'])}"
            confirm = ConfirmDialog("Remove allowlist entry?", body, yes="Remove")
            if not await self.app.push_screen_wait(confirm):
                return
            await self._request(AllowlistRemove(agent_id=name, pattern=entry["pattern"]))
        elif verb == "check":
            command = await self.app.push_screen_wait(
                TextDialog(f"Check a command as {visible(name)}", placeholder="ls -la | wc -l")
            )
            if command:
                self.check_command(name, command)
            return
        self.reload()

    @work(group="policy-check", exclusive=True, exit_on_error=False)
    async def check_command(self, agent: str, command: str) -> None:
        query = PolicyCheck(command=command, agent_id=agent, session_key=f"agent:{agent}")
        try:
            res = await self.app.link.request(query)  # type: ignore[attr-defined]
        except (RemoteError, ConnectionError) as exc:
            self.show_check(Text(str(exc), style="red"))
            return
        verdict = str(res.get("decision", "?"))
        style = {"allow": "bold green", "ask": "bold yellow", "deny": "bold red"}.get(verdict, "bold")
        out = Text.assemble(
            ("$ ", "dim"), visible(command), "\n", (verdict, style), f"  {visible(res.get('reason', ''))}"
        )
        step = res.get("decidedBy") or {}
        if step:
            out.append(
                f"\ndecided by {step.get('layer')}: {step.get('key')} = {step.get('value')}", style="dim"
            )
        self.show_check(out)
