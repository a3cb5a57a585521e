"""`verify`: DuckDB recomputes a view from the mirrors on its own and diffs it with the view table by key.

The second, independent engine that proves the incremental result: the view's Spark SQL is
transpiled to DuckDB with sqlglot, run over the mirrors' live rows (read by DuckDB's iceberg
extension, no Spark), and compared row by row with the view table: matching, mismatching (and which
columns differ), missing from the table, extra in the table, duplicate keys.

Where Spark and DuckDB order differently, the transpiled SQL says Spark's order explicitly:
`array_sort` / `sort_array(collect_list(struct(...)))` sort structs field by field with NULL fields first in Spark
and last in DuckDB, so it becomes `array_agg(struct ORDER BY field NULLS FIRST, ...)`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import duckdb
import sqlglot
from pyiceberg.exceptions import NoSuchTableError
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from lakemv.catalog.declarations import SourceTable, ViewSource
from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import MIRROR_NAMESPACE, VIEW_NAMESPACE
from lakemv.catalog.viewstate import STATE, ViewState
from lakemv.core.errors import LakemvError, QueryError
from lakemv.core.planner import ViewPlan
from lakemv.core.planner.finality import checked_sql
from lakemv.core.sql.quote import ansi_ident
from lakemv.core.types import UTC_MICROS, duckdb_type
from lakemv.duck.query import lake_connection, metadata_location


class ViewMismatch(LakemvError):
    """The view table differs from the view's recompute (the result says where)."""

    def __init__(self, result: VerifyResult):
        super().__init__(result.summary())
        self.result = result


def _spark_array_sort(node: exp.Expression) -> exp.Expression:
    """array_sort / sort_array(collect_list(struct(f1, f2, ...))) with Spark's order: fields ascending,
    NULL fields first (the elements, structs, are never NULL)."""
    if not (isinstance(node, exp.ArraySort) and isinstance(node.this, exp.ArrayAgg)):
        return node
    struct = node.this.this
    descending = isinstance(node.args.get("asc"), exp.Boolean) and node.args["asc"].this is False
    if not isinstance(struct, exp.Struct) or descending or node.args.get("expression") is not None:
        return node  # a descending sort_array, or array_sort with a comparator: left to sqlglot
    fields = [e.expression if isinstance(e, (exp.PropertyEQ, exp.Alias)) else e for e in struct.expressions]
    if not fields:
        return node
    order = exp.Order(
        this=struct.copy(), expressions=[exp.Ordered(this=f.copy(), desc=False, nulls_first=True) for f in fields]
    )
    not_null = exp.Where(this=exp.Not(this=exp.Is(this=struct.copy(), expression=exp.Null())))
    return exp.Filter(this=exp.ArrayAgg(this=order), expression=not_null)


def _spark_empty_lists(node: exp.Expression) -> exp.Expression:
    """collect_list / collect_set of no values is `[]` in Spark, NULL in DuckDB: coalesce to `[]`.

    Applied to the outermost aggregate node (a FILTER made by `_spark_array_sort` included)."""
    if isinstance(node, (exp.ArrayAgg, exp.ArrayUniqueAgg)) and not isinstance(node.parent, exp.Filter):
        return exp.Coalesce(this=node, expressions=[exp.Array(expressions=[])])
    if isinstance(node, exp.Filter) and isinstance(node.this, (exp.ArrayAgg, exp.ArrayUniqueAgg)):
        return exp.Coalesce(this=node, expressions=[exp.Array(expressions=[])])
    return node


def _spark_array_exists(node: exp.Expression) -> exp.Expression:
    """Spark's `exists(array, x -> p)`: TRUE if some element satisfies p, else NULL if p is NULL for
    some element (three-valued, Spark's default), else FALSE; NULL for a NULL array. sqlglot would
    render it as SQL's EXISTS (subquery) and drop the lambda."""
    if not (isinstance(node, exp.Exists) and isinstance(node.expression, exp.Lambda)):
        return node
    array, predicate = node.this, node.expression

    def count(where: exp.Lambda) -> exp.Expression:
        return exp.GT(this=exp.ArraySize(this=exp.ArrayFilter(this=array.copy(), expression=where)), expression=exp.Literal.number(0))

    is_null = exp.Lambda(this=exp.Is(this=exp.Paren(this=predicate.this.copy()), expression=exp.Null()), expressions=[e.copy() for e in predicate.expressions])
    return exp.Case(
        ifs=[
            exp.If(this=exp.Is(this=array.copy(), expression=exp.Null()), true=exp.Null()),
            exp.If(this=count(predicate.copy()), true=exp.true()),
            exp.If(this=count(is_null), true=exp.Null()),
        ],
        default=exp.false(),
    )


