"""The local indexed state without a JVM: its layout from the plans, the SQLite store, and the walks."""

from __future__ import annotations

import datetime
import math
import sqlite3
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.codec import decode, encode, rows_of, to_arrow
from lakemv.core.state.layout import NOT_CONSTANT, MirrorPart, ViewPart, constant, mirror_parts, plain_column, route
from lakemv.core.state.places import key_blob, key_of
from lakemv.core.state.store import Store
from lakemv.core.state.walk import direct_keys, estimated_rows, gather, project_keys, reach


def test_plain_columns_are_told_from_expressions():
    assert plain_column("_lmv_self.username") == "username"
    assert plain_column("_lmv_self.`index`") == "index"
    assert plain_column("LOWER(_lmv_self.username)") is None
    assert plain_column("_lmv_self.a + 1") is None


def test_constants_are_told_from_expressions():
    assert [constant(e) for e in ("'stars'", "''", "7", "NULL", "TRUE")] == ["stars", "", 7, None, True]
    for expression in ("1.5", "-1", "'a\\nb'", "_lmv_self.a", "LOWER('A')", "DATE'2024-01-01'", "'a' || 'b'"):
        assert constant(expression) is NOT_CONSTANT, expression  # left to Spark


def test_user_profile_is_served_by_indexes_on_its_join_columns(plans, sources):
    r = route(plans["user_profile"])
    assert r.indexed and r.exact_keys
    parts = mirror_parts(sources, [r])
    assert set(parts) == {"users", "stars", "repos", "pull_requests", "payment_info"}
    assert parts["users"].indexes == (("id",), ("username",))  # the key (email) is the primary key
    assert parts["stars"].indexes == (("repo_name", "repo_owner"), ("username",))
    assert parts["pull_requests"].indexes == (("author",),)
    assert parts["payment_info"].indexes == (("user_id",),)
    assert parts["repos"].indexes == ()  # looked up by (owner, name): its primary key
    # a changed repo walks stars -> users; a changed star carries its username to users
    plan = plans["user_profile"]
    repos = next(o.id for o in plan.occurrences if o.table == "repos")
    assert [(h.table, h.columns) for h in r.up[repos]] == [("stars", ("repo_owner", "repo_name")), ("users", ("username",))]


def test_a_link_carrying_the_key_skips_the_hop_into_the_anchor(plans):
    plan = plans["repo_summary"]
    r = route(plan)
    stars = next(o.id for o in plan.occurrences if o.table == "stars")
    assert r.up[stars] == () and r.key_columns[stars] == ("repo_owner", "repo_name")


def test_a_link_on_expressions_leaves_the_view_to_scans(sources):
    plan = plan_view(
        parse_view(
            "-- @key: email\nSELECT u.email, (SELECT count(*) FROM stars s WHERE lower(s.username) = lower(u.username)) AS n FROM users u",
            "v",
        ),
        sources,
    )
    r = route(plan)
    assert not r.indexed and "compares expressions" in (r.reason or "")


def test_an_expression_key_is_looked_up_by_its_plain_columns_then_filtered(sources):
    plan = plan_view(
        parse_view(
            "-- @key: author, day\nSELECT p.author, date_trunc('DAY', p.created_at) AS day, count(*) AS n "
            "FROM pull_requests p GROUP BY p.author, date_trunc('DAY', p.created_at)",
            "daily",
        ),
        sources,
    )
    r = route(plan)
    assert r.indexed and not r.exact_keys
    assert r.anchors[plan.anchor].columns == ("author",)
    assert r.key_columns[plan.anchor] == ("author", None)  # the day is evaluated by Spark


