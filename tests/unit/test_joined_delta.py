"""Aggregates by delta over a join: the anchor rows a batch reaches, and the rows their joined rows
read before the batch and after it, from a real (SQLite) store. Adding up the joined rows of the two
sides, old ones subtracted, must give what a full recompute gives after the batch minus before it."""

from __future__ import annotations

from collections import Counter

from lakemv.core.planner import plan_view
from lakemv.core.planner.aggregates import delta_plan
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.explain import explain
from lakemv.core.state.layout import grain_route, mirror_parts, route
from lakemv.core.state.store import Store
from lakemv.core.state.walk import Before, changed_rows, estimated_reach, reached_anchors, sides

VIEW = """-- @key: status
SELECT p.status, count(*) AS n, sum(u.id) AS ids FROM pull_requests p JOIN users u ON u.username = p.author GROUP BY p.status"""


def row(parts, table: str, **values) -> tuple:
    return tuple(values.get(c) for c in parts[table].column_names)


def pr(parts, index: int, author: str | None, status: str = "open") -> tuple:
    return row(parts, "pull_requests", repo="r", repo_owner="o", index=index, author=author, status=status)


def totals(parts, prs: list[tuple], users: list[tuple], sign: int = 1) -> Counter:
    """count(*) and sum(u.id) per status over the inner join, as the view's SQL computes them."""
    p, u = parts["pull_requests"].column_names, parts["users"].column_names
    by_name = {user[u.index("username")]: user for user in users}
    found: Counter = Counter()
    for one in prs:
        user = by_name.get(one[p.index("author")])
        if user is not None:
            found[(one[p.index("status")], "n")] += sign
            found[(one[p.index("status")], "ids")] += sign * user[u.index("id")]
    return found


def test_the_two_sides_of_a_batch_add_up_to_the_change_of_a_full_recompute(sources):
    plan = plan_view(parse_view(VIEW, "v"), sources)
    assert [link.unique for link in plan.links] == [True]  # users by its unique username: one user per pull request
    r = route(plan)
    parts = mirror_parts(sources, [r])
    store = Store(":memory:")
    for part in parts.values():
        store.attach_mirror(part)
    ann, bob = row(parts, "users", id=1, email="a@x", username="ann"), row(parts, "users", id=2, email="b@x", username="bob")
    before_prs = [pr(parts, 1, "ann"), pr(parts, 2, "bob"), pr(parts, 3, "ann", "merged")]
    store.put_rows("users", [(u, 1, False) for u in (ann, bob)])
    store.put_rows("pull_requests", [(p, 1, False) for p in before_prs])
    full_before = totals(parts, before_prs, [ann, bob])

    # the batch: bob is renamed bea (his open PR no longer joins), PR 4 by bea is opened, PR 1 is deleted
    bea = row(parts, "users", id=2, email="b@x", username="bea")
    store.put_rows("users", [(bea, 2, False)])
    store.put_rows("pull_requests", [(pr(parts, 1, "ann"), 2, True), (pr(parts, 4, "bea"), 2, False)])
    after_prs = [pr(parts, 2, "bob"), pr(parts, 3, "ann", "merged"), pr(parts, 4, "bea")]
    images = {"users": [bob, bea], "pull_requests": [pr(parts, 1, "ann"), pr(parts, 4, "bea")]}
    signs = {"users": [-1, 1], "pull_requests": [-1, 1]}

    anchors = reached_anchors(plan, r, parts, store, images)
    index = parts["pull_requests"].column_names.index("index")
    assert sorted({a[index] for a in anchors}) == [1, 2, 4]  # its own images, and bob's PR through his old name
    changed = changed_rows(parts, images, signs)
    assert changed["users"] == {("b@x",): bob} and changed["pull_requests"][("r", "o", 4)] is None
    old, new = sides(plan, r, parts, store, anchors, changed)
    tables = {o.id: o.table for o in plan.occurrences}
    side = {name: {tables[o]: sorted(rows, key=repr) for o, rows in rows_of.items()} for name, rows_of in (("old", old), ("new", new))}
    assert side["old"]["pull_requests"] == sorted([pr(parts, 1, "ann"), pr(parts, 2, "bob")], key=repr)  # PR 4 did not exist yet
    assert side["old"]["users"] == sorted([ann, bob], key=repr)  # bob as he was
    assert side["new"]["pull_requests"] == sorted([pr(parts, 2, "bob"), pr(parts, 4, "bea")], key=repr)
    assert side["new"]["users"] == [bea]  # nobody is called bob any more

    delta = totals(parts, side["new"]["pull_requests"], side["new"]["users"]) + Counter()
    delta.subtract(totals(parts, side["old"]["pull_requests"], side["old"]["users"]))
    expected = totals(parts, after_prs, [ann, bea])
    expected.subtract(full_before)
    assert {k: v for k, v in delta.items() if v} == {k: v for k, v in expected.items() if v} == {("open", "n"): -1, ("open", "ids"): -1}


