"""A batch of raw lines turned into per-table, deduplicated change sets plus dead letters. Pure.

Dedupe rule: per primary key the change with the highest source position wins; on equal positions
the later line wins (a replay of the same event is identical anyway). The mirror MERGE then applies a
change only if its position is newer than the stored one, so the same rule holds across batches.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import mirror_arrow_schema
from lakemv.core.cdc.envelope import Change, Skip, Truncate, parse_envelope
from lakemv.core.cdc.events import DUPLICATE, LATE_COUNTED, first_per_key, late_reason, parse_event
from lakemv.core.cdc.unavailable import Lookup, carry, fill, lost_reason, unfilled_keys
from lakemv.core.errors import ConfigError, EnvelopeError


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A line that could not be applied, with the reason; stored in the dead-letter table."""

    raw: str
    source_file: str
    table: str | None
    reason: str


@dataclass
class ChangeSet:
    """What one batch of lines amounts to: latest change per key and table, dead letters, skips."""

    changes: dict[str, list[Change]] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    events: int = 0  # lines that parsed into a change, before dedupe
    new_fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # table -> field -> first non-null value
    absent: dict[str, Counter[str]] = field(default_factory=dict)  # table -> declared column -> images lacking it
    rows: dict[str, pa.Table] = field(default_factory=dict)  # mirror rows per table, when Spark parsed the unit (lakemv.spark.bulk)
    set_wise: int = 0  # lines Spark parsed (lakemv.spark.bulk)
    line_by_line: int = 0  # lines of such a unit parsed one by one in the driver (parse_line)
    truncates: dict[str, list[Truncate]] = field(default_factory=dict)  # TRUNCATEs per table (see `expand_truncates`)
    late: Counter[str] = field(default_factory=Counter)  # per event source: events older than its watermark (counted or dead letters)

    @property
    def max_position(self) -> dict[str, int]:
        return {t: max(c.position for c in cs) for t, cs in self.changes.items() if cs}


def local_path(file_path: str) -> str:
    """A local file's path on disk, from a `file:` URI (as Spark and Iceberg spell it) or a plain path."""
    path = urlparse(file_path).path if "://" in file_path or file_path.startswith("file:") else file_path
    return unquote(path)


def check_landing(landing: Path) -> None:
    """A landing path that is missing, or a file, is a usage error (ConfigError) before anything starts."""
    if not landing.exists():
        raise ConfigError("landing directory does not exist", str(landing))
    if not landing.is_dir():
        raise ConfigError("the landing path is a file, not a directory of <table>/ folders", str(landing))


@functools.lru_cache(maxsize=4096)
def table_of(file_path: str) -> str:
    """The source table a landing file belongs to: the name of its parent folder (every line of a
    file asks: remembered per file)."""
    return PurePosixPath(local_path(file_path)).parent.name


def latest_per_key(changes: Iterable[Change]) -> list[Change]:
    """Keep, per primary key, the change with the highest position (later one on a tie)."""
    best: dict[tuple[Any, ...], Change] = {}
    for change in changes:
        current = best.get(change.key)
        if current is None or change.position >= current.position:
            best[change.key] = change
    return list(best.values())


