"""A DataTable whose cells are re-rendered only when their own value changes, not on every cell update."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.style import Style
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, ColumnKey, RowKey

CELL_CACHE_SIZE = 4096


class StableTable(DataTable[Any]):
    """Textual's DataTable keys its caches on a table-wide update counter: one `update_cell` (the runtime
    column ticking each second) throws away every rendered cell, row and line, and the whole visible table
    is rendered again through Rich. Under load that was half the console's CPU. Here `update_cells` writes a
    batch of cells and forgets only the rows they touch, and a rendered body cell is kept as long as the
    same value object sits in it (the sessions list only replaces cells that changed).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (row key, column key, everything Textual's own key holds but the counter) -> (value, lines)
        self._stable_cells: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def clear(self, columns: bool = False) -> Any:
        self._stable_cells.clear()
        return super().clear(columns)

    def update_cells(self, changes: Iterable[tuple[RowKey | str, ColumnKey | str, Any]]) -> None:
        """Write (row key, column key, value) cells; repaint only their rows. Widths stay as they are
        (like `update_cell` without `update_width`)."""
        rows: set[RowKey] = set()
        for row, column, value in changes:
            row_key = RowKey(row) if isinstance(row, str) else row
            column_key = ColumnKey(column) if isinstance(column, str) else column
            if row_key not in self._row_locations or column_key not in self._column_locations:
                raise CellDoesNotExist(f"No cell exists for row_key={row!r}, column_key={column!r}.")
            self._data[row_key][column_key] = value
            rows.add(row_key)
        if not rows:
            return
        self._forget_rows(rows)
        for row_key in rows:
            index = self._row_locations.get(row_key)
            if index is not None:
                self.refresh_row(index)

    def _forget_rows(self, rows: set[RowKey]) -> None:
        """Drop what Textual's caches hold for these rows (each cache is at most a few thousand entries)."""
        indices = {self._row_locations.get(key) for key in rows}
        # (Textual's LRUCache is not iterable itself: its keys() view is.)
        cells, row_lines, renderables = (
            self._cell_render_cache.keys(),
            self._row_render_cache.keys(),
            self._row_renderable_cache.keys(),
        )
        for cell_key in [k for k in cells if k[0] in rows]:
            self._cell_render_cache.discard(cell_key)
        for row_key in [k for k in row_lines if k[0] in rows]:
            self._row_render_cache.discard(row_key)
        for renderable_key in [k for k in renderables if k[1] in indices]:
            self._row_renderable_cache.discard(renderable_key)
        for line in list(self._line_cache.keys()):
            try:
                owner = self._get_offsets(line[0])[0]
            except LookupError:
                continue
            if owner in rows:
                self._line_cache.discard(line)

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        if row_index < 0 or column_index < 0:  # header and label cells: Textual's own path
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        try:
            value = self._data[row_key][column_key]  # type: ignore[index]
        except KeyError:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        key = (
            row_key,
            column_key,
            row_index,  # the rendered cell carries its row index as mouse metadata
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
        )
        hit = self._stable_cells.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if len(self._stable_cells) >= CELL_CACHE_SIZE:
            self._stable_cells.clear()  # rows come and go; starting over is cheaper than tracking age
        self._stable_cells[key] = (value, lines)
        return lines