def _spark_count_if(node: exp.Expression) -> exp.Expression:
    """Spark's `count_if(p)` counts the rows where p is TRUE: 0 over no rows, where DuckDB's COUNT_IF
    gives NULL. Rendered as `count(CASE WHEN p THEN 1 END)`, which is 0 in both."""
    if not isinstance(node, exp.CountIf):
        return node
    return exp.Count(this=exp.Case(ifs=[exp.If(this=node.this.copy(), true=exp.Literal.number(1))]))


def _spark_epoch_functions(node: exp.Expression) -> exp.Expression:
    """Spark's `timestamp_micros(n)` as DuckDB's `make_timestamp(n)` read as UTC, and `pmod(a, b)` as
    `((a % b) + b) % b` (the window starts of `lakemv.core.planner.timewindows` use both)."""
    if isinstance(node, exp.Anonymous) and node.name.upper() == "TIMESTAMP_MICROS" and len(node.expressions) == 1:
        made = exp.Anonymous(this="make_timestamp", expressions=[node.expressions[0].transform(_spark_epoch_functions)])
        return exp.Cast(this=made, to=exp.DataType.build(duckdb_type(UTC_MICROS)))  # Spark's TIMESTAMP is UTC micros
    if isinstance(node, exp.Anonymous) and node.name.upper() == "PMOD" and len(node.expressions) == 2:
        a, b = (exp.Paren(this=e.transform(_spark_epoch_functions)) for e in node.expressions)
        return exp.Mod(this=exp.Paren(this=exp.Add(this=exp.Mod(this=a, expression=b), expression=b.copy())), expression=b.copy())
    return node


def duckdb_sql(spark_sql: str) -> str:
    """The view's Spark SQL as DuckDB SQL (sqlglot), with Spark's ordering, empty lists, counts
    over no rows and three-valued `exists` made explicit."""
    try:
        tree = sqlglot.parse_one(spark_sql, read="spark")
        tree = tree.transform(_spark_array_exists).transform(_spark_array_sort).transform(_spark_empty_lists).transform(_spark_epoch_functions)
        tree = tree.transform(_spark_count_if)
        return tree.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise QueryError(f"cannot translate the view's SQL to DuckDB: {str(exc).splitlines()[0]}") from None


@dataclass(frozen=True)
class Difference:
    """One key whose row differs: `kind` is mismatch, missing (not in the table) or extra (only there)."""

    kind: str
    key: Mapping[str, object]
    columns: tuple[str, ...] = ()

    def describe(self) -> str:
        key = ", ".join(f"{k}={v!r}" for k, v in self.key.items())
        return f"{self.kind}: {key}" + (f" (differs in {', '.join(self.columns)})" if self.columns else "")


@dataclass(frozen=True)
class VerifyResult:
    """How the view table compares with its independent recompute."""

    view: str
    expected_rows: int
    table_rows: int
    matching: int
    mismatching: int
    missing: int
    extra: int
    duplicate_keys: int
    samples: tuple[Difference, ...] = field(default_factory=tuple)
    seconds: float = 0.0
    not_compared: tuple[str, ...] = ()  # columns left out (enriched as of processing)

    @property
    def ok(self) -> bool:
        return not (self.mismatching or self.missing or self.extra or self.duplicate_keys)

    def summary(self) -> str:
        verdict = "matches its recompute" if self.ok else "differs from its recompute"
        duplicates = f", {self.duplicate_keys} duplicate keys" if self.duplicate_keys else ""
        return (
            f"{self.view} {verdict} (DuckDB): {self.matching} matching, {self.mismatching} mismatching, "
            f"{self.missing} missing, {self.extra} extra{duplicates}; "
            f"{self.table_rows} rows in the table, {self.expected_rows} expected ({self.seconds:.1f}s)"
            + (f"; as of processing, not compared: {', '.join(self.not_compared)}" if self.not_compared else "")
        )



_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")
FLOAT_TOLERANCE = 1e-9  # floating-point values added in another order: equal within this share of the larger (or this much)
_FLOATS = ("DOUBLE", "FLOAT")


def _differ(column: str, expected: str, actual: str) -> str:
    """SQL: the column's values differ. Floating-point values on both sides are equal within
    `FLOAT_TOLERANCE` of the larger (or of 1 near zero; NaN and the infinities equal only themselves): a sum's value depends on the order it adds in,
    which differs between engines and between a full run and a sum kept by deltas. Where the view's
    column is a DECIMAL(p, s) and DuckDB's recompute gives a DOUBLE (DuckDB averages and divides
    decimals in double precision, Spark in decimal, rounding half up to the scale), within half a unit
    of the decimal's last place (and double precision's own error) they are equal."""
    e, a = f"e.{ansi_ident(column)}", f"a.{ansi_ident(column)}"
    differ = f"{e} IS DISTINCT FROM {a}"
    if expected in _FLOATS and actual in _FLOATS:
        near = f"isfinite({e}) AND isfinite({a}) AND abs({e} - {a}) <= {FLOAT_TOLERANCE!r} * greatest(abs({e}), abs({a}), 1.0)"
        return f"({differ} AND NOT coalesce({near}, FALSE))"
    found = _DECIMAL.match(actual)
    if expected not in _FLOATS or found is None:
        return differ
    half = 0.5 * 10 ** -int(found.group(2))
    near = f"abs(e.{ansi_ident(column)} - CAST(a.{ansi_ident(column)} AS DOUBLE)) <= {half!r} + abs(e.{ansi_ident(column)}) * 1e-12"
    return f"({differ} AND NOT coalesce({near}, FALSE))"


