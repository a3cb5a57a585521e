"""Where a stream keeps its state, and which Kafka topic feeds which table - read by the stream itself,
and by `lakemv status` without Spark.

A stream's checkpoint is Spark's (offsets or file logs, commits), under the warehouse; lakemv keeps its
own files beside Spark's in it: the batch journal (`lakemv-journal/`), the transaction gates and mode
(`lakemv-transactions/`). The local indexed state lives on the driver's disk (`state_path`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import Location, as_location
from lakemv.core.cdc.changeset import local_path
from lakemv.core.errors import ConfigError


def checkpoint_dir(settings: LakeSettings, landing: Path) -> Location:
    """One checkpoint per (catalog, landing folder), kept under the warehouse."""
    digest = hashlib.sha1(f"{settings.catalog_name}:{landing.resolve()}".encode()).hexdigest()[:12]
    return settings.checkpoint_root / f"ingest-{digest}"


def state_path(settings: LakeSettings, checkpoint: Location | Path) -> Path:
    """The stream's local indexed state (lakemv.core.state), on the driver's disk, rebuilt from Iceberg if lost:
    beside its checkpoint when that is local, else in the local folder under the checkpoint's name (a
    checkpoint in an object store: the store is a SQLite file, read and written in place)."""
    checkpoint = as_location(checkpoint)
    if checkpoint.local is not None and settings.local_dir is None:
        return checkpoint.local / "lakemv-state" / "state.sqlite"
    return settings.local_root / "state" / checkpoint.name / "state.sqlite"


def stream_id(checkpoint: Location) -> str:
    """Spark's id of the streaming query, kept in the checkpoint (a new checkpoint, a new id)."""
    first = (checkpoint / "metadata").read_text().splitlines()[0]
    return str(json.loads(first)["id"])


def seen_files(checkpoint: Location) -> list[str]:
    """Every file Spark's file source has assigned to a batch so far: its source log's latest
    compaction (which holds all before it) and the batches logged after it."""
    log = checkpoint / "sources" / "0"
    names = log.children()
    compacted = max((int(n.removesuffix(".compact")) for n in names if n.endswith(".compact")), default=-1)
    logged = sorted(int(n) for n in names if n.isdigit() and int(n) > compacted)
    files = ([log / f"{compacted}.compact"] if compacted >= 0 else []) + [log / str(b) for b in logged]
    return [e["path"] for f in files for e in _log_entries(f) or []]


def unseen_files(landing: Path, checkpoint: Location) -> set[str]:
    """Landing files (as paths on disk) that no batch of the stream has taken: listed as Spark's file
    source lists them (recursively, without names starting with `_` or `.` or ending in `._COPYING_`),
    less its source log's. (A file Spark skips all the same only delays the views to the run's end.)"""
    found = set()
    for folder, dirs, files in os.walk(landing):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        found.update(os.path.join(folder, f) for f in files if not f.startswith(("_", ".")) and not f.endswith("._COPYING_"))
    root = str(landing.resolve())
    found = {os.path.join(root, os.path.relpath(f, landing)) for f in found}
    return found - {local_path(uri) for uri in seen_files(checkpoint)}


def planned_files(checkpoint: Location, batch_id: int) -> list[str]:
    """The files Spark's file source assigned to `batch_id` (from its source log in the checkpoint)."""
    log = checkpoint / "sources" / "0"
    for path in (log / str(batch_id), log / f"{batch_id}.compact"):
        entries = _log_entries(path)
        if entries is not None:
            return [e["path"] for e in entries if e.get("batchId") == batch_id]
    return []


def _log_entries(path: Location) -> list[dict] | None:
    """The entries of one file of Spark's file-source log (after its version line); None: no such file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines()[1:] if line.strip()]


@dataclass(frozen=True)
class KafkaTopics:
    """Which topic feeds which table, the data collections they are, and the transaction topic."""

    tables: Mapping[str, str]  # topic -> source table
    collections: Mapping[str, str]  # source table -> `<schema>.<table>` as Debezium names it
    transaction_topic: str | None

    @classmethod
    def of(cls, settings: LakeSettings, sources: Mapping[str, SourceTable]) -> KafkaTopics:
        tables, collections = {}, {}
        for name, source in sorted(sources.items()):
            # Debezium names a table's topic `<prefix>.<schema>.<table>`; an event stream's is its name
            topic = source.topic or (name if source.is_events else f"{settings.kafka_topic_prefix}.{settings.kafka_schema}.{name}")
            if topic in tables:
                raise ConfigError(f"topic {topic!r} is declared for both {tables[topic]} and {name}", "sources")
            tables[topic] = name
            parts = topic.split(".")
            collections[name] = ".".join(parts[-2:]) if len(parts) >= 2 else f"{settings.kafka_schema}.{name}"
        transactions = None
        if settings.kafka_transactions != "off":
            transactions = settings.kafka_transaction_topic or f"{settings.kafka_topic_prefix}.transaction"
        return cls(tables, collections, transactions)

    @property
    def pattern(self) -> str:
        """The subscribePattern: every data topic, and the transaction topic (topics may come later)."""
        names = sorted(self.tables) + ([self.transaction_topic] if self.transaction_topic else [])
        return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def kafka_checkpoint(settings: LakeSettings) -> Location:
    """One checkpoint per (catalog, topic prefix): the broker address may change, the offsets not."""
    digest = hashlib.sha1(f"{settings.catalog_name}:kafka:{settings.kafka_topic_prefix}".encode()).hexdigest()[:12]
    return settings.checkpoint_root / f"kafka-{digest}"


def consumed_offsets(checkpoint: Location) -> dict[tuple[str, int], int]:
    """Per topic partition, the offset the stream has consumed up to: the end offsets of its last
    committed batch, from Spark's checkpoint (empty before the first)."""
    committed = [int(n) for n in (checkpoint / "commits").children() if n.isdigit()]
    if not committed:
        return {}
    lines = (checkpoint / "offsets" / str(max(committed))).read_text().splitlines()
    source = json.loads(lines[2]) if len(lines) > 2 else {}  # v1, the batch's metadata, then the Kafka source's offsets
    return {(topic, int(p)): int(o) for topic, parts in source.items() for p, o in parts.items()}


def mode_path(checkpoint: Location) -> Location:
    """Where the stream records which transaction mode it ran in (read by `lakemv status`)."""
    return checkpoint / "lakemv-transactions" / "mode.json"
