"""A query planned once and run again over new rows (lakemv.spark.views.kept, the JVM's
dev.lakemv.spark.Replan) computes what the query planned anew over those rows computes."""

from __future__ import annotations

import pyarrow as pa

from lakemv.spark.views.kept import MARK, KeptPlans, planning_session, replan_class, run_kept

USERS, STARS = f"{MARK}users", f"{MARK}stars"
SQL = (  # a join, an aggregate (a shuffle) and an uncorrelated subquery, all over the batch's rows
    f"SELECT u.name, count(s.repo) AS stars, (SELECT count(*) FROM {STARS}) AS all_stars "
    f"FROM {USERS} u LEFT JOIN {STARS} s ON s.name = u.name GROUP BY u.name"
)


def _users(*names: str) -> pa.Table:
    return pa.table({"name": pa.array(names, pa.string())})


def _stars(*pairs: tuple[str, str]) -> pa.Table:
    return pa.table({"name": pa.array([p[0] for p in pairs], pa.string()), "repo": pa.array([p[1] for p in pairs], pa.string())})


def _planned_anew(spark, sql: str, inputs: dict[str, pa.Table]) -> list[dict]:
    for name, rows in inputs.items():
        spark.createDataFrame(rows).createOrReplaceTempView(name)
    try:
        return sorted(spark.sql(sql).toArrow().to_pylist(), key=str)
    finally:
        for name in inputs:
            spark.catalog.dropTempView(name)


def test_a_kept_plan_run_over_new_rows_equals_the_query_planned_anew(spark):
    kept = KeptPlans(spark)
    assert kept.available, "lakemv's jar is not on the driver's class path (bash scripts/setup.sh builds it)"
    batches = [
        # no stars when planned: a rule that folded the empty input away would leave rows in the plan
        {USERS: _users("ann", "bob"), STARS: _stars()},
        {USERS: _users("ann", "cy"), STARS: _stars(("ann", "lake"), ("ann", "pond"), ("cy", "lake"), ("dee", "sea"))},
        {USERS: _users("bob"), STARS: _stars(("bob", "pond"))},
        {USERS: _users(), STARS: _stars(("bob", "pond"))},
    ]
    for number, inputs in enumerate(batches):
        got = sorted(kept.run("recompute", SQL, inputs).to_pylist(), key=str)
        assert got == _planned_anew(spark, SQL, inputs), number
        assert kept.reran == number, "the plan of the first batch ran again for each later one"
        assert replan_class(spark).rowsHeld(kept.plans["recompute"].plan) == 0, "a kept plan holds no batch's rows"
    assert got == []
    assert _planned_anew(spark, SQL, batches[1])[0] == {"name": "ann", "stars": 2, "all_stars": 4}


def test_a_changed_query_is_planned_again_and_a_plan_holding_rows_of_its_own_is_not_kept(spark):
    kept = KeptPlans(spark)
    inputs = {USERS: _users("ann"), STARS: _stars(("ann", "lake"))}
    kept.run("recompute", SQL, inputs)
    other = SQL.replace("count(s.repo)", "count(DISTINCT s.repo)")  # a time-bounded view's new watermark, say
    assert kept.run("recompute", other, inputs).to_pylist() == [{"name": "ann", "stars": 1, "all_stars": 1}]
    assert kept.reran == 0
    constant = f"SELECT u.name, k.kind FROM {USERS} u JOIN VALUES ('ann', 'a') AS k(name, kind) ON k.name = u.name"
    for _ in range(2):
        assert kept.run("keys", constant, {USERS: _users("ann", "bob")}).to_pylist() == [{"name": "ann", "kind": "a"}]
    assert "keys" not in kept.plans and kept.reran == 0


def test_kept_plans_are_made_in_a_session_of_their_own(spark):
    session = planning_session(spark)
    assert session is planning_session(spark) and session is not spark
    assert session.conf.get("spark.sql.adaptive.enabled") == "false"
    assert spark.conf.get("spark.sql.adaptive.enabled") != "false"  # the pipeline's own session is left as it was


def test_kept_plans_run_together_in_one_spark_job_each_as_planned_anew(spark):
    """A batch's kept plans go to Spark as one job (run_kept), each query's rows as its own plan
    computes them: an aggregate over a join, a projection of other types, one with no rows."""
    queries = [
        (KeptPlans(spark), SQL),
        (KeptPlans(spark), f"SELECT s.repo, count(*) AS fans, max(u.name) AS last FROM {STARS} s JOIN {USERS} u ON u.name = s.name GROUP BY s.repo"),
        (KeptPlans(spark), f"SELECT name, length(name) * 1.5D AS size, CAST(NULL AS ARRAY<INT>) AS nothing FROM {USERS} WHERE name <> 'bob'"),
    ]
    batches = [
        {USERS: _users("ann", "bob"), STARS: _stars(("ann", "lake"))},
        {USERS: _users("ann", "cy"), STARS: _stars(("ann", "lake"), ("cy", "lake"), ("cy", "pond"))},
        {USERS: _users("bob"), STARS: _stars()},
    ]
    tracker = spark.sparkContext.statusTracker()
    for number, inputs in enumerate(batches):
        group = f"run_kept_{number}"
        spark.sparkContext.setJobGroup(group, "kept plans together")
        try:
            got = run_kept(spark, [(kept, "recompute", sql, inputs) for kept, sql in queries])
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        for (kept, sql), table in zip(queries, got, strict=True):
            assert sorted(table.to_pylist(), key=str) == _planned_anew(spark, sql, inputs), (number, sql)
            assert kept.reran == number
        if number:  # every query had a kept plan: one job (and the first query's subquery, run as the plan starts)
            assert len(tracker.getJobIdsForGroup(group)) == 2, tracker.getJobIdsForGroup(group)
    assert got[0].to_pylist() == [{"name": "bob", "stars": 0, "all_stars": 0}]  # bob alone, without stars
    assert got[1].num_rows == got[2].num_rows == 0  # no rows, and the schema they would have
    assert got[2].schema.field("nothing").type == pa.list_(pa.int32()) and got[2].schema.field("size").type == pa.float64()
