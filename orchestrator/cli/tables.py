"""Tables that fit the terminal without cutting a word (rich is imported only when one is made).

rich narrows a table that is wider than the terminal by shrinking its widest columns, past the
longest word of a cell: ``leader/sharded/cpu`` comes out as ``leader/sharded/c`` over ``pu``,
or as ``slurmlab…``. :class:`FittedTable` narrows the widest column first, a column at a time,
but none below its longest word (so short columns stay on one line); when even the longest
words do not fit side by side, it prints each row as a block of ``column: value`` lines instead,
wrapped at the terminal's width. String cells and titles are shown as they are, never parsed
as markup, their control characters written out (:func:`~sporch.orchestrator.cli.terminal.visible`).
"""

from __future__ import annotations

from typing import Any, Optional

from sporch.orchestrator.cli.terminal import visible, wrapped

#: Where a row's values start in the one-block-per-row form (under the first column's value).
BLOCK_INDENT = 2


def fitted_table(*args: Any, title: Optional[Any] = None, **kwargs: Any) -> Any:
    """A FittedTable (rich's Table arguments); a string title is shown as it is."""
    from rich.text import Text

    if isinstance(title, str):
        title = Text(visible(title, one_line=True), style="table.title")
    return _table_class()(*args, title=title, **kwargs)


def _table_class() -> type:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    def plain_cells(cells: tuple) -> list[Any]:
        return [Text(visible(c, one_line=True)) if isinstance(c, str) else c for c in cells]

    class FittedTable(Table):
        """A rich Table that never breaks a word to fit (see the module's docstring)."""

        def add_row(self, *cells: Any, **kw: Any) -> None:
            super().add_row(*plain_cells(cells), **kw)

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            side_by_side, widths = self._fit_widths(console, options)
            if not side_by_side:
                yield from self._fit_blocks(console, options)
                return
            kept = [c.width for c in self.columns]
            try:
                if widths is not None:
                    for column, width in zip(self.columns, widths):
                        column.width = width
                yield from super().__rich_console__(console, options)
            finally:
                for column, width in zip(self.columns, kept):
                    column.width = width

        # -- widths ---------------------------------------------------------------------------------
        def _fit_pad(self, index: int) -> int:
            _, right, _, left = self.padding
            if not self.pad_edge:
                left = 0 if index == 0 else left
                right = 0 if index == len(self.columns) - 1 else right
            return left + right

        def _fit_frame(self) -> int:
            """Columns the borders take."""
            return ((2 if self.show_edge else 0) + len(self.columns) - 1) if self.box else 0

        def _fit_measure(self, console: Console, options: ConsoleOptions, index: int) -> tuple[int, int]:
            """(longest word, whole widest cell) of a column, its padding included."""
            column, pad = self.columns[index], self._fit_pad(index)
            if column.width is not None:
                return column.width + pad, column.width + pad
            low = high = 1
            for cell in [column.header, *column.cells]:
                m = Measurement.get(console, options, cell)
                low, high = max(low, m.maximum if column.no_wrap else m.minimum), max(high, m.maximum)
            if column.min_width is not None:
                low, high = max(low, column.min_width), max(high, column.min_width)
            return low + pad, max(low, high) + pad

        def _fit_widths(self, console: Console, options: ConsoleOptions) -> tuple[bool, Optional[list[int]]]:
            """(whether the columns' longest words fit side by side, each column's width without
            its padding -- None when the table fits whole and rich lays it out itself)."""
            if not self.columns:
                return True, None
            space = options.max_width - self._fit_frame()
            sizes = [self._fit_measure(console, options, i) for i in range(len(self.columns))]
            lows, highs = [lo for lo, _ in sizes], [hi for _, hi in sizes]
            if sum(highs) <= space:
                return True, None
            if sum(lows) > space:
                return False, None
            widths = list(highs)  # the widest column gives up a column at a time, none below its longest word
            for _ in range(sum(widths) - space):
                i = max((i for i, w in enumerate(widths) if w > lows[i]), key=lambda i: (widths[i], i))
                widths[i] -= 1
            return True, [w - self._fit_pad(i) for i, w in enumerate(widths)]

        # -- one block per row ----------------------------------------------------------------------
        def _fit_blocks(self, console: Console, options: ConsoleOptions) -> RenderResult:
            width = options.max_width

            def text(cell: Any) -> str:
                return " ".join(cell.plain.split()) if isinstance(cell, Text) else " ".join(str(cell).split())

            if self.title:
                yield Text(wrapped(text(self.title), width), style="table.title")
            headers = [text(c.header) for c in self.columns]
            columns = [list(c.cells) for c in self.columns]
            for row in range(self.row_count):
                values = [text(cells[row]) if row < len(cells) else "" for cells in columns]
                yield Text(wrapped(f"{headers[0]}: {values[0]}" if headers[0] else values[0], width, BLOCK_INDENT),
                           style="bold")
                for header, value in zip(headers[1:], values[1:]):
                    line = " " * BLOCK_INDENT + (f"{header}: {value}" if header else value)
                    yield Text(wrapped(line, width, 2 * BLOCK_INDENT))
            if self.caption:
                yield Text(wrapped(text(self.caption), width))

    return FittedTable
