"""Where a batch reads stored rows and how it writes mirrors and views: its backend, chosen once when
the processor is built (`lakemv.spark.batch.runner.choose_backend`).

* `ScanBackend`: every lookup is a Spark scan of the Iceberg tables; mirrors are written by MERGE;
  views by their scan step over the changed rows' images.
* `LocalStateBackend` (`lakemv.spark.batch.local`): lookups in the local indexed state for the tables
  it keeps, mirror writes as direct commits it locates, and the views it serves stepped from it; what
  it does not keep (a UNION ALL view, say) it hands to `ScanBackend`, whose methods it extends.

The processor runs the same steps whichever it holds; no step asks which one it is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED, POSITION, TableNames, mirror_arrow_schema
from lakemv.core.batch.journal import Journal, TablePlan
from lakemv.core.batch.plan import table_plan
from lakemv.core.batch.result import ViewResult
from lakemv.core.cdc.changeset import change_values
from lakemv.core.cdc.effects import CHANGED, SIGN, effect_of
from lakemv.core.planner.dag import levels
from lakemv.core.planner.retention import Need
from lakemv.core.sql.quote import q
from lakemv.core.state.store import Store
from lakemv.spark.batch.sync import SyncReport
from lakemv.spark.commits import WriteUnit, append_once
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.mirror import matching_rows, merge_changes, stored_rows
from lakemv.spark.parallel import concurrently
from lakemv.spark.views.feeds import Feeds
from lakemv.spark.views.maintain import ViewMaintainer
from lakemv.spark.views.upstream import UpstreamImages


@dataclass
class BatchContext:
    """What the processor and its backend share: the session, the tables, the views, the journal."""

    spark: SparkSession
    names: TableNames
    sources: dict[str, SourceTable]  # the processor's own dict: schema drift updates it in place
    maintainers: list[ViewMaintainer]
    journal: Journal | None
    direct: DirectWriter | None
    direct_tables: set[str]  # tables written by direct commits (lakemv.spark.directwrite)
    watched: set[str]  # tables some view reads
    needs: dict[str, list[Need] | None]  # per event source, which events views may read again
    view_workers: int
    watermarks: Callable[[], dict[str, int | None]]
    feeds: Feeds  # every view's change feed, one table

    def declared(self, source: SourceTable) -> pa.Schema:
        """A source's declared columns as the mirror types them."""
        return pa.schema([f for f in mirror_arrow_schema(source) if f.name in source.column_names])


