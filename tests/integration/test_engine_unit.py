"""Units of landing lines through the engine (`lakemv.spark.engine.batch.EngineBatch`): real Debezium
envelopes parsed set-wise, the mirrors MERGEd, the views kept by the state, each unit's ledger row. A
malformed line becomes a dead letter with its reason; a unit replayed after it committed changes
nothing; a unit that crashed before its ledger row - after its views' commits, or before them - is
redone from the state it started at, its earlier commits taken back. After every unit each view's
table and digests equal Spark's full recompute over the mirrors."""

from __future__ import annotations

import random
from contextlib import nullcontext
from pathlib import Path

import pytest
from lakemv.catalog.declarations import load_sources
from lakemv.catalog.tables import live_rows_sql
from lakemv.core.batch.journal import BatchRef
from lakemv.core.planner.definitions import load_views
from lakemv.core.sql.viewsql import recompute_sql
from lakemv.spark.bulk import Lines
from lakemv.spark.engine.batch import EngineBatch, EngineUnsupported, UnitVersions
from lakemv.workload.debezium import connect_schema, write_landing_files
from lakemv.workload.github import WorkloadConfig, generate_files
from lakemv.workload.shapes import copies
from pyspark.sql import functions as F

STREAM = "engine"


class Crash(Exception):
    """A crash injected at a step of a unit."""


def _crash_at(name: str):
    def step(current: str):
        if current == name:
            raise Crash(name)
        return nullcontext()

    return step


def _lines(spark, folder: Path) -> Lines:
    return Lines(spark.read.text(str(folder / "*" / "*.json")).select("value", F.input_file_name().alias("file")))


def _differing(lake, engine: EngineBatch) -> dict[str, int]:
    """Per view, rows in its table and not in Spark's full recompute over the mirrors, or the reverse,
    plus keys whose digest in the state differs from the recompute's; only views where any differ."""
    spark = lake.spark
    live = {}
    for table, source in engine.sources.items():
        spark.sql(live_rows_sql(lake.names, source)).createOrReplaceTempView(f"check_{table}")
        live[table] = f"check_{table}"
    full = {name: spark.sql(recompute_sql(plan, live)).localCheckpoint() for name, plan in engine.recompute.plans.items()}
    tables = {
        name: spark.table(engine.tables.tables[name]).exceptAll(frame).count() + frame.exceptAll(spark.table(engine.tables.tables[name])).count()
        for name, frame in full.items()
    }
    digests = engine.recompute.differing(full, engine.versions.current())
    return {name: tables[name] + digests.get(name, 0) for name in full if tables[name] or digests.get(name, 0)}


def _ledger(lake, write_id: str) -> int:
    stream, rest = write_id.split(":")
    batch, chunk = rest.split(".")
    return lake.spark.sql(
        f"SELECT count(*) FROM {lake.names.ledger} WHERE stream_id = '{stream}' AND batch_id = {batch} AND chunk = {chunk}"
    ).first()[0]


# The units build on each other in one lake (the module's fixture): one worker runs them all, early.
pytestmark = pytest.mark.xdist_group("engine_unit")


@pytest.fixture(scope="module")
def engine_lake(spark, tmp_path_factory):
    """The lake, the engine built over its empty mirrors, and the workload the units come from."""
    from lakemv.catalog.settings import LakeSettings
    from lakemv.spark.session import use_catalog

    from tests.conftest import Lake, small_settings

    root = tmp_path_factory.mktemp("engine-unit")
    settings = small_settings(root / "warehouse", "t_engine_unit")
    use_catalog(spark, settings)
    sources = load_sources(LakeSettings().sources_dirs)
    tables = {t: s for t, s in sources.items() if t in ("users", "repos", "pull_requests", "stars", "payment_info")}
    lake = Lake(spark, settings, None)
    plans = copies(load_views(LakeSettings().view_dirs), tables, 6)
    engine = EngineBatch.build(spark, lake.names, tables, plans, root / "state", 2)
    workload, events, _ = generate_files(WorkloadConfig(users=40, seed=7, rounds=1), tables, root / "units" / "0")
    return lake, engine, workload, root, events


def _round(lake, workload, root: Path, unit: int, changes: int, extra: dict[str, str] | None = None) -> Path:
    """A change round's landing files as unit `unit`'s folder (and `extra` lines: table folder -> line)."""
    folder = root / "units" / str(unit)
    rng = random.Random(unit)
    for table, events in workload.change_round(changes).items():
        write_landing_files(folder, table, events, connect_schema(workload.sources[table]), rng, f"u{unit}", files=1)
    for table, line in (extra or {}).items():
        (folder / table).mkdir(parents=True, exist_ok=True)
        (folder / table / f"extra-{unit}.json").write_text(line + "\n")
    return folder


