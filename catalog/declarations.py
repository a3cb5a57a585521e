"""Source table declarations: data (one TOML file per table), parsed into frozen, validated objects.

A declaration file looks like::

    name = "users"
    primary_key = ["email"]
    unique = [["username"]]                     # optional; column sets the source keeps unique too
    ordering = ["source.lsn", "source.ts_ms"]   # optional; first field present in an envelope wins
    topic = "github.public.users"               # optional; the Kafka topic (default <prefix>.<schema>.<name>)
    columns = [
      { name = "id", type = "bigint" },
      { name = "email", type = "string" },
      { name = "registered_at", type = "timestamp", encoding = "micros" },
      { name = "balance", type = "decimal(12,2)" },
    ]

An append-only event source (page views, searches, clicks: plain JSON objects, one per line, never
updated) says so, names its event id and event time, and how late an event may arrive::

    name = "page_views"
    kind = "events"
    event_id = "view_id"          # duplicates (a redelivery) are dropped by it; it is the table's key
    event_time = "viewed_at"      # a timestamp column: windows, lateness and retention are on it
    lateness = "10 minutes"       # watermark = newest event time seen - lateness; older events are late
    late = "dead_letter"          # or "count": a late event is a dead letter with its reason, or counted
    partition = "hour"            # the events table is partitioned by hours (or days) of event time

Onboarding a new source is dropping such a file into a sources folder; no code changes.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lakemv.core.durations import format_duration, parse_duration
from lakemv.core.errors import ConfigError
from lakemv.core.types import arrow_type, spark_ddl

ColumnType = Literal["string", "bigint", "int", "double", "boolean", "timestamp", "date", "time", "decimal"]
# How a value is encoded on the wire when the message carries no Connect schema that says so
# (Debezium: MicroTimestamp, Timestamp, NanoTimestamp, ZonedTimestamp / ISO strings, Date as days
# since the epoch, MicroTime / Time / NanoTime since midnight; a decimal as base64 of its unscaled
# big-endian bytes, decimal.handling.mode=precise, or as text, =string).
Encoding = Literal["micros", "millis", "nanos", "iso", "days", "base64", "string"]
_DECIMAL = re.compile(r"^decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
# Encodings each type accepts, the first its default.
ENCODINGS: Mapping[str, tuple[str, ...]] = {
    "timestamp": ("micros", "millis", "nanos", "iso"),
    "date": ("days", "iso"),
    "time": ("micros", "millis", "nanos", "iso"),
    "decimal": ("base64", "string"),
}
# Lower-case identifiers; a leading underscore is not allowed, which keeps the mirrors' `_lmv_*`
# bookkeeping columns (and Iceberg's reserved `_deleted`, `_pos`, ...) clear of declared names.
IDENTIFIER = r"^[a-z][a-z0-9_]*$"



class Column(BaseModel):
    """One declared source column and, for temporal types, how its values are encoded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=IDENTIFIER)
    type: ColumnType
    encoding: Encoding | None = None
    precision: int | None = Field(default=None, ge=1, le=38)  # decimal only: `type = "decimal(12,2)"`
    scale: int | None = Field(default=None, ge=0, le=38)

    @model_validator(mode="before")
    @classmethod
    def _decimal_type(cls, data: Any) -> Any:
        """`type = "decimal(p,s)"` as users write it (and as Spark spells the type)."""
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            found = _DECIMAL.match(data["type"].strip().lower())
            if found:
                return {**data, "type": "decimal", "precision": int(found[1]), "scale": int(found[2])}
        return data

    @model_validator(mode="after")
    def _check_encoding(self) -> Column:
        allowed = ENCODINGS.get(self.type, ())
        if self.encoding is not None and self.encoding not in allowed:
            raise ValueError(f"column {self.name!r}: encoding {self.encoding!r} does not apply to type {self.type}")
        if self.type == "decimal":
            if self.precision is None or self.scale is None:
                raise ValueError(f"column {self.name!r}: a decimal needs its precision and scale, e.g. type = \"decimal(12,2)\"")
            if self.scale > self.precision:
                raise ValueError(f"column {self.name!r}: scale {self.scale} is larger than precision {self.precision}")
        elif self.precision is not None or self.scale is not None:
            raise ValueError(f"column {self.name!r}: precision and scale apply to decimal columns only")
        return self

    @property
    def wire_encoding(self) -> Encoding | None:
        """The encoding in force: the declared one, else Debezium's default for the type."""
        if self.encoding is not None:
            return self.encoding
        defaults = ENCODINGS.get(self.type)
        return defaults[0] if defaults else None  # type: ignore[return-value]

    @property
    def kind(self) -> str:
        """The type with its parameters, as the mirror's schema spells it: `decimal(12,2)`, `bigint`."""
        return f"decimal({self.precision},{self.scale})" if self.type == "decimal" else self.type

    @property
    def spark_type(self) -> str:
        return spark_ddl(arrow_type(self.kind))


