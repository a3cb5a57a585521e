"""The batch journal: what a batch will change, made durable before the first table changes.

A batch's effect on the views depends on the mirrors' rows *before* the batch (the old images). After
a crash part-way, those rows may already be overwritten, so they cannot be looked up again. The
journal keeps, per table, the change rows the batch applies and the old and new images of the rows
they change. A replay of the batch reads them back instead of recomputing them, and so does exactly
what the first attempt would have done.

It lives in the stream's checkpoint folder (`<checkpoint>/lakemv-journal/<batch>.<chunk>/`), as Arrow
IPC files, written into a temporary folder and renamed into place: an entry is there whole or not
at all. Entries of committed batches are removed as later batches start.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from spark.events import lowest


@dataclass(frozen=True, order=True)
class BatchRef:
    """One unit of ingest work: batch `batch` of stream `stream`, part `chunk` of it."""

    stream: str
    batch: int
    chunk: int = 0

    @property
    def write_id(self) -> str:
        """The tag its Iceberg commits carry (see spark.commits)."""
        return f"{self.stream}:{self.batch}.{self.chunk}"

    @property
    def entry_name(self) -> str:
        return f"{self.batch:012d}.{self.chunk:06d}"


@dataclass(frozen=True)
class TablePlan:
    """What a batch does to one mirror: the change rows it MERGEs and the images views need."""

    rows: pa.Table
    images: pa.Table | None  # old and new images of the rows that change; None if no view reads it


def _write(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).read_all()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """The journal of one ingest stream."""

    def __init__(self, root: Path):
        self.root = root

    def _entry(self, ref: BatchRef) -> Path:
        return self.root / ref.entry_name

    def load(self, ref: BatchRef) -> dict[str, TablePlan] | None:
        """The plan saved for `ref`, or None when this is the batch's first attempt."""
        entry = self._entry(ref)
        manifest = entry / "manifest.json"
        if not manifest.exists():
            return None
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        if meta["write_id"] != ref.write_id:  # a checkpoint folder reused by another stream
            return None
        plans = {}
        for table, has_images in meta["tables"].items():
            images = _read(entry / f"{table}.images.arrow") if has_images else None
            plans[table] = TablePlan(_read(entry / f"{table}.rows.arrow"), images)
        return plans

    def watermarks(self, ref: BatchRef) -> dict[str, int | None] | None:
        """The event sources' watermarks `ref`'s first attempt judged lateness by (None: no entry)."""
        manifest = self._entry(ref) / "manifest.json"
        if not manifest.exists():
            return None
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        return dict(meta.get("watermarks", {})) if meta["write_id"] == ref.write_id else None

    def save(self, ref: BatchRef, plans: Mapping[str, TablePlan], watermarks: Mapping[str, int | None] | None = None) -> None:
        """Make `plans` durable for `ref` (atomically: a crash leaves the whole entry or none), with the
        watermarks its events were judged by, so a replay finds the same events late."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self._entry(ref)
        temporary = self.root / f".tmp-{ref.entry_name}-{os.getpid()}"
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        for table, plan in plans.items():
            _write(temporary / f"{table}.rows.arrow", plan.rows)
            if plan.images is not None:
                _write(temporary / f"{table}.images.arrow", plan.images)
        meta = {
            "write_id": ref.write_id,
            "tables": {t: p.images is not None for t, p in plans.items()},
            "watermarks": dict(watermarks or {}),
        }
        (temporary / "manifest.json").write_text(json.dumps(meta), encoding="utf-8")
        for path in temporary.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(temporary)
        shutil.rmtree(final, ignore_errors=True)  # a half-removed older entry of the same name
        os.rename(temporary, final)
        _fsync_dir(self.root)

    def pending_watermarks(self) -> dict[str, int | None]:
        """Per event source, the lowest watermark a unit still in the journal was judged by (None: one
        was judged before the source had a watermark): what a replay may need events back to."""
        found: dict[str, int | None] = {}
        if not self.root.is_dir():
            return found
        for manifest in self.root.glob("[0-9]*/manifest.json"):
            for source, mark in json.loads(manifest.read_text(encoding="utf-8")).get("watermarks", {}).items():
                found[source] = lowest(found[source], mark) if source in found else mark
        return found

    def write_ids(self) -> set[str]:
        """Write ids of the units with an entry: the last batch's, which a restart may replay."""
        if not self.root.is_dir():
            return set()
        ids = set()
        for manifest in self.root.glob("[0-9]*/manifest.json"):
            ids.add(json.loads(manifest.read_text(encoding="utf-8"))["write_id"])
        return ids

    def forget_before(self, ref: BatchRef) -> None:
        """Drop entries of batches before `ref`'s (Spark committed them) and abandoned temp folders.

        Earlier chunks of `ref`'s own batch stay: a crash now replays the whole batch, chunk 0 first.
        """
        if not self.root.is_dir():
            return
        batch_prefix = f"{ref.batch:012d}"
        for path in self.root.iterdir():
            if path.name.startswith(".tmp-") or (path.name[0].isdigit() and path.name < batch_prefix):
                shutil.rmtree(path, ignore_errors=True)
