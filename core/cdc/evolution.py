"""Schema drift, as pure functions: a source's after-images grow or lose fields over time.

A field the declaration does not know becomes a nullable mirror column, typed from its first
non-null JSON value. A declared field that stops arriving is stored as NULL. Evolved columns live in
the mirror's Iceberg schema, which is where a restarted ingest reads them back from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lakemv.catalog.declarations import IDENTIFIER, Column, SourceTable
from lakemv.core.types import TIME_COMMENT, column_type_of

_IDENTIFIER = re.compile(IDENTIFIER)


@dataclass(frozen=True)
class TypedSample:
    """A new field's first value with the type its message's Connect schema names (a decimal with
    its precision and scale, a timestamp, date or time with its encoding): typed as it says."""

    value: Any
    type: str
    encoding: str | None = None
    precision: int | None = None
    scale: int | None = None


def infer_column(name: str, value: Any) -> Column | str:
    """The column a new after-image field becomes, or the reason it cannot become one."""
    if not _IDENTIFIER.match(name):
        return f"field {name!r} is not a lower-case identifier ({IDENTIFIER}); declare it to keep it"
    if isinstance(value, TypedSample):
        if value.type == "decimal":
            scale = max(0, value.scale or 0)
            return Column(name=name, type="decimal", precision=max(value.precision or 38, scale, 1), scale=scale)
        return Column(name=name, type=value.type, encoding=value.encoding)  # type: ignore[arg-type]
    if isinstance(value, bool):
        return Column(name=name, type="boolean")
    if isinstance(value, int):
        return Column(name=name, type="bigint")
    if isinstance(value, float):
        return Column(name=name, type="double")
    if isinstance(value, str):
        return Column(name=name, type="string")
    if value is None:
        return f"field {name!r} has only NULL values so far; it becomes a column when a value arrives"
    return f"field {name!r} holds a {type(value).__name__}, not a scalar; declare it to keep it"


def with_columns(source: SourceTable, columns: Iterable[Column]) -> SourceTable:
    """`source` with `columns` appended (those it already has are skipped)."""
    known = set(source.column_names)
    added = tuple(c for c in columns if c.name not in known)
    return source if not added else source.model_copy(update={"columns": (*source.columns, *added)})


def _declared(spark_simple: str) -> str | None:
    """The declared type of a mirror column by its Spark simple type, or TIME_COMMENT for a STRING that
    holds times of day (lakemv.spark.mirror reads the column's comment)."""
    return column_type_of(spark_simple, None) if spark_simple != TIME_COMMENT else "time"


def mirror_columns(source: SourceTable, schema: Iterable[tuple[str, str]], bookkeeping: Iterable[str]) -> SourceTable:
    """`source` plus the columns its mirror gained by evolution (`schema`: (name, Spark simple type))."""
    skip = set(source.column_names) | set(bookkeeping)
    found = [
        Column(name=n, type=t) if t.startswith("decimal(") else Column(name=n, type=kind)  # type: ignore[arg-type]
        for n, t in schema
        if n not in skip and (t.startswith("decimal(") or (kind := _declared(t)) is not None)
    ]
    return with_columns(source, found)
