"""Keeps the store in step with the Iceberg tables: checks what each part reflects, reloads the rest.

A part records the snapshot of its table it reflects. It is in step when the table's current snapshot
is that one, or when every snapshot after it is a `replace` (compaction: same rows, new files) or was
written by the unit now being applied (`allowed`: a replayed unit, or the unit that just merged and
is about to record its rows). Anything else - a tombstone purge, a backfill's publish, a crash between
an Iceberg commit and the store's, an expired or rolled-back snapshot, a missing or new store -
reloads the part from the table (the only reads of whole tables the store makes).

A located part also knows where each row lives (data file, row position): the snapshots it follows
move rows into new files - a unit's own commit, a compaction's rewrite - so the key columns of the
data files each such snapshot adds are read (small files for a unit, the rewritten rows for a
compaction), oldest snapshot first, and each key's row is placed at its position there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from lakemv.catalog.storage import S3Options, arrow_file
from lakemv.catalog.tables import DELETED, POSITION, TableNames
from lakemv.core.planner import over
from lakemv.core.sql.quote import q
from lakemv.core.state.codec import columns_of, rows_of
from lakemv.core.state.layout import MirrorPart, ViewPart
from lakemv.core.state.places import Location
from lakemv.core.state.store import Store
from lakemv.spark.commits import WRITE_ID
from lakemv.spark.directwrite import Committed

log = logging.getLogger(__name__)
_MAX_WALK = 10_000  # snapshots followed back from the current one before giving up (reload)
DIGEST = "_lmv_digest"
# What a reload collects at once: values (rows x columns) in the driver - a 1M-user, 100-view mirror
# with its derived key columns was 1.2 GB in one collect, more than a 4 GB driver's heap - and bytes in
# one slice, which may be one task's result: a task hands over up to `spark.task.maxDirectResultSize`
# (128 MiB, lakemv.spark.session); a 1M-row view's digests and file places, a few hundred MB, were lost.
RELOAD_CELLS = 8_000_000
RELOAD_BYTES = 32 << 20
RELOAD_SAMPLE = 1_000  # rows read to size a row in bytes; a part of at most this many is collected at once


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

    def files(self, identifier: str, snapshot: int) -> tuple[list[str], list[str]]:
        """(data files the snapshot added, data files it removed), as the table's metadata spells them."""
        table = self._table(identifier)
        java = table.snapshot(snapshot)
        if java is None:
            raise LookupError(f"snapshot {snapshot} of {identifier} has expired")
        io = table.io()
        return [_location(f) for f in _each(java.addedDataFiles(io))], [_location(f) for f in _each(java.removedDataFiles(io))]

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


def _each(iterable) -> Iterator:  # noqa: ANN001 - a py4j proxy of a Java Iterable
    iterator = iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()


def _location(data_file) -> str:  # noqa: ANN001 - a py4j proxy of org.apache.iceberg.DataFile
    return str(data_file.location())


@dataclass(frozen=True)
class Step:
    """How a part stands against its table: in step up to `reflected`, the table now at `current`."""

    current: int | None
    reflected: int | None
    moved: tuple[int, ...] = ()  # the snapshots after the recorded one, oldest first, that moved rows
    folded: tuple[int, ...] = ()  # the leading `replace` snapshots the part reflects already


