"""Other view shapes in the supported class stay equal to their full recompute, and to their SQL run
verbatim, batch after batch (workload/shapes.py lists them); DuckDB's check agrees."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from chispa import assert_df_equality

from lakemv.core.batch import choice
from lakemv.core.planner import ViewPlan, plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.store import Store
from lakemv.duck.verify import verify_view
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.views.kept import KeptPlans
from lakemv.spark.views.maintain import ANALYSED, ViewMaintainer
from lakemv.workload.shapes import SCANNED, SHAPES, shape_view
from tests.cdc import at, dbz, user
from tests.integration.test_view_properties import assert_views_are_fresh


def repo(owner, name, description="d", lsn_ms=1_700_000_000_000):
    return {"owner": owner, "name": name, "description": description, "star_count": 0, "fork_count": 0,
            "created_at": lsn_ms, "updated_at": lsn_ms}  # fmt: skip


def star(username, owner, name):
    return {"username": username, "repo_owner": owner, "repo_name": name, "created_at": 1_700_000_000_000_000}


def pr(owner, name, index, author, status="open", day="2024-03-01"):
    return {"repo_owner": owner, "repo": name, "index": index, "author": author, "status": status,
            "title": f"pr {index}", "created_at": f"{day}T10:00:00Z"}  # fmt: skip


BATCHES = [
    [
        *(("users", dbz("c", 10 + i, user(f"{n}@x", n, id=i))) for i, n in enumerate(["ann", "bob", "cy"], start=1)),
        ("repos", dbz("c", 20, repo("ann", "lake"))),
        ("repos", dbz("c", 21, repo("bob", "pond"))),
        ("stars", dbz("c", 30, star("ann", "bob", "pond"))),
        ("stars", dbz("c", 31, star("bob", "bob", "pond"))),
        ("stars", dbz("c", 32, star("bob", "ann", "lake"))),
        ("pull_requests", dbz("c", 40, pr("ann", "lake", 1, "bob"))),
        ("pull_requests", dbz("c", 41, pr("ann", "lake", 2, "bob", day="2024-03-02"))),
        ("pull_requests", dbz("c", 42, pr("bob", "pond", 1, "ann", status="closed"))),
    ],
    [  # join columns move: a PR changes author and day, a user is renamed, a star is removed
        ("pull_requests", dbz("u", 50, pr("ann", "lake", 1, "ann", day="2024-03-02"))),
        ("users", dbz("u", 51, user("bob@x", "bobby", id=2))),
        ("stars", dbz("d", 52, None, before={"username": "ann", "repo_owner": "bob", "repo_name": "pond"})),
        ("pull_requests", dbz("u", 53, pr("bob", "pond", 1, "ann", status="open"))),
    ],
    [  # a user is deleted and re-created under the old name, a replay of an old event, a new star
        ("users", dbz("d", 60, None, before={"email": "ann@x"})),
        ("users", dbz("c", 61, user("ann2@x", "ann", id=1))),
        ("stars", dbz("c", 62, star("cy", "ann", "lake"))),
        ("pull_requests", dbz("c", 40, pr("ann", "lake", 1, "bob"))),
        ("stars", dbz("c", 63, star("bobby", "ann", "lake"))),
        ("stars", dbz("c", 64, star("cy", "cy", "void"))),  # a repository that does not exist: a LEFT JOIN chain breaks
    ],
]


# Each backend once and each path once (three deterministic batches): lookups by scans with Spark
# MERGEs, incrementally; from the local state with direct commits, each view by the plan it keeps
# (lakemv.spark.views.kept), and all of them in one Spark job per core as on a cluster ("together");
# from the local state with Spark MERGEs, recomputing whole - the same whole recompute and MERGE a batch
# without the state makes (the shapes the state does not serve take that path there). The random
# histories of test_shape_properties take any mix.
VARIANTS = [("scan", "incremental"), ("direct", "incremental"), ("direct", "together"), ("indexed", "full")]
# Every shape runs the default way (direct commits, each view by its kept plan); the other variants run a
# shape of each kind of link and key: a GROUP BY on a non-key column; keys that are an expression, one
# only, a constant; a link on expressions, many to many, a join on a unique key, a LEFT JOIN chain, NOT
# EXISTS, nested scalar subqueries, a window, UNION ALL of each kind.
KIND_SHAPES = (
    "stars_per_user", "daily_prs", "case_blind_stars", "repo_fans", "star_emails", "starred_owners", "starless_users",
    "star_counts_nested", "latest_prs", "monthly_signups", "user_totals", "people_counts", "directory",
)  # fmt: skip
assert set(KIND_SHAPES) <= set(SHAPES) and SCANNED <= set(KIND_SHAPES)
# Recomputing whole is one path for every shape (the view's SQL run verbatim, its rows diffed against
# the table's and MERGEd), so it runs on the kinds of rows it diffs: a key that is an expression (with
# lists in the rows), a constant, several columns of a LEFT JOIN chain; NULLs from NOT EXISTS and a
# window; a UNION ALL's branches.
WHOLE_SHAPES = ("stars_per_user", "daily_prs", "user_totals", "starred_owners", "starless_users", "latest_prs", "directory")
assert set(WHOLE_SHAPES) <= set(KIND_SHAPES)
# Lookups by scans (the path without the local state, and of the shapes it does not serve) find a
# view's keys by joining the changed rows back through its links: a GROUP BY on a non-key column, keys
# that are an expression or a constant, a link on expressions, many to many, NOT EXISTS, a window, and
# UNION ALL's branches of each kind. Each shape costs scans a few Spark jobs per batch; the random
# histories of test_view_properties run scans too.
SCAN_SHAPES = (
    "stars_per_user", "daily_prs", "case_blind_stars", "repo_fans", "starless_users", "latest_prs", "people_counts", "directory",
)  # fmt: skip
assert SCANNED <= set(SCAN_SHAPES) <= set(KIND_SHAPES)


def shape_processor(lake, folder, lookups: str, names: Sequence[str] = tuple(SHAPES)) -> BatchProcessor:
    """The shapes `names` (default: every one) on one processor: lookups by `scan`, from the local state
    in `folder` (`indexed`), or from it with direct commits (`direct`)."""
    plans = [plan_view(shape_view(name), lake.sources) for name in names]
    store = Store(folder / "state.sqlite") if lookups != "scan" else None
    direct = DirectWriter(lake.spark, lake.settings) if lookups == "direct" else None
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=store, direct=direct)
    assert (lake.names.mirror("users") in processor.direct_tables) == (lookups == "direct")
    served = set(names) - SCANNED
    assert set(processor.indexed) == (served if store else set())  # the others beside it, from the store
    return processor


def assert_duckdb_agrees(lake, plans: list[ViewPlan]) -> None:
    """`lakemv verify`'s comparison for every shape: no difference, and every key compared."""
    for plan in plans:
        result = verify_view(lake.settings, lake.sources, plan.name, plan.definition.sql, plan.key_names)
        assert result.ok, result.summary() + "".join(f"\n  {d.describe()}" for d in result.samples)
        assert result.matching == result.table_rows == result.expected_rows, result.summary()


