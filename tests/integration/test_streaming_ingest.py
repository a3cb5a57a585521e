"""Streaming ingest from a landing directory: --once (availableNow), checkpoints, continuous mode."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lakemv.catalog.tables import live_rows_sql
from lakemv.core.batch import choice, deferral
from lakemv.core.errors import ConfigError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.spark.stream.files import run_ingest
from tests.cdc import dbz, user


def drop(landing: Path, table: str, name: str, *lines: str) -> None:
    folder = landing / table
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.tmp").write_text("\n".join(lines) + "\n")
    (folder / f".{name}.tmp").rename(folder / name)


def usernames(lake) -> list[str]:
    return sorted(r["username"] for r in lake.spark.sql(live_rows_sql(lake.names, lake.sources["users"])).collect())


def test_once_processes_what_is_there_and_the_checkpoint_skips_it_next_time(lake, tmp_path):
    landing = tmp_path / "landing"
    drop(landing, "users", "anything-goes.jsonl", dbz("c", 1, user("a@x.io", "ann")), dbz("c", 2, user("b@x.io", "bob", 2)))
    drop(landing, "users", "no-extension", dbz("u", 3, user("a@x.io", "anna")))
    first = run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True)
    assert (first.events, usernames(lake)) == (3, ["anna", "bob"])
    again = run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True)
    assert again.events == 0
    drop(landing, "users", "later.json", dbz("d", 4, before={"email": "b@x.io"}))
    third = run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True)
    assert (third.events, usernames(lake)) == (1, ["anna"])
    assert (lake.settings.checkpoint_root).is_dir()


def test_max_files_per_trigger_splits_the_backlog(lake, tmp_path):
    landing = tmp_path / "landing"
    for n in range(4):
        drop(landing, "users", f"f{n}.json", dbz("c", n + 1, user(f"u{n}@x.io", f"u{n}", n)))
    result = run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True, max_files_per_trigger=2)
    assert [b.events for b in result.batches] == [2, 2]
    assert len(usernames(lake)) == 4


def shouts_view(lake):  # noqa: N802
    return plan_view(parse_view("-- @key: email\nSELECT u.email, upper(u.username) AS shout FROM users u", "shouts"), lake.sources)


def shouts_backlog(lake, landing: Path, view, numbers: range):
    """One file a new user for each of `numbers`, then a once run of two files a batch."""
    for n in numbers:
        drop(landing, "users", f"f{n}.json", dbz("c", n + 1, user(f"u{n}@x.io", f"u{n}", n)))
    return run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True, max_files_per_trigger=2, views=[view])


def test_a_backlog_maintains_each_view_once_after_its_last_batch(lake, tmp_path):
    """A once run drains a backlog of several batches: the views hold the keys each batch reaches
    (lakemv.core.batch.deferral) and are maintained once, by the batch that takes the last files."""
    landing, view = tmp_path / "landing", shouts_view(lake)
    result = shouts_backlog(lake, landing, view, range(5))
    held = [b.views["shouts"] for b in result.batches]
    assert [b.events for b in result.batches] == [2, 2, 1]
    assert [v.deferred for v in held] == [True, True, False] and held[-1].keys == 5 and held[-1].upserts == 5, held
    assert held[0].note == deferral.HELD
    rows = lake.spark.table(lake.names.view("shouts")).collect()
    assert sorted((r["email"], r["shout"]) for r in rows) == [(f"u{n}@x.io", f"U{n}") for n in range(5)]
    drop(landing, "users", "later.json", dbz("u", 6, user("u0@x.io", "zed", 0)))  # one more batch: maintained at once
    again = run_ingest(lake.spark, lake.settings, lake.sources, landing, once=True, max_files_per_trigger=2, views=[view])
    assert [(v.deferred, v.upserts) for b in again.batches for v in b.views.values()] == [(False, 1)]


def test_a_backlog_stops_looking_for_keys_once_a_whole_recompute_is_cheaper(lake, tmp_path, monkeypatch):
    """Once maintaining a held view's keys is predicted to cost more than recomputing it whole, the state
    forgets them: the backlog's next units do not look for keys, its last unit recomputes the view whole.
    A state rebuilt from the tables knows nothing pending: every unit of its first backlog skips the walk."""
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_WHOLE)
    landing, view = tmp_path / "landing", shouts_view(lake)
    result = shouts_backlog(lake, landing, view, range(5))
    held = [b.views["shouts"] for b in result.batches]
    assert [(v.deferred, v.note, v.keys) for v in held[:2]] == [(True, deferral.HELD, 2), (True, deferral.WHOLE_DUE, 0)], held
    assert (held[-1].deferred, held[-1].plan, held[-1].upserts) == (False, "whole", 5), held[-1]
    rows = lake.spark.table(lake.names.view("shouts")).collect()
    assert sorted((r["email"], r["shout"]) for r in rows) == [(f"u{n}@x.io", f"U{n}") for n in range(5)]

    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)
    states = [f for root in {tmp_path, lake.settings.local_root} for f in root.rglob("state.sqlite*")]
    assert states
    for file in states:  # a driver on a blank disk
        file.unlink(missing_ok=True)
    drop(landing, "users", "f8.json", dbz("u", 9, user("u0@x.io", "zed", 0)))
    again = [b.views["shouts"] for b in shouts_backlog(lake, landing, view, range(5, 8)).batches]
    assert [(v.deferred, v.note) for v in again[:-1]] == [(True, deferral.WHOLE_DUE)], again
    assert (again[-1].plan, again[-1].upserts) == ("whole", 4) and "not known" in (again[-1].note or ""), again[-1]
    rows = lake.spark.table(lake.names.view("shouts")).collect()
    assert sorted((r["email"], r["shout"]) for r in rows) == sorted(
        [(f"u{n}@x.io", f"U{n}") for n in range(1, 8)] + [("u0@x.io", "ZED")])


def test_byte_and_event_limits_bound_every_unit_of_a_backlog(lake, tmp_path):
    landing = tmp_path / "landing"
    lines = [dbz("c", n + 1, user(f"u{n}@x.io", f"u{n}", n)) for n in range(230)]
    drop(landing, "users", "big.json", *lines[:200])  # one big file: more lines than a unit may hold
    for n in range(200, 230, 10):
        drop(landing, "users", f"small-{n}.json", *lines[n : n + 10])
    settings = lake.settings.model_copy(update={"max_events_per_batch": 60, "max_bytes_per_batch": 4096})
    result = run_ingest(lake.spark, settings, lake.sources, landing, once=True)
    assert max(b.lines for b in result.batches) <= 60
    assert sum(b.events for b in result.batches) == 230
    # The 200-line file is one Spark batch applied in four units; the small files come in later batches.
    assert [b.chunk for b in result.batches if b.batch_id == result.batches[0].batch_id] == [0, 1, 2, 3]
    assert len({b.batch_id for b in result.batches}) >= 2
    assert len(usernames(lake)) == 230


def test_continuous_mode_picks_up_files_that_arrive_while_running(lake, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    seen = []
    runner = threading.Thread(
        target=run_ingest,
        args=(lake.spark, lake.settings, lake.sources, landing),
        kwargs={"once": False, "trigger_seconds": 0.5, "on_batch": seen.append},
        daemon=True,
    )
    runner.start()
    try:
        time.sleep(3)
        drop(landing, "users", "late.json", dbz("c", 1, user("late@x.io", "late")))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(b.events for b in seen):
            time.sleep(0.5)
        assert usernames(lake) == ["late"]
    finally:
        for query in lake.spark.streams.active:
            query.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()


def test_missing_landing_directory_is_a_clear_error(lake, tmp_path):
    with pytest.raises(ConfigError, match="landing directory does not exist"):
        run_ingest(lake.spark, lake.settings, lake.sources, tmp_path / "nope", once=True)


def test_a_backlog_parsed_set_wise_lands_exactly_as_line_by_line(lake, tmp_path):
    """The same landing files ingested into two catalogs, every batch parsed by Spark in one and line
    by line in the other: the same mirror rows (tombstones and positions included), dead letters
    and views."""
    from lakemv.catalog.settings import LakeSettings
    from lakemv.core.planner import plan_view
    from lakemv.core.planner.definitions import load_views
    from lakemv.spark.session import use_catalog
    from lakemv.workload.github import WorkloadConfig, generate_files
    from tests.conftest import small_settings
    from tests.e2e.crash_harness import HOSTILE

    landing = tmp_path / "landing"
    generate_files(WorkloadConfig(users=60, seed=8, rounds=3), lake.sources, landing)
    drop(landing, "users", "hostile.json", *HOSTILE)
    plans = [plan_view(v, lake.sources) for v in load_views(LakeSettings().view_dirs).values()]
    other = small_settings(tmp_path / "other", f"{lake.settings.catalog_name}_lines")
    use_catalog(lake.spark, other)
    set_wise = run_ingest(lake.spark, lake.settings.model_copy(update={"bulk_min_bytes": 1}), lake.sources, landing, once=True, views=plans)
    by_line = run_ingest(lake.spark, other.model_copy(update={"bulk_min_bytes": 1 << 40}), lake.sources, landing, once=True, views=plans)
    assert set_wise.batches and all(b.set_wise for b in set_wise.batches)
    assert not any(b.set_wise for b in by_line.batches)
    assert set_wise.events == by_line.events > 0 and set_wise.dead_letters == by_line.dead_letters == len(HOSTILE)

    def rows(catalog: str, namespace: str, table: str, drop: tuple[str, ...]) -> list[str]:
        frame = lake.spark.table(f"{catalog}.{namespace}.{table}").drop(*drop)
        return sorted(str(r.asDict(recursive=True)) for r in frame.collect())

    per_run = ("_lmv_ingested_at", "_lmv_batch_id")
    for table in lake.sources:
        assert rows(lake.settings.catalog_name, "mirror", table, per_run) == rows(other.catalog_name, "mirror", table, per_run), table
    for plan in plans:
        assert rows(lake.settings.catalog_name, "views", plan.name, ()) == rows(other.catalog_name, "views", plan.name, ()), plan.name
    letters = ("raw", "reason", "source_table")
    assert sorted(map(str, lake.spark.table(f"{lake.settings.catalog_name}.lakemv.dead_letters").select(*letters).collect())) == sorted(
        map(str, lake.spark.table(f"{other.catalog_name}.lakemv.dead_letters").select(*letters).collect())
    )
