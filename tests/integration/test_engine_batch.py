"""A batch through the engine state end to end (lakemv.spark.engine): its rows written by key and
index, the keys they reach, the rows those read, every view recomputed by its kept plan and diffed
against its digests. The rows that changed are exactly those two full recomputes by Spark - before
the batch and after it - tell apart, for every shape at once."""

from __future__ import annotations

import json

import pytest
from lakemv.spark.frames import local_frame
from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import TablesRewritten
from lakemv.core.sql.viewsql import recompute_sql
from chispa import assert_df_equality
from lakemv.spark.engine.keyed import KeyedStore
from lakemv.spark.engine.publish import ViewTables
from lakemv.spark.engine.views import Recompute, place_of
from lakemv.spark.mirror import ensure_view_namespace
from lakemv.spark.engine.walk import Walker
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.integration.test_engine_walk import ROWS, T, every_shape

# (table, row, deleted): a changed description, a moved star, a renamed user (a join column: its
# stars now point nowhere), a new user, a pull request given to another author, a payment gone
BATCH = [
    ("repos", ("r1", "bob", "uno", 3, 0, T, T), False),
    ("stars", ("alice", "r2", "carol", T), True),
    ("stars", ("erin", "r1", "bob", T), False),
    ("users", (2, "b@x", "bobby", T), False),
    ("users", (6, "f@x", "frank", None), False),
    ("pull_requests", ("t3", "r2", "carol", 1, "erin", "open", None), False),
    ("payment_info", (13, 5, None), True),
]


def _after() -> dict[str, list[tuple]]:
    from lakemv.catalog.declarations import load_sources

    sources = load_sources(LakeSettings().sources_dirs)
    tables = {t: list(rows) for t, rows in ROWS.items()}
    for table, row, deleted in BATCH:
        names = sources[table].column_names
        pk = [names.index(c) for c in sources[table].primary_key]
        tables[table] = [r for r in tables[table] if [r[i] for i in pk] != [row[i] for i in pk]] + ([] if deleted else [row])
    return tables


def _ddl(source) -> str:
    return ", ".join(f"`{c.name}` {c.spark_type}" for c in source.columns)


def _view_tables(lake, recompute: Recompute, full: dict) -> ViewTables:
    """Every view's Iceberg table made from its rows `full`, and its digests and places seeded (version 2)."""
    ensure_view_namespace(lake.spark, lake.names)
    tables = ViewTables(recompute, {name: lake.names.view(f"engine_{name}") for name in recompute.plans})
    tables.create(full)
    tables.seed(1)
    return tables


def _snapshot(lake, table: str) -> int:
    """The table's current snapshot id."""
    return lake.spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]


def _assert_tables_are(lake, tables: ViewTables, rows: DataFrame) -> None:
    """Every view's table holds the rows of its full recompute (`rows`: all views' rows keyed,
    `Recompute.whole_rows`') as Spark reads it, and as many as DuckDB reads (its `iceberg_scan` applies
    the position deletes too): all views in one comparison, each row as the JSON its digest is made of."""
    from lakemv.catalog.tables import VIEW_NAMESPACE
    from lakemv.duck.query import connect_duckdb, metadata_location

    recompute = tables.recompute
    held = recompute.whole_rows({name: lake.spark.table(table) for name, table in tables.tables.items()})
    assert_df_equality(held.select("view", "row"), rows.select("view", "row"), ignore_row_order=True, ignore_nullable=True)
    con = connect_duckdb(settings=lake.settings)
    scans = [
        f"SELECT '{name}', count(*) FROM iceberg_scan('{metadata_location(lake.settings, VIEW_NAMESPACE, table.rsplit('.', 1)[1])}')"
        for name, table in tables.tables.items()
    ]
    counted = dict(con.execute(" UNION ALL ".join(scans)).fetchall())
    names = {recompute.walker.ids[name]: name for name in tables.tables}
    expected = {names[int(r["view"])]: int(r["count"]) for r in rows.groupBy("view").count().collect()}
    assert counted == {name: expected.get(name, 0) for name in tables.tables}


def _assert_places(lake, tables: ViewTables, version: int) -> None:
    """Every place the state keeps beside a view row's digest is a live row of the view's table, and every
    live row has one (a place the manifests name otherwise - file:///x for file:/x - deletes nothing)."""
    walker = tables.recompute.walker
    spaces = {walker.numbers[w.digests]: w.view for w in walker.walks.views}
    state = walker.store.scan(version).where(F.col("space").isin(list(spaces))).select("space", *place_of("v"))
    kept = {(spaces[r["space"]], r["file"], r["pos"]) for r in state.collect()}
    read = " UNION ALL ".join(f"SELECT '{name}' AS view, _file, _pos FROM {table}" for name, table in tables.tables.items())
    live = {(r["view"], r["_file"], r["_pos"]) for r in lake.spark.sql(read).collect()}
    assert kept == live, (sorted(kept - live)[:3], sorted(live - kept)[:3])


