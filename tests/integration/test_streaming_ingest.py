"""Streaming ingest from a landing directory: --once (availableNow), checkpoints, continuous mode."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from catalog.errors import ConfigError
from spark.ingest import run_ingest
from spark.mirror import live_rows_sql
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
