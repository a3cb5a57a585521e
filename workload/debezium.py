"""Debezium PostgreSQL-connector envelopes for declared sources, and landing files that hold them."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lakemv.catalog.declarations import Column, SourceTable
from lakemv.core.types import TYPES, WIRE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
def encode_value(column: Column, value: Any) -> Any:
    """Encode a model value (timestamps as epoch micros, dates as days) the way Debezium sends it."""
    if value is None or column.type not in ("timestamp", "date"):
        return value
    encoding = column.wire_encoding
    if column.type == "date":
        return value if encoding == "days" else (_EPOCH + timedelta(days=value)).date().isoformat()
    if encoding == "micros":
        return value
    if encoding == "millis":
        return value // 1000
    if encoding == "nanos":
        return value * 1000
    return (_EPOCH + timedelta(microseconds=value)).isoformat().replace("+00:00", "Z")


def _field_schema(column: Column, key: bool) -> dict[str, Any]:
    wire = (column.type, column.wire_encoding)
    kind, name = WIRE[wire][:2] if wire in WIRE else (TYPES[column.type].connect, None)
    schema: dict[str, Any] = {"type": kind, "optional": not key, "field": column.name}
    if name:
        schema.update(name=name, version=1)
    return schema


def connect_schema(source: SourceTable, server: str = "github") -> dict[str, Any]:
    """The Kafka Connect schema Debezium puts beside the payload when schemas are enabled."""
    value_name = f"{server}.public.{source.name}.Value"
    fields = [_field_schema(c, c.name in source.primary_key) for c in source.columns]
    image = {"type": "struct", "fields": fields, "optional": True, "name": value_name}
    source_fields = [
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "field": "snapshot"},
        {"type": "string", "optional": False, "field": "table"},
        {"type": "int64", "optional": True, "field": "txId"},
        {"type": "int64", "optional": True, "field": "lsn"},
    ]
    return {
        "type": "struct",
        "optional": False,
        "name": f"{server}.public.{source.name}.Envelope",
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            {"type": "struct", "fields": source_fields, "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def envelope(
    source: SourceTable,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    lsn: int,
    ts_ms: int,
    snapshot: bool = False,
) -> dict[str, Any]:
    """A Debezium change event (payload only) with images encoded per the declaration."""

    def encode(image: dict[str, Any] | None) -> dict[str, Any] | None:
        if image is None:
            return None
        return {c.name: encode_value(c, image[c.name]) for c in source.columns if c.name in image}

    return {
        "before": encode(before),
        "after": encode(after),
        "source": {
            "version": "3.6.0.Final",
            "connector": "postgresql",
            "name": "github",
            "ts_ms": ts_ms,
            "snapshot": "true" if snapshot else "false",
            "db": "github",
            "schema": "public",
            "table": source.name,
            "txId": lsn // 16,
            "lsn": lsn,
        },
        "op": op,
        "ts_ms": ts_ms + 7,
        "transaction": None,
    }


def write_landing_files(
    out: Path,
    table: str,
    events: Iterable[dict[str, Any]],
    schema: dict[str, Any],
    rng: random.Random,
    prefix: str,
    files: int = 1,
    wrapped_share: float = 0.5,
) -> list[Path]:
    """Spread `events` over `files` JSON-lines files in `out/table/`; each file is written under a
    hidden name and renamed, so a running ingest never sees half a file."""
    folder = out / table
    folder.mkdir(parents=True, exist_ok=True)
    buckets: list[list[str]] = [[] for _ in range(max(1, files))]
    for event in events:
        wrapped = rng.random() < wrapped_share
        line = json.dumps({"schema": schema, "payload": event} if wrapped else event, separators=(",", ":"))
        buckets[rng.randrange(len(buckets))].append(line)
    written = []
    for lines in buckets:
        if not lines:
            continue
        name = f"{prefix}-{rng.getrandbits(64):016x}.json"
        hidden = folder / f".{name}.tmp"
        hidden.write_text("\n".join(lines) + "\n")
        os.replace(hidden, folder / name)
        written.append(folder / name)
    return written
