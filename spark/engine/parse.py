"""A unit's landing lines parsed set-wise for the engine state (`lakemv.spark.engine.batch`): each table's
lines by its envelope SQL (`lakemv.core.cdc.envelopesql`, the rules of `parse_envelope`), its latest
change per primary key kept; the few lines the SQL cannot vouch for parsed by `parse_line` in the
driver, so their dead letters carry the same reasons. What the engine does not carry yet is refused
(`EngineUnsupported`) before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.tables import DELETED, OP, POSITION, SOURCE_TS
from lakemv.core.batch.records import TableEntry
from lakemv.core.cdc.changeset import ChangeSet, changes_to_arrow
from lakemv.core.cdc.envelope import Change
from lakemv.core.cdc.envelopesql import CLEAN, SEQ, parse_sql
from lakemv.core.errors import LakemvError
from lakemv.spark.bulk import Lines, beginnings, folder_of, parse_lines, raw_lines, register_reader, unit_files
from lakemv.spark.frames import local_frame
from lakemv.spark.parallel import concurrently
from lakemv.spark.views.kept import replan_class

_TABLE = "_lmv_table"


class EngineUnsupported(LakemvError):
    """A unit holds what the engine state does not carry yet; nothing of the unit was written."""


@dataclass
class Parsed:
    """A unit's lines parsed: per table its latest change per primary key (kept in Spark), and what the
    driver heard of the lines it parsed itself."""

    changes: dict[str, DataFrame]
    tables: dict[str, TableEntry]
    result: ChangeSet
    clean: int  # lines Spark parsed
    fallback: int  # lines parsed in the driver


def _unsupported(result: ChangeSet, python: Mapping[str, list[tuple[int, Change]]], sources: Mapping[str, SourceTable]) -> list[str]:
    """What of a unit the engine state does not carry yet."""
    found = []
    for table, changes in sorted(python.items()):
        if sources[table].is_events:
            found.append(f"events of the event source {table!r}")
        if any(c.unavailable for _, c in changes):
            found.append(f"values Debezium sent as unavailable in {table!r}")
        if any(c.follows for _, c in changes):
            found.append(f"an incremental snapshot's reads of {table!r}")
    found += [f"a TRUNCATE of {table!r}" for table in sorted(result.truncates)]
    found += [f"new fields of {table!r} ({', '.join(sorted(fields))})" for table, fields in sorted(result.new_fields.items())]
    return found


def parse(
    lines: Lines,
    sources: Mapping[str, SourceTable],
    batch_id: int,
    ingested_at: int,
    max_line_chars: int | None,
    keep: Callable,
    relation: str = "_lmv_engine",
    into: SparkSession | None = None,
) -> Parsed:
    """The unit's lines as each table's latest change per primary key (the mirror's columns), in Spark.
    `keep` persists a frame until the unit ends (`Walker.keep`). Each table's lines are a temp view
    named from `relation`, for the caller to drop once what was kept is released: dropping (or
    replacing) a temp view uncaches every plan that reads it. The lines are parsed in their own session
    (a streaming batch's frame lives in one of its own); the changes are frames of `into` (default: that one)."""
    spark = lines.frame.sparkSession
    register_reader(spark)
    into = into or spark
    replan = replan_class(into)
    declared = sorted(t for t, s in sources.items() if not s.is_events)
    files = unit_files(lines)
    known = beginnings(files, sources)
    if files:
        # each table's lines read from its own files: every table's SQL reads its lines once, none cached
        by_folder: dict[str, list[str]] = {}
        for uri in files:
            by_folder.setdefault(folder_of(uri), []).append(uri)

        def read(paths: list[str]) -> DataFrame:
            reader = spark.read.options(ignoreMissingFiles="true", __globPaths__="false")
            return reader.text(paths).selectExpr("value", "_metadata.file_path AS file").withColumn(SEQ, F.monotonically_increasing_id())

        declared = [t for t in declared if t in by_folder]
        for table in declared:
            read(by_folder[table]).createOrReplaceTempView(f"{relation}_{table}")
        strays = [uri for folder, uris in by_folder.items() if folder not in declared for uri in uris]
        stray = read(strays) if strays else None
    else:
        numbered = keep(
            lines.frame.select("value", "file")
            .withColumn(SEQ, F.monotonically_increasing_id())
            .withColumn(_TABLE, F.regexp_extract("file", r"([^/]+)/[^/]+$", 1))
        )
        for table in declared:
            numbered.where(F.col(_TABLE) == table).createOrReplaceTempView(f"{relation}_{table}")
        stray = numbered.where(~F.col(_TABLE).isin(declared)).select("value", "file", SEQ)

    def parsed_of(table: str) -> DataFrame:
        source = sources[table]
        frame = spark.sql(parse_sql(source, f"{relation}_{table}", max_line_chars, known[table]))
        # computed now, its plan a scan of what was computed (every plan over the envelope SQL's is large:
        # each step over it cost seconds of planning); a clean line's text is not kept
        kept = [*source.column_names, POSITION, OP, DELETED, SOURCE_TS, SEQ, CLEAN]
        return frame.select(*kept, *[F.when(~F.col(CLEAN), F.col(c)).alias(c) for c in ("value", "file")]).localCheckpoint()

    parsed = dict(zip(declared, concurrently(spark, parsed_of, declared), strict=True))  # the tables' jobs side by side
    # the lines the SQL cannot vouch for (and those of no declared table), parsed by the driver's rules
    unclean = [frame.where(~F.col(CLEAN)).select("value", "file", SEQ) for frame in parsed.values()]
    rest = reduce(
        DataFrame.unionByName,
        unclean + ([stray] if stray is not None else []),
        local_frame(spark, [], "value STRING, file STRING, " + SEQ + " BIGINT"),
    )
    raw = raw_lines(rest)
    result = ChangeSet()
    python: dict[str, list[tuple[int, Change]]] = {}
    parse_lines(raw, sources, result, max_line_chars, None, python)
    unsupported = _unsupported(result, python, sources)
    if unsupported:
        raise EngineUnsupported("the engine state does not carry yet: " + "; ".join(unsupported))

    def latest_of(table: str) -> DataFrame:
        source = sources[table]
        columns = [*source.column_names, POSITION, OP, DELETED, SOURCE_TS]
        rows = parsed[table].where(F.col(CLEAN)).select(*columns, SEQ)
        if table in python:
            extra = changes_to_arrow(source, [c for _, c in python[table]], batch_id, ingested_at)
            extra = extra.append_column(SEQ, pa.array([s for s, _ in python[table]], type=pa.int64()))
            rows = rows.unionByName(
                spark.createDataFrame(extra.select([*columns, SEQ])).select(*[F.col(c).cast(rows.schema[c].dataType) for c in rows.columns])
            )
        # the latest change per key: the highest position, the later line on a tie; and how many lines
        latest = rows.groupBy(*[F.col(k).alias(f"_lmv_k_{k}") for k in source.primary_key]).agg(
            F.max(F.struct(POSITION, SEQ, *[c for c in columns if c != POSITION])).alias("m"), F.count(F.lit(1)).alias("_lmv_lines")
        )
        # computed now, its plan a scan of what was computed: every plan over it stays small
        done = latest.select(*[F.col(f"m.{c}").alias(c) for c in columns], "_lmv_lines").localCheckpoint()
        return done if into is spark else DataFrame(replan.inSession(into._jsparkSession, done._jdf), into)

    changes = dict(zip(declared, concurrently(spark, latest_of, declared), strict=True))
    stats = (
        reduce(
            DataFrame.unionByName,
            [
                frame.groupBy(F.lit(table).alias("t")).agg(
                    F.count(F.lit(1)).alias("rows"), F.sum("_lmv_lines").alias("lines"), F.max(POSITION).alias("pos"), F.max(SOURCE_TS).alias("ts")
                )
                for table, frame in changes.items()
            ],
        ).collect()
        if changes
        else []
    )
    tables = {
        r["t"]: TableEntry(int(r["rows"]), r["pos"], None if r["ts"] is None else int(r["ts"].timestamp() * 1_000_000)) for r in stats if r["rows"]
    }
    changes = {t: frame for t, frame in changes.items() if t in tables}  # (`_lmv_lines` stays: dropping it would plan them anew)
    clean = sum(int(r["lines"] or 0) for r in stats) - sum(len(v) for v in python.values())
    return Parsed(changes, tables, result, clean, raw.num_rows)