@pytest.mark.slow(175)
@pytest.mark.parametrize(("lookups", "path"), VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_each_shape_equals_its_full_recompute_after_every_batch(lake, tmp_path, lookups, path, monkeypatch):
    """After each batch every view equals lakemv's recompute and its SQL run verbatim over the live
    mirrors; after the last, `lakemv verify`'s DuckDB check agrees (an empty list - [] in Spark, NULL
    in DuckDB - and `exists` among the shapes)."""
    if path == "full":  # every batch reaches "most" rows: the batch recomputes each view whole and writes the diff
        monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_WHOLE)
    else:  # whatever the first (cold) batches measured
        monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)
    if path == "together":  # as without lakemv's jar: one job per core over every view's rows
        monkeypatch.setattr(KeptPlans, "available", property(lambda _self: False))
    names = {("direct", "incremental"): tuple(SHAPES), ("indexed", "full"): WHOLE_SHAPES, ("scan", "incremental"): SCAN_SHAPES}.get((lookups, path), KIND_SHAPES)
    processor = shape_processor(lake, tmp_path, lookups, names)
    seen_rows = {name: 0 for name in names}
    for number, batch in enumerate(BATCHES):
        result = processor.process_lines(number, [(line, at(table)) for table, line in batch])
        assert result.dead_letters == 0
        for view in result.views.values():
            assert ("recomputed in full" in (view.note or "")) == (path == "full" and bool(view.keys)), view
        if number == 2 and path != "full":  # new stars of cy (2 now) and bobby (1): 3 rows read for 2 keys
            stars = result.views["stars_per_user"]
            assert (stars.keys, stars.rows_read) == (2, 3 if "stars_per_user" in processor.indexed else None), stars
        # lakemv's recompute equals the verbatim SQL over these mirrors: the default way checks that for every shape
        for name, rows in assert_views_are_fresh(lake, processor, recompute=(lookups, path) == ("direct", "incremental")).items():
            seen_rows[name] = max(seen_rows[name], len(rows))
    assert all(seen_rows.values()), seen_rows  # every view had rows at some point: the check is not vacuous
    reran = {name for name, view in processor.indexed.items() if view.kept.reran}
    if (lookups, path) == ("direct", "incremental"):  # the later batches ran the plans the first one made
        assert reran == set(processor.indexed), set(processor.indexed) - reran
    elif path == "together":
        assert not reran and processor.indexed, reran
    day = lake.spark.sql(
        f"SELECT day, prs FROM {lake.names.view('daily_prs')} WHERE author = 'ann' ORDER BY day"
    ).collect()
    assert [(r.day.day, r.prs) for r in day] == [(1, 1), (2, 1)]  # ann's PRs of Mar 1 (pond) and Mar 2 (lake #1)
    if (lookups, path) == ("direct", "incremental"):
        assert_duckdb_agrees(lake, [m.plan for m in processor.maintainers])