def in_step(snapshots: Snapshots, identifier: str, snapshot: int | None, allowed: Collection[str] = ()) -> Step | None:
    """None when a part recorded at `snapshot` is out of step with its table; else where it stands:
    the table's current snapshot, the newest one the part already reflects (past `snapshot` through
    `replace` snapshots only, since an allowed unit's rows are not in the part until that unit applies
    them), and the snapshots in between that moved rows into new data files."""
    chain = snapshots.since(identifier, snapshot)
    if chain is None:
        return None
    reflected, folded = snapshot, []
    for entry in reversed(chain):  # oldest first
        if entry.operation == "replace" and reflected == entry.parent:
            reflected = entry.id
            folded.append(entry.id)
        elif entry.write_id not in allowed and entry.operation != "replace":
            return None
    moved = tuple(e.id for e in reversed(chain))
    return Step(chain[0].id if chain else snapshot, reflected, moved, tuple(folded))


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

    def __init__(self, spark: SparkSession, store: Store, names: TableNames, s3: S3Options | None = None):
        self.spark = spark
        self.store = store
        self.names = names
        self.s3 = s3  # how to read the data files of tables in an object store
        self.snapshots = Snapshots(spark)
        self.retained: dict[str, str] = {}  # event source -> SQL predicate of the events a reload keeps
        self.settled: dict[str, tuple[str, int]] = {}  # view -> (column, epoch micros): rows before are settled

    def identifier(self, part: str) -> str:
        kind, name = part.split(":", 1)
        return self.names.mirror(name) if kind == "mirror" else self.names.view(name)

    def check(self, allowed: Collection[str] = (), only: Collection[str] | None = None) -> SyncReport:
        """Bring every attached part (or those named in `only`) in step (see the module docstring)."""
        report = SyncReport([], {})
        parts: dict[str, MirrorPart | ViewPart] = {f"mirror:{t}": p for t, p in self.store.mirrors.items()}
        parts.update({f"view:{v}": p for v, p in self.store.views.items()})
        if only is not None:
            parts = {name: part for name, part in parts.items() if name in only}
        records = self.store.records()
        for name, part in parts.items():
            record = records.get(name)
            step = None
            if record is not None and record.fingerprint == part.fingerprint:
                step = in_step(self.snapshots, self.identifier(name), record.snapshot, allowed)
            if step is not None and step.reflected != record.snapshot:  # type: ignore[union-attr]
                with self.store.transaction():
                    if not self.relocate(name, step.folded):
                        step = None
                    else:
                        self.store.set_record(name, part.fingerprint, step.reflected, record.write_id)  # type: ignore[union-attr]
            if step is None:
                started = time.perf_counter()
                rows = self.reload(name)
                report.reloaded[name] = (rows, time.perf_counter() - started)
                continue
            report.in_step.append(name)
        if report.reloaded:
            log.info(report.describe())
        return report

    def advance(self, name: str, write_id: str) -> Step | None:
        """After the unit `write_id` committed to the part's table: where the part stands, or None when
        someone else committed too (the caller reloads instead of applying its rows). The caller applies
        the unit's rows, then `relocate`s through `moved` and records `current`."""
        record = self.store.record(name)
        return None if record is None else in_step(self.snapshots, self.identifier(name), record.snapshot, {write_id})

    def places(
        self, name: str, find: Callable[[], Iterable[Location | None]], write_id: str, refresh: bool
    ) -> tuple[int | None, list[Location]]:
        """Where rows of part `name` live (`find` reads them from the store, None where not known)
        and the snapshot the part reflects, which a commit deleting them validates from. With
        `refresh` (a commit lost a race: a compaction may have moved them) the part follows its table
        first; a place not known (a part that never lost track should have none) reloads the part."""
        if refresh:
            self.check((write_id,), only=(name,))
        found = list(find())
        if None in found:
            self.reload(name)
            found = list(find())
        record = self.store.record(name)
        return (None if record is None else record.snapshot), [p for p in found if p is not None]

    def follows(self, name: str, committed: Committed | None, write_id: str) -> bool:
        """Whether `committed` (unit `write_id`'s direct commit to part `name`'s table) directly
        follows the snapshot the part reflects: nobody else committed in between, so `place` can
        record it."""
        if committed is None or committed.write_id != write_id:
            return False
        record = self.store.record(name)
        return record is not None and committed.parent == record.snapshot

    def place(self, name: str, committed: Committed, write_id: str) -> None:
        """Place the rows `committed` wrote (after the caller applied them: see `follows`) from what it
        wrote, without reading the table's history or the file back, and record its snapshot."""
        part, key = self._part(name)
        if part.located and committed.path is not None and committed.rows is not None:
            self.store.locate(name, committed.path, rows_of(committed.rows, key))
        self.store.set_record(name, part.fingerprint, committed.snapshot, write_id)

    def put_placed(self, table: str, items: list, committed: Committed, write_id: str) -> None:
        """`Store.put_rows` of a mirror's applied rows `items` that `committed` wrote (see `follows`),
        each with its place in the file it wrote (found by key: one statement per row, not two), and
        its snapshot recorded, as `place` does after a plain `put_rows`."""
        name = f"mirror:{table}"
        part = self.store.mirrors[table]
        locations = None
        if part.located and committed.path is not None and committed.rows is not None:
            at = {k: i for i, k in enumerate(rows_of(committed.rows, list(part.primary_key)))}
            pk = [part.column_names.index(k) for k in part.primary_key]
            path = committed.path
            locations = [None if (i := at.get(tuple(values[p] for p in pk))) is None else (path, i) for values, *_ in items]
        self.store.put_rows(table, items, locations)
        self.store.set_record(name, part.fingerprint, committed.snapshot, write_id)

    def _part(self, name: str) -> tuple[MirrorPart | ViewPart, list[str]]:
        """Part `name` ("mirror:<table>" or "view:<view>") and the columns that key its rows."""
        kind, table = name.split(":", 1)
        if kind == "mirror":
            mirror = self.store.mirrors[table]
            return mirror, list(mirror.primary_key)
        view = self.store.views[table]
        return view, list(view.key)

    def relocate(self, name: str, snapshots: tuple[int, ...]) -> bool:
        """Place the rows the `snapshots` (oldest first) wrote at their positions in the data files
        they added, and forget the files they removed; False when a snapshot or file is gone (the
        caller reloads). A no-op for a part that does not keep locations."""
        part, key = self._part(name)
        if not part.located or not snapshots:
            return True
        identifier = self.identifier(name)
        try:
            for snapshot in snapshots:
                added, removed = self.snapshots.files(identifier, snapshot)
                for path in added:
                    fs, file = arrow_file(path, self.s3)
                    self.store.locate(name, path, rows_of(pq.read_table(file, columns=list(key), filesystem=fs), key))
                self.store.forget_files(name, removed)
        except (LookupError, OSError) as exc:
            log.info("%s: cannot follow the files of its table (%s): reloading it", name, exc)
            return False
        return True

    def _slices(self, sql: str, key: Sequence[str], width: int) -> Iterator[pa.Table]:
        """The rows of `sql` in slices by a hash of their `key` columns, each collected on its own, as
        many as `reload_slices` says from the row count and a sample's bytes a row."""
        rows, slices = self.spark.sql(f"SELECT count(*) FROM ({sql})").first()[0], 1
        if rows > RELOAD_SAMPLE:
            sample = self.spark.sql(f"SELECT * FROM ({sql}) LIMIT {RELOAD_SAMPLE}").toArrow()
            slices = reload_slices(rows, width, sample.nbytes / sample.num_rows)
        if slices == 1:
            yield self.spark.sql(sql).toArrow()
            return
        hashed = f"pmod(hash({', '.join(f's.{q(k)}' for k in key)}), {slices})"
        for number in range(slices):
            yield self.spark.sql(f"SELECT s.* FROM ({sql}) AS s WHERE {hashed} = {number}").toArrow()

    def reload(self, name: str) -> int:
        """Reload one part from the current snapshot of its table; returns the rows loaded (for an
        event source, only the events its `retained` predicate keeps)."""
        kind, table = name.split(":", 1)
        identifier = self.identifier(name)
        snapshot = self.snapshots.current(identifier)
        travel = f" VERSION AS OF {snapshot}" if snapshot is not None else ""
        if kind == "mirror":
            part = self.store.mirrors[table]
            # A snapshot is read with its own schema: a column added since (schema drift adds one
            # without a snapshot) is NULL in every row it holds.
            known = set(self.spark.sql(f"SELECT * FROM {identifier}{travel}").columns)
            columns = [q(c) if c in known else f"NULL AS {q(c)}" for c in (*part.column_names, POSITION, DELETED)]
            columns += ["_file", "_pos AS _lmv_at"] if part.located else []
            where = f" WHERE {self.retained[table]}" if table in self.retained else ""
            sql = f"SELECT {', '.join(columns)} FROM {identifier}{travel}{where}"
            if part.derived:  # each key expression a view looks rows up by, evaluated by Spark (lakemv.core.state.layout)
                derived = ", ".join(f"{over(expression, 'a')} AS {q(name)}" for name, expression in part.derived)
                sql = f"SELECT a.*, {derived} FROM ({sql}) AS a"
            loaded = 0
            with self.store.transaction():
                self.store.clear_rows(table)
                self.store.drop_indexes(table)
                for data in self._slices(sql, part.primary_key, len(columns) + len(part.derived)) if snapshot is not None else ():
                    values = columns_of(data, part.column_names + part.derived_names)
                    positions = data.column(POSITION).to_pylist()
                    deleted = data.column(DELETED).to_pylist()
                    self.store.put_rows(table, zip(zip(*values, strict=True), positions, deleted, strict=True), _locations(data, part.located))
                    loaded += data.num_rows
                self.store.rebuild_indexes(table)
                self.store.set_record(name, part.fingerprint, snapshot, None)
            return loaded
        view = self.store.views[table]
        rows = 0
        with self.store.transaction():
            self.store.clear_digests(table)
            if snapshot is not None:
                columns = [f.name for f in self.spark.table(identifier).schema.fields]
                located = ", _file, _pos AS _lmv_at" if view.located else ""
                timed, where = "", ""
                if view.settle is not None:  # the rows no event can reach again stay out (lakemv.spark.batch.local._retained)
                    timed = f", unix_micros(v.{q(view.settle)}) AS _lmv_t"
                    if table in self.settled:
                        where = f" WHERE NOT coalesce(v.{q(view.settle)} < timestamp_micros({self.settled[table][1]}), FALSE)"
                sql = (
                    f"SELECT {', '.join(q(k) for k in view.key)}, {digest_sql(columns, 'v')} AS {DIGEST}{located}{timed} "
                    f"FROM {identifier}{travel} AS v{where}"
                )
                for data in self._slices(sql, view.key, len(view.key) + 3):
                    keys = list(zip(*columns_of(data, view.key), strict=True)) if data.num_rows else []
                    times = data.column("_lmv_t").to_pylist() if timed else None
                    digests = zip(keys, data.column(DIGEST).to_pylist(), strict=True)
                    self.store.put_digests(table, digests, (), _locations(data, view.located), times)
                    rows += data.num_rows
            self.store.set_record(name, view.fingerprint, snapshot, None)
        return rows