class SourceTable(BaseModel):
    """A declared source table: its columns, primary key and the envelope fields that order changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=IDENTIFIER)
    columns: tuple[Column, ...] = Field(min_length=1)
    primary_key: tuple[str, ...] = Field(min_length=1)
    # "table": a CDC table of Debezium envelopes; "events": append-only plain JSON events (see above).
    kind: Literal["table", "events"] = "table"
    event_id: str | None = None
    event_time: str | None = None
    lateness: str = "0 seconds"  # events only: how far behind the newest event time an event may be
    late: Literal["dead_letter", "count"] = "dead_letter"
    partition: Literal["hour", "day"] = "day"
    # Column sets the source database keeps unique besides the primary key (SQL UNIQUE: NULLs may
    # repeat). The planner accepts a join on one as matching at most one row; ingest checks it.
    unique: tuple[tuple[str, ...], ...] = ()
    ordering: tuple[str, ...] = ("source.lsn", "source.ts_ms")
    # The Kafka topic of its changes; default Debezium's `<prefix>.<schema>.<name>` (settings).
    topic: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]+$")

    @model_validator(mode="before")
    @classmethod
    def _event_key(cls, data: Any) -> Any:
        """An event source is keyed by its event id: `primary_key` need not be written."""
        if isinstance(data, dict) and data.get("kind") == "events" and "primary_key" not in data:
            if not data.get("event_id") or not data.get("event_time"):
                raise ValueError("an event source needs event_id (the column that identifies an event) and event_time")
            return {**data, "primary_key": [data["event_id"]]}
        return data

    @model_validator(mode="after")
    def _check_events(self) -> SourceTable:
        if self.kind != "events":
            for name in ("event_id", "event_time", "lateness", "late", "partition"):
                if name in self.model_fields_set:
                    raise ValueError(f"{name} applies to event sources only: add kind = \"events\"")
            return self
        if self.event_id is None or self.event_time is None:
            raise ValueError("an event source needs event_id (the column that identifies an event) and event_time")
        names = {c.name: c for c in self.columns}
        if self.event_id not in names:
            raise ValueError(f"event_id {self.event_id!r} is not a declared column")
        if self.primary_key != (self.event_id,):
            raise ValueError(f"an event source is keyed by its event id: primary_key must be [{self.event_id!r}] or left out")
        if self.event_time not in names:
            raise ValueError(f"event_time {self.event_time!r} is not a declared column")
        if names[self.event_time].type != "timestamp":
            raise ValueError(f"event_time {self.event_time!r} must be a timestamp column, not {names[self.event_time].type}")
        if self.unique:
            raise ValueError("an event source has no unique keys besides its event id")
        parse_duration(self.lateness)  # ValueError names what is accepted
        return self

    @property
    def is_events(self) -> bool:
        return self.kind == "events"

    @property
    def lateness_micros(self) -> int:
        """The declared allowed lateness of an event source, in microseconds."""
        return parse_duration(self.lateness)

    def describe_lateness(self) -> str:
        return format_duration(self.lateness_micros)

    @model_validator(mode="after")
    def _check(self) -> SourceTable:
        names = [c.name for c in self.columns]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate columns: {', '.join(duplicates)}")
        missing = [k for k in self.primary_key if k not in names]
        if missing:
            raise ValueError(f"primary key column(s) not declared: {', '.join(missing)}")
        for columns in self.unique:
            if not columns:
                raise ValueError("a unique key needs at least one column")
            missing = [c for c in columns if c not in names]
            if missing:
                raise ValueError(f"unique key column(s) not declared: {', '.join(missing)}")
            if len(set(columns)) != len(columns):
                raise ValueError(f"unique key ({', '.join(columns)}) lists a column twice")
        for path in self.ordering:
            if path.split(".")[0] not in ("source", "ts_ms") or not path.replace(".", "").replace("_", "").isalnum():
                raise ValueError(f"ordering field {path!r} must be 'ts_ms' or a 'source.<field>' path")
        return self

    @property
    def is_view(self) -> bool:
        return False

    @property
    def key_never_null(self) -> bool:
        """A source's primary-key columns never hold NULL (the database's primary key)."""
        return True

    @property
    def column_names(self) -> tuple[str, ...]:  # (not cached: model_copy, as schema drift uses it, would keep it stale)
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)


class ViewColumn(BaseModel):
    """One output column of a view another view reads (its type is Spark's, found when its table is made)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    spark_type: str = "string"  # (the planner reads names; the rows carry their own types)


class ViewSource(BaseModel):
    """A view read by another view, as the planner and the view step see a table: its output columns,
    its key as primary key (which, unlike a source's, may hold a NULL: a GROUP BY's NULL group), no
    other unique key, never events. `fingerprint` is the upstream view's: a reader's rows were
    computed from that definition (`lakemv.core.planner.dag`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=IDENTIFIER)
    columns: tuple[ViewColumn, ...] = Field(min_length=1)
    primary_key: tuple[str, ...] = Field(min_length=1)
    fingerprint: str
    kind: Literal["view"] = "view"
    # A view whose key is constants has at most one row (a total): every key of a reader reads it,
    # without an equality; and no two of its rows share the empty column set (`unique`).
    single_row: bool = False
    unique: tuple[tuple[str, ...], ...] = ()
    event_id: None = None
    event_time: None = None
    lateness_micros: int = 0

    @property
    def is_events(self) -> bool:
        return False

    @property
    def is_view(self) -> bool:
        return True

    @property
    def key_never_null(self) -> bool:
        return False

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


class SourceRegistry(Mapping[str, SourceTable]):
    """All declared sources by name, loaded from one or more folders of TOML files."""

    def __init__(self, tables: Iterable[SourceTable]):
        self._tables: dict[str, SourceTable] = {}
        for table in tables:
            if table.name in self._tables:
                raise ConfigError(f"source {table.name!r} is declared twice")
            self._tables[table.name] = table

    def __getitem__(self, name: str) -> SourceTable:
        return self._tables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def __repr__(self) -> str:
        return f"SourceRegistry({', '.join(self._tables)})"


def read_definition(path: Path) -> str:
    """A definition file's text; one that cannot be read, or is not UTF-8, is a ConfigError naming it."""
    try:
        text = path.read_bytes().decode("utf-8")
        if not text.strip():
            raise ConfigError("the file is empty", str(path))
        return text
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}; save the file as UTF-8", str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror}", str(path)) from None


def parse_source(text: str, location: str) -> SourceTable:
    """Parse one TOML declaration; errors name the file and the offending field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", location) from None
    try:
        return SourceTable.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "declaration"
        raise ConfigError(f"{where}: {first['msg']}", location) from None


def load_sources(dirs: Iterable[Path]) -> SourceRegistry:
    """Load every `*.toml` declaration from the given folders (missing folders are an error)."""
    tables = []
    for folder in dirs:
        check_folder(folder, "sources folder")
        found = sorted(folder.glob("*.toml"))
        if not found:
            raise ConfigError("sources folder holds no declarations (<table>.toml files)", str(folder))
        for path in found:
            tables.append(parse_source(read_definition(path), str(path)))
    return SourceRegistry(tables)


def check_folder(folder: Path, what: str) -> None:
    """A ConfigError unless `folder` is a folder, saying what it is instead."""
    if folder.is_file():
        raise ConfigError(f"{what} is a file, not a folder", str(folder))
    if not folder.is_dir():
        raise ConfigError(f"{what} does not exist", str(folder))
