"""Arrow values <-> the store's values. Pure.

The store keeps plain Python values: timestamps as epoch microseconds, dates as epoch days, decimals as
their text, the rest as they are; a whole row is one `marshal` blob (exact for every value, NaN and -0.0 included), and
the columns it is looked up by are SQLite columns of their own.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

Values = tuple[Any, ...]


def _plain_type(kind: pa.DataType) -> pa.DataType | None:
    """The Arrow type a column is cast to before it is stored, or None when its values are kept."""
    if pa.types.is_timestamp(kind):
        return pa.int64()
    if pa.types.is_date32(kind):
        return pa.int32()
    if pa.types.is_decimal(kind):  # marshal cannot keep a Decimal: its text, fixed scale, is exact
        return pa.string()
    return None


def columns_of(table: pa.Table, names: Sequence[str]) -> list[list[Any]]:
    """The named columns as lists of store values."""
    lists = []
    for name in names:
        column = table.column(name)
        plain = _plain_type(column.type)
        lists.append((column.cast(plain) if plain is not None else column).to_pylist())
    return lists


def rows_of(table: pa.Table, names: Sequence[str]) -> list[Values]:
    """The rows of `table` as tuples of store values, columns in the order of `names`."""
    if table.num_rows == 0:
        return []
    return list(zip(*columns_of(table, names), strict=True))


class Lazily(Mapping[str, Any]):
    """Per name of `names`, `make(name)`, made when first read (a view that holds a backlog's keys
    without looking for them reads none of a unit's images). Threads may make one twice: the same value."""

    def __init__(self, names: Iterable[str], make: Callable[[str], Any]):
        self._names, self._make, self._made = tuple(names), make, {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._made:
            if name not in self._names:
                raise KeyError(name)
            self._made[name] = self._make(name)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def encode(row: Values) -> bytes:
    return marshal.dumps(row)


def decode(blob: bytes) -> Values:
    return marshal.loads(blob)


def to_arrow(rows: Iterable[Values], schema: pa.Schema) -> pa.Table:
    """Rows of store values (shorter rows padded with NULL: columns added later) as an Arrow table."""
    rows = list(rows)
    width = len(schema)
    columns: list[list[Any]] = [[] for _ in range(width)]
    for row in rows:
        for index in range(width):
            columns[index].append(row[index] if index < len(row) else None)
    arrays = []
    for values, field in zip(columns, schema, strict=True):
        plain = _plain_type(field.type)
        arrays.append(pa.array(values, type=plain).cast(field.type) if plain is not None else pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def index_value(value: Any) -> Any:
    """A value as SQLite compares it: booleans as integers, the rest as they are."""
    return int(value) if isinstance(value, bool) else value
