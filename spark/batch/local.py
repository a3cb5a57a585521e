"""The local state backend of a batch: lookups in the local indexed state, direct commits it locates,
and the views it serves stepped from it (`lakemv.spark.views.indexed`).

It keeps the tables and views its layout covers (`lakemv.core.state.layout`); for the others it is
`ScanBackend` (`lakemv.spark.batch.backend`), whose methods it extends. Before each unit it checks the
state against the tables (another writer - compaction, a backfill's publish, a crash - may have moved
one) and after it records the unit's rows and drops the events no view needs any more.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

import pyarrow as pa

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED, POSITION
from lakemv.core.batch import deferral
from lakemv.core.batch.journal import TablePlan
from lakemv.core.batch.plan import now_micros, table_plan
from lakemv.core.batch.result import ViewResult
from lakemv.core.cdc.changeset import change_values
from lakemv.core.cdc.effects import CHANGED, SIGN, effect_of_values
from lakemv.core.cdc.events import lowest
from lakemv.core.planner import over
from lakemv.core.planner.retention import horizon, settles
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.quote import q
from lakemv.core.state.codec import Lazily, Values, rows_of, to_arrow
from lakemv.core.state.layout import ViewPart, grain_route, mirror_parts, route
from lakemv.core.state.places import Location
from lakemv.core.state.store import Store, Stored
from lakemv.spark.batch.backend import BatchContext, ScanBackend, _by_key
from lakemv.spark.batch.sync import StoreSync, SyncReport, record_mirrors
from lakemv.spark.commits import WriteUnit, commit_once
from lakemv.spark.directwrite import Committed
from lakemv.spark.parallel import concurrently
from lakemv.spark.views.indexed import IndexedView
from lakemv.spark.views.kept import MARK, KeptPlans, run_kept
from lakemv.spark.views.maintain import ViewMaintainer
from lakemv.spark.views.state import read_state
from lakemv.spark.views.together import Gathered, part_schema, recompute_together
from lakemv.spark.views.viewdelta import ViewDelta

ORDINAL = "_lmv_i"  # each row's place in the unit, which the evaluation of derived columns keeps


class LocalStateBackend(ScanBackend):
    """A batch's reads and writes through the local indexed state (see the module docstring)."""

    def __init__(self, ctx: BatchContext, store: Store):
        super().__init__(ctx)
        self.store = store
        self.sync: StoreSync | None = None
        self.indexed: dict[str, IndexedView] = {}
        self._starts: list[int] = []  # when the last view steps started (epoch micros)
        self._holding = False  # the last unit held its views' keys: more of its batch or backlog follows
        self._committed: dict[str, Committed | None] = {}  # the unit's direct mirror commits, for `record`
        self._found: dict[str, dict[Values, Stored]] = {}  # the stored rows `plans` read, for the unit's commits
        self._values: dict[str, tuple[pa.Table, list[Values]]] = {}  # the applied rows `plans` made values of, for `record`
        self._images: dict[str, tuple[pa.Table, list[Values]]] = {}  # and the images it made, for the views
        self._kept = KeptPlans(ctx.spark)  # the evaluation of derived columns, planned once (`_derived`)
        self.attach()

    # ---- the state's upkeep ---------------------------------------------------------------------
    def attach(self) -> None:
        """Derive the store's layout from the views, attach it, and bring it in step with the tables."""
        ctx, store = self.ctx, self.store
        routes = {m.plan.name: route(m.plan) for m in ctx.maintainers}
        located = bool(ctx.direct_tables)  # direct commits delete replaced rows by their place in the table's files
        retention = {t: json.dumps([ctx.needs[t], ctx.sources[t].lateness_micros]) for t in ctx.needs}
        grains = {m.plan.name: grain_route(m.plan) for m in ctx.maintainers if routes[m.plan.name].indexed}  # (aggregates by delta over a join's grain)
        walked = [*routes.values(), *(g for g in grains.values() if g is not None)]
        for table, part in mirror_parts(ctx.sources, walked, located, retention).items():
            store.attach_mirror(part)
            # the store judges which rows win and knows where the rows they replace live; a direct
            # commit writes unpartitioned tables only (an event source's is partitioned by event time)
            if located and ctx.direct is not None and ctx.direct.supports(ctx.names.mirror(table)):
                ctx.direct_tables.add(ctx.names.mirror(table))
        self.sync = StoreSync(ctx.spark, store, ctx.names, ctx.direct.settings.s3 if ctx.direct is not None else None)
        self.indexed = {}
        for m in ctx.maintainers:
            if routes[m.plan.name].indexed:
                rule = settles(m.plan)
                store.attach_view(
                    ViewPart(view=m.plan.name, key=m.plan.key_names, definition=m.plan.fingerprint, located=located,
                             settle=rule[0] if rule is not None else None)  # fmt: skip
                )
                self.indexed[m.plan.name] = IndexedView(m, routes[m.plan.name], self.sync, grains[m.plan.name])
                if deferral.deferrable(m.plan, indexed=True):
                    self.indexed[m.plan.name].budget = m.plan.definition.freshness
                elif deferral.refusal(m.plan, indexed=True) is None:  # a view that may have had a budget: keys one
                    # since removed left pending, or a state that cannot tell (rebuilt), are caught up at once
                    pending = store.pending(m.plan.name)
                    if pending.keys or not pending.known:
                        self.indexed[m.plan.name].catch_up_once()
                if ctx.direct_tables:
                    m.direct = ctx.direct
        for m in ctx.maintainers:  # views over views, by scans: their aggregates by delta keep their states here
            m.delta = None if m.plan.name in self.indexed else ViewDelta.of(m, store)
        self.sync.retained, self.sync.settled = self._retained()
        # A unit still in the journal may be replayed next: its commits are not foreign (the replay
        # applies its rows to the store again, and diffs its views against what the store holds).
        self.synced = self._out_of_step(self.sync.check(ctx.journal.write_ids() if ctx.journal is not None else ()))

    def in_step(self, views: Collection[str]) -> None:
        """`views` were just built whole: nothing of them is pending."""
        for name in views:
            if name in self.indexed:
                self.indexed[name].in_step()

    def check(self, replaying: Collection[str]) -> bool:
        assert self.sync is not None
        self._out_of_step(self.sync.check(replaying))
        return True

    def _out_of_step(self, report: SyncReport) -> SyncReport:
        """A store found out of step with the tables may hold states of aggregates by delta that no
        longer match their views (`lakemv.spark.views.viewdelta`): those are built again."""
        if report.reloaded:
            for m in self.ctx.maintainers:
                if m.delta is not None:
                    m.delta.forget()
        return report

    def record(self, plans: Mapping[str, TablePlan], unit: WriteUnit) -> bool:
        """The unit's applied rows into the store, with the snapshots its commits made (one transaction)."""
        assert self.sync is not None
        rows = {}
        made, self._values = self._values, {}  # the rows `plans` made values of (not a replay's, read from the journal)
        values = {
            t: made[t][1] if t in made and made[t][0] is p.rows else rows_of(p.rows, self.store.mirrors[t].column_names)
            for t, p in plans.items() if t in self.store.mirrors and p.rows.num_rows
        }  # fmt: skip
        for table, derived in self._derived(values).items():
            values[table] = [row + more for row, more in zip(values[table], derived, strict=True)]
        for table, items in values.items():
            rows[table] = list(zip(items, plans[table].rows.column(POSITION).to_pylist(), plans[table].rows.column(DELETED).to_pylist(), strict=True))
        committed, self._committed, self._found = self._committed, {}, {}
        record_mirrors(self.sync, rows, unit.write_id, committed)
        return True

    def _derived(self, rows: Mapping[str, list[Values]]) -> dict[str, list[Values]]:
        """Per table whose part has derived columns (key expressions a view looks its anchor rows up
        by, lakemv.core.state.layout), their values for each of `rows`, evaluated by Spark: one job
        for every table, each by the plan kept for it (lakemv.spark.views.kept)."""
        runs, tables = [], []
        for table, items in rows.items():
            part = self.store.mirrors[table]
            if not part.derived:
                continue
            relation = f"{MARK}derived_{table}"
            select = ", ".join(f"{over(expression, 'a')} AS {q(name)}" for name, expression in part.derived)
            inputs = to_arrow(items, part_schema(part)).append_column(ORDINAL, pa.array(range(len(items)), pa.int64()))
            runs.append((self._kept, f"derived:{table}", f"SELECT a.{ORDINAL}, {select} FROM {relation} AS a", {relation: inputs}))
            tables.append(table)
        found = run_kept(self.ctx.spark, runs) if runs else []
        return {t: rows_of(r.sort_by(ORDINAL), self.store.mirrors[t].derived_names) for t, r in zip(tables, found, strict=True)}

    def close(self) -> None:
        self.store.close()

    # ---- retention of events --------------------------------------------------------------------
    def _horizons(self, marks: Mapping[str, int | None] | None = None) -> dict[str, int]:
        """Per event source whose views need only some of its events, the event time before which
        the store drops them (lakemv.core.planner.retention), by the watermarks `marks` (default: now)."""
        marks = self.ctx.watermarks() if marks is None else marks
        found = {t: horizon(wanted, marks) for t, wanted in self.ctx.needs.items()}
        return {t: h for t, h in found.items() if h is not None}

    def _retained(self) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
        """What a reload keeps: per such event source the predicate its events are kept by, and per
        view whose rows settle (lakemv.core.planner.retention.settles) its column and the time (epoch
        micros) before which its rows are settled. A unit still in the journal may be replayed: it
        judges windows from the watermark it started with, which the tables' newest events (its own
        among them, if it crashed after appending them) overstate; that watermark bounds both."""
        marks: dict[str, int | None] = dict(self.ctx.watermarks())
        if self.ctx.journal is not None:
            for source, mark in self.ctx.journal.pending_watermarks().items():
                if source in marks:
                    marks[source] = lowest(mark, marks[source])
        horizons = self._horizons(marks)
        events = {t: f"{q(self.ctx.sources[t].event_time or '')} >= timestamp_micros({before})" for t, before in horizons.items()}
        return events, self._settled(horizons)

    def _settled(self, horizons: Mapping[str, int]) -> dict[str, tuple[str, int]]:
        """Per view the store serves whose rows settle: its column, and the time before which its rows
        are settled, by the event sources' `horizons`."""
        found = {}
        for m in self.ctx.maintainers:
            rule = settles(m.plan)
            if rule is not None and m.plan.name in self.indexed and rule[1] in horizons:
                found[m.plan.name] = (rule[0], horizons[rule[1]] + rule[2])
        return found

    def retain(self, judged: Mapping[str, int | None] | None) -> int:
        """Drop from the store the events no view needs any more, and the digests of view rows no
        event can reach again (after a unit commits); how many events went. The unit committed:
        nothing replays it, nor any unit before it. `judged`: the watermarks the rest of its batch
        is judged by (lakemv.spark.batch.runner), lower than now: a redelivery there of an event this unit
        admitted is on time, and must find it in the store."""
        assert self.sync is not None
        dropped = 0
        marks = self.ctx.watermarks()
        if judged is not None:
            marks = {s: lowest(m, judged.get(s)) for s, m in marks.items()}
        horizons = self._horizons(marks)
        for table, before in horizons.items():
            if table in self.store.mirrors:
                dropped += self.store.purge(table, self.ctx.sources[table].event_time or "", before)
        for view, (_column, before) in self._settled(horizons).items():
            self.store.settle(view, before)
        self.sync.retained, self.sync.settled = self._retained()
        return dropped

    # ---- reads ----------------------------------------------------------------------------------
    def live_rows(self, table: str, keys: Sequence[tuple]) -> dict[tuple, tuple]:
        if table not in self.store.mirrors:
            return super().live_rows(table, keys)
        source = self.ctx.sources[table]
        names = self.store.mirrors[table].column_names
        stored = self.store.lookup(table, source.primary_key, keys, (False,) * len(source.primary_key))
        found = to_arrow([tuple(dict(zip(names, row)).get(c) for c in source.column_names) for row in stored], self.ctx.declared(source))
        return _by_key(source, change_values(found))

    def holders(self, source: SourceTable, columns: Sequence[str], values: list[tuple]) -> list[dict]:
        if source.name not in self.store.mirrors:
            return super().holders(source, columns, values)
        names = self.store.mirrors[source.name].column_names
        rows = self.store.lookup(source.name, columns, values, (False,) * len(columns))
        return [dict(zip(names, row, strict=True)) for row in rows]

    def plans(self, rows: Mapping[str, pa.Table]) -> dict[str, TablePlan]:
        """Tables the store keeps are judged against its rows (every value in the store's form, compared
        as tuples); the others as `ScanBackend` judges them."""
        kept = {t: r for t, r in rows.items() if t in self.store.mirrors}
        plans = super().plans({t: r for t, r in rows.items() if t not in kept})
        self._found, self._values, self._images = {}, {}, {}
        for table, changes in kept.items():
            source = self.ctx.sources[table]
            names = self.store.mirrors[table].column_names
            values = rows_of(changes, names)
            pk = [names.index(k) for k in source.primary_key]
            keys = [tuple(v[i] for i in pk) for v in values]
            found = self._found[table] = self.store.stored(table, keys)
            pad = len(names)
            stored = {k: (s.row + (None,) * (pad - len(s.row)), s.position, s.deleted) for k, s in found.items()}
            compared = values
            if list(names) != list(source.column_names):  # (the images carry the declared columns, in their order)
                take = [names.index(c) for c in source.column_names]
                compared = [tuple(v[i] for i in take) for v in values]
                stored = {k: (tuple(r[i] for i in take), p, d) for k, (r, p, d) in stored.items()}
            effect = effect_of_values(
                source.column_names, keys, compared, changes.column(POSITION).to_pylist(), changes.column(DELETED).to_pylist(), stored
            )
            plans[table] = table_plan(changes, effect, lambda images, s=self.ctx.declared(source): to_arrow(images, s))
            self._values[table] = (plans[table].rows, [values[i] for i in effect.applied])
            if compared is values:  # (the images' values are in the part's order)
                self._images[table] = (plans[table].images, effect.images)
        return dict(sorted(plans.items()))

    # ---- writes ---------------------------------------------------------------------------------
    def write_mirror(self, table: str, rows: pa.Table, unit: WriteUnit) -> None:
        """A mirror the store locates: one direct commit; an event source it keeps: an append of the
        events it judged new (nothing to replace); any other: as `ScanBackend`."""
        ctx = self.ctx
        if ctx.names.mirror(table) in ctx.direct_tables:
            self._commit_mirror(table, rows, unit)
        elif ctx.sources[table].is_events and table in self.store.mirrors:
            self.append(ctx.names.mirror(table), rows, unit)
        else:
            super().write_mirror(table, rows, unit)

    def _commit_mirror(self, table: str, rows: pa.Table, unit: WriteUnit) -> None:
        """The unit's rows of a mirror as one direct commit: added, and the rows the mirror holds for
        their keys (live or tombstones; none for new keys) deleted by position. After a lost race (a
        compaction moved those rows) the store follows the table first, so the positions are fresh."""
        ctx, store, sync, direct = self.ctx, self.store, self.sync, self.ctx.direct
        assert sync is not None and direct is not None
        identifier, name = ctx.names.mirror(table), f"mirror:{table}"
        pk = list(ctx.sources[table].primary_key)
        keys = rows_of(rows.select(pk), pk)
        read = self._found.pop(table, None)  # what `plans` read of these keys, unless this unit is a replay

        def held() -> list[Location | None]:
            nonlocal read
            if read is not None:  # (once: a retry after a lost race follows the table, then reads the store)
                found, read = read, None
                return [found[k].location for k in keys if k in found]
            return [s.location for s in store.stored(table, keys).values()]

        def attempt(retry: bool) -> None:
            base, replaced = sync.places(name, held, unit.write_id, refresh=retry)
            self._committed[table] = direct.commit(identifier, rows, replaced, unit.write_id, validate_from=base)

        commit_once(ctx.spark, identifier, unit, attempt, f"commit into mirror {table}")

    def views(
        self, plans: Mapping[str, TablePlan], changed: Sequence[str], unit: WriteUnit, position: int | None, due: Sequence[str] | None = None,
        hold: bool = False,
    ) -> dict[str, ViewResult]:
        """The views the store serves, side by side (`view_workers` at once), then the rest by scans.
        With `due` (between batches: no changes), only those views, which wait for their budget. With
        `hold` (more units of the batch follow: a backlog), every view that can wait adds the keys it
        reaches to its pending keys; the batch's last unit maintains it once over all of them (or whole)."""
        ctx = self.ctx
        views: dict[str, ViewResult] = {}
        made, self._images = self._images, {}
        images = Lazily(
            [t for t in changed if t in self.store.mirrors],
            lambda t: made[t][1] if t in made and made[t][0] is plans[t].images else rows_of(plans[t].images, self.store.mirrors[t].column_names),
        )
        updated = Lazily([t for t in images if CHANGED in plans[t].images.column_names], lambda t: plans[t].images.column(CHANGED).to_pylist())
        signs = Lazily([t for t in images if SIGN in plans[t].images.column_names], lambda t: plans[t].images.column(SIGN).to_pylist())
        served = {m.plan.name: m for m in ctx.maintainers if m.plan.name in self.indexed and (images or self.indexed[m.plan.name].budget is not None)}
        if due is not None:
            served = {name: m for name, m in served.items() if name in due}
        now = now_micros()
        if due is None:  # a batch: the next is expected after the last gap between batches
            self._starts = [*self._starts[-1:], now]
            self._holding = hold
        gap = deferral.period(self._starts)  # when the next batch is expected: views that wait judge their budget by it
        if served:  # each view's keys and rows side by side, one recompute of them all, each view's writes side by side
            prepared = concurrently(
                ctx.spark, lambda name: self._indexed_view(served[name], images, (updated, signs), unit, position, now, gap, hold), sorted(served), ctx.view_workers
            )
            ready = dict(zip(sorted(served), prepared, strict=True))
            views.update((name, p) for name, p in ready.items() if isinstance(p, ViewResult))
            views.update(self._recompute({name: p for name, p in ready.items() if isinstance(p, Gathered)}))
            views = dict(sorted(views.items()))
        if changed or self.feeds_readers(views, unit):
            views.update(super().views(plans, changed, unit, position, due, done=views))
        return views

    def _recompute(self, gathered: Mapping[str, Gathered]) -> dict[str, ViewResult]:
        """The prepared views recomputed together (a Spark job per core, lakemv.spark.views.together),
        then each one's diff and writes, side by side."""
        if not gathered:
            return {}
        spark, workers = self.ctx.spark, self.ctx.view_workers
        computed = dict(zip(gathered, recompute_together(spark, list(gathered.values()), min(workers, spark.sparkContext.defaultParallelism)), strict=True))
        diffed = dict(zip(gathered, concurrently(spark, lambda name: gathered[name].view.diff(gathered[name], *computed[name]), list(gathered), workers),
                          strict=True))  # fmt: skip
        parts = {name: d.feed for name, d in diffed.items() if d.feed is not None}
        if parts:  # every view's feed rows in one commit, before any view's (a crash in between: the replay finds them)
            unit = next(iter(gathered.values())).writing.unit
            self.ctx.feeds.append(self.ctx.direct, parts, unit)  # type: ignore[arg-type]
            crash_point("feeds", unit.batch_id)
        finished = concurrently(spark, lambda name: gathered[name].view.finish(gathered[name], diffed[name], name in parts), list(gathered), workers)
        return dict(zip(gathered, finished, strict=True))

    def release(self) -> None:
        """Views that hold a backlog's keys are due from now on (its run ends: no unit of it follows)."""
        self._holding = False

    def due(self) -> list[str]:
        """The views that wait for their budget and are due now (were a batch to start); none while a
        batch's units hold their keys (its last unit maintains them)."""
        if self._holding:
            return []
        now, gap = now_micros(), deferral.period(self._starts)
        found = []
        for name, view in sorted(self.indexed.items()):
            if view.budget is not None:
                pending = self.store.pending(name)
                if (pending.keys or not pending.known) and deferral.is_due(pending, now, view.budget, gap):
                    found.append(name)
        return found

    @property
    def waits(self) -> bool:
        """Whether a view waits for its freshness budget (every batch may make it due)."""
        return any(v.budget is not None for v in self.indexed.values())

    def _indexed_view(  # noqa: ANN001
        self, maintainer: ViewMaintainer, images, changes, unit: WriteUnit, position: int | None, now: int, gap: int, hold: bool
    ) -> ViewResult | Gathered:
        """A view the store serves: paused and resumed like any view, otherwise prepared from the store
        for the batch's recompute (or done already: nothing reached, deferred, recomputed whole).
        `changes`: per table, the columns each image's update changed, and each image's sign."""
        state = read_state(self.ctx.spark, maintainer.table)
        if state.state == "paused":
            return ViewResult(maintainer.plan.name, 0, paused=True, note=f"paused by {state.by}")
        if state.state == "resume":  # a backfill published: catch up by snapshots, then reload its digests
            result = maintainer.resume(state, unit, position)
            assert self.sync is not None
            self.sync.reload(f"view:{maintainer.plan.name}")
            return result
        return self.indexed[maintainer.plan.name].prepare(images, unit, position, state, now, gap, changes[0], hold, signs=changes[1])
