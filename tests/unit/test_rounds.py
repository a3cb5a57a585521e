"""The engine state's spaces and the asks a batch makes, compiled from the views' routes (lakemv.core.state.rounds)."""

from __future__ import annotations

from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.layout import route
from lakemv.core.state.rounds import KEYS, Space, number, walks
from lakemv.workload.shapes import SHAPES, shape_view


def _walks(plans, sources):
    return walks(plans, {p.name: route(p) for p in plans}, sources)


def test_user_profile_walks_up_two_hops_and_down_its_link_tree(plans, sources):
    plan = plans["user_profile"]
    w = _walks([plan], sources)
    view = w.view("user_profile")
    repos = next(o.id for o in plan.occurrences if o.table == "repos")
    hops = [w.asks[i] for i in view.up[repos]]
    assert [(a.source, a.space.label, a.using) for a in hops] == [
        ("repos", "index stars(repo_name, repo_owner)", ("name", "owner")),  # the space's columns sorted, the asker's in step
        ("stars", "index users(username)", ("username",)),
    ]
    (anchor,) = view.anchors.values()
    assert w.asks[anchor].space == Space(kind="rows", name="users", columns=("email",))  # the key is the primary key: the rows themselves
    assert w.asks[anchor].source == KEYS
    assert view.exact  # the anchor is found by the whole key
    assert (view.up_rounds, view.down_rounds, w.rounds) == (2, 3, 5)  # up: repos -> stars -> users; down: users, stars | PRs | payments, repos
    assert {s.kind for s in w.spaces} == {"rows", "index", "view"}
    assert Space(kind="view", name="user_profile", columns=("email",)) in w.spaces


def test_copies_of_a_view_share_every_ask(plans, sources):
    one = _walks([plans["user_profile"]], sources)
    definition = plans["user_profile"].definition
    copies = [plan_view(definition.model_copy(update={"name": f"copy_{n}"}), sources) for n in range(20)]
    many = _walks(copies, sources)
    assert many.asks == one.asks and many.rounds == one.rounds
    assert len(many.spaces) == len(one.spaces) + 19  # one digest space more per view, nothing else


def test_every_shape_compiles_and_its_rounds_stay_few(sources):
    plans = [plan_view(shape_view(name), sources) for name in SHAPES]
    w = _walks(plans, sources)
    assert len(w.views) == len(SHAPES)
    whole = {v.view: v.whole for v in w.views if v.whole}
    assert set(whole) == {"case_blind_stars"} and "compares expressions" in whole["case_blind_stars"]
    longest = max((v for v in w.views if not v.whole), key=lambda v: v.up_rounds + v.down_rounds)
    assert (longest.view, longest.up_rounds, longest.down_rounds, w.rounds) == ("stars_of_busy_repos", 3, 4, 7)
    assert len(w.asks) < sum(len(v.up.get(o, ())) + 1 for v in w.views for o in v.up) + sum(len(v.down) for v in w.views)  # shared
    by_name = {p.name: p for p in plans}
    for view in w.views:
        plan = by_name[view.view]
        for occ, hops in view.up.items():
            source = plan.occurrence(occ).table
            for i in hops:  # each hop starts from the rows the one before found
                assert w.asks[i].source == source and len(w.asks[i].using) == len(w.asks[i].space.columns) == len(w.asks[i].null_safe)
                source = w.asks[i].space.name
        for child, (parent, i) in view.down.items():
            assert w.asks[i].source == plan.occurrence(parent).table and w.asks[i].space.name == plan.occurrence(child).table


def test_an_expression_key_indexes_its_anchor_by_the_expression(sources):
    plan = plan_view(
        parse_view(
            "-- @key: month\nSELECT date_trunc('MONTH', u.registered_at) AS month, count(*) AS n FROM users u GROUP BY date_trunc('MONTH', u.registered_at)",
            "monthly",
        ),
        sources,
    )
    w = _walks([plan], sources)
    (anchor,) = w.view("monthly").anchors.values()
    space = w.asks[anchor].space
    assert space.kind == "index" and space.name == "users" and len(space.derived) == 1
    assert "date_trunc" in space.derived[0][1].lower() and w.asks[anchor].using == ("month",)


def test_spaces_keep_their_numbers_and_a_dropped_number_is_never_reused():
    a, b, c, d = (Space(kind="view", name=n, columns=("k",)) for n in "abcd")
    first, dropped = number([a, b], {})
    assert first == {a: 1, b: 2} and dropped == []
    second, dropped = number([b, c], first)
    assert second == {b: 2, c: 3} and dropped == [(a, 1)]
    third, dropped = number([c, d], {c: 3}, issued=3)  # b was dropped too, after being issued
    assert third == {c: 3, d: 4}
    fourth, _ = number([a], {}, issued=4)
    assert fourth == {a: 5}
