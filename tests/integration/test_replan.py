"""A view's recompute planned once and run again over new rows (lakemv.spark.views.together.Planned,
the JVM's dev.lakemv.spark.Replan) computes what the query planned anew over those rows computes."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame

from lakemv.spark.parallel import sql_conf
from lakemv.spark.views.together import _PLANNED_CONF, MARK, _replan

USERS, STARS = f"{MARK}users", f"{MARK}stars"
SQL = (
    f"SELECT u.name, count(s.repo) AS stars, (SELECT count(*) FROM {STARS}) AS all_stars "
    f"FROM {USERS} u LEFT JOIN {STARS} s ON s.name = u.name GROUP BY u.name"
)


def _marked(name: str, table: pa.Table) -> pa.Table:
    return table.append_column(name, pa.nulls(table.num_rows, pa.bool_()))


def _register(spark, users: pa.Table, stars: pa.Table) -> None:
    spark.createDataFrame(_marked(USERS, users)).createOrReplaceTempView(USERS)
    spark.createDataFrame(_marked(STARS, stars)).createOrReplaceTempView(STARS)


def _stars(*pairs: tuple[str, str]) -> pa.Table:
    return pa.table({"name": pa.array([p[0] for p in pairs], pa.string()), "repo": pa.array([p[1] for p in pairs], pa.string())})


def test_a_kept_plan_over_new_rows_equals_the_query_planned_anew(spark):
    replan = _replan(spark)
    assert replan is not None, "lakemv's jar is not on the driver's class path (bash scripts/setup.sh builds it)"
    with sql_conf(spark, _PLANNED_CONF):
        # no stars when planned: a rule that folded the empty input away would leave rows in the plan
        _register(spark, pa.table({"name": ["ann", "bob"]}), _stars())
        frame = spark.sql(SQL)
        plan = frame._jdf.queryExecution().executedPlan()
        assert sorted(frame.toArrow().to_pylist(), key=str) == [
            {"name": "ann", "stars": 0, "all_stars": 0}, {"name": "bob", "stars": 0, "all_stars": 0},
        ]  # fmt: skip
        assert replan.marked(plan, MARK)
        for users, stars in [
            (pa.table({"name": ["ann", "cy"]}), _stars(("ann", "lake"), ("ann", "pond"), ("cy", "lake"), ("dee", "sea"))),
            (pa.table({"name": ["bob"]}), _stars(("bob", "pond"))),
            (pa.table({"name": pa.array([], pa.string())}), _stars(("bob", "pond"))),
        ]:
            rows = spark.sparkContext._jvm.java.util.HashMap()
            rows.put(USERS, replan.localRows(spark.createDataFrame(_marked(USERS, users))._jdf))
            rows.put(STARS, replan.localRows(spark.createDataFrame(_marked(STARS, stars))._jdf))
            again = DataFrame(replan.frame(spark._jsparkSession, replan.swap(plan, MARK, rows)), spark).toArrow()
            _register(spark, users, stars)
            expected = spark.sql(SQL).toArrow()
            assert sorted(again.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)
            assert again.num_rows == users.num_rows


def test_a_plan_holding_rows_of_its_own_is_not_kept(spark):
    replan = _replan(spark)
    with sql_conf(spark, _PLANNED_CONF):
        _register(spark, pa.table({"name": ["ann"]}), _stars(("ann", "lake")))
        constant = spark.sql(f"SELECT u.name, k.kind FROM {USERS} u JOIN VALUES ('ann', 'a') AS k(name, kind) ON k.name = u.name")
        assert not replan.marked(constant._jdf.queryExecution().executedPlan(), MARK)
        assert replan.marked(spark.sql(SQL)._jdf.queryExecution().executedPlan(), MARK)