def parse_line(
    text: str | None,
    file: str,
    sources: Mapping[str, SourceTable],
    result: ChangeSet,
    max_line_chars: int | None = None,
    watermarks: Mapping[str, int | None] | None = None,
) -> Change | None:
    """Parse one `(line, file)` pair: its change, or None after recording its dead letter or skip in
    `result` (which also counts the event and notes fields the declaration lacks or misses).

    An event older than its source's watermark in `watermarks` is late: a dead letter or counted."""
    table = table_of(file)
    if text is not None and not text.isascii():
        bad = utf8_error(text)
        if bad is not None:
            result.dead_letters.append(DeadLetter(printable(text), file, table, bad))
            return None
    if text is not None and max_line_chars is not None and len(text) > max_line_chars:
        reason = f"line of {len(text):,} characters is over the limit of {max_line_chars:,} (LAKEMV_MAX_LINE_CHARS)"
        result.dead_letters.append(DeadLetter(text, file, table, reason))
        return None
    source = sources.get(table)
    if source is None:
        known = ", ".join(sorted(sources))
        result.dead_letters.append(DeadLetter(text or "", file, table, f"unknown table folder {table!r}: declared sources are {known}"))
        return None
    try:
        outcome = parse_event(text, source) if source.is_events else parse_envelope(text, source)
    except EnvelopeError as exc:
        result.dead_letters.append(DeadLetter(text or "", file, table, str(exc)))
        return None
    if isinstance(outcome, Skip):
        result.skipped[outcome.reason] += 1
        return None
    if isinstance(outcome, Truncate):
        result.events += 1
        result.truncates.setdefault(table, []).append(outcome)
        return None
    if source.is_events and watermarks:
        late = late_reason(outcome, source, watermarks.get(table))
        if late is not None:
            result.late[table] += 1
            if source.late == "count":
                result.skipped[LATE_COUNTED] += 1
            else:
                result.dead_letters.append(DeadLetter(text or "", file, table, late))
            return None
    result.events += 1
    if outcome.unknown:
        fields = result.new_fields.setdefault(table, {})
        for name, value in outcome.unknown:
            if fields.get(name) is None:
                fields[name] = value
    if outcome.absent:
        result.absent.setdefault(table, Counter()).update(outcome.absent)
    if outcome.unavailable and text is not None:
        outcome = replace(outcome, line=(text, file))
    return outcome


def decode_lines(values: Iterable[bytes | None]) -> list[str | None]:
    """Raw lines (bytes, None for a Kafka tombstone) as text. A line that is not UTF-8 keeps its bytes
    as lone surrogates (`surrogateescape`), so `parse_line` can make it a dead letter with its reason
    rather than the batch failing to decode."""
    return [None if v is None else v.decode("utf-8", "surrogateescape") for v in values]


def utf8_error(text: str) -> str | None:
    """Why a decoded line is not UTF-8 (the first undecodable byte and where), or None if it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        offset = len(text[: exc.start].encode("utf-8", "surrogateescape"))
        byte = text[exc.start].encode("utf-8", "surrogateescape")[0] if "\udc80" <= text[exc.start] <= "\udcff" else None
        found = f"byte 0x{byte:02x}" if byte is not None else "a lone surrogate"
        return f"not valid UTF-8: {found} at byte offset {offset:,}"
    return None


def printable(text: str) -> str:
    """A line for the dead-letter table: undecodable bytes written as `\\xff` escapes."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def build_changeset(
    lines: Iterable[tuple[str | None, str]],
    sources: Mapping[str, SourceTable],
    max_line_chars: int | None = None,
    watermarks: Mapping[str, int | None] | None = None,
    lookup: Lookup | None = None,
    applied: Callable[[], int] | None = None,
    live_keys: Callable[[str], list[tuple]] | None = None,
) -> ChangeSet:
    """Parse `(line, file)` pairs and dedupe them per table; a line over `max_line_chars` is not parsed.
    `lookup(table, keys)` gives stored live rows, to keep the values Debezium sent no value for;
    `applied()` the highest source position the lake holds, to place incremental snapshot reads;
    `live_keys(table)` the keys of a table's live rows, for a TRUNCATE."""
    result = ChangeSet()
    parsed: dict[str, list[Change]] = {}
    placed = ReadPlacer(applied)
    for text, file in lines:
        change = parse_line(text, file, sources, result, max_line_chars, watermarks)
        if change is not None:
            parsed.setdefault(change.table, []).append(placed(change))
    for table in result.truncates:
        parsed.setdefault(table, [])
    result.changes = {
        table: dedupe(sources[table], expand_truncates(keep_unavailable(sources[table], changes, result, lookup), result.truncates.get(table), live_keys), result)
        for table, changes in parsed.items()
    }  # fmt: skip
    return result


