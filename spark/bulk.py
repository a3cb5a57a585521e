"""Large units parsed set-wise by Spark instead of line by line in the driver.

A snapshot (`op: r`) or a backlog arrives as millions of lines. Parsing them in the driver runs at
Python speed on one core; here Spark parses them (`lakemv.core.cdc.envelopesql`, the same rules) and dedupes
them per primary key (highest position, then the later line), and only the deduplicated mirror rows
come back to the driver, as Arrow. The few lines the SQL cannot vouch for are parsed by
`parse_envelope` as always, so their dead letters and skips carry the same reasons, and take part
in the dedupe with their place in the unit. What comes out is the `ChangeSet` a small unit's lines
give, with its rows already in Arrow: the rest of the batch (journal, store, MERGE, views) is the
same code for both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import BATCH_ID, INGESTED_AT, POSITION, mirror_arrow_schema
from lakemv.core.cdc.changeset import (
    ChangeSet,
    ReadPlacer,
    changes_to_arrow,
    decode_lines,
    dedupe,
    expand_truncates,
    keep_unavailable,
    parse_line,
)
from lakemv.core.cdc.envelope import Change
from lakemv.core.cdc.envelopesql import CLEAN, CLOSES, KINDS, SEQ, beginning, parse_sql
from lakemv.core.cdc.unavailable import Lookup

_TABLE = "_lmv_table"


@dataclass(frozen=True)
class Lines:
    """A unit's landing lines still in Spark: a DataFrame of `value` and `file`, and the files it reads
    where the caller knows them (a streaming batch's frame does not say)."""

    frame: DataFrame
    files: tuple[str, ...] = ()


def lines_frame(spark: SparkSession, lines: list[tuple[str, str]]) -> Lines:
    """`(line, file)` pairs as `Lines` (for callers that hold lines in the driver, e.g. the benchmark)."""
    table = pa.table({"value": [v for v, _ in lines], "file": [f for _, f in lines]})
    return Lines(spark.createDataFrame(table))


def bulk_changeset(
    lines: Lines,
    sources: Mapping[str, SourceTable],
    batch_id: int,
    ingested_at_micros: int,
    max_line_chars: int | None,
    watermarks: Mapping[str, int | None] | None = None,
    lookup: Lookup | None = None,
    applied: Callable[[], int] | None = None,
    live_keys: Callable[[str], list[tuple]] | None = None,
) -> ChangeSet:
    """The unit's change set, parsed and deduplicated by Spark (see the module docstring).

    Runs in the session of `lines.frame` (a streaming batch's frame lives in a session of its own).
    Event sources' lines are parsed in the driver (`lakemv.core.cdc.events`), as in a small unit.
    """
    spark = lines.frame.sparkSession
    register_reader(spark)
    files = unit_files(lines)
    known = beginnings(files, sources)
    relation = f"_lmv_bulk_{batch_id}"
    # Line numbers from Spark's partition order, the same on a replay of the same files; the lines
    # are read once for every table.
    numbered = (
        lines.frame.select("value", "file")
        .withColumn(SEQ, F.monotonically_increasing_id())
        .withColumn(_TABLE, F.regexp_extract("file", r"([^/]+)/[^/]+$", 1))
        .persist()
    )
    result = ChangeSet()
    parsed: dict[str, DataFrame] = {}
    try:
        # only the tables the unit has lines of: each table's SQL costs seconds to plan (from the unit's
        # files where they are known, else by a job)
        present = {folder_of(uri) for uri in files} if files else {row[0] for row in numbered.select(_TABLE).distinct().collect()}
        for table, source in sources.items():
            if source.is_events or table not in present:
                continue
            # A view of its own per table: replacing a temp view uncaches every plan that read it.
            numbered.where(F.col(_TABLE) == table).createOrReplaceTempView(f"{relation}_{table}")
            parsed[table] = spark.sql(parse_sql(source, f"{relation}_{table}", max_line_chars, known[table])).persist()
        stray = numbered.where(~F.col(_TABLE).isin(list(parsed))).select("value", "file", SEQ)
        rest = stray
        for frame in parsed.values():
            rest = rest.unionByName(frame.where(~F.col(CLEAN)).select("value", "file", SEQ))
        fallback = raw_lines(rest)
        result.line_by_line = fallback.num_rows
        result.set_wise = numbered.count() - fallback.num_rows
        result.events += result.set_wise  # every clean line is an event; parse_line counts the rest
        python: dict[str, list[tuple[int, Change]]] = {}
        parse_lines(fallback, sources, result, max_line_chars, watermarks, python)
        if any(c.follows for changes in python.values() for _, c in changes):
            python = _place_reads(python, [parsed[t].where(F.col(CLEAN)).select(POSITION, SEQ) for t in parsed], applied)
        # A table with values Debezium did not send is parsed in the driver whole: those values are
        # the previous image's, which may be any earlier line of the unit (lakemv.core.cdc.unavailable).
        whole = sorted(
            {t for t, changes in python.items() if not sources[t].is_events and any(c.unavailable for _, c in changes)} | set(result.truncates)
        )  # and a TRUNCATE, which deletes what the unit's earlier lines made too
        for table in whole:
            clean = raw_lines(parsed[table].where(F.col(CLEAN)).select("value", "file", SEQ))
            result.set_wise -= clean.num_rows
            result.line_by_line += clean.num_rows
            result.events -= clean.num_rows
            parse_lines(clean, sources, result, max_line_chars, watermarks, python)
            changes = keep_unavailable(sources[table], [c for _, c in sorted(python.pop(table, []), key=lambda p: p[0])], result, lookup)
            changes = expand_truncates(changes, result.truncates.get(table), live_keys)
            result.rows[table] = changes_to_arrow(sources[table], dedupe(sources[table], changes, result), batch_id, ingested_at_micros)
        for table in [t for t in python if sources[t].is_events]:
            result.changes[table] = dedupe(sources[table], [c for _, c in sorted(python.pop(table), key=lambda p: p[0])], result)
        for table, frame in parsed.items():
            if table in result.rows:
                continue
            source = sources[table]
            columns = list(mirror_arrow_schema(source).names)
            clean = frame.where(F.col(CLEAN)).select(
                *[
                    F.lit(None).cast("timestamp").alias(c) if c == INGESTED_AT else F.lit(None).cast("bigint").alias(c) if c == BATCH_ID else c
                    for c in columns
                ],
                SEQ,
            )
            if table in python:
                extra = changes_to_arrow(source, [c for _, c in python[table]], batch_id, ingested_at_micros)
                extra = extra.append_column(SEQ, pa.array([s for s, _ in python[table]], type=pa.int64()))
                clean = clean.unionByName(spark.createDataFrame(extra))
            rows = _latest(clean, source).toArrow()
            if rows.num_rows:
                rows = rows.set_column(
                    rows.schema.get_field_index(INGESTED_AT),
                    INGESTED_AT,
                    pa.array([ingested_at_micros] * rows.num_rows, pa.timestamp("us", tz="UTC")),
                )
                rows = rows.set_column(rows.schema.get_field_index(BATCH_ID), BATCH_ID, pa.array([batch_id] * rows.num_rows, pa.int64()))
                result.rows[table] = rows.select(columns).cast(mirror_arrow_schema(source))
        return result
    finally:
        for table in parsed:
            spark.catalog.dropTempView(f"{relation}_{table}")
        for frame in parsed.values():
            frame.unpersist()
        numbered.unpersist()


# Per table (and the encodings its temporal columns declare), the beginnings of wrapped lines this process
# has vouched for (`lakemv.core.cdc.envelopesql.beginning`), the newest last: a Connect schema changes rarely.
_BEGINNINGS: dict[tuple, list[str]] = {}
_KEEP = 4
_SAMPLED = 16  # lines of a file looked at for a wrapped one


def _declared(table: str, source: SourceTable) -> tuple:
    return (table, *((c.name, c.type, c.wire_encoding) for c in source.columns if c.type in ("timestamp", "date")))


def unit_files(lines: Lines) -> list[str]:
    """The files a unit's lines come from, where known (the caller's list, or the frame's own reader)."""
    return list(lines.files) or list(lines.frame.inputFiles())


def folder_of(uri: str) -> str:
    """The landing folder (its table's name) of a file's URI or path."""
    return Path(unquote(urlparse(uri).path)).parent.name


def beginnings(files: list[str], sources: Mapping[str, SourceTable]) -> dict[str, list[str]]:
    """Per table, the vouched beginnings of its wrapped lines: those earlier units found, and the first
    wrapped line among the first few of one of `files` (a unit's) in each table's folder (local files; no job runs)."""
    read: set[str] = set()
    for uri in files:
        parsed = urlparse(uri)
        path = Path(unquote(parsed.path))
        table = path.parent.name
        if parsed.scheme not in ("", "file") or table in read or table not in sources or sources[table].is_events:
            continue
        read.add(table)
        found = None
        try:
            with path.open("rb") as handle:  # the first wrapped line among the file's first few
                for _ in range(_SAMPLED):
                    line = handle.readline(1 << 20)
                    if not line or (found := beginning(line.decode().rstrip("\r\n"), sources[table])) is not None:
                        break
        except (OSError, UnicodeDecodeError):
            continue
        known = _BEGINNINGS.setdefault(_declared(table, sources[table]), [])
        if found is not None and found not in known:
            known.append(found)
            del known[:-_KEEP]
    return {table: list(_BEGINNINGS.get(_declared(table, source), ())) for table, source in sources.items()}


def register_reader(spark: SparkSession) -> None:
    """The JVM functions the envelope SQL calls (`lakemv.core.cdc.envelopesql.CLOSES` and `KINDS`), in `spark`'s session."""
    spark.udf.registerJavaFunction(CLOSES, "dev.lakemv.spark.JsonCloses", "boolean")
    spark.udf.registerJavaFunction(KINDS, "dev.lakemv.spark.JsonKinds", "string")


def raw_lines(frame: DataFrame) -> pa.Table:
    """Lines for the driver with their bytes as they are (`value` as binary: a line that is not UTF-8
    must reach `parse_line` to be a dead letter, not fail the conversion)."""
    return frame.select(F.col("value").cast("binary").alias("value"), "file", SEQ).toArrow()


def parse_lines(
    lines: pa.Table,
    sources: Mapping[str, SourceTable],
    result: ChangeSet,
    max_line_chars: int | None,
    watermarks: Mapping[str, int | None] | None,
    into: dict[str, list[tuple[int, Change]]],
) -> None:
    texts = decode_lines(lines.column("value").to_pylist())
    for text, file, seq in zip(texts, *(lines.column(c).to_pylist() for c in ("file", SEQ)), strict=True):
        change = parse_line(text, file, sources, result, max_line_chars, watermarks)
        if change is not None:
            into.setdefault(change.table, []).append((seq, change))


def _place_reads(
    python: dict[str, list[tuple[int, Change]]], clean: list[DataFrame], applied: Callable[[], int] | None
) -> dict[str, list[tuple[int, Change]]]:
    """Incremental snapshot reads placed after the changes before them in the unit, those Spark parsed
    included (`lakemv.core.cdc.changeset.ReadPlacer`)."""
    positions: list[tuple[int, int | None]] = []  # (line, position of a clean line), in line order below
    for frame in clean:
        table = frame.toArrow()
        positions += zip(table.column(SEQ).to_pylist(), table.column(POSITION).to_pylist(), strict=True)
    entries = sorted(
        [(seq, 0, pos, None) for seq, pos in positions] + [(seq, 1, None, (t, c)) for t, cs in python.items() for seq, c in cs], key=lambda e: e[:2]
    )
    placer = ReadPlacer(applied)
    placed: dict[str, list[tuple[int, Change]]] = {}
    for seq, _, position, item in entries:
        if item is None:
            if position is not None:
                placer.saw(position)
            continue
        table, change = item
        placed.setdefault(table, []).append((seq, placer(change)))
    return placed


def _latest(frame: DataFrame, source: SourceTable) -> DataFrame:
    """Per primary key the row with the highest position, the later line on a tie (as `latest_per_key`)."""
    order = Window.partitionBy(*[F.col(k) for k in source.primary_key]).orderBy(F.col(POSITION).desc(), F.col(SEQ).desc())
    return frame.withColumn("_lmv_rank", F.row_number().over(order)).where(F.col("_lmv_rank") == 1).drop("_lmv_rank")
