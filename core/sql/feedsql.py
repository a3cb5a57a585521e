"""Every view's change feed in one Iceberg table, and each view's read path of it (pure: pyarrow, sqlglot).

Iceberg commits one table at a time, so a feed table per view cost a commit per view per batch. All
views' feed rows go into one table, `<catalog>.lakemv.changes`, in one append per unit: a data file
per view, all of them in the same commit, whose summary names the views it holds (`VIEWS_PROPERTY`).

Its columns: `view`, `op` ('upsert' or 'delete'), `batch_id`, `source_position`, `changed_at`, and per
view a struct column `v_<view>` (`feed_column`) holding the view's key columns and its `row` (the
view's row, NULL on delete). A view's data file has only the shared columns and its own struct:
Iceberg readers (Spark, DuckDB, pyiceberg) read the columns a file lacks as NULL.

A view's feed keeps the columns a table of its own had (key columns, `op`, `row`, `batch_id`,
`source_position`, `changed_at`): `<catalog>.views.<view>__changes` is an Iceberg view over the
table (`feed_view_sql`), and lakemv's DuckDB connection defines the same one. A view whose columns
change drops its struct column and adds it again: the new column has a new field id, so the rows of
the old shape read NULL and leave the view's read path (`v_<view> IS NOT NULL`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

FEEDS = "changes"  # in lakemv's own namespace, beside the ledger and the dead letters
VIEWS_PROPERTY = "lakemv.feed.views"  # a feed commit's summary: the views whose rows it holds, comma-separated
ROW = "row"
_TS = pa.timestamp("us", tz="UTC")
# The columns every view's feed rows fill, in the table's order (the views' struct columns follow).
SHARED = pa.schema([("view", pa.string()), ("op", pa.string()), ("batch_id", pa.int64()), ("source_position", pa.int64()), ("changed_at", _TS)])
# The columns of a view's feed as its readers see them, after its key columns.
FEED_COLUMNS = ("op", ROW, "batch_id", "source_position", "changed_at")


def feed_column(view: str) -> str:
    """The struct column of `view`'s feed rows."""
    return f"v_{view}"


def views_of(summary: Mapping[str, str] | None) -> frozenset[str]:
    """The views a feed commit holds rows of, from its snapshot summary."""
    text = (summary or {}).get(VIEWS_PROPERTY) or ""
    return frozenset(v for v in text.split(",") if v)


def views_property(views: Iterable[str]) -> str:
    return ",".join(sorted(set(views)))


def feed_part(
    view: str, plan_columns: Sequence[str], key_names: Sequence[str], diff: pa.Table, batch_id: int | None, position: int | None,
    now_micros: int, op_column: str,
) -> pa.Table:  # fmt: skip
    """One view's feed rows of a diff (its recomputed rows with `op_column` 'upsert' or 'delete'), as
    its data file of the shared table holds them: the shared columns, then its struct column."""
    count = diff.num_rows
    deleted = pc.equal(diff.column(op_column), "delete").combine_chunks()
    row = pa.StructArray.from_arrays([diff.column(c).combine_chunks() for c in plan_columns], names=list(plan_columns), mask=deleted)
    keys = [diff.column(k).combine_chunks() for k in key_names]
    struct = pa.StructArray.from_arrays([*keys, row], names=[*key_names, ROW])
    per_batch = {"view": view, "batch_id": batch_id, "source_position": position, "changed_at": now_micros}
    columns: dict[str, pa.Array] = {}
    for field in SHARED:
        columns[field.name] = diff.column(op_column) if field.name == "op" else pa.array([per_batch[field.name]] * count, field.type)
    columns[feed_column(view)] = struct
    return pa.table(columns)


def _name(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _shared(name: str) -> exp.Column:
    return exp.Column(this=_name(name), table=exp.to_identifier("f"))


def feed_view_select(view: str, key_names: Sequence[str], feeds_table: exp.Expression) -> exp.Select:
    """A view's feed over the shared table `feeds_table` (a table or a scan): its key columns, `op`,
    `row`, `batch_id`, `source_position`, `changed_at`, for the rows of its current struct column."""
    struct = exp.Column(this=_name(feed_column(view)), table=exp.to_identifier("f"))

    def field(name: str) -> exp.Expression:
        return exp.Dot(this=struct.copy(), expression=_name(name))

    columns: list[exp.Expression] = [exp.alias_(field(k), _name(k)) for k in key_names]
    for name in FEED_COLUMNS:
        columns.append(exp.alias_(field(ROW) if name == ROW else _shared(name), _name(name)))
    if not isinstance(feeds_table, exp.Table | exp.Subquery):
        raise TypeError(f"not a table or a subquery: {feeds_table!r}")
    source = feeds_table.copy()
    source.set("alias", exp.TableAlias(this=exp.to_identifier("f")))
    where = exp.and_(exp.EQ(this=_shared("view"), expression=exp.Literal.string(view)), exp.Not(this=exp.Is(this=struct.copy(), expression=exp.Null())))
    return exp.select(*columns).from_(source).where(where)


def feed_view_sql(view: str, key_names: Sequence[str], feeds_table: str, dialect: str = "spark") -> str:
    """`feed_view_select` over the table named `feeds_table`, as SQL of `dialect`."""
    return feed_view_select(view, key_names, exp.to_table(feeds_table, dialect=dialect)).sql(dialect=dialect)


def feed_insert_sql(
    view: str, plan_columns: Sequence[str], key_names: Sequence[str], feeds_table: str, diff: str, op_column: str,
    batch_id: int | None, position: int | None,
) -> str:  # fmt: skip
    """Spark SQL appending a diff (relation `diff`, `op_column` 'upsert' or 'delete') to the shared
    table as `view`'s feed rows: its columns by name, the other views' struct columns left NULL."""
    op = exp.column(op_column, table="s")

    def source(name: str) -> exp.Column:
        return exp.Column(this=_name(name), table=exp.to_identifier("s"))

    def number(value: int | None) -> exp.Expression:
        return exp.cast(exp.Null() if value is None else exp.Literal.number(int(value)), "BIGINT")

    upsert = exp.EQ(this=op.copy(), expression=exp.Literal.string("upsert"))
    row = exp.Case().when(upsert, exp.Struct(expressions=[exp.alias_(source(c), _name(c)) for c in plan_columns]))
    struct = exp.Struct(expressions=[*(exp.alias_(source(k), _name(k)) for k in key_names), exp.alias_(row, _name(ROW))])
    values = {
        "view": exp.Literal.string(view),
        "op": op,
        "batch_id": number(batch_id),
        "source_position": number(position),
        "changed_at": exp.CurrentTimestamp(),
    }
    select = exp.select(*(exp.alias_(values[f.name], _name(f.name)) for f in SHARED), exp.alias_(struct, _name(feed_column(view))))
    select = select.from_(exp.to_table(diff, dialect="spark").as_("s"))
    target = exp.Schema(
        this=exp.to_table(feeds_table, dialect="spark"),
        expressions=[*(_name(f.name) for f in SHARED), _name(feed_column(view))],
    )
    return exp.insert(select, target).sql(dialect="spark")