def reload_slices(rows: int, width: int, row_bytes: float) -> int:
    """Slices for a reload of `rows` rows of `width` columns, `row_bytes` each in Arrow: at most
    `RELOAD_CELLS` values, and `RELOAD_BYTES` in one slice (its rows may be one task's: one file)."""
    return max(1, -(-rows * width // RELOAD_CELLS), int(-(-rows * row_bytes // RELOAD_BYTES)))


def _locations(data, located: bool):  # noqa: ANN001, ANN202
    """Each row's (file, position) from a reload's `_file` and `_pos` columns, or None when not kept."""
    if not located:
        return None
    return zip(data.column("_file").to_pylist(), data.column("_lmv_at").to_pylist(), strict=True)


def digest_sql(columns: list[str], alias: str) -> str:
    """Spark SQL for the digest of a view row: the same text for a recomputed row and a stored one."""
    fields = ", ".join(f"'{c}', {alias}.{q(c)}" for c in columns)
    return f"md5(to_json(named_struct({fields})))"


def record_mirrors(
    sync: StoreSync, rows: Mapping[str, list], write_id: str, committed: Mapping[str, Committed | None] | None = None
) -> list[str]:
    """Apply a unit's applied mirror rows to the store and record the snapshots they made, in one
    transaction (placed from the direct commits in `committed` that directly follow what the store
    reflects); returns the parts that had to be reloaded instead (someone else committed too)."""
    reload = []
    with sync.store.transaction():
        for table, items in rows.items():
            name = f"mirror:{table}"
            made = (committed or {}).get(table)
            if sync.follows(name, made, write_id):
                sync.put_placed(table, items, made, write_id)  # type: ignore[arg-type]
                continue
            step = sync.advance(name, write_id)
            if step is not None:
                sync.store.put_rows(table, items)
                if sync.relocate(name, step.moved):
                    sync.store.set_record(name, sync.store.mirrors[table].fingerprint, step.current, write_id)
                    continue
            reload.append(name)
    for name in reload:
        sync.reload(name)
    return reload
