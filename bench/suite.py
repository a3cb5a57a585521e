"""lakemv's benchmark suite: every measure side by side on the same lake, from one command.

    make bench                                              # 100k and 1M users
    .venv/bin/python -m bench.suite --users 100000 1000000
    .venv/bin/python -m bench.suite --users 20000 --quick   # a smoke run of every measure

Per scale it loads a GitHub snapshot of `--users` users into the mirrors, builds `user_profile`, and
measures, on that one lake and in this order:

1. one 1k-change batch, incremental (whole batch and its view step), against a Spark full recompute
   of the view (written to an Iceberg table) and a DuckDB full recompute (written to Parquet);
2. fixed overhead: a batch of no lines, a batch of events already applied, a batch touching one table;
3. fan-out: the description of the most-starred repository edited (one event, every stargazer's row);
4. freshness: events written to the landing zone at a steady 1k and 2k events/s for 10 minutes while
   `ingest` runs continuously (the feed starts once ingest is ready); p50 / p99 of (time the change
   is visible in user_profile - event time), the batches' p50 / p99, and whether latency grows over the
   run; then single changes, one new star every 5 s, into an idle ingest; then (`sustain`) a rate that
   grows by half every minute from 1k events/s: the highest rate whose p99 stays within the target
   without growing;
5. catch-up: events per second draining a backlog of 1M change events, with the stream's local state in
   place, then another backlog with the state deleted first (rebuilt from the tables, then drained);
6. start-up: `lakemv ingest --once` (the real command) on this lake with its state in place, given one
   new file: seconds until its first batch starts;
7. many views: 1k-change batches maintaining `--views` views of mixed shapes (the shipped views, the
   test shapes the store indexes, numbered copies) against batches of user_profile alone: the same
   recorded batches replayed on the lake restored before each of `--view-repeats` repeats;
8. cost: `lakemv explain`'s predicted rows per key and keys per batch for user_profile and
   COST_SHAPES, against 1k-change batches maintaining them (keys reached, rows the state read).

Setting up each scale also measures the local state: its load from the tables, its size on disk and
the driver memory it takes; each scale ends with the driver's peak memory (Python and JVM).

Cost is wall seconds and CPU seconds (this process plus its JVM, so Python parsing, Spark and DuckDB
all count). Writes bench/results/suite-<time>/ with results.json, report.md and PNG plots.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyspark
from rich.console import Console

from bench import lakecopy
from bench.memory import PeakMemory
from bench.report import write_report
from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.streams import checkpoint_dir, planned_files, state_path
from lakemv.catalog.tables import TableNames
from lakemv.core.batch.result import BatchResult
from lakemv.core.planner import plan_view
from lakemv.core.planner.cost import batch_estimate, key_profile, predict
from lakemv.core.planner.cost import statistics as mirror_statistics
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.store import Store
from lakemv.duck.query import lake_connection
from lakemv.duck.verify import duckdb_sql, verify_plan
from lakemv.spark.batch.runner import VIEW_WORKERS, BatchProcessor
from lakemv.spark.bulk import lines_frame
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.session import get_spark
from lakemv.spark.stream.files import run_ingest
from lakemv.spark.views.maintain import ViewMaintainer
from lakemv.workload.debezium import connect_schema, write_landing_files
from lakemv.workload.github import GitHubWorkload, WorkloadConfig
from lakemv.workload.shapes import copies, shape_view

RESULTS = Path(__file__).with_name("results")
LAKEMV = PROJECT_ROOT / ".venv" / "bin" / "lakemv"
MEASURES = ("batches", "full", "freshness", "sustain", "catch-up", "startup", "views", "cost")
# Views whose cost per key `lakemv explain` predicts, set against measured batches (the cost measure).
COST_SHAPES = ("repo_fans", "latest_prs")
VIEW = "user_profile"
TARGETS = {  # issue 13's, on 2 cores
    "freshness_p50_seconds": 3.0,
    "freshness_p99_seconds": 10.0,
    "catch_up_events_per_second": 50_000,
    "catch_up_events_per_second_1m": 25_000,  # issue 31: >= 50k events/s at 100k users, >= 25k at 1M
    "snapshot_events_per_second": 100_000,
    "cheaper_than_spark_full": 20.0,
    "faster_than_duckdb_full": 10.0,
    "faster_than_duckdb_full_100k": 3.0,  # issue 31: >= 10x at 1M users, >= 3x at 100k
    "growth_for_10x_state": 1.2,
    "empty_batch_seconds": 1.0,
    "fan_out_seconds": 3.0,
    "per_view_seconds": 0.15,
    "single_change_seconds": 3.0,
    "startup_seconds": 8.0,
}
Events = dict[str, list[dict[str, Any]]]


def lines_of(events: Events) -> list[tuple[str, str]]:
    return [(json.dumps(e, separators=(",", ":")), f"file:///landing/{t}/bench.json") for t, es in events.items() for e in es]


def count(events: Events) -> int:
    return sum(len(es) for es in events.values())


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


class Meter:
    """Wall seconds, CPU seconds (this process and its JVM), Spark jobs and Iceberg commits of a step."""

    def __init__(self, spark, catalog: str):
        self.spark = spark
        self.catalog = catalog
        self.jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.steps = 0

    def jvm_cpu(self) -> float:
        with open(f"/proc/{self.jvm_pid}/stat", encoding="utf-8") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.ticks

    def commits(self) -> int:
        total = 0
        present = {row[0] for row in self.spark.sql(f"SHOW NAMESPACES IN {self.catalog}").collect()}
        for namespace in sorted(present & {"mirror", "views", "lakemv"}):
            for row in self.spark.sql(f"SHOW TABLES IN {self.catalog}.{namespace}").collect():
                table = f"{self.catalog}.{namespace}.{row['tableName']}"
                total += self.spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]
        return total

    def measure(self, label: str, step: Callable[[], Any], commits: bool = True) -> tuple[Any, dict[str, Any]]:
        before = self.commits() if commits else 0
        self.steps += 1
        group = f"bench-{self.steps}-{label}"
        context = self.spark.sparkContext
        context.setJobGroup(group, label)
        python, jvm, started = time.process_time(), self.jvm_cpu(), time.perf_counter()
        try:
            result = step()
        finally:
            seconds, python, jvm = time.perf_counter() - started, time.process_time() - python, self.jvm_cpu() - jvm
            context.setJobGroup("bench-idle", "idle")
        figures = {
            "seconds": round(seconds, 3),
            "cpu_seconds": round(python + jvm, 3),
            "python_cpu_seconds": round(python, 3),
            "spark_jobs": len(context.statusTracker().getJobIdsForGroup(group)),
        }
        if commits:
            figures["iceberg_commits"] = self.commits() - before
        return result, figures


def batch_figures(result: BatchResult, figures: dict[str, Any]) -> dict[str, Any]:
    view = result.views.get(VIEW)
    return {
        **figures,
        "events": result.events,
        "merged": dict(result.merged),
        "keys_affected": (view.keys or 0) if view else 0,
        "view_upserts": view.upserts if view else 0,
        "view_deletes": view.deletes if view else 0,
        "view_seconds": round(view.seconds, 3) if view else 0.0,
        "view_steps": dict(view.steps) if view else {},
        "steps": dict(result.steps),
        "views": len(result.views),
        "views_seconds": round(sum(v.seconds for v in result.views.values()), 3),
        "per_view": {name: {"keys": v.keys, "seconds": round(v.seconds, 3), "steps": dict(v.steps), "note": v.note,
                            "rows_read": v.rows_read} for name, v in result.views.items()},  # fmt: skip
    }


def streamed_batch(result: BatchResult) -> dict[str, Any]:
    """A batch of a streaming measure (freshness, catch-up) as its results record it: its size, its
    seconds and steps, and `VIEW`'s keys, seconds, steps and note (e.g. recomputed whole)."""
    view = result.views.get(VIEW)
    return {"batch_id": result.batch_id, "events": result.events, "seconds": round(result.seconds, 3),
            "view_seconds": round(view.seconds, 3) if view else 0.0, "keys": view.keys if view else 0,
            "note": view.note if view else None, "steps": dict(result.steps), "view_steps": dict(view.steps) if view else {}}  # fmt: skip


