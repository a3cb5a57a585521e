"""Crash harness: run `lakemv ingest` as a real process, SIGKILL it at named steps, restart, compare.

One *trial* = one generated input (a seed) fed to two warehouses:

- the reference: one uninterrupted `lakemv ingest --once`;
- the crashed: a schedule of (crash point, batch) pairs in pipeline order. Each run arms one point
  (`LAKEMV_CRASH_AT`), waits until the process reports it reached the point, and kills the process
  group with SIGKILL (the JVM dies with it). The next run restarts from the checkpoint, so it replays
  the interrupted batch first. A last clean run finishes the input.

Then both lakes are read with DuckDB (no Spark) and must be equal: mirrors (tombstones and
bookkeeping included), views, change feeds (as multisets: a duplicate entry is a failure), dead
letters and ledger rows. The crashed lake's views must also equal an independent Python model of the
generator's true state.

The crashed lake may live elsewhere than the reference (`crashed_on`): on the scale-out stack (a Spark
cluster, an object store, a REST catalog), whose lake must then equal the local one.

`python -m tests.e2e.crash_harness --seeds 1 2 3` runs several trials and prints the figures;
`--cluster DIR` runs the crashed lakes on the scale-out stack `lakemv cluster up --dir DIR` started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lakemv.catalog.declarations import SourceRegistry, load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import DEAD_LETTERS, LEDGER, MIRROR_NAMESPACE, OPS_NAMESPACE, VIEW_NAMESPACE
from lakemv.core.cdc.coerce import EPOCH, ONE_MICRO
from lakemv.duck.query import connect_duckdb, lake_connection, metadata_location
from lakemv.workload.github import WorkloadConfig, generate_files
from tests import viewmodel
from tests.conftest import LAKEMV
from tests.e2e.cli import assert_same_rows

TABLES = ("payment_info", "pull_requests", "repos", "stars", "users")
VIEWS = ("repo_summary", "user_profile")
# Every crash point of a batch, in the order ingest reaches them.
# `mirror:<t>` and `view:<v>` leave the store behind Iceberg (the table committed, the store not yet);
# `state:mirrors` leaves it ahead of the view tables (it holds the batch's mirror rows, no view is
# written yet) and `state:<v>` ahead of the ledger (the view's digests are in, the unit not committed).
POINTS = (
    "parsed",
    "journaled",
    "dead_letters",
    *(f"mirror:{t}" for t in TABLES),
    "state:mirrors",
    *(f"keys:{v}" for v in VIEWS),
    "feeds",  # every view's change-feed rows of the batch, in one commit
    *(f"{step}:{v}" for v in VIEWS for step in ("view", "state")),
    "ledger",
    "batch_end",
)
# A backlog drained as one batch of set-wise units (views held until its last batch, repo_summary
# waiting for a freshness budget as well): (point, batch) pairs, since a held view's steps are reached in
# the last batch only (of four rounds: batches 0-3). `--backlog` kills at each; tests/e2e/test_crash_recovery.py
# at the steps only a backlog has.
BACKLOG_SCHEDULE = (
    ("journaled", 1), ("deferred:user_profile", 1), ("state:mirrors", 2), ("deferred:repo_summary", 2), ("view:user_profile", 3),
    ("state:user_profile", 3), ("ledger", 3),
)  # fmt: skip
BACKLOG_ROUNDS = 4
# Every crash point of a unit through the engine state (LAKEMV_ENGINE_STATE), in order: the state's
# rows written, the diff's digests written, the views' tables committed (the state's places not yet
# written), the unit's state writes done (its ledger row not yet committed).
ENGINE_POINTS = ("parsed", "dead_letters", "mirrors", "state:rows", "state:diff", "views", "state:end", "ledger", "batch_end")
BACKLOG_DEFERRED = ("repo_summary",)
LOSE_STATE_EVERY = 4  # after every 4th kill the crashed run also loses its local state (deleted)
MODELS = {
    "user_profile": (viewmodel.user_profile, viewmodel.USER_PROFILE_KEY),
    "repo_summary": (viewmodel.repo_summary, viewmodel.REPO_SUMMARY_KEY),
}
HOSTILE = (
    '{"op": "c", "after": {',  # malformed JSON
    '["not", "an", "envelope"]',
    '{"op": "x", "after": {"id": 1}, "source": {"lsn": 1}}',  # unknown op
    '{"op": "c", "after": {"id": "12", "email": "s@x", "username": "s"}, "source": {"lsn": 5}}',  # string into BIGINT
)


@dataclass
class Place:
    """Where one lake of a trial lives: a warehouse (a folder, or an S3 prefix) with the settings that
    reach it (`env`: LAKEMV_* variables), and the driver's local folder, if it is not the warehouse."""

    warehouse: str
    env: dict[str, str] = field(default_factory=dict)
    local_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.local_dir is not None:
            self.env = {**self.env, "LAKEMV_LOCAL_DIR": str(self.local_dir)}

    @classmethod
    def folder(cls, path: Path) -> Place:
        return cls(str(path))

    @property
    def settings(self) -> LakeSettings:
        return LakeSettings.of_environment(self.env, warehouse=self.warehouse, local_dir=self.local_dir)

    def lose_state(self) -> int:
        """Delete the local indexed state of every stream (the next run rebuilds it from Iceberg)."""
        if self.local_dir is not None:
            folders = list((self.local_dir / "state").glob("*"))
        else:
            folders = [*Path(self.warehouse).glob("_checkpoints/*/lakemv-state"), *Path(self.warehouse).glob("_checkpoints/*/lakemv-engine")]
        for folder in folders:
            shutil.rmtree(folder)
        return len(folders)


