"""The batch journal: what a batch will change, made durable before the first table changes.

A batch's effect on the views depends on the mirrors' rows *before* the batch (the old images). After
a crash part-way, those rows may already be overwritten, so they cannot be looked up again. The
journal keeps, per table, the change rows the batch applies and the old and new images of the rows
they change. A replay of the batch reads them back instead of recomputing them, and so does exactly
what the first attempt would have done.

It lives in the stream's checkpoint folder (`<checkpoint>/lakemv-journal/<batch>.<chunk>/`), on the
local disk or in the object store with the checkpoint, as Arrow IPC files. Each file is written
atomically and the entry's manifest last: an entry counts only once its manifest is there, so a crash
leaves the whole entry or none (an object store has no rename). Entries of committed batches are
removed as later batches start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from lakemv.catalog.storage import Location, as_location
from lakemv.core.cdc.events import lowest


@dataclass(frozen=True, order=True)
class BatchRef:
    """One unit of ingest work: batch `batch` of stream `stream`, part `chunk` of it."""

    stream: str
    batch: int
    chunk: int = 0

    @property
    def write_id(self) -> str:
        """The tag its Iceberg commits carry (see lakemv.spark.commits)."""
        return f"{self.stream}:{self.batch}.{self.chunk}"

    @property
    def batch_prefix(self) -> str:
        """What the journal entry of every unit of this batch is named by first."""
        return f"{self.batch:012d}."

    @property
    def entry_name(self) -> str:
        return f"{self.batch_prefix}{self.chunk:06d}"


@dataclass(frozen=True)
class TablePlan:
    """What a batch does to one mirror: the change rows it MERGEs and the images views need."""

    rows: pa.Table
    images: pa.Table | None  # old and new images of the rows that change; None if no view reads it


def _write(place: Location, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    place.write_bytes(sink.getvalue().to_pybytes())


def _read(place: Location) -> pa.Table:
    return ipc.open_file(pa.BufferReader(place.read_bytes())).read_all()


class Journal:
    """The journal of one ingest stream."""

    def __init__(self, root: Location | Path):
        self.root = as_location(root)

    def _entry(self, ref: BatchRef) -> Location:
        return self.root / ref.entry_name

    def _manifest(self, entry: Location) -> dict | None:
        try:
            return json.loads((entry / "manifest.json").read_text())
        except FileNotFoundError:
            return None

    def _own(self, ref: BatchRef) -> dict | None:
        """The manifest saved for `ref` (None: none yet, or a checkpoint folder reused by another stream)."""
        meta = self._manifest(self._entry(ref))
        return meta if meta is not None and meta["write_id"] == ref.write_id else None

    def load(self, ref: BatchRef) -> dict[str, TablePlan] | None:
        """The plan saved for `ref`, or None when this is the batch's first attempt."""
        meta = self._own(ref)
        if meta is None:
            return None
        entry = self._entry(ref)
        plans = {}
        for table, has_images in meta["tables"].items():
            images = _read(entry / f"{table}.images.arrow") if has_images else None
            plans[table] = TablePlan(_read(entry / f"{table}.rows.arrow"), images)
        return plans

    def watermarks(self, ref: BatchRef) -> dict[str, int | None] | None:
        """The event sources' watermarks `ref`'s first attempt judged lateness by (None: no entry)."""
        meta = self._own(ref)
        return dict(meta.get("watermarks", {})) if meta is not None else None

    def holds(self, ref: BatchRef) -> bool | None:
        """Whether `ref`'s first attempt held its views' keys for a backlog's end (None: no entry)."""
        meta = self._own(ref)
        return bool(meta.get("hold", False)) if meta is not None else None

    def save(
        self, ref: BatchRef, plans: Mapping[str, TablePlan], watermarks: Mapping[str, int | None] | None = None, hold: bool = False
    ) -> None:
        """Make `plans` durable for `ref` (atomically: a crash leaves the whole entry or none), with the
        watermarks its events were judged by, so a replay finds the same events late, and whether it
        held its views' keys (`hold`), so a replay does what its first attempt did."""
        entry = self._entry(ref)
        (entry / "manifest.json").remove()  # an older entry of the same name no longer counts
        for table, plan in plans.items():
            _write(entry / f"{table}.rows.arrow", plan.rows)
            if plan.images is not None:
                _write(entry / f"{table}.images.arrow", plan.images)
        entry.sync()
        meta = {
            "write_id": ref.write_id,
            "tables": {t: p.images is not None for t, p in plans.items()},
            "watermarks": dict(watermarks or {}),
            "hold": hold,
            "saved_at": time.time(),  # snapshots since then may be needed by a replay (oldest_pending)
        }
        (entry / "manifest.json").write_text(json.dumps(meta))
        entry.sync()
        self.root.sync()

    def _manifests(self) -> list[dict]:
        found = []
        for name in self.root.children():
            if name[0].isdigit():
                meta = self._manifest(self.root / name)
                if meta is not None:
                    found.append(meta)
        return found

    def pending_watermarks(self) -> dict[str, int | None]:
        """Per event source, the lowest watermark a unit still in the journal was judged by (None: one
        was judged before the source had a watermark): what a replay may need events back to."""
        found: dict[str, int | None] = {}
        for meta in self._manifests():
            for source, mark in meta.get("watermarks", {}).items():
                found[source] = lowest(found[source], mark) if source in found else mark
        return found

    def oldest_saved_at(self) -> float | None:
        """When the oldest unit still in the journal was saved (epoch seconds): a replay of it looks
        for its earlier commits in the snapshots since, so snapshot expiry keeps those."""
        times = [meta.get("saved_at", 0.0) for meta in self._manifests()]  # an entry from before the stamp: as old as can be
        return min(times) if times else None

    def write_ids(self) -> set[str]:
        """Write ids of the units with an entry: the last batch's, which a restart may replay."""
        return {meta["write_id"] for meta in self._manifests()}

    def forget_before(self, ref: BatchRef) -> None:
        """Drop entries of batches before `ref`'s (Spark committed them), and the temporary folders an
        earlier version of the journal renamed into place.

        Earlier chunks of `ref`'s own batch stay: a crash now replays the whole batch, chunk 0 first.
        """
        for name in self.root.children():
            if name.startswith(".tmp-") or (name[0].isdigit() and name < ref.batch_prefix):
                (self.root / name / "manifest.json").remove()  # first: a half-removed entry does not count
                (self.root / name).remove()