class Scale:
    """One lake of `users` users, and every measure run against it."""

    def __init__(self, users: int, root: Path, args: argparse.Namespace, console: Console):
        self.users = users
        self.args = args
        self.console = console
        self.root = root / f"users-{users}"
        self.settings = LakeSettings(warehouse=self.root / "warehouse", catalog_name=f"bench{users}")
        self.sources = load_sources(self.settings.sources_dirs)
        self.names = TableNames(self.settings.catalog_name)
        self.plan = plan_view(load_views(self.settings.view_dirs)[VIEW], self.sources)
        self.workload = GitHubWorkload(WorkloadConfig(users=users, seed=args.seed), self.sources)
        self.schemas = {name: connect_schema(source) for name, source in self.workload.sources.items()}
        self.spark = get_spark(self.settings)
        self.direct = None if args.scan or args.no_direct else DirectWriter(self.spark, self.settings)
        self.meter = Meter(self.spark, self.settings.catalog_name)
        self.batch_id = 0
        self.processor: BatchProcessor | None = None

    def say(self, text: str) -> None:
        self.console.print(f"[bold]{self.users:,} users[/]: {text}")

    # ---- setup ---------------------------------------------------------------------------------
    def load(self) -> dict[str, Any]:
        with self.console.status("generating the snapshot..."):
            snapshot = next(self.workload.rounds())
        events = count(snapshot)
        # The mirrors only, judged by a local state of their own (discarded after): every write is a
        # direct commit, as ingest makes it; the measured processor below rebuilds its state from Iceberg.
        loading = None if self.args.scan else Store(self.root / "state-load" / "state.sqlite")
        loader = BatchProcessor(self.spark, self.names, self.sources, store=loading, direct=self.direct)
        chunk, started = self.args.load_chunk, time.perf_counter()
        flat = [(t, e) for t, es in snapshot.items() for e in es]
        del snapshot
        with self.console.status(f"loading {events:,} snapshot events into the mirrors...") as status:
            for start in range(0, len(flat), chunk):
                part: Events = {}
                for table, event in flat[start : start + chunk]:
                    part.setdefault(table, []).append(event)
                self.batch_id += 1
                lines = lines_of(part)
                loader.process_lines(self.batch_id, lines if self.settings.set_wise_bytes is None else lines_frame(self.spark, lines))
                status.update(f"loading snapshot events into the mirrors: {min(start + chunk, len(flat)):,} / {events:,}")
        load_seconds = time.perf_counter() - started
        if loading is not None:
            loading.close()
        rows = {t: self.spark.table(self.names.mirror(t)).count() for t in self.sources}
        build = self.build()
        view_rows = self.spark.table(self.names.view(VIEW)).count()
        self.say(f"{events:,} snapshot events loaded in {load_seconds:.0f}s; {VIEW} built: {view_rows:,} rows in {build['seconds']}s")
        setup = {"snapshot_events": events, "load_seconds": round(load_seconds, 1), "mirror_rows": rows, "view_rows": view_rows, "build": build}
        (self.root / "setup.json").write_text(json.dumps(setup, indent=2))  # for a run resumed from this lake (--resume)
        return setup

    def resume(self) -> dict[str, Any]:
        """The setup of the run that kept the many-views lake in --root (`setup.json`); the snapshot is
        generated again, and dropped, so that the recorded batches are the ones that run replayed."""
        with self.console.status("generating the snapshot again (the recorded batches follow it)..."):
            next(self.workload.rounds())
        self.say(f"resumed from the lake kept in {self.root}")
        return {**json.loads((self.root / "setup.json").read_text()), "resumed": True}

    def build(self) -> dict[str, Any]:
        """The batch processor of user_profile (building the view the first time; with the local
        state, loading it from the tables: its rebuild time, rows and size are in the figures)."""
        store = None if self.args.scan else Store(self.root / "state" / "state.sqlite")

        def processor() -> BatchProcessor:
            return BatchProcessor(self.spark, self.names, self.sources, [self.plan], store=store, view_workers=self.args.view_workers, direct=self.direct)

        resident = _resident_bytes()
        self.processor, figures = self.meter.measure("build", processor)
        if store is not None and self.processor.synced is not None:
            reloaded = self.processor.synced.reloaded
            figures["state"] = {
                "reloaded": {name: {"rows": rows, "seconds": round(seconds, 2)} for name, (rows, seconds) in reloaded.items()},
                "rebuild_seconds": round(sum(s for _, s in reloaded.values()), 2),
                "disk_bytes": store.size_bytes(),
                # the driver's growth while the store loaded: SQLite's page cache (at most 256 MiB) and
                # what Python keeps; the JVM is a process of its own
                "resident_bytes": _resident_bytes() - resident,
            }
            self.say(f"local state: {figures['state']['rebuild_seconds']}s to load from the tables, "
                     f"{store.size_bytes() / 2**20:,.0f} MiB on disk, +{figures['state']['resident_bytes'] / 2**20:,.0f} MiB resident")  # fmt: skip
        return figures

    def batch(self, label: str, events: Events | list[tuple[str, str]]) -> dict[str, Any]:
        assert self.processor is not None
        lines = events if isinstance(events, list) else lines_of(events)
        self.batch_id += 1
        number = self.batch_id
        result, figures = self.meter.measure(label, lambda: self.processor.process_lines(number, lines))
        out = batch_figures(result, figures)
        self.say(f"{label}: {out['events']:,} events, {out['keys_affected']:,} keys, {out['seconds']}s "
                 f"(view step {out['view_seconds']}s, {out['spark_jobs']} Spark jobs, {out['iceberg_commits']} commits)")  # fmt: skip
        return out

    # ---- 1-3: batches --------------------------------------------------------------------------
    def batches(self) -> dict[str, Any]:
        changes = self.args.changes
        for number in range(self.args.warmup):
            self.batch(f"warm-up {number + 1}", self.workload.change_round(changes))
        measured = []
        for number in range(self.args.repeat):
            events = self.workload.change_round(changes)
            measured.append(self.batch(f"1k-change batch {number + 1}", events))
        again = lines_of(events)  # the last batch's events, every one already applied
        empty = self.batch("batch of no lines", [])
        applied = self.batch("batch of already-applied events", again)
        one_table = self.batch("batch touching payment_info only", self.workload.operate("payment_toggle", changes))
        (owner, name), stars = self.workload.most_starred_repo()
        if stars < self.args.fan_out_stars:  # the generator's most popular repo is smaller than the measure asks
            self.batch(f"fan-out setup: {self.args.fan_out_stars - stars:,} more stars of {owner}/{name}",
                       self.workload.star_repo(owner, name, self.args.fan_out_stars - stars))  # fmt: skip
            (owner, name), stars = self.workload.most_starred_repo()
        fan_out = {**self.batch(f"fan-out: {owner}/{name} ({stars:,} stars) described", self.workload.describe_repo(owner, name)),
                   "stars": stars}  # fmt: skip
        return {"one_k": measured, "median_one_k": _median_batch(measured), "empty": empty,
                "already_applied": applied, "one_table": one_table, "fan_out": fan_out}  # fmt: skip

    def full_recomputes(self) -> dict[str, Any]:
        maintainer = ViewMaintainer(self.spark, self.names, self.sources, self.plan)
        scratch = f"{self.settings.catalog_name}.views.bench_full_{VIEW}"

        def spark_full() -> None:
            maintainer.recompute().writeTo(scratch).using("iceberg").createOrReplace()

        out = self.root / "duckdb_full.parquet"
        sql = duckdb_sql(self.plan.definition.sql)

        def duckdb_full() -> int:
            con = lake_connection(self.settings, self.sources)
            try:
                con.execute(f"COPY ({sql}) TO '{out}' (FORMAT parquet)")
                return con.execute(f"SELECT count(*) FROM '{out}'").fetchone()[0]
            finally:
                con.close()

        spark_runs = [self.meter.measure("spark full recompute", spark_full, commits=False)[1] for _ in range(self.args.repeat)]
        duck_runs = []
        for _ in range(self.args.repeat):
            rows, figures = self.meter.measure("duckdb full recompute", duckdb_full, commits=False)
            duck_runs.append({**figures, "rows": rows})
        self.spark.sql(f"DROP TABLE IF EXISTS {scratch} PURGE")
        best_spark = min(spark_runs, key=lambda r: r["seconds"])
        best_duck = min(duck_runs, key=lambda r: r["seconds"])
        self.say(f"full recompute: Spark {best_spark['seconds']}s ({best_spark['cpu_seconds']} CPU s), "
                 f"DuckDB {best_duck['seconds']}s ({best_duck['cpu_seconds']} CPU s)")  # fmt: skip
        return {"spark": spark_runs, "duckdb": duck_runs, "spark_best": best_spark, "duckdb_best": best_duck}

    # ---- 4: freshness --------------------------------------------------------------------------
    def _write(self, landing: Path, events: Events, prefix: str, rng: random.Random, files: int = 1) -> list[tuple[str, int]]:
        written = []
        for table, table_events in events.items():
            for path in write_landing_files(landing, table, table_events, self.schemas[table], rng, prefix, files=files):
                written.append((path.name, sum(1 for _ in path.open(encoding="utf-8"))))
        return written

    def freshness(self, rate: int) -> dict[str, Any]:
        """A steady feed of `rate` events/s: files every 0.5 s, the first `--freshness-warmup` s not measured."""
        tick, warmup, seconds = 0.5, self.args.freshness_warmup, self.args.freshness_seconds
        landing = self._stream(self.root / f"landing-{rate}")
        ticks = self._ticks([rate], int((warmup + seconds) / tick), tick)
        return {"rate": rate, **self._visibility(landing, ticks, tick, warmup, f"freshness at {rate:,} events/s")}

    def _ticks(self, rates: list[int], per_rate: int, tick: float) -> list[Events]:
        """For each of `rates` (events/s) in turn, `per_rate` change rounds, one per `tick` seconds."""
        ratio = count(self.workload.change_round(100)) / 100  # events per operation (noise, two-event operations)
        return [self.workload.change_round(max(1, round(rate * tick / ratio))) for rate in rates for _ in range(per_rate)]

    def _stream(self, landing: Path) -> Path:
        """The stream of `landing` with its local state in place: made by an unmeasured `ingest --once` of
        100 changes when new. A new stream's state is loaded from the tables, and not knowing what its
        views had pending, it diffs each whole once (lakemv.spark.views.indexed `catch_up_once`):
        that is the catch-up-with-a-rebuild measure's, not a steady stream's."""
        if not state_path(self.settings, checkpoint_dir(self.settings, landing)).exists():
            self._write(landing, self.workload.change_round(100), "init", random.Random(6))
            run_ingest(self.spark, self.settings, self.sources, landing, once=True, views=[self.plan])
        return landing

    def single_changes(self) -> dict[str, Any]:
        """One change at a time into an idle, running ingest (a new star every 5 s): how soon each shows."""
        landing = self._stream(self.root / "landing-single")
        ticks = [self.workload.operate("star_create", 1) for _ in range(self.args.single_changes)]
        out = self._visibility(landing, ticks, 5.0, 0.0, "single changes")
        return {**out, "median_seconds": out["p50_seconds"]}

    def _visibility(
        self, landing: Path, ticks: list[Events], tick: float, warmup: float, label: str,
        steps: list[int] | None = None, give_up: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Run ingest continuously on `landing` and, once it is ready (its store loaded), write one file
        per table every `tick` seconds from `ticks`; per event: when the batch that carried it
        committed user_profile, minus the event time. `steps` numbers each tick's step (a ramp of
        rates); with `give_up`, the feed stops once a file it wrote has waited that long unseen (the
        rate is not sustained: more would only grow the backlog)."""
        seconds = len(ticks) * tick - warmup
        offered = sum(count(t) for t in ticks) / (len(ticks) * tick)
        fed: dict[str, tuple[float, int, int]] = {}  # file name -> (event time, events, step)
        seen: dict[int, float] = {}  # batch id -> when its last unit committed
        batches: list[dict[str, Any]] = []
        rng = random.Random(len(ticks))
        feeding_done, ready = threading.Event(), threading.Event()
        checkpoint = checkpoint_dir(self.settings, landing)
        visible: dict[str, float] = {}
        looked: set[int] = set()
        gave_up: list[int] = []  # the step the feed stopped in

        def look() -> None:
            """Files the committed batches carried, and when they became visible."""
            for batch_id, at in sorted(seen.items()):
                if batch_id not in looked:
                    looked.add(batch_id)
                    for uri in planned_files(checkpoint, batch_id):
                        visible.setdefault(uri.rsplit("/", 1)[-1], at)

        def feed() -> None:
            ready.wait()
            start = time.time() + 1.0
            for number, events in enumerate(ticks):
                time.sleep(max(0.0, start + number * tick - time.time()))
                now = time.time()
                if give_up is not None:
                    look()
                    waiting = [at for name, (at, _, _) in fed.items() if name not in visible]
                    if waiting and now - min(waiting) > give_up:
                        gave_up.append(steps[number] if steps else 0)
                        break
                for table_events in events.values():
                    for event in table_events:
                        event["source"]["ts_ms"] = int(now * 1000)
                        event["ts_ms"] = int(now * 1000)
                for name, n in self._write(landing, events, f"t{number:05d}", rng):
                    fed[name] = (now, n, steps[number] if steps else 0)
            feeding_done.set()

        def on_batch(result: BatchResult) -> None:
            now = time.time()
            seen[result.batch_id] = now
            batches.append({"at": now, **streamed_batch(result)})

        for table in self.workload.sources:
            (landing / table).mkdir(parents=True, exist_ok=True)
        errors: list[BaseException] = []

        def ingest() -> None:
            try:
                run_ingest(self.spark, self.settings, self.sources, landing, once=False, trigger_seconds=self.args.trigger_seconds,
                           views=[self.plan], on_batch=on_batch, on_ready=ready.set)  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - reported in the results
                errors.append(exc)
            finally:
                ready.set()

        self.say(f"{label} for {warmup + seconds:.0f}s (offered {offered:,.1f} events/s)...")
        runner = threading.Thread(target=ingest, daemon=True)
        runner.start()
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        feeder.join()
        deadline = time.time() + self.args.drain_seconds
        while time.time() < deadline and not errors:
            look()
            if len(visible) >= len(fed):
                break
            time.sleep(0.5)
        stopped = time.time()
        for query in self.spark.streams.active:
            query.stop()
        runner.join(timeout=300)
        first = min(t for t, _, _ in fed.values())
        latencies, unseen = [], 0
        for name, (at, n, _) in fed.items():
            if at - first < warmup:
                continue
            if name in visible:
                latencies += [visible[name] - at] * n
            else:
                latencies += [stopped - at] * n  # not visible by the end: a lower bound
                unseen += n
        p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
        measured_events = len(latencies)
        durations = [b["seconds"] for b in batches]
        self.say(f"{label}: p50 {_s(p50)}, p99 {_s(p99)}, max {_s(max(latencies, default=None))} over {measured_events:,} events; "
                 f"batches p50 {_s(percentile(durations, 0.5))}, p99 {_s(percentile(durations, 0.99))}"
                 + (f" ({unseen:,} not visible after the {self.args.drain_seconds:.0f}s drain: lower bounds)" if unseen else ""))  # fmt: skip
        return {
            "offered_events_per_second": round(offered, 1), "seconds": seconds, "warmup_seconds": warmup,
            "trigger_seconds": self.args.trigger_seconds, "events_measured": measured_events, "events_not_visible": unseen,
            "p50_seconds": _round(p50), "p99_seconds": _round(p99), "max_seconds": _round(max(latencies, default=None)),
            "batch_p50_seconds": _round(percentile(durations, 0.5)), "batch_p99_seconds": _round(percentile(durations, 0.99)),
            "steady": steady([(at - first, visible.get(name, stopped) - at) for name, (at, _, _) in fed.items() if at - first >= warmup]),
            "gave_up_in_step": gave_up[0] if gave_up else None,
            "batches": [{**b, "at": round(b["at"] - first, 3)} for b in batches],
            "file_latencies": sorted((round(at - first, 3), round(visible.get(name, stopped) - at, 3), n, step)
                                     for name, (at, n, step) in fed.items()),
            "error": repr(errors[0]) if errors else None,
        }  # fmt: skip

    def sustain(self) -> dict[str, Any]:
        """The highest rate ingest sustains: a feed whose rate grows by half every `--sustain-step-seconds`
        from `--sustain-from` events/s; a step is sustained when its events' p99 latency is within the
        p99 target and does not grow across the step. The feed stops once a file waits twice that target."""
        tick, step_seconds, target = 0.5, self.args.sustain_step_seconds, TARGETS["freshness_p99_seconds"]
        landing = self._stream(self.root / "landing-sustain")
        rates = [round(self.args.sustain_from * 1.5**i) for i in range(self.args.sustain_steps)]
        per_rate = int(step_seconds / tick)
        ticks = self._ticks(rates, per_rate, tick)
        steps = [number for number in range(len(rates)) for _ in range(per_rate)]
        out = self._visibility(landing, ticks, tick, 0.0, f"ramp from {rates[0]:,} events/s",
                               steps=steps, give_up=2 * target)  # fmt: skip
        per_step = []
        for number, rate in enumerate(rates):
            files = [(at, lag, n) for at, lag, n, step in out["file_latencies"] if step == number]
            lags = [lag for _, lag, n in files for _ in range(n)]  # per event
            if not lags:
                break
            p99 = percentile(lags, 0.99)
            ok = p99 is not None and p99 <= target and steady([(at, lag) for at, lag, _ in files]) and out["gave_up_in_step"] != number
            per_step.append({"rate": rate, "events": len(lags), "p50_seconds": _round(percentile(lags, 0.5)), "p99_seconds": _round(p99), "sustained": ok})
        highest = None
        for s in per_step:  # the highest of the first run of sustained steps (a later one only after a failed one is luck)
            if not s["sustained"]:
                break
            highest = s["rate"]
        judged = ", ".join(f"{step['rate']:,} {'ok' if step['sustained'] else 'not'}" for step in per_step)
        self.say(f"sustained rate: {highest if highest is not None else 'none'} events/s (steps: {judged})")
        return {"highest_sustained_events_per_second": highest, "steps": per_step, "step_seconds": step_seconds, **{k: v for k, v in out.items() if k not in ("file_latencies",)}}  # fmt: skip

    # ---- 5: catch-up ---------------------------------------------------------------------------
    def catch_up(self, rebuild: bool = False) -> dict[str, Any]:
        """Drain a backlog of `--backlog-events` change events with `ingest --once`; with `rebuild`, a
        second backlog into the same stream with its local state deleted first (a driver on a blank
        disk): the processor loads the state from the tables, then drains."""
        landing, target, prefix = self._stream(self.root / "backlog"), self.args.backlog_events, "r" if rebuild else "b"
        state = state_path(self.settings, checkpoint_dir(self.settings, landing)).parent
        rng, total, number = random.Random(8 if rebuild else 7), 0, 0
        with self.console.status(f"writing a backlog of {target:,} change events...") as status:
            while total < target:
                events = self.workload.change_round(min(50_000, max(1, int((target - total) / 1.15))))
                total += sum(n for _, n in self._write(landing, events, f"{prefix}{number:05d}", rng, files=3))
                number += 1
                status.update(f"writing a backlog of change events: {total:,} / {target:,}")
        if rebuild:
            shutil.rmtree(state, ignore_errors=True)
        units: list[dict[str, Any]] = []
        began, ready_at = time.perf_counter(), []

        def on_batch(result: BatchResult) -> None:
            units.append({**streamed_batch(result), "chunk": result.chunk})

        label = "catch-up, the state rebuilt first" if rebuild else "catch-up"
        self.say(f"{label}: draining a backlog of {total:,} events...")
        result, figures = self.meter.measure(
            label, lambda: run_ingest(self.spark, self.settings, self.sources, landing, once=True, views=[self.plan], on_batch=on_batch,
                                      on_ready=lambda: ready_at.append(time.perf_counter() - began)),
            commits=False,
        )  # fmt: skip
        rate = result.events / figures["seconds"]
        durations = [u["seconds"] for u in units]
        self.say(f"{label}: {result.events:,} events in {figures['seconds']:.0f}s = {rate:,.0f} events/s over {len(units)} units "
                 f"(ready after {ready_at[0] if ready_at else 0:.1f}s; units p99 {_s(percentile(durations, 0.99))})")  # fmt: skip
        return {**figures, "events": result.events, "events_per_second": round(rate), "units": units, "ready_seconds": _round(ready_at[0] if ready_at else None),
                "unit_p50_seconds": _round(percentile(durations, 0.5)), "unit_p99_seconds": _round(percentile(durations, 0.99))}  # fmt: skip

    # ---- start-up ------------------------------------------------------------------------------
    def startup(self) -> dict[str, Any]:
        """`lakemv ingest --once` as a user runs it, on this lake with its state in place (the catch-up
        measure's checkpoint), given one new file: seconds from exec until its first batch starts
        (the first batch line's arrival less the batch's own seconds), and the whole run."""
        landing = self._stream(self.root / "backlog")
        env = {**os.environ, "LAKEMV_CATALOG_NAME": self.settings.catalog_name, "LAKEMV_WAREHOUSE": str(self.settings.warehouse),
               "COLUMNS": "1000"}  # fmt: skip - one batch line per batch
        env.pop("PREFECT_API_URL", None)
        runs = []
        for number in range(-1, self.args.repeat):  # the first run builds the views the suite did not (unmeasured)
            self._write(landing, self.workload.change_round(100), f"s{number + 1:03d}", random.Random(number))
            started = time.perf_counter()
            process = subprocess.Popen([str(LAKEMV), "ingest", "--landing", str(landing), "--once"], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
            first, lines, memory = None, [], PeakMemory(process)
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                found = re.match(r"^batch \d+.*, ([0-9.]+)s$", line.strip())
                if first is None and found:
                    first = time.perf_counter() - started - float(found.group(1))
            total = time.perf_counter() - started
            peaks = memory.stop()
            if process.wait() != 0 or first is None:
                raise RuntimeError(f"lakemv ingest --once failed or ran no batch:\n{''.join(lines)[-3000:]}")
            if number < 0:
                continue
            runs.append({"to_first_batch_seconds": round(first, 3), "seconds": round(total, 3),
                         "peak_python_mib": peaks["python_mib"], "peak_jvm_mib": peaks["jvm_mib"]})  # fmt: skip
            self.say(f"start-up: ingest --once reached its first batch after {first:.2f}s (whole run {total:.2f}s; "
                     f"peak resident {peaks['python_mib']:,} MiB Python + {peaks['jvm_mib']:,} MiB JVM)")  # fmt: skip
        return {"runs": runs, "median_to_first_batch_seconds": statistics.median(r["to_first_batch_seconds"] for r in runs)}

    # ---- 6: many views ------------------------------------------------------------------------
    def _views_processor(self, plans: list, label: str) -> BatchProcessor:
        """A batch processor of `plans` with a local state of its own (`state-<label>`)."""
        store = None if self.args.scan else Store(self.root / f"state-{label}" / "state.sqlite")
        return BatchProcessor(self.spark, self.names, self.sources, plans, store=store, view_workers=self.args.view_workers, direct=self.direct)

    def _close_processor(self) -> None:
        """Close the batch processor in use (its relations and local state), if any, before another
        replaces it or the lake it read is restored."""
        if self.processor is not None:
            self.processor.close()
            self.processor = None

    def many(self, count: int, freshness: int | None = None) -> None:
        """From here on, batches maintain `count` views of mixed shapes (bench.profile --views), all but
        user_profile with the freshness budget `freshness` (micros), if given."""
        self._close_processor()
        self.processor = self._views_processor(copies(load_views(self.settings.view_dirs), self.sources, count, freshness), "many")

    def many_views(self) -> dict[str, Any]:
        """What one more view costs a batch, on recorded batches replayed on a restored lake: the lake is
        kept once both processors (user_profile alone; `--views` views of mixed shapes) have built their
        views and states; each of `--view-repeats` repeats restores it before each processor replays the
        same warm-up and measured 1k-change batches (the two in turn, the first alternating). A repeat's
        cost per view is (median batch with the views - median batch with one) / (views - 1)."""
        count, changes = self.args.views, self.args.changes
        plans = {"one": [self.plan], "many": copies(load_views(self.settings.view_dirs), self.sources, count)}
        recorded = [lines_of(self.workload.change_round(changes)) for _ in range(self.args.warmup + self.args.repeat)]
        states = [self.root / f"state-{label}" for label in plans]
        runs: dict[str, Any] = {}
        kept, first = self.root / "many-views-lake", self.batch_id
        if self.args.resume:  # the lake and builds a previous run kept
            built = json.loads((kept / "kept.json").read_text())
            runs, first = {label: {**run, "repeats": []} for label, run in built["runs"].items()}, built["batch_id"]
        else:
            for label, views in plans.items():
                processor, build = self.meter.measure(f"{len(views)} views built", lambda v=views, n=label: self._views_processor(v, n))
                store = processor.store
                runs[label] = {"views": len(views), "build": build, "store_bytes": store.size_bytes() if store else None, "repeats": []}
                self.say(f"{len(views)} views built in {build['seconds']}s")
                processor.close()
            lakecopy.keep(Path(self.settings.warehouse), kept, states)
            (kept / "kept.json").write_text(json.dumps({"batch_id": first, "runs": runs}, indent=2))
        for repeat in range(self.args.view_repeats):
            for label in (("one", "many") if repeat % 2 == 0 else ("many", "one")):
                self._close_processor()
                lakecopy.restore(kept, Path(self.settings.warehouse), states)
                self.processor, opened = self.meter.measure("opened", lambda n=label: self._views_processor(plans[n], n))
                self.batch_id = first
                batches = [self.batch(f"{len(plans[label])} views, repeat {repeat + 1}: {'warm-up' if n < self.args.warmup else 'batch'} {n + 1}", lines)
                           for n, lines in enumerate(recorded)]  # fmt: skip
                measured = batches[self.args.warmup :]
                runs[label]["repeats"].append({"opened_seconds": opened["seconds"], "batches": measured, "median": _median_batch(measured)})
                if label == "many" and repeat == self.args.view_repeats - 1:  # the views as the batches left them
                    runs["many"]["verify"] = self.verify(plans["many"])
        self._close_processor()
        lakecopy.restore(kept, Path(self.settings.warehouse), states)  # later measures start from the same lake
        shutil.rmtree(kept, ignore_errors=True)
        pairs = list(zip(runs["one"]["repeats"], runs["many"]["repeats"], strict=True))
        per_view = [(m["median"]["seconds"] - o["median"]["seconds"]) / (count - 1) for o, m in pairs]  # in repeat order
        per_view_cpu = [(m["median"]["cpu_seconds"] - o["median"]["cpu_seconds"]) / (count - 1) for o, m in pairs]
        for label in plans:
            medians = [r["median"] for r in runs[label]["repeats"]]
            runs[label]["median"] = _median_batch(medians)
            runs[label]["seconds_spread"] = [min(m["seconds"] for m in medians), max(m["seconds"] for m in medians)]
        median = statistics.median(per_view)
        self.say(f"{count} views: {runs['many']['median']['seconds']}s per 1k-change batch against {runs['one']['median']['seconds']}s "
                 f"with one: {median * 1000:,.0f} ms per view (repeats {min(per_view) * 1000:,.0f}-{max(per_view) * 1000:,.0f} ms)")  # fmt: skip
        return {**runs, "repeats": self.args.view_repeats, "per_view_seconds": round(median, 3),
                "per_view_seconds_spread": [round(min(per_view), 3), round(max(per_view), 3)],
                "per_view_seconds_by_repeat": [round(v, 3) for v in per_view],
                "per_view_cpu_seconds": round(statistics.median(per_view_cpu), 3)}  # fmt: skip

    def costs(self) -> dict[str, Any]:
        """`lakemv explain`'s cost per key (from DuckDB's counts over the mirrors before the batches)
        against what 1k-change batches measure: keys reached, rows the local state read for them,
        seconds per key. The prediction for each batch takes its changed rows per table."""
        plans = [self.plan, *(plan_view(shape_view(name), self.sources) for name in COST_SHAPES)]
        con = lake_connection(self.settings, self.sources)  # pinned to the mirrors as they are now
        try:
            stats = {p.name: mirror_statistics(con, p, self.sources) for p in plans}
            self._close_processor()
            self.processor = self._views_processor(plans, "cost")
            for number in range(self.args.warmup):
                self.batch(f"cost: warm-up {number + 1}", self.workload.change_round(self.args.changes))
            batches = [self.batch(f"cost: 1k-change batch {n + 1}", self.workload.change_round(self.args.changes))
                       for n in range(self.args.repeat)]  # fmt: skip
            self._close_processor()
            out: dict[str, Any] = {}
            for plan in plans:
                key_profile(con, plan)
                estimates = [batch_estimate(con, plan, stats[plan.name].rows, b["merged"]) for b in batches]
                out[plan.name] = self._cost_figures(plan, stats[plan.name], estimates, [b["per_view"][plan.name] for b in batches])
        finally:
            con.close()
        return out

    def _cost_figures(self, plan: Any, stats: Any, estimates: list[tuple[float, float]], runs: list[dict[str, Any]]) -> dict[str, Any]:
        cost = predict(plan, stats)
        keys = sum(r["keys"] or 0 for r in runs)
        read = [r["rows_read"] for r in runs if r["rows_read"] is not None]
        predicted_keys = sum(k for k, _ in estimates)
        figures = {
            "predicted_rows_per_key": round(sum(k * r for k, r in estimates) / predicted_keys, 2) if predicted_keys else None,
            "measured_rows_per_key": round(sum(read) / keys, 2) if read and keys else None,
            "predicted_keys_per_batch": round(predicted_keys / len(runs), 1),
            "measured_keys_per_batch": round(keys / len(runs), 1),
            "average_key_rows": round(cost.rows_per_key, 2),
            "seconds_per_key_ms": round(1000 * sum(r["seconds"] for r in runs) / keys, 3) if keys else None,
            "view_seconds": [r["seconds"] for r in runs],
            "anchor_rows_per_key": round(cost.anchor_rows_per_key, 2),
            "per_occurrence": [
                {"table": plan.occurrence(o.occurrence).table, "alias": plan.occurrence(o.occurrence).alias,
                 "rows_per_key": round(o.rows_per_key, 3), "keys_per_change": round(o.keys_per_change, 3),
                 "rows_per_reached_key": round(o.rows_per_reached_key, 3)}
                for o in cost.occurrences
            ],  # fmt: skip
        }
        self.say(f"cost of {plan.name}: explain predicts {figures['predicted_keys_per_batch']} keys per batch of "
                 f"{figures['predicted_rows_per_key']} rows each; measured {figures['measured_keys_per_batch']} keys of "
                 f"{figures['measured_rows_per_key']} rows ({figures['seconds_per_key_ms']} ms per key)")  # fmt: skip
        return figures

    def run(self) -> dict[str, Any]:
        """Every chosen measure in turn; one that fails is recorded with its error and the others still
        run (a long run keeps what it measured)."""
        out: dict[str, Any] = {"users": self.users, "setup": self.resume() if self.args.resume else self.load(), "errors": {}}
        measures = self.args.measures
        steps: list[tuple[str, str, Callable[[], Any], Any]] = [
            ("batches", "batches", self.batches, None),
            ("full", "full_recompute", self.full_recomputes, None),
            ("freshness", "freshness", lambda: [self.freshness(rate) for rate in self.args.rates], []),
            ("freshness", "single_changes", self.single_changes, None),
            ("sustain", "sustain", self.sustain, None),
            ("catch-up", "catch_up", self.catch_up, None),
            ("catch-up", "catch_up_rebuilt", lambda: self.catch_up(rebuild=True), None),
            ("startup", "startup", self.startup, None),
            ("views", "many_views", self.many_views, None),
            ("cost", "cost", self.costs, None),
        ]
        for measure, key, step, empty in steps:
            out[key] = empty
            if measure not in measures:
                continue
            try:
                out[key] = step()
            except Exception as exc:  # noqa: BLE001 - recorded in the results, the run goes on
                out["errors"][key] = _failure(exc)
                self.say(f"{key} failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        out["verify"] = self.verify([self.plan])
        out["driver_memory"] = self.driver_memory()
        return out

    def driver_memory(self) -> dict[str, Any]:
        """The driver's peak resident memory so far (this Python process and its JVM, each its high-water
        mark since it started: a later scale's includes the earlier ones) and the JVM's heap in use now.
        The report gives the peak per scale and the growth between scales (a real ingest's memory is
        `bench.memory`'s, in the start-up and backlog measures)."""
        jvm = self.spark.sparkContext._jvm
        heap = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
        python, java = _peak_resident(os.getpid()), _peak_resident(self.meter.jvm_pid)
        figures = {"python_peak_bytes": python, "jvm_peak_bytes": java, "jvm_heap_used_bytes": int(heap.getUsed()),
                   "jvm_heap_max_bytes": int(heap.getMax())}  # fmt: skip
        self.say(f"driver memory: peak {python / 2**20:,.0f} MiB Python + {java / 2**20:,.0f} MiB JVM "
                 f"(heap in use {figures['jvm_heap_used_bytes'] / 2**20:,.0f} of {figures['jvm_heap_max_bytes'] / 2**20:,.0f} MiB)")  # fmt: skip
        return figures

    def verify(self, plans: list) -> dict[str, Any]:
        """DuckDB's recompute of each view against its table, as `lakemv verify` does it: what the runs
        left in the lake must be exact."""
        failed: dict[str, str] = {}
        for plan in plans:
            result = verify_plan(self.settings, self.sources, plan)
            if isinstance(result, str):
                failed[plan.name] = f"not verified: {result}"
                continue
            if not result.ok:
                failed[plan.name] = result.summary()
        self.say(f"verify: {len(plans) - len(failed)} of {len(plans)} views match DuckDB's recompute"
                 + "".join(f"\n  {reason}" for reason in failed.values()))  # fmt: skip
        return {"views": len(plans), "matching": len(plans) - len(failed), "failed": failed}


def _peak_resident(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def steady(files: list[tuple[float, float]]) -> bool:
    """Whether latencies (time fed, latency) do not grow over a run: the median of its last third is
    at most 1.5x the first third's plus one second (a backlog that grows makes each file wait longer)."""
    ordered = [lag for _, lag in sorted(files)]
    if len(ordered) < 3:
        return True
    third = len(ordered) // 3
    return statistics.median(ordered[-third:]) <= 1.5 * statistics.median(ordered[:third]) + 1.0


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="utf-8") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _failure(exc: BaseException) -> str:
    """A failed measure's error for the results: where Python was (the traceback's frames in lakemv's
    own code, and its last two), and the error's head, which for a JVM error names its cause
    (`java.lang.OutOfMemoryError: ...`), and its tail (a JVM stack's innermost frames come first, its
    `Caused by` last)."""
    import traceback

    text = str(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    kept = [f for i, f in enumerate(frames) if "site-packages" not in f.filename or i >= len(frames) - 2]
    where = "".join(traceback.format_list(kept))
    body = text if len(text) <= 6000 else f"{text[:4000]}\n[... {len(text) - 6000:,} characters ...]\n{text[-2000:]}"
    return f"{type(exc).__name__}: {body}\n{where}"


def _median_batch(batches: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(batches, key=lambda b: b["seconds"])
    middle = ordered[len(ordered) // 2]
    return {**middle, "cpu_seconds": statistics.median(b["cpu_seconds"] for b in batches)}


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="utf-8") if line.startswith("model name")), "?")
    memory = next((int(line.split()[1]) for line in open("/proc/meminfo", encoding="utf-8") if line.startswith("MemTotal")), 0)
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(memory / 2**20, 1), "python": platform.python_version(),
            "spark": pyspark.__version__, "duckdb": duckdb.__version__, "os": platform.platform()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--changes", type=int, default=1000, help="operations in the measured change batch")
    parser.add_argument("--warmup", type=int, default=1, help="change batches before the measured ones")
    parser.add_argument("--repeat", type=int, default=3, help="measured 1k-change batches and full recomputes")
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 2000], help="freshness feed rates, events/s")
    parser.add_argument("--freshness-seconds", type=float, default=600.0, help="measured seconds of each steady feed (after the warm-up)")
    parser.add_argument("--sustain-from", type=int, default=1000, help="the rate ramp's first step, events/s (x1.5 per step)")
    parser.add_argument("--sustain-steps", type=int, default=6, help="steps of the rate ramp")
    parser.add_argument("--sustain-step-seconds", type=float, default=60.0, help="seconds of each step of the rate ramp")
    parser.add_argument("--freshness-warmup", type=float, default=15.0)
    parser.add_argument("--single-changes", type=int, default=6, help="single changes, 5 s apart, into an idle ingest")
    parser.add_argument("--drain-seconds", type=float, default=120.0, help="after the feed stops, wait this long for the last files")
    parser.add_argument("--trigger-seconds", type=float, default=0.5)
    parser.add_argument("--backlog-events", type=int, default=1_000_000)
    parser.add_argument("--load-chunk", type=int, default=500_000, help="snapshot events per loading unit")
    parser.add_argument("--fan-out-stars", type=int, default=10_000, help="stars of the repository the fan-out batch edits")
    parser.add_argument("--measures", nargs="+", default=list(MEASURES), choices=MEASURES, help="a subset of the measures")
    parser.add_argument("--views", type=int, default=None, help="views of the many-views measure (100; 16 with --quick)")
    parser.add_argument("--view-repeats", type=int, default=5, help="restores of the lake the many-views measure replays its batches on")
    parser.add_argument("--view-workers", type=int, default=None, help="views maintained at once (default: LAKEMV_VIEW_WORKERS's default)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--scan", action="store_true", help="measure without the local state (every lookup scans Iceberg)")
    parser.add_argument("--no-direct", action="store_true", help="with the local state, but Spark MERGEs instead of direct commits")
    parser.add_argument("--quick", action="store_true", help="short runs: 20s of feed, a 100k-event backlog")
    parser.add_argument("--root", type=Path, default=None, help="work folder (default: a temporary one, removed after)")
    parser.add_argument("--resume", action="store_true", help="with --measures views and --root: replay the batches on the lake a run "
                        "kept there once it had built the views (`many-views-lake`), without loading and building again")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.freshness_seconds, args.freshness_warmup, args.backlog_events, args.repeat = 20.0, 5.0, 100_000, 2
        args.sustain_step_seconds, args.sustain_steps = 15.0, min(args.sustain_steps, 4)
        args.fan_out_stars = min(args.fan_out_stars, max(args.users) // 10)
        args.views, args.view_repeats = args.views or 16, min(args.view_repeats, 3)
    args.views = args.views or 100
    if args.resume and (args.root is None or args.measures != ["views"] or len(args.users) != 1):
        parser.error("--resume needs --root, --measures views and one --users")
    args.view_workers = args.view_workers or VIEW_WORKERS
    console = Console()
    root = args.root or Path(tempfile.mkdtemp(prefix="lakemv-bench-"))
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    results: dict[str, Any] = {
        "benchmark": "suite", "started": started, "machine": machine(), "targets": TARGETS,
        "command": " ".join([".venv/bin/python -m bench.suite", *sys.argv[1:]]), "settings": {k: v for k, v in vars(args).items() if k != "root"},
        "scales": [],
    }  # fmt: skip
    out = RESULTS / f"suite-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    try:
        for users in sorted(args.users):
            results["scales"].append(Scale(users, root, args, console).run())
            results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            (out / "results.json").write_text(json.dumps(results, indent=2))
            write_report(results, out)  # after each scale: a long run leaves a report as it goes
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    console.print(f"results: {out}/results.json, report: {out}/report.md")


if __name__ == "__main__":
    main()
