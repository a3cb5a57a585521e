"""Mirror MERGE rules on real Iceberg tables through Spark (one batch = one process_lines call)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from chispa import assert_df_equality
from pyspark.sql import Row

from lakemv.catalog.tables import DELETED, OP, POSITION, live_rows_sql
from lakemv.spark.batch.runner import BatchProcessor
from tests.cdc import at, dbz, user

T0 = datetime(2024, 3, 1, 12, tzinfo=UTC)
T0_MICROS = 1_709_294_400_000_000


@pytest.fixture
def apply(lake):
    processor = BatchProcessor(lake.spark, lake.names, lake.sources)
    batches = iter(range(1000))

    def run(*lines: tuple[str, str]):
        return processor.process_lines(next(batches), list(lines))

    return run


def live(lake, table="users"):
    return lake.spark.sql(live_rows_sql(lake.names, lake.sources[table]))


def users_df(lake, *rows):
    schema = lake.spark.table(lake.names.mirror("users")).select("id", "email", "username", "registered_at").schema
    return lake.spark.createDataFrame([Row(id=i, email=e, username=u, registered_at=r) for i, e, u, r in rows], schema)


def assert_users(lake, *rows):
    assert_df_equality(live(lake), users_df(lake, *rows), ignore_row_order=True, ignore_nullable=True)


def test_create_update_delete_and_tombstone(lake, apply):
    apply((dbz("r", 10, user("a@x.io", "ann")), at("users")), (dbz("c", 11, user("b@x.io", "bob", 2)), at("users")))
    apply((dbz("u", 20, user("a@x.io", "anna"), before=None), at("users")), (dbz("d", 21, before={"email": "b@x.io"}), at("users")))
    assert_users(lake, (1, "a@x.io", "anna", T0))
    tomb = lake.spark.table(lake.names.mirror("users")).where("email = 'b@x.io'").select("username", POSITION, OP, DELETED).collect()
    assert tomb == [Row(username=None, **{POSITION: 21, OP: "d", DELETED: True})]


def test_replayed_create_cannot_resurrect_a_deleted_row(lake, apply):
    apply((dbz("c", 10, user("a@x.io", "ann")), at("users")))
    apply((dbz("d", 30, before=user("a@x.io", "ann")), at("users")))
    apply((dbz("c", 10, user("a@x.io", "ann")), at("users")), (dbz("u", 25, user("a@x.io", "zombie")), at("users")))
    assert_users(lake)


def test_recreate_with_a_newer_position_brings_the_row_back(lake, apply):
    apply((dbz("c", 10, user("a@x.io", "ann")), at("users")), (dbz("d", 11, before={"email": "a@x.io"}), at("users")))
    apply((dbz("c", 12, user("a@x.io", "ann2", 9)), at("users")))
    assert_users(lake, (9, "a@x.io", "ann2", T0))


def test_out_of_order_batches_keep_the_newest(lake, apply):
    apply((dbz("u", 50, user("a@x.io", "newest")), at("users")))
    apply((dbz("c", 10, user("a@x.io", "oldest")), at("users")), (dbz("u", 40, user("a@x.io", "older")), at("users")))
    assert_users(lake, (1, "a@x.io", "newest", T0))


def test_duplicates_within_and_across_batches_are_harmless(lake, apply):
    line = dbz("c", 10, user("a@x.io", "ann"), wrapped=True)
    apply((line, at("users", "a.json")), (line, at("users", "b.json")))
    apply((line, at("users", "c.json")))
    assert_users(lake, (1, "a@x.io", "ann", T0))
    assert lake.spark.table(lake.names.mirror("users")).count() == 1


def test_primary_key_change_is_delete_plus_create(lake, apply):
    apply((dbz("c", 10, user("old@x.io", "ann")), at("users")))
    apply((dbz("d", 20, before={"email": "old@x.io"}), at("users")), (dbz("c", 21, user("new@x.io", "ann")), at("users")))
    assert_users(lake, (1, "new@x.io", "ann", T0))


def test_composite_keys_and_all_five_tables(lake, apply):
    lines = [
        (dbz("c", 1, user("a@x.io", "ann")), at("users")),
        (dbz("c", 2, {"name": "lake", "owner": "ann", "description": "d", "star_count": 1, "fork_count": 0, "created_at": 1_709_294_400_000, "updated_at": None}), at("repos")),
        (dbz("c", 3, {"title": "t", "repo": "lake", "repo_owner": "ann", "index": 1, "author": "ann", "status": "open", "created_at": "2024-03-01T13:00:00+01:00"}), at("pull_requests")),
        (dbz("c", 4, {"title": "t2", "repo": "lake", "repo_owner": "ann", "index": 2, "author": "bob", "status": "open", "created_at": None}), at("pull_requests")),
        (dbz("c", 5, {"username": "bob", "repo_name": "lake", "repo_owner": "ann", "created_at": 1_709_294_400_000_000}), at("stars")),
        (dbz("c", 6, {"id": 1, "user_id": 1, "verified": True}), at("payment_info")),
        (dbz("d", 7, before={"repo": "lake", "repo_owner": "ann", "index": 2}), at("pull_requests")),
    ]
    result = apply(*lines)
    assert result.merged == {"users": 1, "repos": 1, "pull_requests": 2, "stars": 1, "payment_info": 1}
    # unix_micros: compare instants, not the naive datetimes PySpark hands back in local time
    prs = live(lake, "pull_requests").selectExpr("`index`", "unix_micros(created_at) AS us").collect()
    assert [(r["index"], r["us"]) for r in prs] == [(1, T0_MICROS)]
    assert live(lake, "repos").selectExpr("unix_micros(created_at)").first()[0] == T0_MICROS
    assert live(lake, "payment_info").first()["verified"] is True


def test_bad_lines_go_to_dead_letters_and_the_batch_goes_on(lake, apply):
    result = apply(
        ("{broken", at("users", "bad.json")),
        ('["not", "an", "envelope"]', at("users")),
        (dbz("z", 5, user("x@x.io", "x")), at("users")),
        (dbz("c", 6, {"id": 1, "username": "nokey"}), at("users")),
        (dbz("c", 7, {**user("w@x.io", "w"), "id": "seven"}), at("users")),
        (dbz("c", 8, user("ok@x.io", "fine")), at("users")),
        (dbz("c", 9, user("q@x.io", "q")), at("issues")),
        ("null", at("users")),
    )
    assert (result.dead_letters, result.skipped, result.merged) == (6, 1, {"users": 1})
    assert_users(lake, (1, "ok@x.io", "fine", T0))
    letters = lake.spark.table(lake.names.dead_letters).orderBy("reason").collect()
    reasons = sorted((r["source_table"], r["reason"].split(":")[0]) for r in letters)
    assert reasons == sorted(
        [
            ("users", "malformed JSON"),
            ("users", "not a Debezium envelope"),
            ("users", "unknown op 'z'"),
            ("users", "missing primary-key field 'email' in 'after'"),
            ("users", "column 'id'"),
            ("issues", "unknown table folder 'issues'"),
        ]
    )
    broken = next(r for r in letters if r["reason"].startswith("malformed"))
    assert (broken["raw"], broken["source_file"], broken["batch_id"]) == ("{broken", at("users", "bad.json"), 0)
    assert broken["failed_at"] is not None


def test_mirror_tables_are_format_v2_merge_on_read(lake, apply):
    apply((dbz("c", 1, user("a@x.io", "ann")), at("users")))
    props = dict(lake.spark.sql(f"SHOW TBLPROPERTIES {lake.names.mirror('users')}").collect())
    assert props["format-version"] == "2"
    assert props["write.merge.mode"] == props["write.delete.mode"] == props["write.update.mode"] == "merge-on-read"


@pytest.mark.parametrize("state", [False, True])
def test_an_unavailable_value_keeps_the_stored_one_from_the_mirror_or_the_local_state(lake, tmp_path, state):
    """Debezium's TOAST placeholder in a later batch is filled from the stored row: the mirror's, or the
    local state's when it keeps the table (a view reads it)."""
    from lakemv.core.cdc.unavailable import PLACEHOLDER
    from lakemv.core.planner import plan_view
    from lakemv.core.planner.definitions import parse_view
    from lakemv.core.state.store import Store

    plans = [plan_view(parse_view("-- @key: owner, name\nSELECT owner, name, description FROM repos", "descriptions"), lake.sources)] if state else []
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=Store(tmp_path / "state.sqlite") if state else None)
    assert ("repos" in processor.store.mirrors) if state else processor.store is None

    def repo(description, stars):
        return {"owner": "o", "name": "a", "description": description, "star_count": stars, "fork_count": 0, "created_at": 0, "updated_at": 0}

    processor.process_lines(0, [(dbz("c", 10, repo("a long text", 1)), at("repos"))])
    result = processor.process_lines(1, [(dbz("u", 20, repo(PLACEHOLDER, 2)), at("repos"))])
    assert result.dead_letters == 0
    row = live(lake, "repos").select("description", "star_count").collect()
    assert [tuple(r) for r in row] == [("a long text", 2)]