def _differences(
    con: duckdb.DuckDBPyConnection, keys: Sequence[str], values: Sequence[str], sample: int
) -> tuple[dict[str, int], list[Difference]]:
    """Counts per kind and up to `sample` differences of each kind, between `expected` and `actual`."""
    on = " AND ".join(f"e.{ansi_ident(k)} IS NOT DISTINCT FROM a.{ansi_ident(k)}" for k in keys)
    types = {side: dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {side})").fetchall()) for side in ("expected", "actual")}
    # bookkeeping columns carry the _lmv_ prefix: a view may well have columns named kind or verdict
    flags = [f"{_differ(c, types['expected'][c], types['actual'][c])} AS {ansi_ident('_lmv_d_' + c)}" for c in values]
    select = ", ".join(
        [f"coalesce(e.{ansi_ident(k)}, a.{ansi_ident(k)}) AS {ansi_ident(k)}" for k in keys]
        + ["CASE WHEN a._lmv_a IS NULL THEN 'missing' WHEN e._lmv_e IS NULL THEN 'extra' ELSE 'compare' END AS _lmv_kind"]
        + flags
    )
    con.execute(
        f"CREATE TEMP TABLE compared AS SELECT {select} FROM (SELECT *, TRUE AS _lmv_e FROM expected) e "
        f"FULL OUTER JOIN (SELECT *, TRUE AS _lmv_a FROM actual) a ON {on}"
    )
    differs = " OR ".join(ansi_ident("_lmv_d_" + c) for c in values) or "FALSE"
    kind = f"CASE WHEN _lmv_kind = 'compare' THEN (CASE WHEN {differs} THEN 'mismatch' ELSE 'match' END) ELSE _lmv_kind END"
    con.execute(f"CREATE TEMP VIEW classified AS SELECT *, {kind} AS _lmv_verdict FROM compared")
    counts = dict(con.execute("SELECT _lmv_verdict, count(*) FROM classified GROUP BY _lmv_verdict").fetchall())
    samples = []
    for verdict in ("mismatch", "missing", "extra"):
        rows = con.execute(
            f"SELECT * FROM classified WHERE _lmv_verdict = '{verdict}' ORDER BY {', '.join(ansi_ident(k) for k in keys)} LIMIT {sample}"
        ).fetchall()
        names = [d[0] for d in con.description]
        for row in rows:
            record = dict(zip(names, row, strict=True))
            columns = tuple(c for c in values if record.get("_lmv_d_" + c)) if verdict == "mismatch" else ()
            samples.append(Difference(verdict, {k: record[k] for k in keys}, columns))
    return counts, samples


def consistent_cut(
    settings: LakeSettings, view: str, tables: Sequence[str], views: Sequence[str] = ()
) -> tuple[int | None, dict[str, int | None] | None] | str:
    """The snapshots at which the view and its mirrors agree by contract: (view snapshot, mirror snapshots).

    `views`: those of `tables` that are views it reads (a batch writes them before it, as it writes
    the mirrors before the views). A batch MERGEs the mirrors before the views, so while ingest runs the current mirrors may be a
    batch ahead of the view. The cut is the view's last content change: its current snapshot, with
    each mirror as of that moment. A view a backfill published and maintain
    has not caught up yet agrees with the mirror snapshots the backfill read; a paused view (a
    backfill running) or one not built yet is not verified: the reason is returned instead.
    """
    catalog = pyiceberg_catalog(settings)
    try:
        table = catalog.load_table((VIEW_NAMESPACE, view))
    except NoSuchTableError:  # e.g. a scheduled verify that runs before the first maintain built it
        return "it has no table yet: the next ingest (maintain) builds it"
    state = ViewState.parse(table.properties.get(STATE))
    if state.state == "paused":
        return f"paused by {state.by}: verify it after the backfill publishes"
    if state.state == "resume":
        return None, dict(state.since)
    # The view's last content change (compaction's `replace` commits change no rows): the mirrors as
    # of that moment are the ones it was computed from, even while a batch is merging mirrors now.
    snapshot = table.current_snapshot()
    while snapshot is not None and snapshot.summary is not None and snapshot.summary.operation.value == "replace":
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    if snapshot is None:
        return None, None
    cut = snapshot.timestamp_ms

    def at(identifier: tuple[str, str]) -> int | None:
        found = catalog.load_table(identifier).snapshot_as_of_timestamp(cut)
        return found.snapshot_id if found else None

    return table.current_snapshot().snapshot_id, {t: at((VIEW_NAMESPACE if t in views else MIRROR_NAMESPACE, t)) for t in tables}


