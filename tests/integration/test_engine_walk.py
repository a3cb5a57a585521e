"""The views' walks run set-wise over the engine state (lakemv.spark.engine.walk) find what the
driver-side walks (lakemv.core.state.walk) find over the same rows: the keys a change reaches and the
rows each occurrence reads for them, for every shape at once, their asks sharing rounds."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from functools import reduce

import pytest
from lakemv.spark.frames import local_frame
from lakemv.catalog.settings import LakeSettings
from lakemv.core.planner import over, plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.layout import mirror_parts, route
from lakemv.core.state.walk import gather, reach
from lakemv.spark.engine.keyed import KeyedStore
from lakemv.spark.engine.encoding import JSON, ROW
from lakemv.spark.engine.walk import Walker
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from lakemv.workload.shapes import SHAPES, shape_view

T = datetime.datetime(2024, 2, 1, 12, 30, 15, 123456, tzinfo=datetime.UTC)
ROWS = {
    "users": [(1, "a@x", "alice", T), (2, "b@x", "bob", T), (3, "c@x", "carol", None), (4, "d@x", None, T), (5, "e@x", "erin", T)],
    "stars": [
        ("alice", "r1", "bob", T),
        ("alice", "r2", "carol", T),
        ("bob", "r1", "bob", None),
        ("carol", "r1", "bob", T),
        ("dave", "r2", "carol", T),  # no such user
        ("erin", "r3", "alice", T),
    ],
    "repos": [("r1", "bob", "one", 3, 0, T, T), ("r2", "carol", None, 2, 1, T, None), ("r3", "alice", "three", 1, 0, None, T)],
    "pull_requests": [
        ("t1", "r1", "bob", 1, "alice", "open", T),
        ("t2", "r1", "bob", 2, "bob", "merged", T),
        ("t3", "r2", "carol", 1, "alice", "open", None),
        ("t4", "r3", "alice", 1, None, "closed", T),
    ],
    "payment_info": [(10, 1, True), (11, 2, False), (12, 9, True), (13, 5, None)],
}
CHANGED = {  # the images of a batch: rows as they are after it, and one as it was (a new description)
    "repos": [ROWS["repos"][0], ("r1", "bob", "old", 3, 0, T, T)],
    "stars": [ROWS["stars"][1], ROWS["stars"][4]],
    "users": [ROWS["users"][1], ROWS["users"][3]],
    "payment_info": [ROWS["payment_info"][2]],
    "pull_requests": [ROWS["pull_requests"][2], ROWS["pull_requests"][3]],
}


class Rows:
    """The driver-side walks' store over plain lists (the oracle): NULL matches NULL only where null-safe."""

    def __init__(self, parts, rows):
        self.parts, self.rows = parts, rows

    def lookup(self, table: str, columns: Sequence[str], values: Iterable[tuple], null_safe: Sequence[bool]) -> list[tuple]:
        names = self.parts[table].column_names
        positions = [names.index(c) for c in columns]
        wanted = set(values)
        found = []
        for row in self.rows[table]:
            probe = tuple(row[i] for i in positions)
            if any(v is None and not safe for v, safe in zip(probe, null_safe, strict=True)):
                continue
            if probe in wanted:
                found.append(row)
        return found


def every_shape(sources) -> list:
    """The project's two views and every indexed shape's plan."""
    shipped = load_views(LakeSettings().view_dirs)
    return [
        plan_view(shipped["user_profile"], sources),
        plan_view(shipped["repo_summary"], sources),
        *(plan_view(shape_view(n), sources) for n in SHAPES),
    ]


@pytest.fixture(scope="module")
def engine(spark, sources, tmp_path_factory):
    every = every_shape(sources)
    routes = {p.name: route(p) for p in every}
    walker = Walker.of(KeyedStore(spark, str(tmp_path_factory.mktemp("engine") / "state"), partitions=3), every, sources)
    frames = {t: local_frame(spark, rows, ", ".join(f"`{c.name}` {c.spark_type}" for c in sources[t].columns)) for t, rows in ROWS.items()}
    loaded = walker.load(frames, 0)
    return walker, every, routes, loaded