def test_a_key_with_no_plain_column_is_looked_up_by_a_derived_column_of_its_value(sources):
    plan = plan_view(
        parse_view(
            "-- @key: month\nSELECT date_trunc('MONTH', u.registered_at) AS month, count(*) AS n FROM users u "
            "GROUP BY date_trunc('MONTH', u.registered_at)",
            "monthly",
        ),
        sources,
    )
    r = route(plan)
    assert r.indexed and r.exact_keys
    (name, expression), = r.derived.items()
    anchor = r.anchors[plan.anchor]
    assert anchor.columns == (name,) and anchor.using == ("month",) and "date_trunc" in expression.lower()
    assert r.key_columns[plan.anchor] == (None,)  # a changed row's key is evaluated by Spark
    users = mirror_parts(sources, [r])["users"]
    assert users.derived == ((name, expression),) and name in users.materialized and (name,) in users.indexes
    assert users.fingerprint != mirror_parts(sources, [])["users"].fingerprint  # a new derived column reloads the rows
    # the same expression in another view shares the column; a constant key is one too
    again = route(plan_view(parse_view("-- @key: month\n" + plan.definition.sql.replace("count(*) AS n", "max(u.id) AS top"), "other"), sources))
    assert again.derived == r.derived
    total = route(plan_view(parse_view("-- @key: scope\nSELECT 'all' AS scope, count(*) AS n FROM users u", "total"), sources))
    assert total.indexed and list(total.derived.values()) == ["'all'"]


def test_derived_columns_are_stored_beside_the_row_and_looked_up_by(sources):
    part = MirrorPart(
        table="t", primary_key=("id",), columns=(("id", "bigint"), ("g", "string")), indexes=(("_lmv_x_1",),), derived=(("_lmv_x_1", "upper(_lmv_self.g)"),)
    )
    store = Store(":memory:")
    store.attach_mirror(part)
    store.put_rows("t", [((1, "a", "A"), 1, False), ((2, "a", "A"), 1, False), ((3, "b", "B"), 1, False), ((4, "a", "A"), 1, True)])
    assert sorted(store.lookup("t", ("_lmv_x_1",), [("A",)], (True,))) == [(1, "a"), (2, "a")]  # the row alone, live rows only
    assert store.count_lookup("t", ("_lmv_x_1",), [("A",), ("B",), ("C",)], (True,)) == 3
    assert store.stored("t", [(3,)])[(3,)].row == (3, "b")
    with pytest.raises(ValueError, match="without the values of its derived columns"):
        store.put_rows("t", [((5, "c"), 2, False)])


def test_a_union_all_looks_each_branch_up_by_its_own_anchor(sources):
    from lakemv.workload.shapes import shape_view

    plan = plan_view(shape_view("people_counts"), sources)
    r = route(plan)
    assert r.indexed and not r.exact_keys  # the constant telling the branches apart is not a column
    assert {plan.occurrence(a).table: (l.columns, l.using) for a, l in r.anchors.items()} == {
        "stars": (("username",), ("who",)), "pull_requests": (("author",), ("who",))
    }
    repos = next(o.id for o in plan.occurrences if o.table == "repos")  # joined in the second branch
    assert r.key_columns[repos] == (None, "author") and r.up[repos] == (r.up[repos][0],) and r.up[repos][0].table == "pull_requests"
    store = Store(":memory:")
    parts = mirror_parts(sources, [r])
    for part in parts.values():
        store.attach_mirror(part)
    names = parts["pull_requests"].column_names
    store.put_rows("pull_requests", [(tuple({"repo": "r", "repo_owner": "o", "index": 1, "author": "ann"}.get(c) for c in names), 1, False)])
    store.put_rows("repos", [(tuple({"owner": "o", "name": "r"}.get(c) for c in parts["repos"].column_names), 1, False)])
    repo = tuple({"owner": "o", "name": "r"}.get(c) for c in parts["repos"].column_names)
    keys, pending = reach(plan, r, parts, store, {"repos": [repo]})
    prs = next(a for a in r.anchors if plan.occurrence(a).table == "pull_requests")
    assert keys == set() and list(pending) == [prs] and len(pending[prs]) == 1  # its key: a constant and a column
    typed = pa.schema([("kind", pa.string()), ("who", pa.string())])
    found = direct_keys(plan.keys_at(prs), parts["pull_requests"], typed)
    assert found == ((None, "prs"), ("author", None)) and project_keys(pending[prs], parts["pull_requests"], found) == {("prs", "ann")}
    widened = pa.schema([("kind", pa.int64()), ("who", pa.string())])  # Spark would cast 'prs': the driver does not guess
    assert direct_keys(plan.keys_at(prs), parts["pull_requests"], widened) is None
    rows = gather(plan, r, parts, store, [("prs", "ann")])
    assert {plan.occurrence(o).table: len(found) for o, found in rows.items()} == {"stars": 0, "pull_requests": 1, "repos": 1}


