"""Pure parts of the Prefect operations: the lookup-aware layout compaction writes, the view SQL
DuckDB's verify runs (sqlglot), and the maintenance state a backfill hands over."""

from __future__ import annotations

import pytest

from lakemv.catalog.viewstate import ViewState
from lakemv.core.errors import QueryError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.sortorder import SortOrder, lookups, sort_orders, view_sort_orders
from lakemv.duck.query import connect_duckdb
from lakemv.duck.verify import duckdb_sql


def test_each_table_is_laid_out_by_the_columns_views_look_it_up_by(plans):
    orders = sort_orders(plans.values())
    assert orders["payment_info"] == SortOrder(("user_id",))  # user_profile: p.user_id = u.id
    assert orders["repos"] == SortOrder(("owner", "name"))  # anchor of repo_summary, child of stars
    # stars: by username (user_profile) and by repo (repo_summary, and the parent side of repos).
    assert orders["stars"].zorder and set(orders["stars"].columns) == {"username", "repo_owner"}
    assert orders["pull_requests"].zorder and set(orders["pull_requests"].columns) == {"author", "repo_owner"}
    assert orders["users"].zorder and orders["users"].columns[0] == "username"  # 3 lookups by username
    assert orders["stars"].sql().startswith("zorder(") and SortOrder(("owner", "name")).sql() == "owner, name"
    assert view_sort_orders(plans) == {"user_profile": SortOrder(("email",)), "repo_summary": SortOrder(("owner", "name"))}


def test_a_lookup_through_an_expression_does_not_decide_the_layout(sources):
    plan = plan_view(
        parse_view("-- @key: email\nSELECT u.email, (SELECT count(*) FROM stars s WHERE lower(s.username) = u.username) AS n FROM users u", "v"),
        sources,
    )
    found = lookups([plan])
    assert "stars" not in found and found["users"] == {("email",): 1, ("username",): 1}


def test_array_sort_of_structs_keeps_sparks_order_in_duckdb():
    """Spark sorts a struct with a NULL field before one with a value; DuckDB's list_sort after."""
    sql = duckdb_sql(
        "WITH t AS (SELECT 1 AS k, 1 AS a, CAST(NULL AS STRING) AS b UNION ALL SELECT 1, 1, 'x' UNION ALL SELECT 1, 0, 'z') "
        "SELECT k, array_sort(collect_list(struct(a, b))) AS l, array_sort(collect_set(b)) AS s, "
        "sort_array(collect_list(struct(a, b))) AS l2 FROM t GROUP BY k"
    )
    con = connect_duckdb()
    row = con.execute(sql).fetchone()
    # What Spark returns for the same SQL (measured): [{0,'z'}, {1,NULL}, {1,'x'}] and ['x', 'z'].
    ordered = [{"a": 0, "b": "z"}, {"a": 1, "b": None}, {"a": 1, "b": "x"}]
    assert row == (1, ordered, ["x", "z"], ordered), row


def test_the_maintenance_state_round_trips_and_notices_a_change_of_hands():
    paused = ViewState("paused", {"users": 12, "stars": None}, by="backfill 1", branch="lakemv_backfill_1")
    text = paused.to_json()
    again = ViewState.parse(text)
    assert (again.state, dict(again.since), again.by, again.branch, again.raw) == ("paused", {"users": 12, "stars": None}, "backfill 1", "lakemv_backfill_1", text)
    assert ViewState.parse(None).state == "active" and ViewState.parse(None).raw is None
    assert ViewState.parse(ViewState("resume", {"users": 13}, by="backfill 1").to_json()).raw != text


def test_spark_list_and_exists_semantics_carry_over_to_duckdb():
    """collect_list of no values is [] in Spark (NULL in DuckDB); `exists(array, x -> p)` is three-valued."""
    sql = duckdb_sql(
        "WITH t AS (SELECT 1 AS k, CAST(NULL AS STRING) AS v UNION ALL SELECT 2, 'ann' UNION ALL SELECT 2, 'bo' "
        "UNION ALL SELECT 3, 'bo' UNION ALL SELECT 3, NULL) "
        "SELECT k, sort_array(collect_list(v)) AS l, exists(collect_list(v), x -> x = 'ann') AS has_ann, "
        "exists(array(v), x -> x = 'ann') AS row_has_ann FROM t GROUP BY k, v ORDER BY k, v NULLS FIRST"
    )
    rows = connect_duckdb().execute(sql).fetchall()
    # Spark: k=1 -> [], False, NULL (array(NULL): p is NULL); k=2 'ann' -> True; k=3 NULL -> [], False, NULL.
    assert rows == [
        (1, [], False, None),
        (2, ["ann"], True, True),
        (2, ["bo"], False, False),
        (3, [], False, None),
        (3, ["bo"], False, False),
    ], rows


