"""Keeps the store in step with the Iceberg tables: checks what each part reflects, reloads the rest.

A part records the snapshot of its table it reflects. It is in step when the table's current snapshot
is that one, or when every snapshot after it is a `replace` (compaction: same rows, new files) or was
written by the unit now being applied (`allowed`: a replayed unit, or the unit that just merged and
is about to record its rows). Anything else - a tombstone purge, a backfill's publish, a crash between
an Iceberg commit and the store's, an expired or rolled-back snapshot, a missing or new store -
reloads the part from the table (the only reads of whole tables the store makes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from catalog.tables import DELETED, POSITION, TableNames
from spark.commits import WRITE_ID
from spark.literals import q
from spark.state.codec import columns_of
from spark.state.layout import MirrorPart, ViewPart
from spark.state.store import Store

log = logging.getLogger(__name__)
_MAX_WALK = 10_000  # snapshots followed back from the current one before giving up (reload)
DIGEST = "_lmv_digest"


@dataclass(frozen=True)
class Snapshot:
    id: int
    parent: int | None
    operation: str
    write_id: str | None


class Snapshots:
    """Current snapshot and ancestry of Iceberg tables, read through Iceberg's Java API (no Spark job)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
        self._util = jvm.org.apache.iceberg.spark.Spark3Util

    def _table(self, identifier: str):  # noqa: ANN202 - a py4j proxy of org.apache.iceberg.Table
        return self._util.loadIcebergTable(self.spark._jsparkSession, identifier)

    @staticmethod
    def _snapshot(java) -> Snapshot:  # noqa: ANN001
        parent = java.parentId()
        return Snapshot(int(java.snapshotId()), None if parent is None else int(parent), str(java.operation()), java.summary().get(WRITE_ID))

    def current(self, identifier: str) -> int | None:
        java = self._table(identifier).currentSnapshot()
        return None if java is None else int(java.snapshotId())

    def since(self, identifier: str, snapshot: int | None) -> list[Snapshot] | None:
        """The snapshots after `snapshot` up to the current one, newest first; None if `snapshot` is not an ancestor."""
        table = self._table(identifier)
        java = table.currentSnapshot()
        chain: list[Snapshot] = []
        while java is not None and len(chain) < _MAX_WALK:
            current = self._snapshot(java)
            if current.id == snapshot:
                return chain
            chain.append(current)
            if current.parent is None:  # the table's first snapshot: `snapshot` None means "empty then"
                return chain if snapshot is None else None
            java = table.snapshot(current.parent)  # None once expired: the ancestry cannot be checked
        return chain if snapshot is None and not chain and java is None else None


def in_step(
    snapshots: Snapshots, identifier: str, snapshot: int | None, allowed: Collection[str] = ()
) -> tuple[int | None, int | None] | None:
    """None when a part recorded at `snapshot` is out of step with its table; else (the table's
    current snapshot, the newest one the part already reflects: past `snapshot` through `replace`
    snapshots only, since an allowed unit's rows are not in the part until that unit applies them)."""
    chain = snapshots.since(identifier, snapshot)
    if chain is None:
        return None
    reflected = snapshot
    for entry in reversed(chain):  # oldest first
        if entry.operation == "replace" and reflected == entry.parent:
            reflected = entry.id
        elif entry.write_id not in allowed and entry.operation != "replace":
            return None
    return (chain[0].id if chain else snapshot), reflected


@dataclass
class SyncReport:
    """What a check did: parts found in step, and parts reloaded with their rows and seconds."""

    in_step: list[str]
    reloaded: dict[str, tuple[int, float]]

    def describe(self) -> str:
        done = ", ".join(f"{n} ({rows:,} rows, {s:.1f}s)" for n, (rows, s) in self.reloaded.items())
        return f"state: {len(self.in_step)} parts in step" + (f"; reloaded {done}" if done else "")