def test_layout_fingerprint_changes_only_when_rows_must_reload():
    base = MirrorPart(table="t", primary_key=("id",), columns=(("id", "bigint"), ("a", "string"), ("b", "string")), indexes=(("a",),))
    same = base.model_copy(update={"indexes": ()})
    assert base.fingerprint != same.fingerprint  # `a` is no longer kept as a column of its own
    more = base.model_copy(update={"indexes": (("a",), ("a", "b"))})
    assert base.fingerprint != more.fingerprint  # `b` becomes a column of its own
    fewer = more.model_copy(update={"indexes": (("a", "b"),)})
    assert more.fingerprint == fewer.fingerprint  # an index dropped in place


def test_codec_round_trips_every_type_exactly():
    schema = pa.schema(
        [
            ("s", pa.string()),
            ("i", pa.int64()),
            ("d", pa.float64()),
            ("b", pa.bool_()),
            ("t", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
        ]
    )
    moment = datetime.datetime(2024, 2, 29, 12, 30, 1, 5, tzinfo=datetime.UTC)
    table = pa.Table.from_pylist(
        [
            {"s": "é'x", "i": -(2**62), "d": float("nan"), "b": True, "t": moment, "day": datetime.date(1, 1, 1)},
            {"s": None, "i": None, "d": -0.0, "b": False, "t": None, "day": None},
        ],
        schema=schema,
    )
    rows = [decode(encode(r)) for r in rows_of(table, schema.names)]
    back = to_arrow(rows, schema)
    assert back.column("t").to_pylist() == [moment, None]
    assert back.column("day").to_pylist() == [datetime.date(1, 1, 1), None]
    d = back.column("d").to_pylist()
    assert math.isnan(d[0]) and math.copysign(1, d[1]) == -1
    assert back.drop_columns(["d"]).equals(table.drop_columns(["d"]))
    # a row stored before a column was added reads back with NULL there
    assert to_arrow([("x",)], pa.schema([("s", pa.string()), ("n", pa.int64())])).to_pylist() == [{"s": "x", "n": None}]


def _seed_store(plans, sources) -> tuple[Store, dict]:
    r = route(plans["user_profile"])
    parts = mirror_parts(sources, [r])
    store = Store(":memory:")
    for part in parts.values():
        assert store.attach_mirror(part) is False  # new: empty
    rows = {
        "users": [
            ({"id": 1, "email": "a@x", "username": "ann"}, False),
            ({"id": 2, "email": "b@x", "username": "bob"}, False),
            ({"id": 3, "email": "c@x", "username": "cat"}, True),  # a tombstone: not live
        ],
        "stars": [
            ({"username": "ann", "repo_owner": "o", "repo_name": "r1"}, False),
            ({"username": "bob", "repo_owner": "o", "repo_name": "r1"}, False),
            ({"username": "cat", "repo_owner": "o", "repo_name": "r1"}, False),
            ({"username": "bob", "repo_owner": "o", "repo_name": "r2"}, False),
        ],
        "repos": [({"owner": "o", "name": "r1", "description": "one"}, False), ({"owner": "o", "name": "r2"}, False)],
        "pull_requests": [({"repo": "r1", "repo_owner": "o", "index": 1, "author": "ann"}, False)],
        "payment_info": [({"id": 10, "user_id": 2, "verified": True}, False)],
    }
    for table, items in rows.items():
        names = parts[table].column_names
        store.put_rows(table, [(tuple(values.get(c) for c in names), 5, deleted) for values, deleted in items])
    return store, parts


def test_reach_follows_the_chains_through_live_rows_only(plans, sources):
    store, parts = _seed_store(plans, sources)
    plan, r = plans["user_profile"], route(plans["user_profile"])
    names = parts["repos"].column_names
    image = tuple({"owner": "o", "name": "r1"}.get(c) for c in names)
    keys, pending = reach(plan, r, parts, store, {"repos": [image]})
    assert keys == {("a@x",), ("b@x",)} and pending == {}  # cat's star reaches a tombstoned user: no key
    star = tuple({"username": "bob", "repo_owner": "o", "repo_name": "zz"}.get(c) for c in parts["stars"].column_names)
    pay = tuple({"id": 11, "user_id": 1}.get(c) for c in parts["payment_info"].column_names)
    keys, _ = reach(plan, r, parts, store, {"stars": [star], "payment_info": [pay]})
    assert keys == {("a@x",), ("b@x",)}


def test_gather_collects_each_occurrences_rows_for_the_keys(plans, sources):
    store, parts = _seed_store(plans, sources)
    plan, r = plans["user_profile"], route(plans["user_profile"])
    rows = gather(plan, r, parts, store, [("b@x",)])
    by_table = {plan.occurrence(o).table: sorted(rs, key=repr) for o, rs in rows.items()}
    users = parts["users"].column_names
    assert [row[users.index("username")] for row in by_table["users"]] == ["bob"]
    stars = parts["stars"].column_names
    assert sorted(row[stars.index("repo_name")] for row in by_table["stars"]) == ["r1", "r2"]
    assert len(by_table["repos"]) == 2 and by_table["pull_requests"] == [] and len(by_table["payment_info"]) == 1


def test_a_lookup_counts_the_rows_each_value_finds_in_the_index(plans, sources):
    store, _ = _seed_store(plans, sources)
    assert store.count_per_value("stars", ["username"], [("ann",), ("bob",), ("zed",)], [False]) == {("ann",): 1, ("bob",): 2}
    pairs = [("o", "r1"), ("o", "r2"), ("o", "none"), (None, "r1")]  # (owner, name): several columns, one NULL
    counted = store.count_per_value("stars", ["repo_owner", "repo_name"], pairs, [False, False])
    assert set(counted) == {("o", "r1"), ("o", "r2")} and counted[("o", "r1")] > counted[("o", "r2")] == 1
    for pair in pairs:  # each as many as the lookup finds
        assert counted.get(pair, 0) == store.count_lookup("stars", ["repo_owner", "repo_name"], [pair], [False, False]), pair


def test_the_rows_keys_read_are_estimated_from_each_joins_rows_per_value(plans, sources):
    store, parts = _seed_store(plans, sources)
    plan, r = plans["user_profile"], route(plans["user_profile"])
    stars = next(link.child for link in plan.links if plan.occurrence(link.child).table == "stars")
    by_name = r.down[stars]  # users -> stars by username
    assert store.fanout("users", by_name) == pytest.approx(3 / 2)  # live users ann (1 star) and bob (2); cat is gone
    star = tuple({"username": "ann", "repo_owner": "o", "repo_name": "r2"}.get(c) for c in parts["stars"].column_names)
    store.put_rows("stars", [(star, 6, False)])
    assert store.fanout("users", by_name) == pytest.approx(4 / 2)  # a source smaller than the sample is measured again
    nameless = tuple({"id": 4, "email": "d@x", "username": None}.get(c) for c in parts["users"].column_names)
    store.put_rows("users", [(nameless, 6, False)])
    assert store.fanout("users", by_name) == pytest.approx(4 / 3)  # a NULL username finds no star
    asked: list[tuple[str, str, tuple[str, ...]]] = []

    def fanout(table, hop):
        asked.append((table, hop.table, hop.columns))
        return 2.0

    loose = {link.child: not link.unique for link in plan.links}
    expected = sum(3 * 2.0 ** sum(loose[link.child] for link in plan.chain(o.id)) for o in plan.occurrences)
    assert estimated_rows(plan, r, {plan.anchor: 3}, fanout) == expected
    assert sorted(asked) == sorted((plan.occurrence(link.parent).table, r.down[link.child].table, r.down[link.child].columns)
                                   for link in plan.links if loose[link.child])  # fmt: skip
    assert any(loose.values()) and not all(loose.values())  # stars fan out; repos are found by their key


def test_store_lookups_match_sql_equality_in_chunks_and_null_safe_when_asked(sources):
    part = MirrorPart(table="t", primary_key=("id",), columns=(("id", "bigint"), ("g", "string"), ("h", "bigint")), indexes=(("g",), ("g", "h")))
    store = Store(":memory:")
    store.attach_mirror(part)
    store.put_rows("t", [((i, f"g{i % 700}", None if i % 2 else i), i, False) for i in range(2000)])
    found = store.lookup("t", ("g",), [(f"g{i}",) for i in range(700)], (False,))
    assert len(found) == 2000  # more values than one IN list holds
    assert store.lookup("t", ("g",), [(None,)], (False,)) == []  # NULL = NULL is not true
    assert sorted(r[0] for r in store.lookup("t", ("g", "h"), [("g1", None)], (False, True))) == [1, 701, 1401]  # <=> NULL
    assert store.lookup("t", ("g", "h"), [("g1", None)], (False, False)) == []
    assert [r[0] for r in store.lookup("t", ("g", "h"), [("g2", 702)], (False, False))] == [702]
    # several columns: one statement per chunk of tuples (a VALUES list joined to the part), same answer
    pairs = [(f"g{i % 700}", i) for i in range(0, 2000, 2)] + [("g1", None), ("nope", 1)]
    found = store.lookup("t", ("g", "h"), pairs, (False, True))
    assert sorted(r[0] for r in found) == sorted([*range(0, 2000, 2), 1, 701, 1401])  # each row once
    assert len(store.lookup("t", ("g", "h"), pairs, (False, False))) == 1000  # `=`: no NULL matches
    statements: list[str] = []  # the part is searched through its index, never scanned
    store._db.set_trace_callback(statements.append)
    store.lookup("t", ("g", "h"), [("g1", 1), ("g3", 3)], (False, False))
    store._db.set_trace_callback(None)
    [statement] = [s for s in statements if s.startswith("WITH")]
    plan = [row[-1] for row in store._db.execute(f"EXPLAIN QUERY PLAN {statement}")]
    assert any(step.startswith("SEARCH m USING INDEX") for step in plan) and not any(step.startswith("SCAN m") for step in plan), plan
    stored = store.stored("t", [(5,), (99999,)])
    assert set(stored) == {(5,)} and stored[(5,)].position == 5 and not stored[(5,)].deleted
    store.put_rows("t", [((5, None, None), 9, True)])  # a tombstone replaces the row
    assert store.stored("t", [(5,)])[(5,)].deleted
    assert all(row[0] != 5 for row in store.lookup("t", ("g",), [("g5",)], (False,)))


def test_store_layout_changes_reload_only_what_they_must(tmp_path):
    path = tmp_path / "state.sqlite"
    part = MirrorPart(table="t", primary_key=("id",), columns=(("id", "bigint"), ("g", "string")), indexes=(("g",),))
    store = Store(path)
    store.attach_mirror(part)
    store.put_rows("t", [((1, "a"), 1, False)])
    with store.transaction():
        store.set_record("mirror:t", part.fingerprint, 42, "w")
    store.close()
    again = Store(path)  # reopened: rows and record survive
    assert again.attach_mirror(part) is True and again.record("mirror:t").snapshot == 42 and again.count("t") == 1
    changed = part.model_copy(update={"columns": (("id", "bigint"), ("g", "string"), ("n", "bigint"))})
    assert again.attach_mirror(changed) is False and again.count("t") == 0 and again.record("mirror:t") is None
    view = ViewPart(view="v", key=("k",), definition="abc")
    assert again.attach_view(view) is False
    again.put_digests("v", [(("x",), "d1"), ((None,), "d2")])
    assert again.digests("v", [("x",), (None,), ("y",)]) == {("x",): "d1", (None,): "d2"}
    again.put_digests("v", [], deletes=[("x",)])
    assert again.digests("v", [("x",)]) == {}
    blobs, digests = again.stored_keys("v")  # every row, its key decoded on demand (a whole recompute's gone keys)
    assert [key_of(b) for b in blobs] == [(None,)] and digests == ["d2"]


@pytest.mark.parametrize(
    "key",
    [("a'b\"c",), (1, None, -7), (1.5, -0.0, b"\x00b"), (math.inf, -math.inf), ("", 0), ("é", 2**70), ("nan", "inf")],
)
def test_a_stored_view_key_decodes_to_what_was_encoded(key):
    assert key_of(key_blob(key)) == key
    assert key_blob(key_of(key_blob(key))) == key_blob(key)


def test_a_stored_view_key_keeps_nan_and_gives_booleans_back_as_integers():
    (value, flag) = key_of(key_blob((math.nan, True)))
    assert math.isnan(value) and flag == 1 and type(flag) is int
    with pytest.raises(ValueError):
        key_of(b"__import__('os')")


def test_a_located_store_keeps_where_each_row_lives_and_follows_it_into_new_files(tmp_path):
    path = tmp_path / "state.sqlite"
    part = MirrorPart(table="t", primary_key=("a", "b"), columns=(("a", "bigint"), ("b", "string"), ("g", "string")), indexes=(), located=True)
    assert part.fingerprint != part.model_copy(update={"located": False}).fingerprint  # turning it on reloads
    store = Store(path)
    store.attach_mirror(part)
    f1, f2, f3 = "file:/w/data/f1.parquet", "file:/w/data/f2.parquet", "file:/w/data/f3.parquet"
    store.put_rows("t", [((1, "x", "g"), 1, False), ((2, "y", "g"), 1, False)], [(f1, 0), (f1, 1)])
    assert {k: s.location for k, s in store.stored("t", [(1, "x"), (2, "y")]).items()} == {(1, "x"): (f1, 0), (2, "y"): (f1, 1)}
    # a unit replaces (2, y) and adds (3, z): its rows are put first, then found in the file it committed
    store.put_rows("t", [((2, "y", "h"), 2, False), ((3, "z", "h"), 2, False)])
    assert store.stored("t", [(3, "z")])[(3, "z")].location is None  # not known until located
    store.locate("mirror:t", f2, [(3, "z"), (2, "y")])
    # a compaction rewrote f1 and f2 into f3, in key order: every row moves, f1 and f2 are forgotten
    store.locate("mirror:t", f3, [(1, "x"), (2, "y"), (3, "z")])
    store.forget_files("mirror:t", [f1, f2])
    with store.transaction():
        store.set_record("mirror:t", part.fingerprint, 3, "w")
    store.close()
    again = Store(path)  # places survive a restart (paths by id in `files`)
    assert again.attach_mirror(part)
    stored = again.stored("t", [(1, "x"), (2, "y"), (3, "z")])
    assert {k: s.location for k, s in stored.items()} == {(1, "x"): (f3, 0), (2, "y"): (f3, 1), (3, "z"): (f3, 2)}
    assert [r[0] for r in again._db.execute("SELECT path FROM files")] == [f3]
    view = ViewPart(view="v", key=("k", "d"), definition="abc", located=True)
    again.attach_view(view)
    again.put_digests("v", [(("x", 1), "d1"), (("y", 2), "d2")], (), [(f1, 7), None])
    again.locate("view:v", f2, [("y", 2)])
    assert again.view_locations("v", [("x", 1), ("y", 2), ("z", 3)]) == {("x", 1): (f1, 7), ("y", 2): (f2, 0)}
    again.clear_digests("v")  # a reload starts over: the view's files are forgotten, the mirror's kept
    assert sorted(r[0] for r in again._db.execute("SELECT path FROM files")) == [f3]
    again.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "page"])