JAN, FEB, MAR = (1_705_320_000_000_000, 1_707_998_400_000_000, 1_710_504_000_000_000)  # mid-month, 2024


def test_keys_that_are_expressions_or_constants_are_served_by_a_state_rebuilt_from_the_tables(lake, tmp_path, monkeypatch):
    """monthly_signups (keyed by a month) and user_totals (by the constant 'all') from the local state:
    a state rebuilt from the tables has each user's month evaluated by Spark; a user moving to another
    month reaches both months' keys and reads only their users."""
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)
    plans = [plan_view(shape_view(name), lake.sources) for name in ("monthly_signups", "user_totals")]
    path = tmp_path / "state" / "state.sqlite"

    def processor() -> BatchProcessor:
        made = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=Store(path), direct=DirectWriter(lake.spark, lake.settings))
        assert set(made.indexed) == {"monthly_signups", "user_totals"}
        return made

    first = processor()
    born = [JAN, JAN, JAN, FEB, FEB]
    first.process_lines(0, [(dbz("c", 10 + i, user(f"u{i}@x", f"u{i}", i, t)), at("users")) for i, t in enumerate(born)])
    assert_views_are_fresh(lake, first)
    first.close()
    for file in path.parent.glob("state.sqlite*"):  # a driver on a blank disk: the state is rebuilt from the tables
        file.unlink()
    second = processor()
    assert set(second.synced.reloaded) >= {"mirror:users"}
    late = user("u5@x", "u5", 5, FEB)  # the rebuilt state does not know what was pending: diffed whole once
    assert second.process_lines(1, [(dbz("c", 20, late), at("users", "b1.json"))]).views["monthly_signups"].plan == "whole"
    moved = user("u0@x", "u0", 0, MAR)
    result = second.process_lines(2, [(dbz("u", 30, moved, user("u0@x", "u0", 0, JAN)), at("users", "b2.json"))])
    months = result.views["monthly_signups"]
    assert (months.keys, months.rows_read, months.plan) == (2, 3, "incremental"), months  # January's two users, March's one
    assert (result.views["user_totals"].keys, result.views["user_totals"].rows_read) == (1, 6)
    signups = assert_views_are_fresh(lake, second)["monthly_signups"]
    assert sorted(row["users"] for row in signups.values()) == [1, 2, 3]
    second.close()