@pytest.mark.slow(70)
def test_units_keep_every_view_exact_once(engine_lake):
    lake, engine, workload, root, events = engine_lake
    spark = lake.spark
    # the snapshot as one unit: every view recomputed whole (a backlog's way)
    first = engine.process(BatchRef(STREAM, 0), _lines(spark, root / "units" / "0"))
    assert first.events == events and first.dead_letters == 0
    assert engine.last.details["whole"], engine.last.details
    assert _differing(lake, engine) == {}

    # changes with a malformed line and a line of no declared table: dead letters with their reasons
    bad = {"users": '{"op": "u", "after": {"id": 1', "nowhere": '{"op": "c"}'}
    folder = _round(lake, workload, root, 1, 60, bad)
    engine.way = "incremental"
    second = engine.process(BatchRef(STREAM, 1), _lines(spark, folder))
    assert second.dead_letters == 2 and not second.replayed
    assert engine.last.details["keys"], engine.last.details
    letters = {(r["source_table"], r["reason"]) for r in spark.table(lake.names.dead_letters).where("batch_id = 1").collect()}
    assert {t for t, _ in letters} == {"users", "nowhere"} and all(reason for _, reason in letters), letters
    assert _differing(lake, engine) == {}
    assert _ledger(lake, BatchRef(STREAM, 1).write_id) == 1

    # the same unit again, after it committed: nothing to do, nothing written twice
    version = engine.versions.current()
    again = engine.process(BatchRef(STREAM, 1), _lines(spark, folder))
    assert again.already_committed and engine.versions.current() == version
    assert spark.table(lake.names.dead_letters).where("batch_id = 1").count() == 2
    assert _ledger(lake, BatchRef(STREAM, 1).write_id) == 1


@pytest.mark.slow(30)
@pytest.mark.parametrize(("unit", "way", "step"), [(2, "incremental", "ledger"), (3, "whole", "publish")])
def test_a_unit_crashed_before_its_ledger_row_is_redone(engine_lake, unit, way, step):
    """A crash after the views' commits (`ledger`) or before them (`publish`, the diff's digests
    written): the replay starts from the unit's first version, and what its first attempt published is
    taken back first."""
    lake, engine, workload, root, _ = engine_lake
    spark = lake.spark
    ref = BatchRef(STREAM, unit)
    folder = _round(lake, workload, root, unit, 80)
    engine.way = way
    begun = engine.versions.current()
    with pytest.raises(Crash):
        engine.process(ref, _lines(spark, folder), step=_crash_at(step))
    assert _ledger(lake, ref.write_id) == 0
    stamped = {
        name: spark.sql(f"SELECT count(*) FROM {table}.snapshots WHERE summary['lakemv.batch'] = '{ref.write_id}'").first()[0]
        for name, table in engine.tables.tables.items()
    }
    assert any(stamped.values()) == (step == "ledger"), stamped
    redone = engine.process(ref, _lines(spark, folder))
    assert redone.replayed and not redone.already_committed
    assert sorted(engine.last.details.get("taken_back", [])) == sorted(name for name, n in stamped.items() if n)
    assert engine.versions.current() > begun
    assert _ledger(lake, ref.write_id) == 1
    assert _differing(lake, engine) == {}


def test_what_the_engine_does_not_carry_yet_is_refused_before_any_write(engine_lake, tmp_path):
    lake, engine, *_ = engine_lake
    folder = tmp_path / "truncate"
    (folder / "stars").mkdir(parents=True)
    (folder / "stars" / "t.json").write_text('{"op": "t", "source": {"lsn": 99999999999, "ts_ms": 1}, "ts_ms": 1}\n')
    ledger = lake.spark.table(lake.names.ledger).count()
    with pytest.raises(EngineUnsupported, match="TRUNCATE of 'stars'"):
        engine.process(BatchRef(STREAM, 90), _lines(lake.spark, folder))
    assert lake.spark.table(lake.names.ledger).count() == ledger


def test_unit_versions_replay_from_where_a_unit_began(tmp_path):
    versions = UnitVersions(tmp_path / "units.json", 2)
    assert versions.begin("s:1.0").base == 2 and versions.current() == 2
    versions.end("s:1.0", 5)
    begun = versions.begin("s:2.0")
    assert (begun.base, begun.replay, begun.undo) == (5, False, None)
    again = versions.begin("s:2.0")  # the unit crashed: redone from where it began, its writes taken back
    assert (again.base, again.replay, again.undo) == (5, True, "s:2.0")
    other = versions.begin("s:3.0")  # a unit that never ended and is not replayed: the next starts where it did
    assert (other.base, other.replay, other.undo) == (5, False, "s:2.0")
