"""Every view's change feed in one table: the rows a view's data file holds, and each view's read path
of them, run by DuckDB over Parquet files that lack the other views' columns (as Iceberg reads them)."""

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from lakemv.core.sql.feedsql import SHARED, feed_column, feed_insert_sql, feed_part, feed_view_sql, views_of, views_property

OP = "_lmv_diff"


def _diff(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def test_a_views_file_holds_the_shared_columns_and_its_own_struct_only():
    part = feed_part("fans", ["who", "n"], ["who"], _diff([{"who": "ann", "n": 2, OP: "upsert"}, {"who": "bob", "n": None, OP: "delete"}]),
                     7, 42, 1_000_000, OP)  # fmt: skip
    assert part.column_names == [*SHARED.names, "v_fans"]
    assert part.to_pylist()[0]["v_fans"] == {"who": "ann", "row": {"who": "ann", "n": 2}}
    assert part.to_pylist()[1]["v_fans"] == {"who": "bob", "row": None}  # a delete: its key, no row
    assert {r["view"] for r in part.to_pylist()} == {"fans"} and {r["batch_id"] for r in part.to_pylist()} == {7}


def test_each_views_read_path_sees_its_rows_only_and_the_columns_a_feed_table_had(tmp_path: Path):
    fans = feed_part("fans", ["who", "n"], ["who"], _diff([{"who": "ann", "n": 2, OP: "upsert"}]), 1, 10, 0, OP)
    repos = feed_part("repos", ["owner", "name", "stars"], ["owner", "name"],
                      _diff([{"owner": "ann", "name": "lake", "stars": 3, OP: "upsert"}, {"owner": "bob", "name": "pond", "stars": None, OP: "delete"}]),
                      1, 10, 0, OP)  # fmt: skip
    for name, part in (("a", fans), ("b", repos)):
        pq.write_table(part, tmp_path / f"{name}.parquet")
    con = duckdb.connect()
    con.execute(f"CREATE VIEW changes AS SELECT * FROM read_parquet('{tmp_path}/*.parquet', union_by_name = true)")
    rows = con.execute(feed_view_sql("repos", ["owner", "name"], "changes", dialect="duckdb")).fetchall()
    columns = [d[0] for d in con.description]
    assert columns == ["owner", "name", "op", "row", "batch_id", "source_position", "changed_at"]
    assert sorted((r[0], r[1], r[2], r[3]) for r in rows) == [
        ("ann", "lake", "upsert", {"owner": "ann", "name": "lake", "stars": 3}), ("bob", "pond", "delete", None)]  # fmt: skip
    assert [r[:3] for r in con.execute(feed_view_sql("fans", ["who"], "changes", dialect="duckdb")).fetchall()] == [("ann", "upsert", {"who": "ann", "n": 2})]


def test_the_spark_path_inserts_by_name_into_the_views_column():
    sql = feed_insert_sql("fans", ["who", "n"], ["who"], "lake.lakemv.changes", "_lmv_fans_diff", OP, 3, None)
    assert sql.startswith("INSERT INTO lake.lakemv.changes (`view`, `op`, `batch_id`, `source_position`, `changed_at`, `v_fans`) SELECT 'fans'")
    assert "CASE WHEN s._lmv_diff = 'upsert' THEN STRUCT(s.`who` AS `who`, s.`n` AS `n`) END AS `row`" in sql
    assert feed_column("fans") == "v_fans"


def test_a_commit_names_the_views_it_holds():
    assert views_of({"lakemv.feed.views": views_property(["b", "a", "b"])}) == {"a", "b"}
    assert views_of(None) == set() and views_of({"lakemv.feed.views": ""}) == set()
