"""Hadoop's local file system as lakemv's sessions use it: no `chmod` process per file created
(jvm/java, dev.lakemv.hadoop), the same permission bits as Hadoop's own."""

from __future__ import annotations

import os
import stat


def test_files_are_created_with_hadoops_permissions_through_lakemvs_file_system(spark, tmp_path):
    jvm = spark.sparkContext._jvm
    conf = spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri())
    fs = path.getFileSystem(conf)
    assert fs.getClass().getName() == "dev.lakemv.hadoop.LocalFileSystem"
    assert fs.getRawFileSystem().getClass().getName() == "dev.lakemv.hadoop.RawLocalFileSystem"

    made = jvm.org.apache.hadoop.fs.Path((tmp_path / "a" / "file.bin").as_uri())
    out = fs.create(made, True)
    out.write(bytearray(b"lakemv"))
    out.close()
    mode = stat.S_IMODE(os.stat(tmp_path / "a" / "file.bin").st_mode)
    assert mode == 0o644  # Hadoop's file default (0666) after its umask (fs.permissions.umask-mode, 022)
    assert (tmp_path / "a" / ".file.bin.crc").exists()  # still checksummed

    fs.setPermission(made, jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640))
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "file.bin").st_mode) == 0o640

    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(path.toUri(), conf)
    assert context.getDefaultFileSystem().getClass().getName() == "dev.lakemv.hadoop.LocalFs"


def test_footer_metrics_are_icebergs_own_file_metrics(lake):
    """The direct writer's metrics of a file (dev.lakemv.iceberg.FooterMetrics) equal Iceberg's fileMetrics."""
    import pyarrow as pa

    from lakemv.spark.directwrite import DirectWriter

    spark, name = lake.spark, f"{lake.names.catalog}.metrics.t"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake.names.catalog}.metrics")
    spark.sql(f"CREATE TABLE {name} (k BIGINT, a STRING, b DOUBLE, c TIMESTAMP, d ARRAY<STRING>) USING iceberg")
    writer = DirectWriter(spark, lake.settings)
    assert writer._footer is not None
    table = writer._table(name)
    schema = writer._arrow_schema(name, table)
    rows = pa.table({"k": [3, 1, None], "a": ["x", None, "z"], "b": [1.5, float("nan"), -2.0], "c": [0, 10**15, None], "d": [["p"], [], None]})
    rows = rows.cast(schema)  # with Iceberg's field ids, as the direct writer writes
    config = writer._metrics_config.forTable(table)
    location, _, ours = writer._write(table, rows, "data", config)
    icebergs = writer._parquet_util.fileMetrics(table.io().newInputFile(location), config)
    for part in ("recordCount", "columnSizes", "valueCounts", "nullValueCounts", "nanValueCounts", "lowerBounds", "upperBounds"):
        mine, theirs = getattr(ours, part)(), getattr(icebergs, part)()
        assert mine == theirs if isinstance(mine, int) else mine.equals(theirs), part
    assert ours.recordCount() == 3 and ours.nullValueCounts().get(table.schema().findField("k").fieldId()) == 1
