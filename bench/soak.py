"""Soak: an hour (or more) of continuous ingest at a steady rate under `lakemv serve`'s schedules.

    .venv/bin/python -m bench.soak --minutes 60 --rate 50 --users 20000

A feeder writes the GitHub workload's changes into a landing folder at a steady rate (a file set every
`--every` seconds) while `lakemv serve --continuous` runs the maintain stream and its scheduled compact
(snapshot expiry by hours) and verify flows, as production would. Every minute it records, from the
lake itself: the batches committed (count, median and longest seconds, from the ledger), each table's
current metadata file size and snapshot count, and the files in the warehouse by kind. What must hold
over a long run: batch time, metadata size and file counts stay flat. Results:
bench/results/soak-<time>/soak.json and soak.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.tables import MIRROR_NAMESPACE, OPS_NAMESPACE, VIEW_NAMESPACE

LAKEMV = str(PROJECT_ROOT / ".venv" / "bin" / "lakemv")
RESULTS = PROJECT_ROOT / "bench" / "results"


def feed(landing: Path, users: int, rate: float, every: float, stop: threading.Event, fed: list[int]) -> None:
    """Write the snapshot, then `rate` changes per second, a file set every `every` seconds, until `stop`."""
    from lakemv.catalog.declarations import load_sources
    from lakemv.workload.debezium import connect_schema, write_landing_files
    from lakemv.workload.github import GitHubWorkload, WorkloadConfig

    sources = load_sources(LakeSettings().sources_dirs)
    workload = GitHubWorkload(WorkloadConfig(users=users, seed=11, rounds=1), sources)
    schemas = {name: connect_schema(source) for name, source in workload.sources.items()}
    layout = random.Random(12)
    number = 0
    for events in workload.rounds():  # round 0: the snapshot
        for table, items in events.items():
            write_landing_files(landing, table, items, schemas[table], layout, "s000000", files=1 + len(items) // 20000)
    started = time.monotonic()
    while not stop.is_set():
        number += 1
        events = workload.change_round(max(1, round(rate * every)))
        for table, items in events.items():
            write_landing_files(landing, table, items, schemas[table], layout, f"s{number:06d}")
        fed.append(sum(len(v) for v in events.values()))
        stop.wait(max(0.0, started + number * every - time.monotonic()))


def _metadata(settings: LakeSettings) -> dict[str, dict]:
    """Per table: its current metadata file's bytes and snapshot count."""
    from lakemv.catalog.lake import pyiceberg_catalog

    catalog = pyiceberg_catalog(settings)
    found = {}
    for namespace in (MIRROR_NAMESPACE, VIEW_NAMESPACE, OPS_NAMESPACE):
        for identifier in catalog.list_tables(namespace):
            location = catalog.load_table(identifier).metadata_location
            path = Path(location.removeprefix("file:"))
            document = json.loads(path.read_text())
            found[".".join(identifier)] = {"metadata_bytes": path.stat().st_size, "snapshots": len(document.get("snapshots", []))}
    return found


def _files(warehouse: Path) -> Counter[str]:
    """Files in the lake's table folders by kind (data and delete files, metadata, manifests)."""
    kinds: Counter[str] = Counter()
    for namespace in (MIRROR_NAMESPACE, VIEW_NAMESPACE, OPS_NAMESPACE):
        for path in (warehouse / namespace).rglob("*"):
            if not path.is_file():
                continue
            if path.suffix == ".parquet":
                kinds["data and delete files"] += 1
            elif path.name.endswith(".metadata.json"):
                kinds["metadata files"] += 1
            elif path.suffix == ".avro":
                kinds["manifests and lists"] += 1
            elif path.suffix == ".crc":
                kinds["checksums"] += 1  # Hadoop's local file system writes one beside each file
            else:
                kinds["other"] += 1
            kinds["bytes"] += path.stat().st_size
    return kinds


def _batches(settings: LakeSettings, since: datetime) -> list[tuple[float, int]]:
    """(seconds, events) of the batches committed since `since`, from the ledger."""
    from lakemv.catalog.tables import LEDGER
    from lakemv.duck.query import connect_duckdb, metadata_location

    location = metadata_location(settings, OPS_NAMESPACE, LEDGER)
    if location is None:
        return []
    con = connect_duckdb(threads=1)
    try:
        rows = con.execute(
            f"SELECT seconds, events FROM iceberg_scan('{location}') WHERE finished_at > ?", [since.replace(tzinfo=None)]
        ).fetchall()
    finally:
        con.close()
    return [(float(s), int(e)) for s, e in rows]


def sample(settings: LakeSettings, since: datetime) -> dict:
    batches = _batches(settings, since)
    metadata = _metadata(settings)
    seconds = [s for s, _ in batches]
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "batches": len(batches),
        "events": sum(e for _, e in batches),
        "batch_p50_s": round(statistics.median(seconds), 3) if seconds else None,
        "batch_max_s": round(max(seconds), 3) if seconds else None,
        "metadata_bytes": sum(m["metadata_bytes"] for m in metadata.values()),
        "snapshots": sum(m["snapshots"] for m in metadata.values()),
        "largest_metadata": max(metadata.items(), key=lambda kv: kv[1]["metadata_bytes"])[0] if metadata else None,
        "files": dict(_files(Path(settings.warehouse))),
    }