def test_a_changed_definition_rebuilds_the_view_and_an_unchanged_one_is_left_alone(lake, monkeypatch):
    def processor_for(sql: str) -> BatchProcessor:
        plan = plan_view(parse_view(f"-- @key: username\n{sql}", "fans"), lake.sources)
        return BatchProcessor(lake.spark, lake.names, lake.sources, [plan])

    def assert_fresh(processor: BatchProcessor) -> None:
        (maintainer,) = processor.maintainers
        expected = maintainer.recompute()
        assert_df_equality(lake.spark.table(maintainer.table).select(*expected.columns), expected,
                           ignore_row_order=True, ignore_nullable=True)  # fmt: skip

    first = processor_for("SELECT s.username, count(*) AS stars FROM stars s GROUP BY s.username")
    first.process_lines(0, [(line, at(table)) for table, line in BATCHES[0]])
    assert_fresh(first)
    # Same schema, new meaning: the fingerprint differs, so the view is rebuilt from the mirrors.
    second = processor_for(  # now: stars of one's own repos (ann 1 -> 0, bob 2 -> 1)
        "SELECT s.username, count_if(s.repo_owner = s.username) AS stars FROM stars s GROUP BY s.username"
    )
    assert [(b.view, b.keys, b.upserts) for b in second.built] == [("fans", None, 2)]
    assert_fresh(second)
    # A new column: the table is replaced with the new schema and rebuilt.
    third = processor_for("SELECT s.username, count(*) AS stars, max(s.repo_name) AS last_repo FROM stars s GROUP BY s.username")
    assert lake.spark.table(third.maintainers[0].table).columns == ["username", "stars", "last_repo"]
    assert_fresh(third)
    # The same definition again (formatted differently): nothing to do, and Spark does not analyse the
    # view again (the table says its columns were analysed from this recompute).
    analysed = []
    recompute = ViewMaintainer.recompute
    monkeypatch.setattr(ViewMaintainer, "recompute", lambda self: analysed.append(self.plan.name) or recompute(self))
    again = processor_for("select s.username, count(*) as stars, max(s.repo_name) as last_repo\nfrom stars s group by s.username")
    assert again.built == [] and analysed == []
    # A table whose analysis record is gone (made by an older lakemv) is analysed once, and recorded.
    lake.spark.sql(f"ALTER TABLE {again.maintainers[0].table} UNSET TBLPROPERTIES ('{ANALYSED}')")
    assert processor_for("SELECT s.username, count(*) AS stars, max(s.repo_name) AS last_repo FROM stars s GROUP BY s.username").built == []
    assert analysed == ["fans"]
    assert processor_for("SELECT s.username, count(*) AS stars, max(s.repo_name) AS last_repo FROM stars s GROUP BY s.username").built == []
    assert analysed == ["fans"]


def test_a_null_group_is_a_view_row_maintained_like_any_other(lake):
    """GROUP BY a column holding NULL gives a NULL-keyed row (so does the SQL run verbatim): a change
    reaches it, and it goes when its last row does."""
    plans = [plan_view(shape_view(name), lake.sources) for name in ("prs_by_status", "people_counts")]
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, plans)
    orphan = {**pr("ann", "lake", 1, None), "author": None}
    batches = [
        [("repos", dbz("c", 1, repo("ann", "lake"))), ("pull_requests", dbz("c", 2, orphan))],
        [("pull_requests", dbz("c", 3, {**orphan, "index": 2}))],  # the NULL group grows
        [("pull_requests", dbz("u", 4, {**orphan, "author": "bob"})), ("pull_requests", dbz("d", 5, None, before={**orphan, "index": 2}))],
    ]
    counts = []
    for number, batch in enumerate(batches):
        processor.process_lines(number, [(line, at(table)) for table, line in batch])
        for maintainer in processor.maintainers:
            expected = maintainer.recompute()
            assert_df_equality(lake.spark.table(maintainer.table).select(*expected.columns), expected,
                               ignore_row_order=True, ignore_nullable=True)  # fmt: skip
        rows = lake.spark.table(lake.names.view("people_counts")).collect()
        counts.append(sorted(((r.who, r.n) for r in rows), key=repr))
    assert counts == [[(None, 1)], [(None, 2)], [("bob", 1)]]