@pytest.mark.slow(120)
def test_a_batch_changes_exactly_the_rows_two_full_recomputes_tell_apart(spark, lake, sources, tmp_path):
    every = every_shape(sources)
    walker = Walker.of(KeyedStore(spark, str(tmp_path / "state"), partitions=3), every, sources)
    recompute = Recompute(walker)

    def full(tables: dict[str, list[tuple]], label: str) -> dict:
        for table, rows in tables.items():
            local_frame(spark, rows, _ddl(sources[table])).createOrReplaceTempView(f"{label}_{table}")
        live = {t: f"{label}_{t}" for t in sources}
        return {name: spark.sql(recompute_sql(plan, live)) for name, plan in recompute.plans.items()}

    before = full(ROWS, "before")
    walker.load({t: local_frame(spark, rows, _ddl(sources[t])) for t, rows in ROWS.items()}, 0)
    tables = _view_tables(lake, recompute, before)

    changes = {}
    for table, row, deleted in BATCH:
        frame = local_frame(spark, [row], _ddl(sources[table])).withColumn("_lmv_deleted", F.lit(deleted))
        changes[table] = changes[table].unionByName(frame) if table in changes else frame
    images, version = walker.apply(changes, 2)
    assert version == 4
    keys = walker.reach_packed(images, version)
    rows = walker.keep(recompute.run(walker.gather_grouped(keys, version), keys))
    # one row a key: a plan kept from empty inputs must not lose what it drops for no rows (a DISTINCT)
    twice = rows.groupBy("view", "k").count().where("count > 1").collect()
    assert not twice, f"keys recomputed more than once: {[(r['view'], bytes(r['k'])) for r in twice]}"

    after = full(_after(), "after")
    # the whole way (each view's SQL over the tables after the batch) finds the same rows for the same keys,
    # with every other view gathered: here the odd views whole, the even ones gathered
    odd = sorted(name for name in recompute.plans if walker.ids[name] % 2)
    mixed = recompute.run(walker.gather_grouped(recompute.gathering(keys, odd), version), keys, odd, {t: f"after_{t}" for t in sources})

    def recomputed(frame: DataFrame) -> set:
        return {(r["view"], bytes(r["k"]), bytes(r["d"])) for r in frame.collect()}

    assert recomputed(mixed) == recomputed(rows)
    assert {walker.ids[name] for name in odd} & {v for v, _, _ in recomputed(rows)}  # some whole view had rows to find
    diffed = walker.keep(recompute.diff(rows, keys, version))
    found = diffed.collect()
    changed = {(r["view"], bytes(r["k"]), None if r["d"] is None else bytes(r["d"])) for r in found}
    assert len(found) == len(changed)
    # a compaction of a view's table since its places were read: the batch commits no view and names it;
    # seeding that view's places from its table again and replaying the diff over them mends it
    ids = {walker.ids[n]: n for n in recompute.plans}
    compacted = ids[next(r["view"] for r in found if r["file"] is not None)]
    current = {name: _snapshot(lake, table) for name, table in tables.tables.items()}
    catalog, table = tables.tables[compacted].split(".", 1)
    lake.spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))")
    with pytest.raises(TablesRewritten) as raised:
        tables.publish(diffed, version + 1, 1)
    assert (raised.value.views, raised.value.others_committed) == ([compacted], False)
    assert {name: _snapshot(lake, table) for name, table in tables.tables.items() if name != compacted} == {
        name: snapshot for name, snapshot in current.items() if name != compacted
    }
    tables.seed(version, [compacted])  # version + 1 written again, the compacted view's places read anew
    diffed = walker.keep(recompute.diff(rows, keys, version + 1))
    replayed = diffed.collect()
    assert {(r["view"], bytes(r["k"]), None if r["d"] is None else bytes(r["d"])) for r in replayed} == changed
    # the changed rows written into the views' tables: each replaced row deleted where the state placed it
    published = tables.publish(diffed, version + 2, 1)  # the replayed diff wrote version + 2
    assert published.version == version + 3 and sum(published.written.values()) + sum(published.removed.values()) == len(found)
    assert set(published.snapshots) == {name for name in recompute.plans if walker.ids[name] in {v for v, _, _ in changed}}
    walker.release()

    def keyed(rows: DataFrame) -> dict:
        return {(r["view"], bytes(r["k"])): bytes(r["d"]) for r in rows.collect()}

    after_rows = recompute.whole_rows(after).localCheckpoint()  # every view's rows after the batch, in one job
    old, new = keyed(recompute.whole_rows(before)), keyed(after_rows)
    expected = {(view, k, new.get((view, k))) for view, k in old.keys() | new.keys() if old.get((view, k)) != new.get((view, k))}
    names = {walker.ids[n]: n for n in recompute.plans}

    def readable(found: set) -> list:
        return sorted(((names[v], json.loads(k), d is None) for v, k, d in found), key=repr)

    missing, extra = readable(expected - changed), readable(changed - expected)
    assert (missing, extra) == ([], []), f"missing {missing}\nextra {extra}"
    assert changed == expected
    assert len({v for v, _, _ in expected}) >= 20  # the batch changes most views: the comparison is not vacuous
    # every view's table is its full recompute after the batch, and its digests say so
    _assert_tables_are(lake, tables, after_rows)
    _assert_places(lake, tables, published.version)
    assert recompute.differing_rows(after_rows, list(recompute.plans), published.version) == {name: 0 for name in recompute.plans}