def expand_truncates(changes: list[Change], truncates: list[Truncate] | None, live_keys: Callable[[str], list[tuple]] | None) -> list[Change]:
    """A TRUNCATE as what it does: a delete, at its position, of every row the table held before it:
    those the lake holds (`live_keys`) and those this unit's earlier changes made. Changes after it
    (higher positions) win over those deletes as any later change does."""
    if not truncates:
        return changes
    table = truncates[0].table
    held = list(live_keys(table)) if live_keys is not None else []
    deletes = []
    for truncate in truncates:
        keys = dict.fromkeys([*held, *(c.key for c in changes if c.position < truncate.position)])
        deletes += [Change(table, "d", key, truncate.position, truncate.source_ts_ms, None) for key in keys]
    return [*changes, *deletes]


class ReadPlacer:
    """Gives an incremental snapshot's read (Debezium sends it with no LSN) the position of the change
    before it in the stream: Debezium emits a read when its chunk's window closes and drops it if the
    row changed within the window, so it is newer than every change before it and older than every
    change after it. Changes pass in stream order; the first read asks `applied()` for where the lake
    stands."""

    def __init__(self, applied: Callable[[], int] | None):
        self.applied = applied
        self.high: int | None = None

    def saw(self, position: int) -> None:
        if self.high is None or position > self.high:
            self.high = position

    def __call__(self, change: Change) -> Change:
        if not change.follows:
            self.saw(change.position)
            return change
        if self.applied is not None:
            self.high = max(self.high or 0, self.applied())
            self.applied = None
        return replace(change, position=self.high or 0)


def keep_unavailable(source: SourceTable, changes: list[Change], result: ChangeSet, lookup: Lookup | None) -> list[Change]:
    """A table's changes with Debezium's unavailable values replaced by the row's previous ones
    (`lakemv.core.cdc.unavailable`); a change whose value nothing holds becomes a dead letter."""
    if not any(c.unavailable for c in changes):
        return changes
    changes = carry(source, changes)
    keys = unfilled_keys(changes)
    if not keys:
        return changes
    kept, lost = fill(source, changes, lookup(source.name, keys) if lookup is not None else {})
    for change in lost:
        text, file = change.line or ("", "")
        result.dead_letters.append(DeadLetter(text, file, source.name, lost_reason(change)))
    result.events -= len(lost)
    return kept


def dedupe(source: SourceTable, changes: list[Change], result: ChangeSet) -> list[Change]:
    """A table's changes, one per key: the latest change of a row, the first line of an event id
    (its repeats are counted in `result`)."""
    if not source.is_events:
        return latest_per_key(changes)
    kept, repeats = first_per_key(changes)
    if repeats:
        result.skipped[DUPLICATE] += repeats
    return kept


def change_values(table: pa.Table) -> list[tuple[Any, ...]]:
    """Arrow rows as a parsed change holds its values: timestamps as epoch micros, dates as epoch days."""
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        elif pa.types.is_date32(column.type):
            column = column.cast(pa.int32())
        columns.append(column.to_pylist())
    return list(zip(*columns, strict=True)) if columns else []


def changes_to_arrow(source: SourceTable, changes: list[Change], batch_id: int, ingested_at_micros: int) -> pa.Table:
    """Mirror rows for `changes`: deletes become tombstones carrying only the key."""
    names = source.column_names
    key_index = [names.index(k) for k in source.primary_key]
    width = len(names)
    columns: list[list[Any]] = [[] for _ in range(width)]
    for change in changes:
        if change.row is not None:
            row = change.row
        else:
            filled: list[Any] = [None] * width
            for index, value in zip(key_index, change.key, strict=True):
                filled[index] = value
            row = tuple(filled)
        for index in range(width):
            columns[index].append(row[index])
    count = len(changes)
    bookkeeping = [
        [c.position for c in changes],
        [c.op for c in changes],
        [c.is_delete for c in changes],
        [c.source_ts_ms * 1000 if c.source_ts_ms is not None else None for c in changes],
        [ingested_at_micros] * count,
        [batch_id] * count,
    ]
    schema = mirror_arrow_schema(source)
    arrays = [pa.array(values, type=f.type) for values, f in zip([*columns, *bookkeeping], schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)