def compaction_summary(log: str) -> list[str]:
    """What the compact runs said in serve's log: tables rewritten, rewrites deferred, the stream's waits."""
    tables = re.findall(r"(\w+\.\w+): data files (\d+) -> (\d+), delete files (\d+) -> (\d+)", log, re.M)
    deferred = len(re.findall(r"deferred to the next run", log))
    waits = [float(w) for w in re.findall(r"waited ([0-9.]+)s for compaction", log)]
    shrank = sum(1 for _, a, b, c, d in tables if int(b) + int(d) < int(a) + int(c))
    return [
        f"- compaction: {len(tables)} table runs, {shrank} shrank their files, {deferred} rewrites deferred (lost their race)",
        f"- the stream waited for a compaction turn {len(waits)} times: median {statistics.median(waits) if waits else 0:.1f} s, "
        f"longest {max(waits, default=0):.1f} s",
    ]


def report(samples: list[dict], args: argparse.Namespace, verified: list[str], compaction: list[str]) -> str:
    lines = [
        f"# Soak: {args.minutes} minutes at {args.rate} changes/s ({args.users:,} users), `serve --continuous`, "
        f"compact every {args.compact_every:.0f} s, verify every {args.verify_every:.0f} s",
        "",
        "| minute | batches | events | batch p50 s | batch max s | metadata KiB (all tables) | snapshots | data+delete files | metadata files | manifests | table MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for minute, s in enumerate(samples, 1):
        f = s["files"]
        lines.append(
            f"| {minute} | {s['batches']} | {s['events']} | {s['batch_p50_s']} | {s['batch_max_s']} | {s['metadata_bytes'] / 1024:,.0f} | "
            f"{s['snapshots']} | {f.get('data and delete files', 0)} | {f.get('metadata files', 0)} | {f.get('manifests and lists', 0)} | "
            f"{f.get('bytes', 0) / 2**20:,.1f} |"
        )
    lines += ["", "Compaction:", *compaction]
    lines += ["", "Verify runs (DuckDB re-derives every view):", *(f"- {v}" for v in verified or ["none finished"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=50.0, help="changes per second")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between landing file sets")
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--compact-every", type=float, default=600.0)
    parser.add_argument("--verify-every", type=float, default=900.0)
    parser.add_argument("--retention-hours", type=float, default=None, help="(the compact flow's default when unset)")
    args = parser.parse_args()

    out = RESULTS / f"soak-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    work = out / "work"
    landing, warehouse = work / "landing", work / "warehouse"
    landing.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEMV_", "PREFECT_API_URL"))}
    env["LAKEMV_WAREHOUSE"] = str(warehouse)
    settings = LakeSettings(warehouse=str(warehouse))
    stop, fed = threading.Event(), []
    feeder = threading.Thread(target=feed, args=(landing, args.users, args.rate, args.every, stop, fed), daemon=True)
    feeder.start()
    log = (out / "serve.log").open("w")
    serve = subprocess.Popen(
        [LAKEMV, "serve", "--landing", str(landing), "--continuous", "--ingest-every", "60",
         "--compact-every", str(args.compact_every), "--verify-every", str(args.verify_every),
         *(["--retention-hours", str(args.retention_hours)] if args.retention_hours else [])],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    samples: list[dict] = []
    started = time.monotonic()
    since = datetime.now(UTC)
    try:
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(60)
            if serve.poll() is not None:
                raise SystemExit(f"serve exited with {serve.returncode}: see {out / 'serve.log'}")
            now = datetime.now(UTC)
            try:
                samples.append(sample(settings, since))
            except Exception as exc:  # noqa: BLE001 - a table mid-commit: the next minute tells
                samples.append({"at": now.isoformat(timespec="seconds"), "error": str(exc)[:200], "batches": 0, "events": 0,
                                "batch_p50_s": None, "batch_max_s": None, "metadata_bytes": 0, "snapshots": 0, "files": {}})  # fmt: skip
            since = now
            print(json.dumps(samples[-1]), flush=True)
    finally:
        stop.set()
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        log.close()
    text = (out / "serve.log").read_text()
    verified = [" ".join(line.split()) for line in text.splitlines() if "mismatching" in line]
    compaction = compaction_summary(text)
    (out / "soak.json").write_text(json.dumps(
        {"args": vars(args), "fed_changes": sum(fed), "samples": samples, "verified": verified, "compaction": compaction}, indent=2
    ))
    (out / "soak.md").write_text(report(samples, args, verified, compaction))
    print(f"wrote {out / 'soak.md'}")


if __name__ == "__main__":
    main()