# a snapshot's read of alice older than the row the state holds (a re-snapshot, a replayed stretch): not written
STALE = ("users", (1, "a@x", "alice-long-ago", T))


@pytest.mark.slow(130)
def test_a_batch_that_reaches_no_keys_recomputes_every_view_whole_and_changes_the_same_rows(spark, lake, sources, tmp_path):
    """A backlog's way (`Ways.batch` chose it): every view recomputed whole over the tables after the batch
    and diffed against all of its digests (a scan), with no key reached: the same changed rows as two full
    recomputes tell apart. The changes carry source positions, and one older than its row is left out of
    the state as it is out of the tables."""
    every = every_shape(sources)
    walker = Walker.of(KeyedStore(spark, str(tmp_path / "state"), partitions=3), every, sources)
    recompute = Recompute(walker)

    def keyed(tables: dict[str, list[tuple]], label: str) -> tuple[dict, dict, DataFrame]:
        """Every view's rows over `tables` by key (in one job), the relations they read, the rows keyed."""
        for table, rows in tables.items():
            local_frame(spark, rows, _ddl(sources[table])).createOrReplaceTempView(f"{label}_{table}")
        live = {t: f"{label}_{t}" for t in sources}
        union = recompute.whole_rows({name: spark.sql(recompute_sql(plan, live)) for name, plan in recompute.plans.items()}).localCheckpoint()
        return {(r["view"], bytes(r["k"])): bytes(r["d"]) for r in union.collect()}, live, union

    positioned = {t: local_frame(spark, rows, _ddl(sources[t])).withColumn("_lmv_position", F.lit(10).cast("bigint")) for t, rows in ROWS.items()}
    walker.load(positioned, 0)
    old, before, _ = keyed(ROWS, "before")
    tables = _view_tables(lake, recompute, {name: spark.sql(recompute_sql(plan, before)) for name, plan in recompute.plans.items()})

    changes = {}
    for table, row, deleted, position in [(t, r, d, 20) for t, r, d in BATCH] + [(*STALE, False, 5)]:
        frame = (
            local_frame(spark, [row], _ddl(sources[table]))
            .withColumn("_lmv_deleted", F.lit(deleted))
            .withColumn("_lmv_position", F.lit(position).cast("bigint"))
        )
        changes[table] = changes[table].unionByName(frame) if table in changes else frame
    images, version = walker.apply(changes, 2)
    new, after, after_rows = keyed(_after(), "after")
    # the stale change moved nothing: alice's row before and after is the row the state held
    alice = [bytes(r["v"]) for r in images.where(F.col("table") == walker.tables().index("users")).collect() if b'"a@x"' in bytes(r["v"])]
    assert alice and all(b"alice-long-ago" not in v for v in alice)

    rows = recompute.whole(after)
    diffed = walker.keep(recompute.diff_whole(rows, list(recompute.plans), version))
    found = diffed.collect()
    changed = {(r["view"], bytes(r["k"]), None if r["d"] is None else bytes(r["d"])) for r in found}
    assert len(found) == len(changed)
    published = tables.publish(diffed, version, 1)
    walker.release()
    expected = {(view, k, new.get((view, k))) for view, k in old.keys() | new.keys() if old.get((view, k)) != new.get((view, k))}
    names = {walker.ids[n]: n for n in recompute.plans}

    def readable(found: set) -> list:
        return sorted(((names[v], json.loads(k), d is None) for v, k, d in found), key=repr)

    assert (readable(expected - changed), readable(changed - expected)) == ([], [])
    assert len({v for v, _, _ in expected}) >= 20
    # the digests now are the view: nothing left to diff, and the rows the state holds are the tables'
    assert recompute.differing_rows(after_rows, list(recompute.plans), published.version) == {name: 0 for name in recompute.plans}
    _assert_tables_are(lake, tables, after_rows)
    _assert_places(lake, tables, published.version)
    users = walker.numbers[walker._rows_space("users")]
    held = [json.loads(bytes(r["v"])) for r in walker.store.scan(version).where(F.col("space") == users).collect() if r["v"] is not None]
    assert [u["username"] for u in held if u["email"] == "a@x"] == ["alice"]
