"""Quoting for every SQL lakemv writes, and literal key filters for MERGE targets.

One place quotes: `q` and `literal` for Spark SQL (backquoted identifiers; strings with backslash
escapes, as Spark's parser reads them), `ansi_ident` and `ansi_string` for DuckDB, PostgreSQL and SQLite
(double-quoted identifiers; strings with doubled quotes).

`key_filter` builds `t.k IN (...)` lists from the keys a batch touches.

A MERGE's ON clause decides which target rows meet a source row. Adding `t.k IN (<the source's keys>)`
changes nothing about which rows match (a matching row has one of those keys by definition), but it is
a predicate on the target alone, so Spark pushes it into the Iceberg scan and drops every other row
before the join: the join then shuffles the batch's few rows instead of the whole table (measured:
the shuffle of every mirror row was the largest CPU cost of a batch).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

MAX_LITERALS = 20_000  # past this, a batch is large enough to pay for the full join


def literal(value: Any) -> str | None:
    """Spark SQL literal of a key value, or None for a type left unfiltered."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return spark_string(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return f"DATE'{value.isoformat()}'"
    return None


def key_filter(alias: str, columns: Mapping[str, Iterable[Any]]) -> str | None:
    """`alias.c IN (...) AND ...` over each key column whose values all have literals, or None."""
    parts: list[str] = []
    for column, values in columns.items():
        distinct = set(values)
        if not distinct or len(distinct) > MAX_LITERALS:
            return None
        rendered = [literal(v) for v in distinct]
        if any(r is None for r in rendered):
            continue  # NULL or a type without a literal here: that column is not filtered
        parts.append(f"{alias}.{q(column)} IN ({', '.join(sorted(rendered))})")  # type: ignore[arg-type]
    return " AND ".join(parts) or None


def key_columns(rows: pa.Table, names: Sequence[str]) -> dict[str, list[Any]]:
    """{column: values} of the key columns of an Arrow table."""
    return {n: rows.column(n).to_pylist() for n in names}


def q(identifier: str) -> str:
    """Backquote an identifier for Spark SQL."""
    return "`" + identifier.replace("`", "``") + "`"


def spark_string(text: str) -> str:
    """A Spark SQL string literal of any text (backslash escapes: Spark joins adjacent literals, so a
    doubled quote would not be one quote)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ansi_ident(identifier: str) -> str:
    """Double-quote an identifier for DuckDB, PostgreSQL and SQLite."""
    return '"' + identifier.replace('"', '""') + '"'


def ansi_string(text: str) -> str:
    """A string literal for DuckDB, PostgreSQL and SQLite (a quote doubled)."""
    return "'" + text.replace("'", "''") + "'"
