"""Frames made from the driver's rows (lakemv.spark.frames): the rows `createDataFrame` would make, in a
frame whose scans never start a Python worker."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from lakemv.spark.frames import local_frame

DDL = "id INT, name STRING, at TIMESTAMP, day DATE, amount DECIMAL(10, 2), tags ARRAY<STRING>, blob BINARY, ok BOOLEAN, x DOUBLE"
NAIVE = dt.datetime(2024, 1, 2, 3, 4, 5, 6)
ROWS = [
    (1, "a", NAIVE, dt.date(2024, 1, 1), Decimal("1.50"), ["x", None], b"q", True, 1.5),
    (2, None, NAIVE.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))), None, None, [], None, None, None),
    (3, "é", None, dt.date(1, 1, 1), Decimal("-99999999.99"), None, b"", False, float("inf")),
]


def _lineage(frame) -> str:
    return frame._jdf.queryExecution().toRdd().toDebugString()


def test_a_local_frame_holds_the_rows_create_data_frame_makes_without_python(spark):
    made, listed = local_frame(spark, ROWS, DDL), spark.createDataFrame(ROWS, DDL)
    assert made.schema == listed.schema
    assert made.collect() == listed.collect()
    assert "PythonRDD" in _lineage(listed) and "PythonRDD" not in _lineage(made)
    empty = local_frame(spark, [], DDL)
    assert empty.schema == listed.schema and empty.count() == 0


def test_a_row_of_the_wrong_width_is_refused(spark):
    with pytest.raises(ValueError, match="a row of 2 values for 3 columns"):
        local_frame(spark, [(1, 2)], "a INT, b INT, c INT")