def test_before_puts_old_images_back_with_sql_equality(sources):
    plan = plan_view(parse_view(VIEW, "v"), sources)
    parts = mirror_parts(sources, [route(plan)])
    store = Store(":memory:")
    for part in parts.values():
        store.attach_mirror(part)
    nameless = row(parts, "users", id=3, email="c@x", username=None)
    store.put_rows("users", [(row(parts, "users", id=3, email="c@x", username="cat"), 2, False)])
    before = Before(store, parts, {"users": {("c@x",): nameless}})
    assert before.lookup("users", ["username"], [("cat",)], [False]) == []  # renamed in the batch: cat is new
    assert before.lookup("users", ["username"], [(None,)], [False]) == []  # NULL = NULL is not true
    assert before.lookup("users", ["username"], [(None,)], [True]) == [nameless]  # <=> matches it
    assert Before(store, parts, {"users": {("c@x",): None}}).lookup("users", ["email"], [("c@x",)], [False]) == []  # inserted by the batch


GRAINED = """-- @key: username
SELECT u.username, count(*) AS prs, sum(p.index) AS indexes FROM users u JOIN pull_requests p ON p.author = u.username GROUP BY u.username"""


def test_a_join_that_fans_out_from_its_key_adds_up_the_rows_of_its_grain(sources):
    plan = plan_view(parse_view(GRAINED, "v"), sources)
    assert [link.unique for link in plan.links] == [False]  # a user has many pull requests: its groups fan out
    assert plan.grain is not None and plan.occurrence(plan.grain.anchor).table == "pull_requests"  # each one user's at most
    found = delta_plan(plan)
    assert not isinstance(found, str) and found.grain == "pull_requests", found
    assert "over the joined rows of each pull_requests row" in found.describe()
    text = explain(plan)  # the walks up to the grain, beside the key's
    assert "by delta, up to the rows of pull_requests p:" in text and "users u" in text.split("by delta, up to the rows of")[1], text
    grained = plan.at_grain()
    r, g = route(plan), grain_route(plan)
    assert g is not None and g.indexed and g == route(grained)
    parts = mirror_parts(sources, [r, g])
    assert ("author",) in parts["pull_requests"].indexes and ("username",) in parts["users"].indexes
    store = Store(":memory:")
    for part in parts.values():
        store.attach_mirror(part)
    ann, bob = row(parts, "users", id=1, email="a@x", username="ann"), row(parts, "users", id=2, email="b@x", username="bob")
    before_prs = [pr(parts, 1, "ann"), pr(parts, 2, "bob"), pr(parts, 3, "ann"), pr(parts, 5, "cat")]  # (cat has no user)
    store.put_rows("users", [(u, 1, False) for u in (ann, bob)])
    store.put_rows("pull_requests", [(p, 1, False) for p in before_prs])

    def per_user(prs: list[tuple], users: list[tuple]) -> Counter:
        p, u = parts["pull_requests"].column_names, parts["users"].column_names
        names = {user[u.index("username")] for user in users}
        found: Counter = Counter()
        for one in prs:
            if one[p.index("author")] in names:
                found[(one[p.index("author")], "prs")] += 1
                found[(one[p.index("author")], "indexes")] += one[p.index("index")]
        return found

    # the batch: bob is renamed bea (his PR no longer joins), PR 4 by bea is opened, PR 1 is deleted
    bea = row(parts, "users", id=2, email="b@x", username="bea")
    store.put_rows("users", [(bea, 2, False)])
    store.put_rows("pull_requests", [(pr(parts, 1, "ann"), 2, True), (pr(parts, 4, "bea"), 2, False)])
    images = {"users": [bob, bea], "pull_requests": [pr(parts, 1, "ann"), pr(parts, 4, "bea")]}
    signs = {"users": [-1, 1], "pull_requests": [-1, 1]}
    reached = reached_anchors(grained, g, parts, store, images)
    index = parts["pull_requests"].column_names.index("index")
    assert sorted({a[index] for a in reached}) == [1, 2, 4]  # its own images, and bob's PR through his old name
    old, new = sides(grained, g, parts, store, reached, changed_rows(parts, images, signs))
    occurrence = {plan.occurrence(o).table: o for o in (0, 1)}
    delta = per_user(new[occurrence["pull_requests"]], new[occurrence["users"]])
    delta.subtract(per_user(old[occurrence["pull_requests"]], old[occurrence["users"]]))
    expected = per_user([pr(parts, 2, "bob"), pr(parts, 3, "ann"), pr(parts, 4, "bea"), pr(parts, 5, "cat")], [ann, bea])
    expected.subtract(per_user(before_prs, [ann, bob]))
    assert {k: v for k, v in delta.items() if v} == {k: v for k, v in expected.items() if v} == {
        ("ann", "prs"): -1, ("ann", "indexes"): -1, ("bob", "prs"): -1, ("bob", "indexes"): -2, ("bea", "prs"): 1, ("bea", "indexes"): 4,
    }
    # before any row is read, the reach is estimated from the images and each hop's rows per value
    assert estimated_reach(grained, g, {"users": 2, "pull_requests": 2}, lambda table, hop: 2.0) == 2 + 2 * 2.0


def test_an_outer_join_keeps_its_groups_by_recompute_when_it_would_need_a_grain(sources):
    outer = GRAINED.replace("JOIN pull_requests", "LEFT JOIN pull_requests")
    found = delta_plan(plan_view(parse_view(outer, "v"), sources))
    assert isinstance(found, str) and "outer or semi join" in found and "pull_requests" in found
    plan = plan_view(parse_view(VIEW, "v"), sources)
    assert plan.grain is None  # (the key's own joins are unique: no grain needed)
