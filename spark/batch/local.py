"""A batch's steps on the local state store: attach it, read images from it, record into it, serve views.

Mixed into `lakemv.spark.batch.runner.BatchProcessor`, which runs them when it was given a store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED, POSITION, TableNames
from lakemv.core.batch.journal import Journal, TablePlan
from lakemv.core.batch.result import ViewResult
from lakemv.core.cdc.effects import effect_of
from lakemv.core.cdc.events import lowest
from lakemv.core.planner.retention import Need, horizon, settles
from lakemv.core.sql.quote import q
from lakemv.core.state.codec import rows_of
from lakemv.core.state.layout import ViewPart, mirror_parts, route
from lakemv.core.state.places import Location
from lakemv.core.state.store import Store
from lakemv.spark.batch.sync import StoreSync, SyncReport, record_mirrors
from lakemv.spark.commits import WriteUnit, commit_once
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.views.indexed import IndexedView
from lakemv.spark.views.maintain import ViewMaintainer
from lakemv.spark.views.state import read_state


class StoreSteps:
    """The store's part of a batch (see the module docstring)."""

    spark: SparkSession
    names: TableNames
    sources: dict[str, SourceTable]
    journal: Journal | None
    maintainers: list[ViewMaintainer]
    store: Store | None
    sync: StoreSync | None
    indexed: dict[str, IndexedView]
    synced: SyncReport | None
    direct: DirectWriter | None
    direct_tables: set[str]
    needs: dict[str, list[Need] | None]

    def watermarks(self) -> dict[str, int | None]: ...  # lakemv.spark.batch.runner.BatchProcessor

    def _attach_store(self) -> None:
        """Derive the store's layout from the views, attach it, and bring it in step with the tables."""
        assert self.store is not None
        routes = {m.plan.name: route(m.plan) for m in self.maintainers}
        located = bool(self.direct_tables)  # direct commits delete replaced rows by their place in the table's files
        retention = {t: json.dumps([self.needs[t], self.sources[t].lateness_micros]) for t in self.needs}
        for table, part in mirror_parts(self.sources, list(routes.values()), located, retention).items():
            self.store.attach_mirror(part)
            # the store judges which rows win and knows where the rows they replace live; a direct
            # commit writes unpartitioned tables only (an event source's is partitioned by event time)
            if located and self.direct is not None and self.direct.supports(self.names.mirror(table)):
                self.direct_tables.add(self.names.mirror(table))
        self.sync = StoreSync(self.spark, self.store, self.names, self.direct.settings.s3 if self.direct is not None else None)
        self.indexed = {}
        for m in self.maintainers:
            if routes[m.plan.name].indexed:
                rule = settles(m.plan)
                self.store.attach_view(
                    ViewPart(view=m.plan.name, key=m.plan.key_names, definition=m.plan.fingerprint, located=located,
                             settle=rule[0] if rule is not None else None)  # fmt: skip
                )
                self.indexed[m.plan.name] = IndexedView(m, routes[m.plan.name], self.sync)
                if self.direct_tables:
                    m.direct = self.direct
        self.sync.retained, self.sync.settled = self._retained()
        # A unit still in the journal may be replayed next: its commits are not foreign (the replay
        # applies its rows to the store again, and diffs its views against what the store holds).
        self.synced = self.sync.check(self.journal.write_ids() if self.journal is not None else ())

    # ---- retention of events --------------------------------------------------------------------
    def _horizons(self, marks: Mapping[str, int | None] | None = None) -> dict[str, int]:
        """Per event source whose views need only some of its events, the event time before which
        the store drops them (lakemv.core.planner.retention), by the watermarks `marks` (default: now)."""
        marks = self.watermarks() if marks is None else marks
        found = {t: horizon(wanted, marks) for t, wanted in self.needs.items()}
        return {t: h for t, h in found.items() if h is not None}

    def _retained(self) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
        """What a reload keeps: per such event source the predicate its events are kept by, and per
        view whose rows settle (lakemv.core.planner.retention.settles) its column and the time (epoch
        micros) before which its rows are settled. A unit still in the journal may be replayed: it
        judges windows from the watermark it started with, which the tables' newest events (its own
        among them, if it crashed after appending them) overstate; that watermark bounds both."""
        marks: dict[str, int | None] = dict(self.watermarks())
        if self.journal is not None:
            for source, mark in self.journal.pending_watermarks().items():
                if source in marks:
                    marks[source] = lowest(mark, marks[source])
        horizons = self._horizons(marks)
        events = {t: f"{q(self.sources[t].event_time or '')} >= timestamp_micros({before})" for t, before in horizons.items()}
        return events, self._settled(horizons)

    def _settled(self, horizons: Mapping[str, int]) -> dict[str, tuple[str, int]]:
        """Per view the store serves whose rows settle: its column, and the time before which its rows
        are settled, by the event sources' `horizons`."""
        found = {}
        for m in self.maintainers:
            rule = settles(m.plan)
            if rule is not None and m.plan.name in self.indexed and rule[1] in horizons:
                found[m.plan.name] = (rule[0], horizons[rule[1]] + rule[2])
        return found

    def _retain(self, judged: Mapping[str, int | None] | None = None) -> int:
        """Drop from the store the events no view needs any more, and the digests of view rows no
        event can reach again (after a unit commits); how many events went. The unit committed:
        nothing replays it, nor any unit before it. `judged`: the watermarks the rest of its batch
        is judged by (lakemv.spark.batch.runner), lower than now: a redelivery there of an event this unit
        admitted is on time, and must find it in the store."""
        if self.store is None or self.sync is None:
            return 0
        dropped = 0
        marks = self.watermarks()
        if judged is not None:
            marks = {s: lowest(m, judged.get(s)) for s, m in marks.items()}
        horizons = self._horizons(marks)
        for table, before in horizons.items():
            if table in self.store.mirrors:
                dropped += self.store.purge(table, self.sources[table].event_time or "", before)
        for view, (_column, before) in self._settled(horizons).items():
            self.store.settle(view, before)
        self.sync.retained, self.sync.settled = self._retained()
        return dropped

    def _stored_effect(self, table: str, changes: pa.Table):  # noqa: ANN202 - lakemv.core.cdc.effects.Effect
        """effect_of against the store's rows, every value in the store's form."""
        assert self.store is not None
        source = self.sources[table]
        names = self.store.mirrors[table].column_names
        incoming = [
            {**dict(zip(names, values, strict=True)), POSITION: position, DELETED: deleted}
            for values, position, deleted in zip(
                rows_of(changes, names), changes.column(POSITION).to_pylist(), changes.column(DELETED).to_pylist(), strict=True
            )
        ]
        keys = [tuple(row[k] for k in source.primary_key) for row in incoming]
        found = self.store.stored(table, keys)
        stored = [
            {**dict(zip(names, s.row + (None,) * (len(names) - len(s.row)), strict=True)), POSITION: s.position, DELETED: s.deleted}
            for s in found.values()
        ]
        return effect_of(source.primary_key, source.column_names, incoming, stored)

    def _commit_mirror(self, table: str, rows: pa.Table, unit: WriteUnit) -> None:
        """The unit's rows of a mirror as one direct commit: added, and the rows the mirror holds for
        their keys (live or tombstones; none for new keys) deleted by position. After a lost race (a
        compaction moved those rows) the store follows the table first, so the positions are fresh."""
        assert self.store is not None and self.sync is not None and self.direct is not None
        identifier, name = self.names.mirror(table), f"mirror:{table}"
        pk = list(self.sources[table].primary_key)
        keys = rows_of(rows.select(pk), pk)

        def held() -> list[Location | None]:
            return [s.location for s in self.store.stored(table, keys).values()]  # type: ignore[union-attr]

        def attempt(retry: bool) -> None:
            base, replaced = self.sync.places(name, held, unit.write_id, refresh=retry)  # type: ignore[union-attr]
            self.direct.commit(identifier, rows, replaced, unit.write_id, validate_from=base)  # type: ignore[union-attr]

        commit_once(self.spark, identifier, unit, attempt, f"commit into mirror {table}")

    def _record_mirrors(self, plans: Mapping[str, TablePlan], unit: WriteUnit) -> None:
        """The unit's applied rows into the store, with the snapshots its MERGEs made (one transaction)."""
        assert self.sync is not None and self.store is not None
        rows = {}
        for table, plan in plans.items():
            if table in self.store.mirrors and plan.rows.num_rows:
                names = self.store.mirrors[table].column_names
                rows[table] = list(
                    zip(rows_of(plan.rows, names), plan.rows.column(POSITION).to_pylist(), plan.rows.column(DELETED).to_pylist(), strict=True)
                )
        record_mirrors(self.sync, rows, unit.write_id)

    def _indexed_view(self, maintainer: ViewMaintainer, images, unit: WriteUnit, position: int | None) -> ViewResult:  # noqa: ANN001
        """A view the store serves: paused and resumed like any view, otherwise maintained from the store."""
        state = read_state(self.spark, maintainer.table)
        if state.state == "paused":
            return ViewResult(maintainer.plan.name, 0, paused=True, note=f"paused by {state.by}")
        if state.state == "resume":  # a backfill published: catch up by snapshots, then reload its digests
            result = maintainer.resume(state, unit, position)
            self.sync.reload(f"view:{maintainer.plan.name}")  # type: ignore[union-attr]
            return result
        return self.indexed[maintainer.plan.name].apply(images, unit, position, state)