def test_count_if_over_no_rows_is_zero_in_duckdb_as_in_spark():
    """Spark's count_if over no rows (a global total of an emptied table) is 0; DuckDB's COUNT_IF gives NULL."""
    sql = duckdb_sql(
        "WITH t AS (SELECT 1 AS g, 2 AS id UNION ALL SELECT 2, NULL) "
        "SELECT 'all' AS scope, count(*) AS n, count_if(t.id > 1) AS later, "
        "count_if(t.id > 1) FILTER (WHERE t.g = 2) AS later_of_2 FROM t WHERE t.g > 5 "
        "UNION ALL SELECT 'some', count(*), count_if(t.id > 1), count_if(t.id > 1) FILTER (WHERE t.g = 2) FROM t"
    )
    rows = connect_duckdb().execute(sql + " ORDER BY scope").fetchall()
    # What Spark returns for the same SQL: ('all', 0, 0, 0), ('some', 2, 1, 0) (a NULL predicate is not counted).
    assert rows == [("all", 0, 0, 0), ("some", 2, 1, 0)], rows


def test_a_construct_duckdb_lacks_is_named():
    with pytest.raises(QueryError, match="cannot translate the view's SQL to DuckDB: SOUNDEX is not supported in DuckDB"):
        duckdb_sql("SELECT u.email, soundex(u.username) AS sound FROM users u")


def test_a_decimal_average_compares_within_half_a_unit_of_its_scale():
    """Spark averages a decimal(15,2) into a decimal(19,6), rounding half up; DuckDB in double. verify
    counts them equal within half a unit of the 6th place, not beyond, and compares the rest exactly."""
    from lakemv.duck.verify import _differences

    con = connect_duckdb(threads=1)
    try:
        con.execute("CREATE TEMP TABLE expected AS SELECT * FROM (VALUES (1, 2.0 / 3, 1.0), (2, 2.0 / 3, 1.0), (3, 0.5, 1.0)) t(k, avg, d)")
        con.execute(
            "CREATE TEMP TABLE actual AS SELECT k, CAST(avg AS DECIMAL(19,6)) AS avg, CAST(d AS DECIMAL(19,6)) AS d FROM "
            "(VALUES (1, 0.666667, 1.0), (2, 0.666668, 1.0), (3, 0.5, 1.000001)) t(k, avg, d)"
        )
        counts, samples = _differences(con, ["k"], ["avg", "d"], 5)
    finally:
        con.close()
    assert counts == {"match": 1, "mismatch": 2}
    assert [(s.key["k"], s.columns) for s in samples] == [(2, ("avg",)), (3, ("d",))]


def test_floating_point_values_compare_within_the_error_of_summation_order():
    """A sum of doubles kept by deltas, or run by another engine, adds in another order: verify counts
    it equal within FLOAT_TOLERANCE of the larger value (or of 1 near zero), not beyond; NaN and the
    infinities only equal themselves."""
    from lakemv.duck.verify import FLOAT_TOLERANCE, _differences

    near, far = 1e6 * (1 + FLOAT_TOLERANCE / 2), 1e6 * (1 + FLOAT_TOLERANCE * 4)
    rows = [(1, 1e6, 1e6), (2, 1e6, near), (3, 1e6, far), (4, 0.0, FLOAT_TOLERANCE / 2), (5, 0.0, FLOAT_TOLERANCE * 2),
            (6, "nan", "nan"), (7, "inf", "inf"), (8, "inf", "-inf"), (9, "nan", 1.0)]  # fmt: skip
    con = connect_duckdb(threads=1)
    try:
        for side, at in (("expected", 1), ("actual", 2)):
            values = ", ".join(f"({r[0]}, CAST('{r[at]}' AS DOUBLE))" for r in rows)
            con.execute(f"CREATE TEMP TABLE {side} AS SELECT * FROM (VALUES {values}) t(k, total)")
        counts, samples = _differences(con, ["k"], ["total"], 9)
    finally:
        con.close()
    assert counts == {"match": 5, "mismatch": 4}
    assert sorted(s.key["k"] for s in samples) == [3, 5, 8, 9]
