"""A view recomputed whole by Spark and diffed against the local state's digests.

The view's SQL runs over the mirrors, as a full recompute does, each row with its digest (the text the
state stores for it, `lakemv.spark.batch.sync.digest_sql`). Only what differs comes back to the driver:
the rows whose digest the state does not hold (new or changed content; a digest covers the key), every
row of a key with several (left alone, as the incremental diff leaves them), and the keys the view
table holds that no row has any more. From there the write is the incremental one's: the changed rows'
feed rows, a direct commit deleting the rows they replace by position, and their digests into the state.

Against a join with the view table's rows (`lakemv.core.sql.viewsql.diff_sql`), no stored row is read
but its key, nothing is materialised, no MERGE reads the table, and the state is not reloaded after.
A view whose rows settle keeps that path: the state drops settled rows' digests.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakemv.core.batch.result import ViewResult
from lakemv.core.sql.quote import q
from lakemv.core.sql.viewsql import recompute_sql
from lakemv.core.state.codec import Values, rows_of
from lakemv.spark.batch.sync import DIGEST, digest_sql

if TYPE_CHECKING:
    from lakemv.spark.views.indexed import IndexedView
    from lakemv.spark.views.maintain import Writing

_ROWS = "_lmv_rows"  # how many new rows the key has
_GONE = "_lmv_gone"  # a key the view holds that has no new row


def changed_rows(view: IndexedView) -> tuple[pa.Table, list[Values]]:
    """The view's recomputed rows the state does not hold as they are, with their digests, and the keys
    to diff: theirs, then those of the view's rows that are gone (see the module docstring)."""
    spark, plan, maintainer = view.spark, view.plan, view.maintainer
    stored = f"_lmv_{plan.name}_digests"
    held = view.store.stored_digests(plan.name)
    spark.createDataFrame(pa.table({DIGEST: pa.array(held, pa.string())})).createOrReplaceTempView(stored)
    record = view.store.record(view.name)
    travel = f" VERSION AS OF {record.snapshot}" if record is not None and record.snapshot is not None else ""
    keys = [q(k) for k in plan.key_names]
    values = [q(c) for c in plan.columns if c not in plan.key_names]
    body = recompute_sql(plan, maintainer.live, None, maintainer.watermarks)
    new = (
        f"SELECT b.*, {digest_sql(list(plan.columns), 'b')} AS {DIGEST}, "
        f"count(*) OVER (PARTITION BY {', '.join(f'b.{k}' for k in keys)}) AS {_ROWS} FROM ({body}) AS b"
    )
    old = f"SELECT DISTINCT {', '.join(keys)} FROM {maintainer.table}{travel}"
    # `=` where no new key can be NULL (the same match): `<=>` would shuffle the new rows again by other expressions
    nullable = {f.name for f in spark.sql(new).schema.fields if f.nullable}
    same = " AND ".join(f"n.{q(k)} {'<=>' if k in nullable else '='} o.{q(k)}" for k in plan.key_names)
    select = [f"coalesce(n.{k}, o.{k}) AS {k}" for k in keys] + [f"n.{c}" for c in values]
    sql = (
        f"SELECT /*+ BROADCAST(s) */ {', '.join(select)}, n.{DIGEST}, n.{_ROWS} IS NULL AS {_GONE} "
        f"FROM ({new}) AS n FULL OUTER JOIN ({old}) AS o ON {same} "
        f"LEFT JOIN {stored} AS s ON s.{DIGEST} = n.{DIGEST} "
        f"WHERE n.{_ROWS} IS NULL OR n.{_ROWS} > 1 OR s.{DIGEST} IS NULL"
    )
    try:
        found = spark.sql(sql).toArrow()
    finally:
        spark.catalog.dropTempView(stored)
    gone = found.column(_GONE)
    rows = found.filter(pc.invert(gone)).drop_columns([_GONE])
    left = rows_of(found.filter(gone), plan.key_names)
    return rows, rows_of(rows, plan.key_names) + left


def write_whole(view: IndexedView, writing: Writing) -> ViewResult:
    """Recompute `view` whole and write what changed (see the module docstring); a view whose rows
    settle is diffed against its table's rows and its digests reloaded after."""
    if view.settle is not None:
        result = view.maintainer.write(None, writing)
        view.sync.reload(view.name)
        if not result.paused:
            view.caught_up()
        return result
    steps = writing.steps
    clock = time.perf_counter()
    new, keys = changed_rows(view)
    steps["recompute"] = time.perf_counter() - clock
    clock = time.perf_counter()
    diff = view.diff_rows(new, keys)
    steps["diff"] = time.perf_counter() - clock
    return view.write(diff, writing)
