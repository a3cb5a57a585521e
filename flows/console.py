"""The one console lakemv prints through, and the rendering of query results for humans and machines."""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from lakemv.core.values import plain

if TYPE_CHECKING:
    import pyarrow as pa

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def error_line(label: str, message: str, style: str = "red") -> Text:
    """`label` in `style`, then `message` as it is, credentials masked: a path or name holding `[/x]`
    is text, never markup."""
    from lakemv.core.errors import redact

    return Text.assemble((label, style), " ", redact(message))


def render(result: pa.Table, fmt: str) -> str:
    """Render a query result as `table` (rich), `json` (one object per line) or `csv`."""
    rows = result.to_pylist()
    if fmt == "json":
        return "\n".join(json.dumps(plain(row), ensure_ascii=False) for row in rows)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.column_names)
        for row in rows:
            writer.writerow([json.dumps(v) if isinstance(v, (list, dict)) else v for v in (plain(x) for x in row.values())])
        return buffer.getvalue().rstrip("\n")
    table = Table(*(escape(name) for name in result.column_names), caption=f"{result.num_rows} rows")
    for row in rows:  # Text(): data is shown as is, never read as rich markup
        table.add_row(*(Text("NULL", style="dim") if v is None else Text(str(plain(v))) for v in row.values()))
    with console.capture() as captured:
        console.print(table)
    return captured.get().rstrip("\n")