def verify_view(
    settings: LakeSettings,
    sources: Mapping[str, SourceTable | ViewSource],
    view: str,
    spark_sql: str,
    key: Sequence[str],
    *,
    table_snapshot: int | None = None,
    mirror_snapshots: Mapping[str, int | None] | None = None,
    sample: int = 5,
    compare: Sequence[str] | None = None,
) -> VerifyResult:
    """Recompute `view` in DuckDB and diff it with its table, by `key`.

    `compare` narrows the columns compared beyond the key (a view enriched as of processing: its
    tables' columns held what they held then, which no recompute of today's tables can give).

    `table_snapshot` reads the view table at that snapshot (a backfill's branch head), and
    `mirror_snapshots` the mirrors at theirs (the state the backfill computed from).
    """
    started = time.perf_counter()
    location = metadata_location(settings, VIEW_NAMESPACE, view)
    if location is None:
        raise QueryError(f"view {view} has no table yet: run lakemv ingest (it builds new views)")
    con = lake_connection(settings, sources, snapshots=mirror_snapshots, views=False)  # (the view's SQL reads sources only)
    try:
        scan = f"iceberg_scan('{location}'" + (f", snapshot_from_id => {int(table_snapshot)})" if table_snapshot else ")")
        con.execute(f"CREATE TEMP TABLE actual AS SELECT * FROM {scan}")
        translated = duckdb_sql(spark_sql)
        try:
            con.execute(f"CREATE TEMP TABLE expected AS {translated}")
        except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as exc:
            raise QueryError(
                f"cannot verify {view} with DuckDB: sqlglot's translation of its SQL does not run there "
                f"({str(exc).strip().splitlines()[0]}); a construct of it has no DuckDB equivalent yet"
            ) from None
        columns = [r[0] for r in con.execute("DESCRIBE expected").fetchall()]
        present = {r[0] for r in con.execute("DESCRIBE actual").fetchall()}
        missing_columns = [c for c in columns if c not in present]
        if missing_columns:
            raise QueryError(f"view table {view} lacks column(s) {', '.join(missing_columns)}: run lakemv backfill {view}")
        values = [c for c in columns if c not in key and (compare is None or c in compare)]
        keys = ", ".join(ansi_ident(k) for k in key)
        # DISTINCT over the rows (not count(DISTINCT ...), which skips NULLs): a NULL group is one key
        duplicates = con.execute(f"SELECT (SELECT count(*) FROM actual) - (SELECT count(*) FROM (SELECT DISTINCT {keys} FROM actual))").fetchone()[0]
        expected_rows = con.execute("SELECT count(*) FROM expected").fetchone()[0]
        table_rows = con.execute("SELECT count(*) FROM actual").fetchone()[0]
        counts, samples = _differences(con, key, values, sample)
    except duckdb.Error as exc:
        raise QueryError(f"verify {view}: {str(exc).strip().splitlines()[0]}") from None
    finally:
        con.close()
    return VerifyResult(
        view=view,
        expected_rows=int(expected_rows),
        table_rows=int(table_rows),
        matching=int(counts.get("match", 0)),
        mismatching=int(counts.get("mismatch", 0)),
        missing=int(counts.get("missing", 0)),
        extra=int(counts.get("extra", 0)),
        duplicate_keys=int(duplicates),
        samples=tuple(samples),
        seconds=time.perf_counter() - started,
        not_compared=tuple(c for c in columns if c not in key and c not in values),
    )


def verify_plan(settings: LakeSettings, sources: Mapping[str, SourceTable], plan: ViewPlan, sample: int = 5) -> VerifyResult | str:
    """`verify_view` of a planned view at its consistent cut (what `lakemv verify` runs for each view),
    or why it cannot be verified now (`consistent_cut`'s reason)."""
    cut = consistent_cut(settings, plan.name, plan.tables, plan.upstream)
    if isinstance(cut, str):
        return cut
    sources = {**sources, **{v.name: v for v in plan.inputs}}  # (a view it reads: its table as of the cut)
    return verify_view(
        settings, sources, plan.name, checked_sql(plan.definition.sql, plan.finality, sources), plan.key_names,
        table_snapshot=cut[0], mirror_snapshots=cut[1], sample=sample, compare=plan.compared,
    )  # fmt: skip