@dataclass
class Trial:
    """What one seed's trial did."""

    seed: int
    schedule: list[tuple[str, int]]
    kills: list[str] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)
    states_lost: int = 0  # times the local state was deleted between runs
    runs: int = 0
    seconds: float = 0.0
    compared: dict[str, int] = field(default_factory=dict)  # table -> rows compared


def schedule_for(seed: int, batches: int, points: Sequence[str] = POINTS) -> list[tuple[str, int]]:
    """Every crash point once, spread over batches 1..batches-1 in pipeline order (rotated by seed)."""
    spans = batches - 1
    shift = seed % spans
    per_batch = -(-len(points) // spans)
    return [(point, 1 + (index // per_batch + shift) % spans) for index, point in enumerate(points)]


_GATHER, _WRITE = ("keys", "deferred"), ("feed", "view", "state")


def _rank(point: str) -> tuple[int, str, int]:
    """Where a point comes in a unit: parse, journal, dead letters, mirrors, the store, then each
    view's keys in name order (LAKEMV_VIEW_WORKERS=1), every view's feed rows in one commit, each
    view's writes in name order, then the ledger."""
    if point in ENGINE_POINTS[2:-2]:  # a unit of the engine state: its own steps, in ENGINE_POINTS' order
        return 4, "", ENGINE_POINTS.index(point)
    step, _, name = point.partition(":")
    fixed = {"parsed": 0, "journaled": 1, "dead_letters": 2, "mirror": 3, "feeds": 6, "ledger": 8, "batch_end": 9}
    if point == "state:mirrors":
        return 4, "", 0
    if step in _GATHER:
        return 5, name, _GATHER.index(step)
    if step in _WRITE:
        return 7, name, _WRITE.index(step)
    return fixed[step], name, 0


def _ordered_schedule(schedule: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return sorted(schedule, key=lambda pair: (pair[1], _rank(pair[0])))


def prepare_landing(out: Path, seed: int, users: int, rounds: int, sources: SourceRegistry) -> tuple[dict, int]:
    """Generate the input, add hostile lines to every round, give files distinct, ordered mtimes."""
    workload, _, _ = generate_files(WorkloadConfig(users=users, seed=seed, rounds=rounds), sources, out)
    for number in range(rounds):
        (out / "users" / f"r{number:04d}-zz-hostile.json").write_text("\n".join(HOSTILE) + "\n")
        (out / "nope").mkdir(exist_ok=True)
        (out / "nope" / f"r{number:04d}-x.json").write_text('{"op": "c", "after": {"id": 1}, "source": {"lsn": 1}}\n')
    files = sorted(out.glob("*/*.json"), key=lambda p: (p.name[:5], p.parent.name, p.name))
    base = time.time() - 10_000
    for index, path in enumerate(files):
        os.utime(path, (base + index, base + index))
    per_round = len(files) // rounds
    return workload.state, per_round


# ---- event streams ---------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
EVENT_VIEWS = ("page_views_hourly", "profile_viewers", "search_clicks")
# The event views' own steps, and the steps every unit takes (their full set: `--events` on the CLI).
EVENT_POINTS = (
    "journaled",
    "dead_letters",
    "mirror:clicks",
    "mirror:page_views",
    "state:mirrors",
    *(f"keys:{v}" for v in EVENT_VIEWS),
    "feeds",
    *(f"{step}:{v}" for v in EVENT_VIEWS for step in ("view", "state")),
    "ledger",
    "batch_end",
)


def event_env() -> dict[str, str]:
    """The GitHub sources and views plus the event ones (catalog/sources/events, views/events)."""
    return {
        "LAKEMV_SOURCES_DIRS": json.dumps([str(ROOT / "catalog/sources"), str(ROOT / "catalog/sources/events")]),
        "LAKEMV_EXTRA_VIEWS_DIR": str(ROOT / "views/events"),
    }


def prepare_events(out: Path, seed: int, events: int, rounds: int) -> tuple[list[dict[str, list[str]]], int]:
    """Generated event streams, a file per stream and round plus a bad line, in round order."""
    from lakemv.workload.eventstreams import EventConfig, EventWorkload, write_round

    cut = [r for r in EventWorkload(EventConfig(events=events, rounds=rounds, seed=seed, late_share=0.03, duplicate_share=0.05)).rounds()]
    streams = sorted({s for lines in cut for s in lines})
    for number, lines in enumerate(cut):
        write_round(out, number, {s: lines.get(s, []) for s in streams})
        (out / "page_views" / f"events-{number:05d}.json").open("a").write('{"view_id": "bad", "viewed_at": "yesterday"}\n')
    files = sorted(out.glob("*/*.json"), key=lambda p: (p.name, p.parent.name))
    base = time.time() - 10_000
    for index, path in enumerate(files):
        os.utime(path, (base + index, base + index))
    return cut, len(streams)


def assert_events_match_model(lake: Mapping[str, list[dict]], rounds: list[dict[str, list[str]]], context: str) -> None:
    """The crashed lake's windowed and joined views equal the event model fed the same rounds."""
    from tests.eventmodel import HOUR, EventModel

    sources = load_sources([ROOT / "catalog/sources/events"])
    model = EventModel({n: sources[n] for n in ("page_views", "searches", "clicks")})
    for lines in rounds:
        model.round({s: [l for l in rows if '"bad"' not in l] for s, rows in lines.items() if s in model.sources})
    hourly = {
        (*k, len(v), len({e["viewer"] for e in v} - {None}), model.final("page_views", k[-1], HOUR))
        for k, v in model.windows("page_views", ("repo_owner", "repo_name"), HOUR).items()
    }
    got = {(r["repo_owner"], r["repo_name"], r["hour"], r["views"], r["viewers"], r["window_final"]) for r in lake["views.page_views_hourly"]}
    assert got == hourly, f"page_views_hourly differs from the model{context}"
    pairs = {(c["click_id"], s["query"]) for c, s in model.joined("clicks", "searches", "search_id", 0, HOUR)}
    assert {(r["click_id"], r["query"]) for r in lake["views.search_clicks"]} == pairs, f"search_clicks differs from the model{context}"


def copy_landing(source: Path, target: Path) -> None:
    for path in source.glob("*/*.json"):
        destination = target / path.parent.name / path.name
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(path.read_bytes())
        stat = path.stat()
        os.utime(destination, (stat.st_atime, stat.st_mtime))


def ingest_env(files_per_batch: int, extra: Mapping[str, str] | None = None, set_wise: bool = False, backlog: bool = False) -> dict[str, str]:
    """The environment of one ingest run; `set_wise`: every batch parsed by Spark (lakemv.spark.bulk);
    `backlog`: views hold a backlog's keys for its last batch (LAKEMV_HOLD_BACKLOG), else every batch
    maintains them, as a running stream's batches do."""
    env = {
        **os.environ,
        "LAKEMV_SPARK_MASTER": "local[2]",
        "LAKEMV_DRIVER_MEMORY": "2g",
        "LAKEMV_SHUFFLE_PARTITIONS": "2",
        "LAKEMV_MAX_FILES_PER_BATCH": str(files_per_batch),
        # One view at a time, so that a run reaches the points of a batch in POINTS' order: with views
        # side by side, a kill in one view's step came after another view had finished the batch,
        # whose own points its replays then never reached.
        "LAKEMV_VIEW_WORKERS": "1",
        "LAKEMV_BULK_MIN_BYTES": "1" if set_wise else str(1 << 40),
        "LAKEMV_HOLD_BACKLOG": "true" if backlog else "false",
    }
    env.pop("LAKEMV_CRASH_AT", None)
    env.pop("LAKEMV_CRASH_SIGNAL", None)
    env.update(extra or {})
    return env


def budgeted_views(folder: Path, deferred: Sequence[str]) -> Path:
    """A copy of the project's views in which those `deferred` wait for a budget of an hour."""
    folder.mkdir(parents=True, exist_ok=True)
    for sql in sorted((ROOT / "views").glob("*.sql")):
        text = sql.read_text()
        if sql.stem in deferred:
            first, _, rest = text.partition("\n")
            assert first.startswith("-- @key:"), sql
            text = f"{first}\n-- @freshness: 1 hour\n{rest}"
        (folder / sql.name).write_text(text)
    return folder


def ingest(
    warehouse: Path | str, landing: Path, env: Mapping[str, str], signal_file: Path | None = None, timeout: float = 600, log: Path | None = None
) -> str | None:
    """Run `lakemv ingest --once`; with a signal file, SIGKILL the process group once it appears.

    Returns the point the process reported (it was killed there), or None if it ran to completion.
    """
    args = [LAKEMV, "--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once"]
    if log is None:
        log = Path(warehouse).parent / f"{Path(warehouse).name}-ingest.log"
    with open(log, "a", encoding="utf-8") as out:
        process = subprocess.Popen(args, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if signal_file is not None and signal_file.exists() and signal_file.read_text().strip():
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                reached = signal_file.read_text().strip()
                signal_file.unlink()
                return reached
            code = process.poll()
            if code is not None:
                if code != 0:
                    raise AssertionError(f"ingest exited {code}; see {log}:\n{log.read_text()[-3000:]}")
                return None
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"ingest did not finish within {timeout}s; see {log}")


# ---- reading a lake ------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """DuckDB values as comparable plain data (timestamps as epoch micros)."""
    if isinstance(value, datetime):
        return (value - EPOCH) // ONE_MICRO if value.tzinfo else (value.replace(tzinfo=EPOCH.tzinfo) - EPOCH) // ONE_MICRO
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_lake(
    warehouse: Path | LakeSettings, sources: SourceRegistry, views: Sequence[str] = VIEWS, feeds: bool = True
) -> dict[str, list[dict[str, Any]]]:
    """Every table a crash could corrupt, as rows without run-dependent columns (times, stream ids);
    `feeds`: the views' change feeds too (the engine state writes none yet)."""
    settings = warehouse if isinstance(warehouse, LakeSettings) else LakeSettings(warehouse=warehouse)
    con = connect_duckdb(threads=2, settings=settings)
    tables: dict[str, tuple[str, ...]] = {}
    for name, source in sources.items():
        columns = ", ".join(f'"{c}"' for c in source.column_names)
        tables[f"mirror.{name}"] = (MIRROR_NAMESPACE, name, f"{columns}, _lmv_position, _lmv_op, _lmv_deleted, _lmv_source_ts, _lmv_batch_id")
    for view in views:
        tables[f"views.{view}"] = (VIEW_NAMESPACE, view, "*")
    tables["dead_letters"] = (
        OPS_NAMESPACE,
        DEAD_LETTERS,
        "raw, raw_chars, regexp_extract(source_file, '[^/]+/[^/]+$') AS file, source_table, reason, batch_id",
    )
    tables["ledger"] = (  # without the units between batches (views whose budget fell due): numbered by the time
        OPS_NAMESPACE, LEDGER,
        "batch_id, chunk, lines, events, dead_letters, skipped, list_transform(tables, t -> struct_pack(name := t.name, changes := t.changes)) AS tables",
        "stream_id NOT LIKE '%~idle'",
    )  # fmt: skip
    lake = {}
    for label, (namespace, table, select, *where) in tables.items():
        location = metadata_location(settings, namespace, table)
        assert location is not None, f"{label} does not exist in {settings.warehouse}"
        relation = con.execute(f"SELECT {select} FROM iceberg_scan('{location}')" + "".join(f" WHERE {w}" for w in where))
        names = [d[0] for d in relation.description]
        lake[label] = [dict(zip(names, (_plain(v) for v in row), strict=True)) for row in relation.fetchall()]
    con.close()
    if not feeds:
        return lake
    feed_con = lake_connection(settings, {})  # each view's feed: its rows of the one feeds table, as lakemv's DuckDB reads them
    try:
        for view in views:
            # in the order the feed recorded them (an idle unit's batch id is a time: it says nothing of order)
            relation = feed_con.execute(f'SELECT * EXCLUDE (changed_at) FROM "{view}__changes" ORDER BY changed_at, batch_id, source_position')
            names = [d[0] for d in relation.description]
            lake[f"views.{view}__changes"] = [dict(zip(names, (_plain(v) for v in row), strict=True)) for row in relation.fetchall()]
    finally:
        feed_con.close()
    return lake


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def net_feed(rows: list[dict[str, Any]], key: Sequence[str]) -> list[dict[str, Any]]:
    """Per view key whose latest feed entry is an upsert, that entry: what the feed says the view holds
    now (a key made and deleted while its view waited has no entry at all there). `rows` in the order
    the feed recorded them (`read_lake`'s)."""
    latest: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        latest[tuple(row[k] for k in key)] = {**{k: row[k] for k in key}, "op": row["op"], "row": row["row"]}
    return [entry for entry in latest.values() if entry["op"] == "upsert"]


def assert_same_lake(
    reference: Mapping[str, list[dict]], crashed: Mapping[str, list[dict]], context: str, deferred: Sequence[str] = ()
) -> dict[str, int]:
    """Table by table, the same rows with the same multiplicity. The change feed of a view that waited
    for its budget in the crashed run (`deferred`; "*": every view) says when the view changed
    differently (once per maintenance, not per batch): there, the same latest entry per key, which
    must also be the view's rows."""
    compared = {}
    for label, expected in reference.items():
        view = label.removeprefix("views.").removesuffix("__changes")
        if label.endswith("__changes") and (view in deferred or "*" in deferred):
            key = MODELS[view][1]
            expected, got_net = net_feed(expected, key), net_feed(crashed[label], key)
            shown = [r["row"] for r in got_net]
            assert _canonical(shown) == _canonical(crashed[f"views.{view}"]), f"{context}: {label}'s latest entries are not the view's rows"
            crashed = {**crashed, label: got_net}
        want, got = _canonical(expected), _canonical(crashed[label])
        if want != got:
            missing = sorted(set(want) - set(got))[:2]
            extra = sorted(set(got) - set(want))[:2]
            duplicated = sorted({r for r in got if got.count(r) > want.count(r)})[:2]
            raise AssertionError(
                f"{context}: {label} differs: {len(got)} rows after crashes, {len(want)} without;\n"
                f"  missing: {missing}\n  extra: {extra}\n  repeated: {duplicated}"
            )
        compared[label] = len(want)
    ledger = [(r["batch_id"], r["chunk"]) for r in crashed["ledger"]]
    assert len(ledger) == len(set(ledger)), f"{context}: a unit has two ledger rows: {sorted(ledger)}"
    return compared


def assert_views_match_model(lake: Mapping[str, list[dict]], state: dict, context: str) -> None:
    for view, (model, key) in MODELS.items():
        assert_same_rows(view, lake[f"views.{view}"], model(state), key, context)


# ---- a trial -------------------------------------------------------------------------------------------
def run_trial(
    root: Path,
    seed: int,
    *,
    users: int = 120,
    rounds: int = 5,
    sources: SourceRegistry | None = None,
    points: Sequence[str] = POINTS,
    set_wise: bool = False,
    events: int = 0,
    crashed_on: Place | None = None,
    deferred: Sequence[str] = (),
    backlog: bool = False,
    schedule: Sequence[tuple[str, int]] | None = None,
    lose_state_every: int = LOSE_STATE_EVERY,
    engine: bool = False,
) -> Trial:
    """Reference run and crashed run of one generated input; raises AssertionError on any difference.
    `points`: where to kill (every point by default); `set_wise`: every batch parsed by Spark;
    `events`: feed generated event streams (that many page views) to the event views instead;
    `crashed_on`: where the crashed lake lives (default: a folder beside the reference's); `deferred`:
    views that wait for a freshness budget of an hour in the crashed runs (none falls due in a trial),
    removed for the last run, which then catches up the keys they left pending; `backlog`: every run
    drains the landing files as one backlog, its views held until its last batch (lakemv.core.batch.deferral),
    so a view's steps are reached in the last batch only; `schedule`: (point, batch) pairs instead of
    every point spread over the batches; `lose_state_every`: the crashed run also loses its local state
    after every that many kills; `engine`: both lakes kept by the engine state (LAKEMV_ENGINE_STATE)."""
    started = time.monotonic()
    generated = root / "generated"
    extra: dict[str, str] = {}
    if events:
        extra = event_env()
        sources = load_sources([ROOT / "catalog/sources", ROOT / "catalog/sources/events"])
        cut, per_round = prepare_events(generated, seed, events, rounds)
    else:
        sources = sources or load_sources(LakeSettings().sources_dirs)
        state, per_round = prepare_landing(generated, seed, users, rounds, sources)
    if engine:
        extra = {**extra, "LAKEMV_ENGINE_STATE": "true"}
    trial = Trial(seed, _ordered_schedule(list(schedule) if schedule is not None else schedule_for(seed, rounds, points)))
    if deferred:
        extra_crashed = {"LAKEMV_VIEWS_DIR": str(budgeted_views(root / "views-with-budgets", deferred))}
    lakes = {}
    for name in ("reference", "crashed"):
        landing = root / f"{name}-landing"
        place = crashed_on if name == "crashed" and crashed_on is not None else Place.folder(root / f"{name}-wh")
        log = root / f"{name}-ingest.log"
        copy_landing(generated, landing)
        if name == "crashed":
            signal_file = root / "crash-signal"
            for point, batch in trial.schedule:
                arm = {"LAKEMV_CRASH_AT": f"{point}@{batch}", "LAKEMV_CRASH_SIGNAL": str(signal_file)}
                env = ingest_env(per_round, {**extra, **place.env, **arm, **(extra_crashed if deferred else {})}, set_wise, backlog)
                trial.runs += 1
                reached = ingest(place.warehouse, landing, env, signal_file, log=log)
                if reached is None:
                    trial.not_reached.append(f"{point}@{batch}")
                else:
                    trial.kills.append(reached)
                    if len(trial.kills) % lose_state_every == 0:  # the next run rebuilds it from Iceberg
                        trial.states_lost += place.lose_state()
        trial.runs += 1
        assert ingest(place.warehouse, landing, ingest_env(per_round, {**extra, **place.env}, set_wise, backlog), log=log) is None
        lakes[name] = read_lake(place.settings, sources, (*VIEWS, *EVENT_VIEWS) if events else VIEWS, feeds=not engine)
    context = f"seed {seed}"
    # A backlog's views hold its keys. A restarted run maintains what they held at its first chance,
    # which may be a unit between batches before the stream's first (lakemv.spark.views.indexed
    # `catch_up_once`): their feeds say when they changed differently, so they are compared by what they net to.
    trial.compared = assert_same_lake(lakes["reference"], lakes["crashed"], context, ("*",) if backlog else deferred)
    if events:
        assert_events_match_model(lakes["crashed"], cut, f" ({context}, after crashes)")
    else:
        assert_views_match_model(lakes["crashed"], state, f" ({context}, after crashes)")
    trial.seconds = time.monotonic() - started
    return trial


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--users", type=int, default=120)
    parser.add_argument("--rounds", type=int, help=f"rounds of input (default 5; {BACKLOG_ROUNDS} with --backlog)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/lakemv-crash"))
    parser.add_argument("--set-wise", action="store_true", help="every batch parsed by Spark (lakemv.spark.bulk)")
    parser.add_argument("--events", type=int, default=0, help="feed the event views this many generated page views instead")
    parser.add_argument("--cluster", type=Path, help="crash on the scale-out stack `lakemv cluster up --dir CLUSTER` runs")
    parser.add_argument("--backlog", action="store_true", help="drain the input as one backlog of set-wise units (BACKLOG_SCHEDULE)")
    parser.add_argument("--engine", action="store_true", help="the lakes kept by the engine state, killed at every one of ENGINE_POINTS")
    args = parser.parse_args(argv)
    total_kills = 0
    for seed in args.seeds:
        root = args.root / f"seed-{seed}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        points = EVENT_POINTS if args.events else ENGINE_POINTS if args.engine else POINTS
        place = None
        if args.cluster is not None:
            from lakemv.ops.cluster import ClusterConfig

            config = ClusterConfig.load(args.cluster)
            place = Place(f"{config.warehouse}/crash-{seed}-{int(time.time())}", config.settings_env(), root / "driver")
        if args.backlog:
            mode = {"set_wise": True, "deferred": BACKLOG_DEFERRED, "backlog": True, "schedule": BACKLOG_SCHEDULE}
        elif args.engine:
            mode = {"engine": True}
        else:
            mode = {"set_wise": args.set_wise}
        rounds = args.rounds or (BACKLOG_ROUNDS if args.backlog else 5)
        trial = run_trial(root, seed, users=args.users, rounds=rounds, events=args.events, points=points, crashed_on=place, **mode)
        total_kills += len(trial.kills)
        print(
            f"seed {seed}: {len(trial.kills)} kills ({', '.join(trial.kills)}), not reached: {trial.not_reached or 'none'}; "
            f"{trial.runs} ingest runs, local state deleted {trial.states_lost} times; equal: {sum(trial.compared.values())} rows in {len(trial.compared)} tables; "
            f"{trial.seconds:.0f}s",
            flush=True,
        )
    print(f"{len(args.seeds)} trials, {total_kills} kills, every lake equal to its crash-free run")


if __name__ == "__main__":
    main()