def test_an_unreadable_store_is_set_aside_and_starts_empty(tmp_path, damage):
    path = tmp_path / "state.sqlite"
    part = MirrorPart(table="t", primary_key=("id",), columns=(("id", "bigint"), ("g", "string")), indexes=(("g",),))
    store = Store(path)
    store.attach_mirror(part)
    store.put_rows("t", [((i, "x" * 200), i, False) for i in range(2_000)])
    with store.transaction():
        store.set_record("mirror:t", part.fingerprint, 42, "w")
    store.close()  # sealed: the damage below changes the file the seal describes
    time.sleep(0.02)  # past the file system's timestamp tick, as damage between two runs is
    data = bytearray(path.read_bytes())
    if damage == "garbage":
        data[:100] = b"not a database " * 6 + b"!" * 10
    elif damage == "truncated":
        data = data[: len(data) // 3]
    else:  # a page in the middle overwritten: the header still reads, the b-tree does not
        middle = len(data) // 2 // 4096 * 4096
        data[middle : middle + 4096] = b"\xff" * 4096
    path.write_bytes(bytes(data))
    again = Store(path)
    assert again.checked and again.discarded, "the damage went unnoticed"
    assert again.record("mirror:t") is None  # nothing of the old store is trusted: every part reloads
    assert again.attach_mirror(part) is False and again.count("t") == 0
    again.put_rows("t", [((1, "a"), 1, False)])
    assert again.lookup("t", ("g",), [("a",)], (False,)) == [(1, "a")]
    again.close()


def test_a_cleanly_closed_store_opens_unchecked_and_any_other_checked(tmp_path):
    """quick_check reads every page (seconds at 1M users): a store sealed by a clean close skips it;
    one a crash left, one changed since its close, and one opened before are all checked."""
    path = tmp_path / "state.sqlite"
    part = MirrorPart(table="t", primary_key=("id",), columns=(("id", "bigint"),), indexes=())
    store = Store(path)
    assert store.checked  # new
    store.attach_mirror(part)
    store.put_rows("t", [((1,), 1, False)])
    with store.transaction():
        store.set_record("mirror:t", part.fingerprint, 1, "w")
    store.close()
    assert Path(f"{path}.sealed").exists() and not Path(f"{path}-wal").exists()
    again = Store(path)
    assert not again.checked and again.attach_mirror(part) and again.count("t") == 1
    assert not Path(f"{path}.sealed").exists()  # used up on open: a crash from here leaves no seal
    again.put_rows("t", [((2,), 2, False)])
    again._db.close()  # a crash: no clean close
    crashed = Store(path)
    assert crashed.checked and crashed.attach_mirror(part) and crashed.count("t") == 2
    crashed.close()
    time.sleep(0.02)
    with sqlite3.connect(path) as other:  # a change after the seal (another writer, a copy)
        other.execute('CREATE TABLE "x" (y)')
    changed = Store(path)
    assert changed.checked and not changed.discarded and changed.attach_mirror(part) and changed.count("t") == 2
    changed.close()


def test_commits_leave_folding_the_wal_to_the_checkpoint_thread(tmp_path, monkeypatch):
    """A commit only appends to the WAL; the store's checkpoint thread folds it into the database
    (lakemv.core.state.dbfile), and a commit folds it in itself once the thread falls far behind."""
    from lakemv.core.state import dbfile

    monkeypatch.setattr(dbfile, "WAL_FOLD", 0)
    path = tmp_path / "state.sqlite"
    part = MirrorPart(table="t", primary_key=("id",), columns=(("id", "bigint"), ("g", "string")), indexes=(("g",),))
    store = Store(path)
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    store.attach_mirror(part)
    store.checkpointer.wait_idle()
    folds = store.checkpointer.folds
    store.put_rows("t", [((i, f"g{i % 7}"), i, False) for i in range(5000)])
    assert store.checkpointer.wait_idle() and store.checkpointer.folds > folds
    with sqlite3.connect(path) as other:  # every frame of the WAL is in the database already
        busy, frames, folded = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and frames == folded > 0
    store.checkpointer.stop()  # fallen behind: the next commit folds the WAL in itself past the limit
    monkeypatch.setattr(dbfile, "WAL_LIMIT", 0)
    store.put_rows("t", [((i, "h"), i, False) for i in range(5000)])
    with sqlite3.connect(path) as other:
        busy, frames, folded = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames == folded
    store.close()
    assert Path(f"{path}.sealed").exists()
    again = Store(path)
    assert not again.checked and again.count("t") == 5000
    again.close()


class _History:
    """A fake table history for in_step: snapshots newest first, as Snapshots.since returns them."""

    def __init__(self, *entries: tuple[int, int | None, str, str | None]):
        from lakemv.spark.batch.sync import Snapshot

        self.chain = [Snapshot(*e) for e in reversed(entries)]

    def since(self, identifier: str, snapshot: int | None):
        ids = [s.id for s in self.chain]
        if snapshot is None:
            return self.chain
        return self.chain[: ids.index(snapshot)] if snapshot in ids else None


def test_in_step_tells_compaction_and_the_units_own_commits_from_foreign_ones():
    from lakemv.spark.batch.sync import Step, in_step

    history = _History((1, None, "append", "s:0.0"), (2, 1, "replace", None), (3, 2, "overwrite", "s:1.0"), (4, 3, "replace", None))
    assert in_step(history, "t", 4) == Step(4, 4)
    assert in_step(history, "t", 1) is None  # unit s:1.0 is not the one being applied: foreign
    # current 4; the part still reflects only 2 (unit s:1.0's rows are not in it yet); the unit's
    # commit and the compaction after it moved rows, in that order
    assert in_step(history, "t", 2, {"s:1.0"}) == Step(4, 2, moved=(3, 4))
    # compactions the part can follow at once: it reflects their snapshot, its rows moved there
    assert in_step(history, "t", 1, {"s:1.0"}) == Step(4, 2, moved=(2, 3, 4), folded=(2,))
    assert in_step(history, "t", 99) is None  # not an ancestor (expired, rolled back)
    assert in_step(_History((1, None, "replace", None)), "t", None) == Step(1, 1, moved=(1,), folded=(1,))


def test_a_reload_is_sliced_by_the_values_and_the_bytes_it_collects():
    from lakemv.spark.batch.sync import RELOAD_BYTES, RELOAD_CELLS, reload_slices

    assert reload_slices(0, 5, 0.0) == 1
    assert reload_slices(1_000, 5, 200.0) == 1
    # a mirror of 1M rows and 40 columns: the values bound (8M values a slice)
    assert reload_slices(1_000_000, 40, 100.0) == -(-40_000_000 // RELOAD_CELLS) == 5
    # a view's 1M keys, digests and file places (~300 bytes a row in Arrow): few cells, many bytes -
    # one slice was a few hundred MB in one task's result, more than a task hands over (128 MiB)
    slices = reload_slices(1_000_000, 4, 300.0)
    assert slices == 9 and 1_000_000 * 300 / slices <= RELOAD_BYTES
    assert reload_slices(10_000, 2, 50_000.0) == 15  # wide rows: 500 MB in 32 MiB slices


def test_explain_shows_the_store_lookups_or_why_there_are_none(plans, sources):
    from lakemv.core.planner.explain import explain

    text = explain(plans["user_profile"])
    assert "repos r                      up: stars by (repo_owner = .owner, repo_name = .name) -> users by (username = .username)" in text
    plan = plan_view(
        parse_view("-- @key: email\nSELECT u.email, (SELECT count(*) FROM stars s WHERE lower(s.username) = lower(u.username)) AS n FROM users u", "v"),
        sources,
    )
    assert "local state: not used, every lookup scans the mirrors: the link `" in explain(plan)
