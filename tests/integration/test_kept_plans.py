"""A kept plan (lakemv.spark.views.kept) made over a batch's few rows stays right for the next
batch's many: Spark's optimizer must not drop what it proves needless for the rows it was planned with
(over one row, a DISTINCT's aggregate, a sort, a limit)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from lakemv.spark.views.kept import MARK, KeptPlans

SQL = {
    "distinct": f"SELECT DISTINCT x FROM {MARK}t",
    "grouped": f"SELECT x, count(*) AS n FROM {MARK}t GROUP BY x",
    "sorted": f"SELECT collect_list(x) AS xs FROM (SELECT x FROM {MARK}t ORDER BY x LIMIT 2)",
}


@pytest.mark.parametrize("purpose", sorted(SQL))
def test_a_plan_made_over_one_row_stays_right_for_more(spark, purpose):
    kept = KeptPlans(spark)
    assert kept.available  # lakemv's jar is in the driver: the second run reuses the plan
    one = pa.table({"x": pa.array([5], pa.int64())})
    many = pa.table({"x": pa.array([3, 1, 3, 2], pa.int64())})
    kept.run(purpose, SQL[purpose], {f"{MARK}t": one})
    again = kept.run(purpose, SQL[purpose], {f"{MARK}t": many})
    assert kept.reran == 1
    spark.createDataFrame([(x,) for x in many.column("x").to_pylist()], "x BIGINT").createOrReplaceTempView(f"{MARK}t")
    planned = spark.sql(SQL[purpose]).toArrow()  # planned for these rows
    spark.catalog.dropTempView(f"{MARK}t")
    key = "xs" if purpose == "sorted" else "x"
    assert sorted(map(repr, again.column(key).to_pylist())) == sorted(map(repr, planned.column(key).to_pylist()))
    assert again.num_rows == planned.num_rows