def test_the_state_holds_each_row_once_by_key_and_once_per_index(engine, sources):
    walker, _, _, loaded = engine
    per_table = {t: sum(1 for s in walker.walks.spaces if s.name == t and s.kind != "view") for t in ROWS}
    assert loaded == sum(len(rows) * per_table[t] for t, rows in ROWS.items())
    counts = walker.store.counts(1)
    for space in walker.walks.spaces:
        if space.kind != "view":
            assert counts.get(walker.numbers[space], 0) == len(ROWS[space.name]), space.label


def test_reached_keys_and_gathered_rows_equal_the_driver_walks(engine, spark, sources):
    walker, every, routes, _ = engine
    parts = mirror_parts(sources, list(routes.values()))
    oracle = Rows(parts, ROWS)
    images = {t: local_frame(spark, rows, ", ".join(f"`{c.name}` {c.spark_type}" for c in sources[t].columns)) for t, rows in CHANGED.items()}
    reached = walker.reach(images, 1)
    ids = walker.ids
    expected_keys, evaluated = {}, []
    for plan in every:
        r = routes[plan.name]
        if not r.indexed:
            assert walker.walks.view(plan.name).whole  # recomputed whole
            continue
        keys, anchor_rows = reach(plan, r, parts, oracle, CHANGED)
        if anchor_rows:  # keys that are expressions: the driver path has Spark evaluate them over the anchor rows it reached
            for anchor, rows in anchor_rows.items():
                source = sources[plan.occurrence(anchor).table]
                frame = local_frame(spark, rows, ", ".join(f"`{c.name}` {c.spark_type}" for c in source.columns))
                row = F.struct(*[F.col(c.name) for c in source.columns]).alias(ROW)
                values = F.struct(*[F.expr(over(k.expr, ROW)).alias(k.name) for k in plan.keys_at(anchor)])
                evaluated.append(frame.select(row).select(F.lit(ids[plan.name]).alias("view"), F.to_json(values, JSON).alias("k")))
            continue
        expected_keys[plan.name] = keys
    got: dict[int, set[tuple]] = {}
    for row in reached.select("view", "k").collect():
        got.setdefault(row["view"], set()).add(tuple(json.loads(bytes(row["k"]))))
    assert {ids[n]: got.get(ids[n], set()) for n in expected_keys} == {
        ids[n]: {tuple(map(_text, k)) for k in keys} for n, keys in expected_keys.items()
    }
    names = {ids[p.name]: p.key_names for p in every}
    by_expression: dict[int, set[tuple]] = {}
    for row in reduce(DataFrame.unionByName, evaluated).collect():
        by_expression.setdefault(row["view"], set()).add(tuple(_text(json.loads(row["k"]).get(n)) for n in names[row["view"]]))
    assert {view: got.get(view, set()) for view in by_expression} == by_expression
    assert len(expected_keys) >= 25 and len(by_expression) >= 5 and all(expected_keys.values())

    found: dict[tuple[int, int], list[tuple]] = {}
    for row in walker.gather(reached, 1).collect():
        found.setdefault((row["view"], row["occ"]), []).append(json.loads(bytes(row["v"])))
    for name, keys in expected_keys.items():
        plan = next(p for p in every if p.name == name)
        want_rows = gather(plan, routes[name], parts, oracle, keys)
        for occ in plan.occurrences:
            names, pk = parts[occ.table].column_names, sources[occ.table].primary_key
            expected = sorted(tuple(row[names.index(c)] for c in pk) for row in want_rows.get(occ.id, []))
            assert sorted(tuple(r.get(c) for c in pk) for r in found.get((ids[name], occ.id), [])) == expected, (name, occ.alias)
    walker.release()


def _text(value) -> str | None:
    """A key value as the engine compares it: its text (numbers in their plain form)."""
    if value is None or isinstance(value, str):
        return value
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