class ScanBackend:
    """Reads by Spark scans of the Iceberg tables, writes by MERGE and by each view's scan step."""

    store: Store | None = None
    synced: SyncReport | None = None  # how the local state was brought in step (LocalStateBackend)

    def __init__(self, ctx: BatchContext):
        self.ctx = ctx
        self.indexed: Mapping[str, object] = {}  # views stepped from the local state (none here)
        # each view's level: a view that reads views is stepped after them (lakemv.core.planner.dag)
        self.level = {name: n for n, level in enumerate(levels({m.plan.name: m.plan for m in ctx.maintainers})) for name in level}

    # ---- the backend's own upkeep (nothing to keep here) ---------------------------------------
    def attach(self) -> None:
        """(Re)derive what the backend keeps from the sources and views (after schema drift too)."""

    def check(self, replaying: Collection[str]) -> bool:
        """Bring what the backend keeps in step with the tables; True if there was anything to check."""
        return False

    def in_step(self, views: Collection[str]) -> None:
        """`views` were just built whole (nothing of them can be pending)."""

    def record(self, plans: Mapping[str, TablePlan], unit: WriteUnit) -> bool:
        """Keep the unit's applied mirror rows; True if the backend keeps any."""
        return False

    def retain(self, judged: Mapping[str, int | None] | None) -> int:
        """Drop what no view can need again once the unit committed; how many events went."""
        return 0

    def close(self) -> None:
        """Release what the backend holds open."""

    def release(self) -> None:
        """Views that hold a backlog's keys are due from now on (none hold here)."""

    def due(self) -> list[str]:
        """The views that wait for their budget and are due now (none here)."""
        return []

    @property
    def waits(self) -> bool:
        """Whether a view waits for its freshness budget (none here: every view is maintained every batch)."""
        return False

    # ---- reads ----------------------------------------------------------------------------------
    def live_keys(self, table: str) -> list[tuple]:
        """The primary keys of a mirror's live rows (asked only for a TRUNCATE: it deletes them all)."""
        ctx = self.ctx
        key = ", ".join(q(k) for k in ctx.sources[table].primary_key)
        return change_values(ctx.spark.sql(f"SELECT {key} FROM {ctx.names.mirror(table)} WHERE NOT {DELETED}").toArrow())

    def applied_position(self) -> int:
        """The highest source position the mirrors hold (asked only when an incremental snapshot's
        reads arrive: they take their place after it, lakemv.core.cdc.changeset.ReadPlacer)."""
        ctx = self.ctx
        tables = [ctx.names.mirror(t) for t, s in sorted(ctx.sources.items()) if not s.is_events]
        union = " UNION ALL ".join(f"SELECT max({POSITION}) AS p FROM {t}" for t in tables)
        return ctx.spark.sql(f"SELECT coalesce(max(p), 0) FROM ({union})").first()[0]

    def live_rows(self, table: str, keys: Sequence[tuple]) -> dict[tuple, tuple]:
        """The stored live rows of `keys` (declared columns, as a parsed change holds them), by primary
        key. Only changes with values Debezium did not send (lakemv.core.cdc.unavailable) ask."""
        source = self.ctx.sources[table]
        schema = self.ctx.declared(source)
        key_schema = pa.schema([schema.field(c) for c in source.primary_key])
        wanted = pa.Table.from_pylist([dict(zip(source.primary_key, k, strict=True)) for k in keys], schema=key_schema)
        found = matching_rows(self.ctx.spark, self.ctx.names, source, wanted, live=True).select(source.column_names)
        return _by_key(source, change_values(found))

    def holders(self, source: SourceTable, columns: Sequence[str], values: list[tuple]) -> list[dict]:
        """The live rows of `source` whose `columns` hold one of `values` (a declared unique key's check)."""
        schema = pa.schema([mirror_arrow_schema(source).field(c) for c in columns])
        wanted = pa.Table.from_pylist([dict(zip(columns, v, strict=True)) for v in values], schema=schema)
        return matching_rows(self.ctx.spark, self.ctx.names, source, wanted, live=True).to_pylist()

    def plans(self, rows: Mapping[str, pa.Table]) -> dict[str, TablePlan]:
        """Per table, the change rows that apply and, for tables views read, their old and new images,
        judged against the mirror rows of their keys (read concurrently)."""
        ctx = self.ctx
        scanned = [t for t in rows if t in ctx.watched]
        stored = dict(zip(scanned, concurrently(ctx.spark, lambda t: stored_rows(ctx.spark, ctx.names, ctx.sources[t], rows[t]), scanned)))
        plans = {}
        for table, changes in rows.items():
            if table not in stored:
                plans[table] = TablePlan(changes, None)
                continue
            source = ctx.sources[table]
            schema = ctx.declared(source)
            effect = effect_of(source.primary_key, source.column_names, changes.to_pylist(), stored[table].to_pylist())
            plans[table] = table_plan(changes, effect, lambda images, s=schema: pa.Table.from_arrays(
                [pa.array([i[n] for i in images], type=f.type) for n, f in enumerate(s)], schema=s))  # fmt: skip
        return plans

    # ---- writes ---------------------------------------------------------------------------------
    def append(self, table: str, rows: pa.Table, unit: WriteUnit) -> None:
        """Append `rows` once per unit: a direct commit where the table takes one, else a Spark write."""
        ctx = self.ctx
        if table in ctx.direct_tables:
            assert ctx.direct is not None
            append_once(ctx.spark, table, unit, lambda: ctx.direct.commit(table, rows, (), unit.write_id))
        else:
            append_once(ctx.spark, table, unit, lambda: ctx.spark.createDataFrame(rows).writeTo(table).append())

    def write_mirror(self, table: str, rows: pa.Table, unit: WriteUnit) -> None:
        """The unit's change rows into a mirror: a MERGE guarded by source position (a replay's is a no-op)."""
        ctx = self.ctx
        source = ctx.sources[table]
        unit.retries.run(f"MERGE into mirror {table}", lambda: merge_changes(ctx.spark, ctx.names, source, rows))

    def views(
        self, plans: Mapping[str, TablePlan], changed: Sequence[str], unit: WriteUnit, position: int | None, due: Sequence[str] | None = None,
        hold: bool = False, done: Mapping[str, ViewResult] | None = None,
    ) -> dict[str, ViewResult]:
        """Step every view this backend maintains over the changed tables' images, in dependency order:
        a view that reads views after them, over their rows the unit changed (`done`: the views the
        unit maintained before these; `due`, `hold`: see LocalStateBackend; views stepped by scans
        cannot wait)."""
        scanned = [m for m in self.ctx.maintainers if m.plan.name not in self.indexed]
        if not scanned:
            return {}
        spark, relations, results = self.ctx.spark, {}, dict(done or {})
        upstream = UpstreamImages(spark, self.ctx.names, unit, results)
        try:
            for table in sorted(changed):
                relations[table] = f"_lmv_images_{table}"
                images = plans[table].images
                images = images.drop_columns([c for c in (CHANGED, SIGN) if c in images.column_names])
                spark.createDataFrame(images).createOrReplaceTempView(relations[table])
            stepped = {}
            for m in sorted(scanned, key=lambda m: self.level[m.plan.name]):
                deltas, signed = dict(relations), {}
                for view in m.plan.inputs:
                    made = upstream.relation(view)
                    if made is not None:
                        deltas[view.name], signed[view.name] = made, upstream.signed(view)
                if due is not None and len(deltas) == len(relations):
                    continue  # between batches: only the readers of views that were due
                stepped[m.plan.name] = results[m.plan.name] = m.apply(deltas, unit, position, signed)
            return stepped
        finally:
            upstream.close()
            for relation in relations.values():
                spark.catalog.dropTempView(relation)

    def feeds_readers(self, done: Mapping[str, ViewResult], unit: WriteUnit) -> bool:
        """Whether a view stepped by scans reads a view the unit may have changed (`done`; a replay: any)."""
        return any(
            v.name in done and (unit.replay or done[v.name].upserts or done[v.name].deletes)
            for m in self.ctx.maintainers if m.plan.name not in self.indexed for v in m.plan.inputs
        )  # fmt: skip


def _by_key(source: SourceTable, rows: list[tuple]) -> dict[tuple, tuple]:
    at = [source.column_names.index(k) for k in source.primary_key]
    return {tuple(row[i] for i in at): row for row in rows}
