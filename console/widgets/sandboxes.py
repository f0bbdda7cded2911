"""The sandboxes pane: containers here and on every connected node (node column) with status, image, age, idle
and config match; recreate, prune, explain act where the selected row lives."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from console.dialogs import ConfirmDialog
from console.text import plain
from console.widgets.listpane import ListPane
from engine.protocol.requests import SandboxExplain, SandboxList, SandboxPrune, SandboxRecreate


def compact(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = int(ms) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _plain(value: Any) -> Text:
    # Session keys come from agents: render them as inert text, never as markup or escapes.
    return plain(value)


EMPTY = Text(
    "No sandbox runtimes found. Sandboxes are off unless config.toml turns them on:\n"
    '  [agents.defaults.sandbox]\n  mode = "all"        # or "non-main"\n'
    "then `exechost sandbox setup` builds the default image; the next host=sandbox command "
    "creates its container here (e to explain an agent's settings).",
    style="dim",
)


def _cells(r: dict[str, Any]) -> list[Any]:
    if r.get("running"):
        status = Text("● running", style="green")
    else:
        status = Text("○ stopped" if r.get("exists") else "○ missing", style="dim")
    image = _plain(r.get("image", ""))
    if not r.get("imageMatch"):
        image.append(" ⚠ mismatch", style="yellow")
    config = Text("✓", style="green") if r.get("configMatch") else Text("⚠ recreate", style="yellow")
    return [
        _plain(r.get("node") or "local"),
        _plain(r.get("containerName", "")),
        status,
        image,
        config,
        compact(r.get("ageMs")),
        compact(r.get("idleMs")),
        _plain(r.get("sessionKey", "")),
    ]


class SandboxesPane(ListPane):
    """Talks to the gateway through `app.link` (sandbox.list|explain|recreate|prune)."""

    TABLE_ID = "sandbox-list"
    DETAIL_ID = "sandbox-detail"
    HINT = "r refresh · e explain · x recreate · p prune"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh_list", "Refresh"),
        Binding("e", "explain", "Explain"),
        Binding("x", "recreate", "Recreate"),
        Binding("p", "prune", "Prune"),
    ]

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="sandbox-list", cursor_type="row", zebra_stripes=True)
        table.add_columns("node", "container", "status", "image", "config", "age", "idle", "session")
        yield table
        yield Static(self.HINT, id="sandbox-detail")

    def progress(self, container_name: str, message: str) -> None:
        """`sandbox.progress` from the gateway while a container is created: shown in the detail line;
        once it runs, the list is re-read so the new row appears."""
        line = Text("⏳ ", style="yellow")
        line.append_text(_plain(container_name))
        line.append(": ")
        line.append_text(_plain(message))
        if message in ("container started", "starting stopped container") or message.startswith("running"):
            self._detail_for_now(line)  # done: the row shows it from now on; the line must not linger
            self.action_refresh_list()
        else:
            self._detail(line)

    def show(self, rows: list[dict[str, Any]]) -> None:
        self.fill(rows, _cells, EMPTY)

    @work(group="sandbox-list", exclusive=True, exit_on_error=False)
    async def action_refresh_list(self) -> None:
        try:
            res = await self._request(SandboxList())
        except Exception as exc:
            self._detail(Text(f"sandboxes unavailable: {exc}", style="red"))
            return
        self.show(list(res.get("containers", [])))
        errors = res.get("errors") or []
        if errors:  # a node (or the local Docker) that could not answer: say which, keep the rest
            line = Text("⚠ ", style="yellow")
            line.append_text(
                _plain("; ".join(f"{e.get('node') or 'local'}: {e.get('error')}" for e in errors))
            )
            self._detail(line)

    @work(group="sandbox-action", exclusive=True, exit_on_error=False)
    async def action_explain(self) -> None:
        row = self.selected
        query = SandboxExplain()
        if row is not None:
            agent, key = row.get("agentId") or "main", row.get("sessionKey")
            query = SandboxExplain(agent_id=agent, session_key=key, node=row.get("node") or None)
        try:
            info = await self._request(query)
        except Exception as exc:
            self._detail(Text(f"explain failed: {exc}", style="red"))
            return
        d = info.get("docker", {})
        out = Text()
        out.append(f"{info.get('containerName')}  ", style="bold")
        out.append(f"runtime={info.get('runtime')} mode={info.get('mode')} scope={info.get('scope')} ")
        out.append(f"access={info.get('workspaceAccess')}\n")
        out.append(f"image={d.get('image')} network={d.get('network')} readOnlyRoot={d.get('readOnlyRoot')} ")
        out.append(f"capDrop={','.join(d.get('capDrop') or [])} pidsLimit={d.get('pidsLimit')}\n")
        out.append(f"workspace {info.get('workspaceDir')} → {d.get('workdir')}")
        for problem in info.get("problems") or []:
            out.append(f"\n✗ {problem}", style="red")
        self._detail(out)

    @work(group="sandbox-action", exclusive=True, exit_on_error=False)
    async def action_recreate(self) -> None:
        row = self.selected
        if row is None:
            return
        name = str(row["containerName"])
        ok = await self.app.push_screen_wait(
            ConfirmDialog(
                "Recreate sandbox",
                _plain(f"Stop and remove {name}? It is recreated with the current config on next use."),
                yes="Remove",
            )
        )
        if not ok:
            return
        try:
            res = await self._request(SandboxRecreate(container_name=name, node=row.get("node") or None))
        except Exception as exc:
            self._detail(Text(f"recreate failed: {exc}", style="red"))
            return
        removed = res.get("removed") or []
        self._detail(Text(f"✓ Removed {name}" if removed else f"✗ Failed to remove {name}"))
        self.action_refresh_list()

    @work(group="sandbox-action", exclusive=True, exit_on_error=False)
    async def action_prune(self) -> None:
        """Prunes where the selected row lives (this machine when nothing, or a local row, is selected)."""
        row = self.selected
        node = row.get("node") if row is not None else None
        try:
            res = await self._request(SandboxPrune(node=node or None))
        except Exception as exc:
            self._detail(Text(f"prune failed: {exc}", style="red"))
            return
        removed = res.get("removed") or []
        where = f" on node {node}" if node else ""
        text = f"Pruned {len(removed)} runtime(s){where}." + (f" ({', '.join(removed)})" if removed else "")
        self._detail(_plain(text))
        self.action_refresh_list()
