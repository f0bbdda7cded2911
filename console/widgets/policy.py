"""The policy pane: effective policy per agent and the layer that set each value; allowlist editor."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from console.text import plain
from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config
from engine.policy.precedence import PolicyError, SessionOverrides, resolve_policy


@dataclass
class AgentPolicy:
    agent_id: str
    policy: dict[str, Any]
    trail: list[dict[str, str]]
    allowlist: list[dict[str, Any]]
    error: str | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_policies(config_path: str | None, overrides: dict[str, SessionOverrides]) -> list[AgentPolicy]:
    """Blocking (config + approvals file): run it in a thread worker."""
    config = load_config(config_path)
    store = ApprovalsStore()
    approvals = store.load()
    agent_ids = list(dict.fromkeys(["main", *config.agents, *(a for a in approvals.agents if a != "*")]))
    out: list[AgentPolicy] = []
    for agent_id in agent_ids:
        file_policy = approvals.agent(agent_id)
        allowlist = [
            {
                "pattern": r.pattern,
                "argPattern": r.arg_pattern,
                "lastUsedAt": r.last_used_at,
                "lastUsedCommand": r.last_used_command,
                "source": r.source,
            }
            for r in file_policy.allowlist
        ]
        mine = {k: vars(v) for k, v in overrides.items() if k in (f"agent:{agent_id}", agent_id)}
        override = overrides.get(f"agent:{agent_id}")
        try:
            policy = resolve_policy(
                config,
                agent_id,
                None,
                override,
                file_policy,
                False,
                file_defaults=approvals.defaults,
                session_key=f"agent:{agent_id}",
            )
        except PolicyError as exc:
            out.append(AgentPolicy(agent_id, {}, [], allowlist, error=str(exc), overrides=mine))
            continue
        out.append(
            AgentPolicy(
                agent_id,
                {
                    "host": policy.host,
                    "security": policy.security,
                    "ask": policy.ask,
                    "askFallback": policy.ask_fallback,
                    "elevated": policy.elevated,
                    "node": policy.node,
                    "direct": policy.direct,
                },
                [step.to_json() for step in policy.trail],
                allowlist,
                overrides=mine,
            )
        )
    return out


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
            *(
                plain(x)
                for x in (step.get("key", ""), step.get("value", ""), f"← {step.get('layer', '')}")
            )
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
    ]

    class Edit(Message):
        def __init__(self, verb: str, agent_id: str, pattern: str | None = None) -> None:
            super().__init__()
            self.verb = verb
            self.agent_id = agent_id
            self.pattern = pattern

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.agents: list[AgentPolicy] = []

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="agent-list", cursor_type="row")
        table.add_columns("agent", "host", "security", "ask", "fallback")
        yield table
        with Vertical(id="policy-view"):
            yield Static(id="policy-detail")
            allow: DataTable[Any] = DataTable(id="allowlist", cursor_type="row", zebra_stripes=True)
            allow.add_columns("pattern", "argPattern", "last used", "last command")
            yield allow
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
            allow.add_row(
                plain(entry["pattern"]),
                plain(entry.get("argPattern") or ""),
                fmt_ms(entry.get("lastUsedAt")),
                plain(str(entry.get("lastUsedCommand") or "")[:60]),
            )

    def show_check(self, renderable: RenderableType) -> None:
        self.query_one("#policy-check", Static).update(renderable)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "agent-list":
            event.stop()
            self._detail()

    def action_edit(self, verb: str) -> None:
        agent = self.selected
        if agent is None:
            return
        pattern = None
        if verb == "remove":
            allow = self.query_one("#allowlist", DataTable)
            if not agent.allowlist:
                self.notify("No allowlist entry to remove.", severity="warning")
                return
            pattern = agent.allowlist[min(max(allow.cursor_row, 0), len(agent.allowlist) - 1)]["pattern"]
        self.post_message(self.Edit(verb, agent.agent_id, pattern))
