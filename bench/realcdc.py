"""Freshness of the real pipeline: PostgreSQL commit → view row, and → data-product message.

    .venv/bin/python -m bench.realcdc --users 2000 --rate 1000 --seconds 90

Starts the local stack (`lakemv stack up`, in a temporary folder unless `--stack-dir`), loads a
GitHub snapshot of `--users` users into PostgreSQL, and runs the real `lakemv ingest --kafka` as a
stream with `user_profile` published to Kafka. Then, for `--seconds`, the workload writes `--rate`
changes per second (transactions of 1-4 operations) while a probe renames one user every second:
the probe's commit time against (a) the moment DuckDB sees the new username in the Iceberg view and
(b) the moment a read_committed consumer of the data-product topic receives it. The same run times
what a user would otherwise do to be this fresh: a DuckDB full recompute of `user_profile` over the
same mirrors. Writes bench/results/realcdc-<time>/results.json and report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
from rich.console import Console

from bench.suite import machine, percentile
from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.tables import VIEW_NAMESPACE
from lakemv.duck.query import connect_duckdb, lake_connection, metadata_location
from lakemv.duck.verify import duckdb_sql
from lakemv.ops.stack import Stack, StackConfig
from lakemv.workload.github import WorkloadConfig
from lakemv.workload.postgres import PostgresWorkload, apply

TABLES = ("payment_info", "pull_requests", "repos", "stars", "users")
LAKEMV = str(PROJECT_ROOT / ".venv" / "bin" / "lakemv")


class Probe:
    """Renames one user once a second and times when the change shows in the view and in the topic."""

    def __init__(self, url: str, settings: LakeSettings, bootstrap: str, email: str):
        self.con = psycopg2.connect(url)
        self.settings, self.bootstrap, self.email = settings, bootstrap, email
        self.committed: dict[str, float] = {}
        # When each probe name was first seen; a batch may skip names (it shows the key's latest state),
        # so a probe counts as visible once it or a later one is seen.
        self.in_view: dict[str, float] = {}
        self.in_topic: dict[str, float] = {}
        self.stopping = threading.Event()

    def rename(self, number: int) -> None:
        name = f"probe~{number:05d}"
        with self.con, self.con.cursor() as cur:
            cur.execute("UPDATE users SET username = %s WHERE email = %s", (name, self.email))
        self.committed[name] = time.time()

    def watch_view(self) -> None:
        con = connect_duckdb(threads=1)
        seen = None
        while not self.stopping.is_set():
            location = metadata_location(self.settings, VIEW_NAMESPACE, "user_profile")
            if location is not None:
                row = con.execute(f"SELECT username FROM iceberg_scan('{location}') WHERE email = ?", [self.email]).fetchone()
                name = row[0] if row else None
                if name != seen and name in self.committed and name not in self.in_view:
                    self.in_view[name] = time.time()
                seen = name
            time.sleep(0.2)  # each look reads the table's metadata: more often would load the machine
        con.close()

    def watch_topic(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{time.time_ns()}", "log_level": 3,
                             "isolation.level": "read_committed", "auto.offset.reset": "latest"})  # fmt: skip
        consumer.subscribe(["lakemv.user_profile"])
        key = json.dumps({"email": self.email}, separators=(",", ":")).encode()
        while not self.stopping.is_set():
            message = consumer.poll(0.2)
            if message is None or message.error() or message.key() != key or message.value() is None:
                continue
            name = json.loads(message.value())["username"]
            if name in self.committed and name not in self.in_topic:
                self.in_topic[name] = time.time()
        consumer.close()

    def figures(self, warmup: int) -> dict[str, Any]:
        names = sorted(self.committed)[warmup:]
        result: dict[str, Any] = {"probes": len(names)}
        for label, seen in (("view", self.in_view), ("topic", self.in_topic)):
            delays = []
            for name in names:
                later = [t for n, t in seen.items() if n >= name]  # names sort in probe order
                if later:
                    delays.append(min(later) - self.committed[name])
            result[label] = {
                "seen": len(delays), "p50": percentile(delays, 0.5), "p95": percentile(delays, 0.95),
                "max": max(delays) if delays else None, "mean": sum(delays) / len(delays) if delays else None,
            }  # fmt: skip
        return result


def _duckdb_full(settings: LakeSettings, sources) -> float:  # noqa: ANN001
    from lakemv.core.planner.definitions import load_views

    sql = duckdb_sql(load_views(settings.view_dirs)["user_profile"].sql)
    started = time.perf_counter()
    con = lake_connection(settings, sources)
    try:
        con.execute(f"CREATE TEMP TABLE full_recompute AS {sql}")
    finally:
        con.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=1000, help="changes per second written to PostgreSQL")
    parser.add_argument("--seconds", type=int, default=90)
    parser.add_argument("--warmup", type=int, default=30, help="probes left out while the stream's JVM warms up")
    parser.add_argument("--stack-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "bench" / "results")
    args = parser.parse_args()
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="lakemv-realcdc-"))
    sources = load_sources(LakeSettings().sources_dirs)
    stack = Stack(StackConfig.load(args.stack_dir) if args.stack_dir else StackConfig(folder=root / "stack", tables=TABLES))
    owned = args.stack_dir is None
    with console.status("starting the stack..."):
        stack.up({n: sources[n] for n in TABLES})
    c = stack.config
    warehouse = root / "wh"
    settings = LakeSettings(warehouse=warehouse)
    con = psycopg2.connect(c.postgres_url)
    workload = PostgresWorkload(WorkloadConfig(users=args.users, seed=7), {n: sources[n] for n in TABLES})
    apply(con, workload.snapshot())
    email = "probe@example.net"  # a user the workload does not know, so never changes
    apply(con, [[("INSERT INTO users (id, email, username, registered_at) VALUES (999999999, %s, 'probe', now())", (email,))]])
    env = {**os.environ, "LAKEMV_SINKS": json.dumps({"user_profile": ["kafka"]}), "LAKEMV_KAFKA_TOPIC_PREFIX": c.topic_prefix}
    command = [LAKEMV, "--warehouse", str(warehouse), "ingest", "--kafka", c.bootstrap, "--trigger-seconds", "0.5"]
    log = open(root / "ingest.log", "w")  # noqa: SIM115 - open for the process's life
    ingest = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    probe = Probe(c.postgres_url, settings, c.bootstrap, email)
    try:
        with console.status("waiting for the snapshot to reach the view..."):
            while metadata_location(settings, VIEW_NAMESPACE, "user_profile") is None or not _has_rows(settings):
                time.sleep(1)
        watchers = [threading.Thread(target=probe.watch_view, daemon=True), threading.Thread(target=probe.watch_topic, daemon=True)]
        for w in watchers:
            w.start()
        changes = workload.transactions(args.rate * (args.seconds + 5))
        started = time.monotonic()
        written, number = 0, 0
        with console.status(f"writing {args.rate} changes/s for {args.seconds}s with a probe each second..."):
            while time.monotonic() - started < args.seconds:
                tick = time.monotonic()
                target = int((tick - started) * args.rate)
                while written < target:
                    statements = next(changes)
                    apply(con, [statements])
                    written += len(statements)
                if tick - started >= number:
                    probe.rename(number)
                    number += 1
                time.sleep(max(0.0, 0.02 - (time.monotonic() - tick)))
        wrote_seconds = time.monotonic() - started
        time.sleep(15)  # the last probes
        probe.stopping.set()
        full = _duckdb_full(settings, sources)
    finally:
        os.killpg(ingest.pid, signal.SIGTERM)
        ingest.wait(60)
        log.close()
        if owned:
            stack.down(purge=True)
    figures = probe.figures(args.warmup)
    result = {
        "machine": machine(), "users": args.users, "rate_target": args.rate, "rate_written": round(written / wrote_seconds),
        "seconds": args.seconds, "freshness": figures, "duckdb_full_recompute_seconds": round(full, 2),
    }  # fmt: skip
    out = args.out / f"realcdc-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    report = _report(result)
    (out / "report.md").write_text(report)
    console.print(report)
    console.print(f"results in {out}")


def _has_rows(settings: LakeSettings) -> bool:
    con = connect_duckdb(threads=1)
    try:
        location = metadata_location(settings, VIEW_NAMESPACE, "user_profile")
        return bool(con.execute(f"SELECT count(*) FROM iceberg_scan('{location}')").fetchone()[0])
    finally:
        con.close()


def _report(result: dict[str, Any]) -> str:
    f = result["freshness"]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    lines = [
        f"# Freshness of the real pipeline ({result['users']:,} users, {result['rate_written']:,} changes/s written)",
        "",
        "| from PostgreSQL commit to | probes seen | p50 | p95 | max |",
        "|---|---|---|---|---|",
        f"| the row in user_profile (DuckDB reads the Iceberg view) | {f['view']['seen']}/{f['probes']} | "
        f"{cell(f['view']['p50'])} | {cell(f['view']['p95'])} | {cell(f['view']['max'])} |",
        f"| the message in the data-product topic (read_committed) | {f['topic']['seen']}/{f['probes']} | "
        f"{cell(f['topic']['p50'])} | {cell(f['topic']['p95'])} | {cell(f['topic']['max'])} |",
        "",
        f"A DuckDB full recompute of user_profile over the same mirrors took {result['duckdb_full_recompute_seconds']} s: "
        "recomputing on a schedule cannot be fresher than that, plus the wait for the next run.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
