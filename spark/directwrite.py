"""Small writes straight into Iceberg tables: Parquet files from Arrow, one commit by Iceberg's Java API.

A batch writes a thousand rows into tables of millions. Spark's MERGE must read the table to find the
rows it replaces (Iceberg has no index: 1.4 s for 1k keys into 1M rows here), and every Spark write
is a job. The local state already knows which rows a batch replaces, that each new row wins, and
where each replaced row lives (its data file and position, `lakemv.core.state`), so no read is needed: the
new rows go into a Parquet file, the replaced rows' positions into a position-delete file, and both
are committed as one Iceberg `RowDelta` - atomic for readers, validated like Spark's own merge-on-read
commits (the files the deletes point into must still exist: a compaction that rewrote them in
between makes the commit fail as a conflict, and the caller retries with the rows' new places). An
append is the same without the delete file. Position deletes are what Spark's MERGE writes too, so
every reader of the tables reads them (Spark, DuckDB, pyiceberg) and `compact` folds them away.

The files are written to the table's own data location, so this serves tables on the local file
system (`supports`); elsewhere the callers keep Spark's MERGE.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import S3_SCHEMES, arrow_file, is_remote
from lakemv.core.state.places import Location
from lakemv.spark.commits import WRITE_ID

# Iceberg's reserved field ids of a position-delete file's columns (the table spec's "Position Delete Files").
_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
    ]
)


@dataclass(frozen=True)
class Committed:
    """What one commit made: its snapshot, the one it followed, and the data file of its rows with
    the rows as written (the i-th at position i), so the local state can place them without reading
    the table or the file again."""

    write_id: str
    snapshot: int
    parent: int | None
    path: str | None
    rows: pa.Table | None


class DirectWriter:
    """Commits Arrow rows (and position deletes of the rows they replace) into Iceberg tables of one catalog."""

    def __init__(self, spark: SparkSession, settings: LakeSettings):
        self.spark = spark
        self.settings = settings
        self._jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
        self._schemas: dict[tuple[str, int], pa.Schema] = {}
        self._tables: dict[str, object] = {}  # identifier -> its org.apache.iceberg.Table, kept between commits
        # The classes a commit uses, looked up once: py4j resolves each dotted name anew, a class
        # loader search per package level.
        iceberg = self._jvm.org.apache.iceberg
        self._spark3 = iceberg.spark.Spark3Util
        self._parquet = iceberg.FileFormat.PARQUET
        self._metrics_config = iceberg.MetricsConfig
        self._parquet_util = iceberg.parquet.ParquetUtil
        self._data_files = iceberg.DataFiles
        self._file_metadata = iceberg.FileMetadata
        self._array_list = self._jvm.java.util.ArrayList
        footer = self._jvm.dev.lakemv.iceberg.FooterMetrics  # lakemv's jar (jvm/java); a JavaPackage when absent
        self._footer = footer if isinstance(footer, JavaClass) else None
        # Iceberg waits for its parallel manifest tasks by polling them every 10 ms: 3 or 4 polls per
        # commit (about 35 of its 45 ms here). Run in the committing thread, they are done when polled.
        self._same_thread = iceberg.relocated.com.google.common.util.concurrent.MoreExecutors.newDirectExecutorService()

    def _table(self, identifier: str):  # noqa: ANN202 - a py4j proxy of org.apache.iceberg.Table
        """The table as its catalog has it now. A table loaded before is refreshed: one catalog
        query, and its metadata file read only when another writer moved it (a load parses it every
        time; a table with a day of snapshots has a large one)."""
        table = self._tables.get(identifier)
        if table is not None:
            try:
                table.refresh()
                return table
            except Py4JJavaError:  # dropped meanwhile: load it again (or fail as a load does)
                self._tables.pop(identifier, None)
        table = self._tables[identifier] = self._spark3.loadIcebergTable(self.spark._jsparkSession, identifier)
        return table

    def supports(self, identifier: str) -> bool:
        """Whether this can write the table: data on the local file system or in the warehouse's object
        store, no partitioning."""
        table = self._table(identifier)
        return urlparse(str(table.location())).scheme in ("", "file", *S3_SCHEMES) and bool(table.spec().isUnpartitioned())

    def _arrow_schema(self, identifier: str, table) -> pa.Schema:  # noqa: ANN001
        """The table's schema in Arrow with Iceberg's field ids (pyiceberg's mapping), by schema id:
        the schema as Iceberg's JSON, read by pyiceberg without a catalog of its own."""
        key = (identifier, int(table.schema().schemaId()))
        if key not in self._schemas:
            from pyiceberg.io.pyarrow import schema_to_pyarrow
            from pyiceberg.schema import Schema

            schema = Schema.model_validate_json(self._jvm.org.apache.iceberg.SchemaParser.toJson(table.schema()))
            self._schemas[key] = schema_to_pyarrow(schema, include_field_ids=True)
        return self._schemas[key]

    def _write(self, table, rows: pa.Table, kind: str, config) -> tuple[str, int, object]:  # noqa: ANN001
        """Write `rows` as a Parquet file in the table's data location: its location, size and
        Iceberg metrics (by `config`, an org.apache.iceberg.MetricsConfig)."""
        location = str(table.locationProvider().newDataLocation(f"lmv-{kind}-{uuid.uuid4().hex}.parquet"))
        fs, path = arrow_file(location, self.settings.s3)
        if not is_remote(location):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(rows, path, compression="zstd", filesystem=fs)  # on S3 a single PUT or a multipart upload
        if self._footer is not None and not is_remote(location):
            metrics = self._footer.of(path, config)
        else:
            metrics = self._parquet_util.fileMetrics(table.io().newInputFile(location), config)
        return location, fs.get_file_info(path).size, metrics

    def _data_file(self, table, rows: pa.Table, config):  # noqa: ANN001, ANN202 - Java objects
        """`rows` written as a Parquet data file of `table` (its metrics per `config`): (its location,
        Iceberg's DataFile of it)."""
        location, size, metrics = self._write(table, rows, "data", config)
        data = (
            self._data_files.builder(table.spec()).withPath(location).withFormat(self._parquet).withFileSizeInBytes(size)
            .withMetrics(metrics).build()
        )  # fmt: skip
        return location, data

    def append_files(self, identifier: str, parts: Sequence[pa.Table], write_id: str, properties: Mapping[str, str] | None = None) -> None:
        """Append `parts` as one Parquet file each, in one commit tagged with `write_id` (and
        `properties`). A part may hold a subset of the table's columns (by name): readers read the
        others as NULL."""
        table = self._table(identifier)
        schema, config = self._arrow_schema(identifier, table), self._metrics_config.forTable(table)
        operation = table.newAppend().scanManifestsWith(self._same_thread).writeManifestsWith(self._same_thread, 1)
        for rows in parts:
            subset = pa.schema([schema.field(name) for name in rows.column_names])
            operation = operation.appendFile(self._data_file(table, rows.cast(subset), config)[1])
        operation = operation.set(WRITE_ID, write_id)
        for key, value in (properties or {}).items():
            operation = operation.set(key, value)
        operation.commit()

    def commit(
        self,
        identifier: str,
        rows: pa.Table | None,
        replaced: Sequence[Location],
        write_id: str,
        validate_from: int | None = None,
        exclusive: bool = False,
    ) -> Committed | None:
        """Delete the rows at `replaced` (data file, position) and add `rows`, in one commit tagged with
        `write_id`. Fails with a ValidationException (a conflict: retried by the caller) when a data
        file of `replaced` was removed after snapshot `validate_from` (a compaction rewrote it), or,
        when `exclusive`, when another writer added rows since then (a backfill's publish). Returns
        what it committed (None when the table has moved on past it already)."""
        table = self._table(identifier)
        spec, parquet = table.spec(), self._parquet
        append = not replaced and not exclusive and validate_from is None
        if append:
            operation = table.newAppend()  # merges small manifests as they accumulate, as Spark's appends do
        else:
            if replaced and validate_from is None:
                raise ValueError("replacing rows needs the snapshot their places were read at (validate_from)")
            operation = table.newRowDelta()
            if validate_from is not None:
                operation = operation.validateFromSnapshot(validate_from)
        operation = operation.scanManifestsWith(self._same_thread).writeManifestsWith(self._same_thread, 1)
        location, written = None, None
        if rows is not None and rows.num_rows:
            schema = self._arrow_schema(identifier, table)
            written = rows.select(schema.names).cast(schema)
            location, data = self._data_file(table, written, self._metrics_config.forTable(table))
            operation = operation.appendFile(data) if append else operation.addRows(data)
        if replaced:
            ordered = sorted(set(replaced))
            deletes = pa.table([pa.array([p for p, _ in ordered]), pa.array([a for _, a in ordered], pa.int64())], schema=_DELETE_SCHEMA)
            at, size, metrics = self._write(table, deletes, "deletes", self._metrics_config.forPositionDelete())
            delete_file = (
                self._file_metadata.deleteFileBuilder(spec).ofPositionDeletes().withPath(at)
                .withFormat(parquet).withFileSizeInBytes(size).withMetrics(metrics).build()
            )  # fmt: skip
            referenced = self._array_list()
            for path in sorted({p for p, _ in ordered}):
                referenced.add(path)
            operation = operation.addDeletes(delete_file).validateDataFilesExist(referenced).validateDeletedFiles()
        if exclusive:
            operation = operation.validateNoConflictingDataFiles()
        operation.set(WRITE_ID, write_id).commit()
        snapshot = table.currentSnapshot()  # the table refreshes on commit: this one, unless another came after
        if snapshot is None or snapshot.summary().get(WRITE_ID) != write_id:
            return None
        parent = snapshot.parentId()
        return Committed(write_id, int(snapshot.snapshotId()), None if parent is None else int(parent), location, written)