class StoreSync:
    """Checks and reloads the parts of one store against the tables of one catalog."""

    def __init__(self, spark: SparkSession, store: Store, names: TableNames):
        self.spark = spark
        self.store = store
        self.names = names
        self.snapshots = Snapshots(spark)

    def identifier(self, part: str) -> str:
        kind, name = part.split(":", 1)
        return self.names.mirror(name) if kind == "mirror" else self.names.view(name)

    def check(self, allowed: Collection[str] = ()) -> SyncReport:
        """Bring every attached part in step (see the module docstring)."""
        report = SyncReport([], {})
        parts: dict[str, MirrorPart | ViewPart] = {f"mirror:{t}": p for t, p in self.store.mirrors.items()}
        parts.update({f"view:{v}": p for v, p in self.store.views.items()})
        records = self.store.records()
        for name, part in parts.items():
            record = records.get(name)
            step = None
            if record is not None and record.fingerprint == part.fingerprint:
                step = in_step(self.snapshots, self.identifier(name), record.snapshot, allowed)
            if step is None:
                started = time.perf_counter()
                rows = self.reload(name)
                report.reloaded[name] = (rows, time.perf_counter() - started)
                continue
            if step[1] != record.snapshot:  # type: ignore[union-attr]
                with self.store.transaction():
                    self.store.set_record(name, part.fingerprint, step[1], record.write_id)  # type: ignore[union-attr]
            report.in_step.append(name)
        if report.reloaded:
            log.info(report.describe())
        return report

    def advance(self, name: str, write_id: str) -> int | None | bool:
        """After the unit `write_id` committed to the part's table: its snapshot now, or False when
        someone else committed too (the caller reloads instead of applying its rows)."""
        record = self.store.record(name)
        step = None if record is None else in_step(self.snapshots, self.identifier(name), record.snapshot, {write_id})
        return False if step is None else step[0]

    def reload(self, name: str) -> int:
        """Reload one part from the current snapshot of its table; returns the rows loaded."""
        kind, table = name.split(":", 1)
        identifier = self.identifier(name)
        snapshot = self.snapshots.current(identifier)
        travel = f" VERSION AS OF {snapshot}" if snapshot is not None else ""
        if kind == "mirror":
            part = self.store.mirrors[table]
            columns = [*part.column_names, POSITION, DELETED]
            frame = self.spark.sql(f"SELECT {', '.join(q(c) for c in columns)} FROM {identifier}{travel}")
            data = frame.toArrow() if snapshot is not None else None
            with self.store.transaction():
                self.store.clear_rows(table)
                self.store.drop_indexes(table)
                if data is not None and data.num_rows:
                    values = columns_of(data, part.column_names)
                    positions = data.column(POSITION).to_pylist()
                    deleted = data.column(DELETED).to_pylist()
                    self.store.put_rows(table, zip(zip(*values, strict=True), positions, deleted, strict=True))
                self.store.rebuild_indexes(table)
                self.store.set_record(name, part.fingerprint, snapshot, None)
            return 0 if data is None else data.num_rows
        view = self.store.views[table]
        rows = 0
        with self.store.transaction():
            self.store.clear_digests(table)
            if snapshot is not None:
                columns = [f.name for f in self.spark.table(identifier).schema.fields]
                data = self.spark.sql(
                    f"SELECT {', '.join(q(k) for k in view.key)}, {digest_sql(columns, 'v')} AS {DIGEST} "
                    f"FROM {identifier}{travel} AS v"
                ).toArrow()
                keys = list(zip(*columns_of(data, view.key), strict=True)) if data.num_rows else []
                self.store.put_digests(table, zip(keys, data.column(DIGEST).to_pylist(), strict=True))
                rows = data.num_rows
            self.store.set_record(name, view.fingerprint, snapshot, None)
        return rows


def digest_sql(columns: list[str], alias: str) -> str:
    """Spark SQL for the digest of a view row: the same text for a recomputed row and a stored one."""
    fields = ", ".join(f"'{c}', {alias}.{q(c)}" for c in columns)
    return f"md5(to_json(named_struct({fields})))"


def record_mirrors(sync: StoreSync, rows: Mapping[str, list], write_id: str) -> list[str]:
    """Apply a unit's applied mirror rows to the store and record the snapshots they made, in one
    transaction; returns the parts that had to be reloaded instead (someone else committed too)."""
    reload = []
    with sync.store.transaction():
        for table, items in rows.items():
            name = f"mirror:{table}"
            current = sync.advance(name, write_id)
            if current is False:
                reload.append(name)
                continue
            sync.store.put_rows(table, items)
            sync.store.set_record(name, sync.store.mirrors[table].fingerprint, current, write_id)  # type: ignore[arg-type]
    for name in reload:
        sync.reload(name)
    return reload
