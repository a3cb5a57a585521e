"""Schema drift: after-images gain a field (the mirror gains a nullable column, ingest goes on) or lose
one (stored as NULL; a view reading it is named in an error note). Views not using the column are
unaffected; a view that reads a column the declaration no longer has is refused with a clear error."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.duck.query import run_query
from lakemv.spark.batch.runner import BatchProcessor
from tests.cdc import at, dbz

T_MICROS = 1_709_294_400_000_000
T_MILLIS = T_MICROS // 1000


def _user(email: str, username: str, id: int, **extra) -> dict:  # noqa: A002
    return {"id": id, "email": email, "username": username, "registered_at": T_MICROS, **extra}


def _repo(owner: str, name: str, description: str | None = "words", drop: tuple[str, ...] = ()) -> dict:
    row = {"name": name, "owner": owner, "description": description, "star_count": 3, "fork_count": 0,
           "created_at": T_MILLIS, "updated_at": None}  # fmt: skip
    return {k: v for k, v in row.items() if k not in drop}


def _star(username: str, owner: str, name: str) -> dict:
    return {"username": username, "repo_name": name, "repo_owner": owner, "created_at": T_MICROS}


def _plans(sources):
    return [plan_view(v, sources) for v in load_views(LakeSettings().view_dirs).values()]


def _assert_views_fresh(lake, processor: BatchProcessor) -> None:
    for maintainer in processor.maintainers:
        view = lake.spark.table(maintainer.table)
        expected = maintainer.recompute()
        assert_df_equality(view, expected.select(*view.columns), ignore_row_order=True, ignore_nullable=True)


def test_new_fields_become_columns_and_missing_ones_become_null(lake):
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, _plans(lake.sources))
    processor.process_lines(
        0,
        [
            (dbz("c", 10, _user("ann@x", "ann", 1)), at("users")),
            (dbz("c", 11, _repo("ann", "lake")), at("repos")),
            (dbz("c", 12, _star("ann", "ann", "lake")), at("stars")),
        ],
    )
    profiles_before = {r["email"]: r for r in lake.spark.table(lake.names.view("user_profile")).collect()}

    # 1. users grows two fields: the mirror gains nullable columns, values are kept, views are untouched.
    result = processor.process_lines(
        1,
        [
            (dbz("c", 20, _user("bob@x", "bob", 2, nickname="bobby", karma=7)), at("users")),
            (dbz("u", 21, _user("ann@x", "ann", 1, nickname=None, karma=3)), at("users")),
        ],
    )
    assert result.dead_letters == 0 and result.merged == {"users": 2}
    assert any("new column `karma` (bigint)" in n for n in result.notes), result.notes
    assert any("new column `nickname` (string)" in n for n in result.notes), result.notes
    mirror = {r["email"]: r for r in lake.spark.table(lake.names.mirror("users")).collect()}
    assert (mirror["bob@x"]["nickname"], mirror["bob@x"]["karma"]) == ("bobby", 7)
    assert (mirror["ann@x"]["nickname"], mirror["ann@x"]["karma"]) == (None, 3)
    assert lake.spark.table(lake.names.mirror("users")).schema["karma"].nullable
    profiles = {r["email"]: r for r in lake.spark.table(lake.names.view("user_profile")).collect()}
    assert profiles["ann@x"] == profiles_before["ann@x"]  # unaffected by a column it does not read
    _assert_views_fresh(lake, processor)
    # DuckDB readers see the evolved columns too.
    rows = run_query(lake.settings, lake.sources, "select email, nickname, karma from users order by email").to_pylist()
    assert rows == [{"email": "ann@x", "nickname": None, "karma": 3}, {"email": "bob@x", "nickname": "bobby", "karma": 7}]

    # 2. A restarted processor reads the evolved columns back from the mirror: no new note, values kept.
    restarted = BatchProcessor(lake.spark, lake.names, lake.sources, _plans(lake.sources))
    assert "karma" in restarted.sources["users"].column_names
    result = restarted.process_lines(2, [(dbz("u", 30, _user("bob@x", "bob", 2, nickname="b", karma=8)), at("users"))])
    assert not result.notes and result.merged == {"users": 1}
    assert lake.spark.table(lake.names.mirror("users")).where("email = 'bob@x'").first()["karma"] == 8

    # 3. A field of the wrong type later is a dead letter, not a guess; the rest of the batch applies.
    result = restarted.process_lines(
        3,
        [
            (dbz("u", 40, _user("bob@x", "bob", 2, nickname="b", karma="lots")), at("users")),
            (dbz("c", 41, _user("cy@x", "cy", 3, nickname="c", karma=1)), at("users")),
        ],
    )
    assert result.dead_letters == 1 and result.merged == {"users": 1}

    # 4. repos stops sending `description`: stored as NULL, and the views reading it are named.
    result = restarted.process_lines(4, [(dbz("u", 50, _repo("ann", "lake", drop=("description",))), at("repos"))])
    assert result.dead_letters == 0 and result.merged == {"repos": 1}
    (note,) = result.notes
    assert "repos: column `description` missing from 1 after-images (stored as NULL)" in note
    assert "error: views repo_summary, user_profile read repos.description" in note, note
    assert lake.spark.table(lake.names.mirror("repos")).first()["description"] is None
    profile = lake.spark.table(lake.names.view("user_profile")).where("email = 'ann@x'").first()
    assert [s["description"] for s in profile["starred_repos"]] == [None]
    _assert_views_fresh(lake, restarted)


def test_a_view_reading_a_column_the_declaration_dropped_is_refused_clearly(sources):
    repos = sources["repos"]
    trimmed = {**sources, "repos": repos.model_copy(update={"columns": tuple(c for c in repos.columns if c.name != "description")})}
    view = load_views(LakeSettings().view_dirs)["user_profile"]
    with pytest.raises(ViewDefinitionError) as error:
        plan_view(view, trimmed)
    message = str(error.value)
    assert message.startswith("view user_profile") and "description" in message, message
    assert "Traceback" not in message and "\n" not in message



def test_a_new_field_takes_the_type_its_connect_schema_names_and_keeps_it_after_a_restart(lake):
    """Drift in a schema-carrying stream: a Decimal becomes DECIMAL(p,s), a MicroTime a time of day
    (text in the table, marked so a restarted ingest reads it back as a time), not base64 or a number."""
    import base64
    import json
    from decimal import Decimal

    def envelope(lsn: int, email: str, amount: int, slot: int) -> str:
        fields = [
            {"type": "int64", "optional": True, "field": "id"}, {"type": "string", "optional": False, "field": "email"},
            {"type": "string", "optional": True, "field": "username"},
            {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "registered_at"},
            {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "balance"},
            {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "slot"},
        ]  # fmt: skip
        after = {**_user(email, email.split("@")[0], lsn), "balance": base64.b64encode(amount.to_bytes(4, "big", signed=True)).decode(), "slot": slot}
        schema = {"type": "struct", "fields": [{"type": "struct", "fields": fields, "optional": True, "field": "after"}]}
        return json.dumps({"schema": schema, "payload": {"op": "c", "after": after, "source": {"lsn": lsn}}})

    processor = BatchProcessor(lake.spark, lake.names, lake.sources)
    result = processor.process_lines(0, [(envelope(10, "ann@x", 1250, 3_600_000_000), at("users"))])
    assert any("new column `balance` (decimal)" in n for n in result.notes) and any("`slot` (time)" in n for n in result.notes)
    mirror = lake.spark.table(lake.names.mirror("users"))
    assert dict(mirror.dtypes)["balance"] == "decimal(10,2)" and dict(mirror.dtypes)["slot"] == "string"

    restarted = BatchProcessor(lake.spark, lake.names, lake.sources)  # reads the evolved columns back
    assert restarted.sources["users"].column("slot").type == "time"
    result = restarted.process_lines(1, [(envelope(11, "bob@x", -5, 5_400_123_456), at("users"))])
    assert result.dead_letters == 0
    rows = {r["email"]: (r["balance"], r["slot"]) for r in lake.spark.table(lake.names.mirror("users")).collect()}
    assert rows == {"ann@x": (Decimal("12.50"), "01:00:00.000000"), "bob@x": (Decimal("-0.05"), "01:30:00.123456")}
