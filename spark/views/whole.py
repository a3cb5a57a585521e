"""A view recomputed whole by Spark and diffed against the local state's digests.

The view's SQL runs over the mirrors, as a full recompute does, each row with its digest (the text the
state stores for it, `lakemv.spark.batch.sync.digest_sql`; a digest covers the key). One pass matches
every row's digest against the state's, broadcast with each stored row's number: a row whose digest
the state holds comes back as that number alone, any other row whole (new or changed content). In the
driver, the stored rows no number came back for are the changed and the gone ones; a number that came
back twice, or a changed row whose key also matched, is a key with several rows (left alone, as the
incremental diff leaves them). From there the write is the incremental one's: the changed rows' feed
rows, a direct commit deleting the rows they replace by position, and their digests into the state.

No stored row is read, no key of the view table either: the state holds every row's key and digest.
Nothing is shuffled beyond the view's own SQL, nothing is materialised, no MERGE reads the table, and
the state is not reloaded after. A view whose rows settle is diffed against its table's rows instead:
the state drops settled rows' digests.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from lakemv.core.batch.result import ViewResult
from lakemv.core.sql.quote import q
from lakemv.core.sql.viewsql import recompute_sql
from lakemv.core.state.codec import Values, rows_of
from lakemv.core.state.places import key_blob, key_of
from lakemv.spark.batch.sync import DIGEST, digest_sql

if TYPE_CHECKING:
    from lakemv.spark.views.indexed import IndexedView
    from lakemv.spark.views.maintain import Writing

_AT = "_lmv_at"  # the number of the stored row whose digest a new row has (NULL: none has it)


class Changed(NamedTuple):
    """What a whole recompute found: the rows the state does not hold as they are (with their digests),
    the keys to diff (theirs, then the gone ones), the keys with several rows whose other rows `rows`
    leaves out (they matched the state; `IndexedView.diff_rows` finds those repeated within `rows`),
    and the stored digest of each key to diff that the state holds."""

    rows: pa.Table
    keys: list[Values]
    duplicated: set[Values]
    stored: dict[Values, str]


def changed_rows(view: IndexedView) -> Changed:
    """Recompute the view whole and compare it with the state (see the module docstring)."""
    spark, plan = view.spark, view.plan
    blobs, digests = view.store.stored_keys(plan.name)
    stored = f"_lmv_{plan.name}_digests"
    numbered = pa.table({DIGEST: pa.array(digests, pa.string()), _AT: pa.array(range(len(digests)), pa.int32())})
    spark.createDataFrame(numbered).createOrReplaceTempView(stored)
    body = recompute_sql(plan, view.maintainer.live, None, view.maintainer.watermarks)
    new = f"SELECT b.*, {digest_sql(list(plan.columns), 'b')} AS {DIGEST} FROM ({body}) AS b"
    kept = ", ".join(f"IF(s.{_AT} IS NULL, n.{q(c)}, NULL) AS {q(c)}" for c in [*plan.columns, DIGEST])
    sql = f"SELECT /*+ BROADCAST(s) */ {kept}, s.{_AT} FROM ({new}) AS n LEFT JOIN {stored} AS s ON s.{DIGEST} = n.{DIGEST}"
    try:
        found = spark.sql(sql).toArrow()
    finally:
        spark.catalog.dropTempView(stored)
    at = found.column(_AT)
    rows = found.filter(pc.is_null(at)).drop_columns([_AT])
    keys = rows_of(rows, plan.key_names)
    flags = [pa.types.is_boolean(found.schema.field(k).type) for k in plan.key_names]
    counts = pc.value_counts(at.drop_null())
    matched = counts.field("values")
    twice = pc.filter(matched, pc.greater(counts.field("counts"), 1))
    duplicated = {_key(blobs[i], flags) for i in twice.to_pylist()}
    # where each changed row's key was stored; one whose stored row matched another new row has several rows
    was = pc.index_in(pa.array([key_blob(k) for k in keys], pa.binary()), value_set=pa.array(blobs, pa.binary()))
    duplicated |= {k for k, also in zip(keys, pc.is_in(was, value_set=matched).to_pylist(), strict=True) if also}
    numbers = numbered.column(_AT)
    unmatched = pc.filter(numbers, pc.invert(pc.is_in(numbers, value_set=pa.concat_arrays([matched, was.drop_null().cast(pa.int32())]))))
    left = unmatched.to_pylist()
    gone = [_key(blobs[i], flags) for i in left]
    stored = {k: digests[i] for k, i in zip(keys, was.to_pylist(), strict=True) if i is not None}
    stored.update((k, digests[i]) for k, i in zip(gone, left, strict=True))
    return Changed(rows, keys + gone, duplicated, stored)


def _key(blob: bytes, flags: list[bool]) -> Values:
    """A stored key as the view's rows give it: `flags` marks its boolean columns (the encoding keeps
    booleans as integers)."""
    return tuple(bool(v) if flag and v is not None else v for v, flag in zip(key_of(blob), flags, strict=True))


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
    changed = changed_rows(view)
    steps["recompute"] = time.perf_counter() - clock
    clock = time.perf_counter()
    diff = view.diff_rows(changed.rows, changed.keys, changed.duplicated, changed.stored)
    steps["diff"] = time.perf_counter() - clock
    return view.write(diff, writing)
