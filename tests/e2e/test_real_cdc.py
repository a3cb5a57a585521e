"""The real pipeline end to end: PostgreSQL → Debezium (Kafka Connect) → Kafka → lakemv → Kafka topics
and Delta tables, all real processes on loopback (`lakemv stack up`), the source database the oracle.

The GitHub workload runs as SQL: a snapshot, then inserts, updates of join columns, deletes,
primary-key updates and transactions spanning tables, then a burst of 10k changes. lakemv ingests
from Kafka as a stream, is killed mid-stream (SIGKILL, JVM and all) and restarted, and Kafka Connect
is restarted while changes flow. Once the last commit shows, everything must agree with PostgreSQL,
and each data product with its view, delivered exactly once.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import MIRROR_NAMESPACE
from lakemv.ops.stack import Stack, StackConfig
from lakemv.workload.github import WorkloadConfig
from lakemv.workload.postgres import PostgresWorkload, apply, load_state
from tests.e2e.cli import lakemv
from tests.prefectapi import latest
from tests.e2e.realcdc import (
    Ingest,
    canonical,
    delta_cdf_events,
    delta_rows,
    duckdb_delta_rows,
    feed_events,
    iceberg_rows,
    mirror_rows,
    postgres_rows,
    postgres_view,
    topic_events,
    view_rows,
)

TABLES = ("payment_info", "pull_requests", "repos", "stars", "users")
SINKS = {"user_profile": ["kafka", "delta"], "repo_summary": ["kafka"]}


pytestmark = pytest.mark.xdist_group("cdc_stack")  # every test on one worker: one stack started, not one per worker


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, sources) -> Iterator[Stack]:
    """PostgreSQL, Kafka and Kafka Connect + Debezium, started as `lakemv stack up` starts them."""
    folder = tmp_path_factory.mktemp("stack")
    running = Stack(StackConfig(folder=folder, tables=TABLES))
    try:
        running.up({n: sources[n] for n in TABLES})
        yield running
    finally:
        running.down(purge=True)


def _sentinel(con, number: int) -> str:  # noqa: ANN001
    """Commit one last, recognisable change: once it shows in the lake, every earlier commit does."""
    email = f"sentinel{number}@example.net"
    with con, con.cursor() as cur:
        cur.execute("INSERT INTO users (id, email, username, registered_at) VALUES (%s, %s, %s, now())",
                    (900_000_000 + number, email, f"sentinel{number}"))  # fmt: skip
    return email


def _arrived(settings: LakeSettings, email: str) -> bool:
    rows = iceberg_rows(settings, MIRROR_NAMESPACE, "users", "email", f"email = '{email}' AND NOT _lmv_deleted")
    return bool(rows)


def _produce_bad_records(bootstrap: str, topic: str) -> dict[str, str]:
    """Write what a broken producer might into a Debezium topic: not JSON, a wrong type, bytes that are
    not UTF-8. Returns each record as the dead-letter table keeps it, with its reason."""
    from confluent_kafka import Producer

    wrong_type = {"op": "c", "after": {"id": "seven", "email": "bad@example.com", "username": "bad", "registered_at": 1}, "source": {"lsn": 1}}
    bad = {
        b"{not json": ("{not json", "malformed JSON"),
        json.dumps(wrong_type).encode(): (json.dumps(wrong_type), "column 'id': expected BIGINT"),
        b'{"op": "c", "after": {"username": "caf\xe9"}}': ('{"op": "c", "after": {"username": "caf\\xe9"}}', "not valid UTF-8: byte 0xe9"),
    }
    producer = Producer({"bootstrap.servers": bootstrap})
    for raw in bad:
        producer.produce(topic, key=b'{"email":"bad@example.com"}', value=raw)
    producer.flush(10)
    return dict(bad.values())


def _toasted_changes(con) -> tuple[str, str]:  # noqa: ANN001
    """Descriptions long enough for PostgreSQL to store out of line (TOAST), then an update that leaves
    them unchanged and a rename (a primary-key change): Debezium sends its placeholder for the value
    in both (REPLICA IDENTITY DEFAULT). Returns the two repositories' owners."""
    with con, con.cursor() as cur:
        cur.execute("SELECT owner, name FROM repos ORDER BY owner, name LIMIT 2")
        (owner1, name1), (owner2, name2) = cur.fetchall()
        long_text = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 2000) i)"  # 64 KB that pglz cannot shrink
        cur.execute(f"UPDATE repos SET description = {long_text} WHERE (owner, name) IN ((%s, %s), (%s, %s))", (owner1, name1, owner2, name2))
    with con, con.cursor() as cur:
        cur.execute("UPDATE repos SET star_count = star_count + 1 WHERE (owner, name) IN ((%s, %s), (%s, %s))", (owner1, name1, owner2, name2))
    with con, con.cursor() as cur:
        cur.execute("UPDATE repos SET name = name || '~toast' WHERE owner = %s AND name = %s", (owner2, name2))
    return owner1, owner2


def _delivered(settings: LakeSettings) -> bool:
    """Every data product has delivered its view's whole change feed."""
    from lakemv.catalog.sinks import declared_sinks, sink_lags
    from lakemv.flows.context import Lake

    configured = settings.model_copy(update={"sinks": tuple((v, tuple(k)) for v, k in SINKS.items())})
    lags = sink_lags(configured, declared_sinks(configured, Lake(configured).plans.values()))
    return all(lag.pending == 0 and lag.error is None for lag in lags)


def _transactions_by_position(bootstrap: str, prefix: str) -> dict[int, str]:
    """Every data change Debezium sent: its LSN (lakemv's source position) -> its transaction (txId)."""
    from lakemv.core.cdc.transactions import transaction_key

    found: dict[int, str] = {}
    for table in TABLES:
        for events in topic_events(bootstrap, f"{prefix}.public.{table}").values():
            for event in events:
                payload = (event.get("payload") if isinstance(event, dict) else None) or {}
                block = payload.get("transaction")
                if block and isinstance(payload.get("source"), dict):
                    found[payload["source"]["lsn"]] = transaction_key(block["id"])
    return found


@pytest.mark.slow(240)
def test_postgres_debezium_kafka_to_views_and_data_products_exactly_once(stack: Stack, tmp_path: Path, sources):
    c = stack.config
    warehouse = tmp_path / "wh"
    env = {
        "LAKEMV_SINKS": json.dumps(SINKS), "LAKEMV_KAFKA_TOPIC_PREFIX": c.topic_prefix, "LAKEMV_KAFKA_BOOTSTRAP": c.bootstrap,
        # Batches of at most 8,000 records, units of 2,000: transactions straddle batches and units.
        "LAKEMV_MAX_EVENTS_PER_BATCH": "2000",
    }  # fmt: skip
    settings = LakeSettings(warehouse=warehouse, kafka_bootstrap=c.bootstrap)
    con = psycopg2.connect(c.postgres_url)
    workload = PostgresWorkload(WorkloadConfig(users=150, seed=15), {n: sources[n] for n in TABLES})
    apply(con, workload.snapshot())
    apply(con, workload.transactions(400))

    # lakemv crashes inside a data product's Kafka transaction (its messages sent, not committed) ...
    # The feeds table is new: its first append (the first batch's, which the sinks publish whole) is
    # sequence 1, so 2 is the first delivered snapshot by snapshot (the burst spans batches).
    ingest = Ingest(warehouse, c.bootstrap, {**env, "LAKEMV_CRASH_AT": "sink_produced@2"}).start()
    _sentinel(con, 1)
    apply(con, workload.transactions(5_000))  # a burst of 10k changes, in two halves
    code = ingest.wait_exit("the crash armed inside a data-product transaction")
    assert code == -9, f"ingest exited {code}, not by its armed crash:\n" + "\n".join(ingest.lines[-40:])
    earlier = ingest.lines
    # ... is SIGKILLed, JVM and all, after a batch of the burst ...
    ingest = Ingest(warehouse, c.bootstrap, env).start()
    ingest.wait_for("a batch of the burst", lambda: ingest.batches() > 0)
    ingest.kill()
    earlier += ingest.lines
    # ... and Kafka Connect is restarted while changes flow.
    ingest = Ingest(warehouse, c.bootstrap, env).start()
    apply(con, workload.transactions(2_500))
    stack.restart("connect")
    apply(con, workload.transactions(2_500))
    toasted = _toasted_changes(con)
    bad = _produce_bad_records(c.bootstrap, f"{c.topic_prefix}.public.users")
    last = _sentinel(con, 2)
    ingest.wait_for("the last commit", lambda: _arrived(settings, last), timeout=420)
    ingest.stop()  # as a user's Ctrl-C, maybe mid-unit; a run --once completes what it cut short
    stopped = {row["view"]: row for row in latest("cli-ingest-views")[0]}  # a stopped stream still reports its run
    # (each view's rows changed, by its keys or whole: a backlog one batch caught may be recomputed whole)
    assert all(stopped[view]["rows changed"] > 0 for view in SINKS), stopped
    drained = lakemv("--warehouse", str(warehouse), "ingest", "--kafka", c.bootstrap, "--once", env=env).stdout
    assert _delivered(settings)
    # the run's report says per source how far behind its topic it is: drained, nothing
    reported = {row["source"]: row for row in latest("cli-ingest-sources")[0]}
    assert {t: reported[t]["behind (records)"] for t in TABLES} == dict.fromkeys(TABLES, 0), reported
    log = "\n".join([*earlier, *ingest.lines, drained])

    # Debezium sent its placeholder for the unchanged long descriptions (the update and the rename's
    # create half); the lake kept the values, as the comparisons with PostgreSQL below prove.
    placeholders = [
        e for events in topic_events(c.bootstrap, f"{c.topic_prefix}.public.repos").values() for e in events
        if isinstance(e, dict) and "__debezium_unavailable_value" in json.dumps(e)
    ]  # fmt: skip
    assert {(e["payload"]["op"], e["payload"]["after"]["owner"]) for e in placeholders} >= {("u", toasted[0]), ("u", toasted[1]), ("c", toasted[1])}

    # Every mirror equals its PostgreSQL table.
    for name in TABLES:
        assert mirror_rows(settings, sources[name]) == postgres_rows(con, sources[name]), name

    # Each view equals PostgreSQL's own evaluation of it.
    for view in SINKS:
        lake = {k: canonical(v) for k, v in view_rows(settings, view).items()}
        truth = postgres_view(con, view)
        assert lake.keys() == truth.keys(), f"{view}: {len(lake)} rows in the lake, {len(truth)} in PostgreSQL"
        differing = [k for k in truth if lake[k] != truth[k]]
        assert not differing, f"{view}: {len(differing)} rows differ, e.g. {differing[0]}:\n lake {lake[differing[0]]}\n  pg  {truth[differing[0]]}"

    # Data products: every change of the feed exactly once, in order, per key; compacted = the view.
    for view in SINKS:
        feed = feed_events(settings, view)
        topic = topic_events(c.bootstrap, f"lakemv.{view}")
        assert topic == feed, f"{view}: the topic's messages per key are not the feed's changes exactly once"
        compacted = {k: events[-1] for k, events in topic.items() if events[-1] is not None}
        assert compacted == view_rows(settings, view)
    delta = str(settings.delta_root / "user_profile")
    assert delta_rows(delta, ("email",)) == view_rows(settings, "user_profile")  # read by delta-rs
    assert duckdb_delta_rows(delta) == len(view_rows(settings, "user_profile"))
    assert delta_cdf_events(delta, ("email",)) == feed_events(settings, "user_profile")

    # Whole source transactions only: the rows a transaction left in the mirrors came in one batch.
    positions = _transactions_by_position(c.bootstrap, c.topic_prefix)
    batches: dict[str, set[int]] = defaultdict(set)
    for name in TABLES:
        for row in iceberg_rows(settings, MIRROR_NAMESPACE, name, "_lmv_position, _lmv_batch_id"):
            if row["_lmv_position"] in positions:
                batches[positions[row["_lmv_position"]]].add(row["_lmv_batch_id"])
    split = {t: b for t, b in batches.items() if len(b) > 1}
    assert not split, f"{len(split)} source transactions were applied across batches, e.g. {next(iter(split.items()))}"
    assert sum(1 for b in batches.values() if b) > 1000
    assert re.search(r"holding \d+ changes of \d+ source transactions", " ".join(log.split())), "no batch ended mid-transaction"

    # Bad records are dead letters with their reasons and where they came from; tombstones are counted.
    letters = {r["raw"]: r for r in iceberg_rows(settings, "lakemv", "dead_letters", "raw, source_file, source_table, reason")}
    for raw, reason in bad.items():
        assert raw in letters, f"no dead letter for {raw!r}"
        assert reason in letters[raw]["reason"] and letters[raw]["source_file"].startswith(f"kafka:/users/{c.topic_prefix}.public.users@0:")
    assert re.search(r"\d+ skipped \(\d+ tombstone \(null value\)\)", " ".join(log.split())), log[-2000:]
    assert "NullPointerException" not in log and "\tat org." not in log, "a Java stack trace reached the user"
    lines = [json.loads(line) for line in lakemv("--warehouse", str(warehouse), "status", "--format", "json", env=env).stdout.splitlines()]
    stream = [line for line in lines if line["kind"] == "stream"]
    assert stream and stream[0]["mode"] == "whole transactions", stream
    lags = {line["sink"]: line for line in lines if line["kind"] == "sink"}
    assert set(lags) == {"lakemv.lake.user_profile.kafka", "lakemv.lake.user_profile.delta", "lakemv.lake.repo_summary.kafka"}
    assert all(s["pending"] == 0 for s in lags.values()), lags
    # Operable: the stream's consumed offsets against the topics' ends say it is caught up, and behind
    # once Debezium sends more.
    assert stream[0]["records_behind"] == 0 and stream[0]["progress"] == "caught up", stream
    apply(con, workload.transactions(20))
    deadline = time.monotonic() + 60
    while True:
        status = [json.loads(line) for line in lakemv("--warehouse", str(warehouse), "status", "--format", "json", env=env).stdout.splitlines()]
        row = next(line for line in status if line["kind"] == "stream")
        if row["records_behind"] or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert row["records_behind"] > 0 and row["progress"] == f"{row['records_behind']:,} records behind", row
    con.close()


def test_stack_commands_report_and_point_lakemv_at_the_stack(stack: Stack):
    folder = str(stack.folder)
    status = lakemv("stack", "status", "--dir", folder)
    for component in ("postgres", "kafka", "connect"):
        assert component in status.stdout
    assert status.stdout.count("running") >= 3 and "RUNNING" in status.stdout
    env = lakemv("stack", "env", "--dir", folder).stdout
    assert f"export LAKEMV_KAFKA_BOOTSTRAP={stack.config.bootstrap}" in env
    # libpq's variables reach the stack's database, as a user's psql would after `eval "$(lakemv stack env)"`
    exported = dict(line.removeprefix("export ").split("=", 1) for line in env.splitlines() if line.startswith("export "))
    assert f"# PostgreSQL: {stack.config.postgres_url}" in env
    with psycopg2.connect(host=exported["PGHOST"], port=exported["PGPORT"], dbname=exported["PGDATABASE"], user=exported["PGUSER"]) as con:
        with con.cursor() as cur:
            cur.execute("SELECT current_database(), current_user, to_regclass('public.users') IS NOT NULL")
            assert cur.fetchone() == (stack.config.database, exported["PGUSER"], True)
    # everything the stack runs lives in its folder: PostgreSQL's data too (as root, through an ACL entry)
    assert (stack.folder / "postgres" / "data" / "PG_VERSION").exists()
    missing = lakemv("stack", "status", "--dir", folder + "-nowhere", check=False)
    assert missing.returncode == 1 and "lakemv stack up" in missing.stderr and missing.stderr.startswith("error: no stack in")
    wrong = lakemv("ingest", "--kafka", "not an address", "--once", check=False)
    assert wrong.returncode == 1 and "expected HOST:PORT" in wrong.stderr and "Traceback" not in wrong.stderr


def _produce_events(bootstrap: str, topic: str, events: list[dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for event in events:
        producer.produce(topic, value=json.dumps(event).encode(), key=event["view_id"].encode())
    assert producer.flush(30) == 0


def _view(view_id: str, owner: str, viewer: str, hh_mm: str, **extra: object) -> dict:
    return {"view_id": view_id, "repo_owner": owner, "repo_name": "lake", "viewer": viewer, "viewed_at": f"2026-11-24T{hh_mm}:00Z", **extra}


def test_event_stream_from_kafka_to_a_windowed_view(stack: Stack, tmp_path: Path):
    """The shipped example (catalog/sources/events, views/events) fed from a Kafka topic of plain JSON
    events through the CLI: lateness, redelivery and final windows, then DuckDB's verify."""
    c = stack.config
    warehouse = tmp_path / "wh"
    root = Path(__file__).resolve().parents[2]
    env = {  # as the README enables the examples; no Debezium topics under this prefix: the tables stay empty
        "LAKEMV_SOURCES_DIRS": json.dumps([str(root / "catalog/sources"), str(root / "catalog/sources/events")]),
        "LAKEMV_EXTRA_VIEWS_DIR": str(root / "views/events"),
        "LAKEMV_KAFKA_TOPIC_PREFIX": "no-cdc-here",
    }
    settings = LakeSettings(warehouse=warehouse)
    ingest = ("--warehouse", str(warehouse), "ingest", "--kafka", c.bootstrap, "--once")
    # An event's own `transaction` field is not Debezium's: the event passes the transaction gate.
    _produce_events(c.bootstrap, "page_views", [
        _view("e1", "ann", "bob", "10:05"), _view("e2", "ann", "cy", "10:50", transaction={"id": "t-9"}),
        _view("e3", "bob", "ann", "10:20"),
    ])  # fmt: skip
    lakemv(*ingest, env=env)
    # the watermark is 10:40: 10:35 is late; e2 again is a redelivery; 11:20 closes the 10:00 hour
    _produce_events(c.bootstrap, "page_views", [
        _view("e4", "ann", "dee", "10:35"), _view("e2", "ann", "cy", "10:50"), _view("e5", "ann", "bob", "11:20"),
    ])  # fmt: skip
    lakemv(*ingest, env=env)
    rows = iceberg_rows(settings, "views", "page_views_hourly", "repo_owner, epoch_us(hour) // 3600000000 AS hour, views, viewers, window_final")
    hour = 1_795_514_400_000_000 // 3_600_000_000  # 2026-11-24T10:00:00Z
    assert sorted((r["repo_owner"], r["hour"] - hour, r["views"], r["viewers"], r["window_final"]) for r in rows) == [
        ("ann", 0, 2, 2, True), ("ann", 1, 1, 1, False), ("bob", 0, 1, 1, True),
    ]  # fmt: skip
    letters = iceberg_rows(settings, "lakemv", "dead_letters", "source_table, source_file, reason")
    assert [l["source_table"] for l in letters] == ["page_views"]
    assert letters[0]["reason"].startswith("late event: viewed_at 2026-11-24T10:35:00Z is older than the watermark 2026-11-24T10:40:00Z")
    assert re.fullmatch(r"kafka:/page_views/page_views@\d+:\d+", letters[0]["source_file"])
    verified = lakemv("--warehouse", str(warehouse), "verify", "page_views_hourly", env=env)
    assert "page_views_hourly" in verified.stdout and "Traceback" not in verified.stderr


def _incremental_reads(bootstrap: str, topic: str) -> int:
    """Reads of an incremental snapshot (no LSN, `source.snapshot: incremental`) in a topic so far."""
    return sum(
        1 for events in topic_events(bootstrap, topic).values() for e in events
        if isinstance(e, dict) and (e.get("payload") or {}).get("source", {}).get("snapshot") == "incremental"
    )  # fmt: skip


@pytest.mark.slow(65)
def test_debezium_as_postgresql_really_sends_it(stack: Stack, tmp_path: Path, sources):
    """What Debezium's PostgreSQL connector sends besides plain changes, on the real stack: a column
    added, retyped and dropped on a live table, a TRUNCATE, a logical decoding message, heartbeats,
    REPLICA IDENTITY FULL, and an incremental snapshot (signal table) while changes flow. The lake
    equals PostgreSQL after each of them; nothing becomes a dead letter."""
    c = stack.config
    warehouse = tmp_path / "wh"
    env = {"LAKEMV_KAFKA_TOPIC_PREFIX": c.topic_prefix, "LAKEMV_KAFKA_BOOTSTRAP": c.bootstrap}
    settings = LakeSettings(warehouse=warehouse, kafka_bootstrap=c.bootstrap)
    con = psycopg2.connect(c.postgres_url)
    workload = PostgresWorkload(WorkloadConfig(users=80, seed=29), {n: sources[n] for n in TABLES})
    with con.cursor() as cur:
        cur.execute("SELECT count(*) FROM users")
        empty = cur.fetchone()[0] == 0
    if empty:  # this test may run first on its stack
        apply(con, workload.snapshot())
    else:
        load_state(con, workload)
    apply(con, workload.transactions(100))
    lakemv("--warehouse", str(warehouse), "ingest", "--kafka", c.bootstrap, "--once", env=env)

    with con, con.cursor() as cur:
        cur.execute("SELECT pg_logical_emit_message(true, 'lakemv-test', 'hello')")  # to <prefix>.message: not lakemv's
        cur.execute("ALTER TABLE users ADD COLUMN nickname text")  # a new column on a live table
        cur.execute("UPDATE users SET nickname = 'nick-' || username WHERE email IN (SELECT email FROM users ORDER BY email LIMIT 5)")
        cur.execute("ALTER TABLE repos ALTER COLUMN fork_count TYPE integer")  # retyped: int32 on the wire now
        cur.execute("UPDATE repos SET fork_count = fork_count + 1 WHERE (owner, name) IN (SELECT owner, name FROM repos ORDER BY 1, 2 LIMIT 5)")
        cur.execute("ALTER TABLE stars ADD COLUMN scratch text")
        cur.execute("UPDATE stars SET scratch = 'x' WHERE username IN (SELECT username FROM stars ORDER BY 1 LIMIT 3)")
        cur.execute("ALTER TABLE stars DROP COLUMN scratch")  # dropped again: later images lack it
        cur.execute("UPDATE stars SET created_at = created_at + interval '1 second' WHERE username IN (SELECT username FROM stars ORDER BY 1 LIMIT 3)")
        cur.execute("CREATE TEMP TABLE kept AS SELECT * FROM payment_info ORDER BY id LIMIT 3")
        cur.execute("TRUNCATE payment_info")  # op "t": every row goes
        cur.execute("INSERT INTO payment_info SELECT * FROM kept")  # and three come back after it
        cur.execute("ALTER TABLE repos REPLICA IDENTITY FULL")
        long_text = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 1000) i)"
        cur.execute(f"UPDATE repos SET description = {long_text} WHERE (owner, name) IN (SELECT owner, name FROM repos ORDER BY 1, 2 LIMIT 1)")
    with con, con.cursor() as cur:  # unchanged TOASTed value under FULL: Debezium sends it whole
        cur.execute("UPDATE repos SET star_count = star_count + 1 WHERE (owner, name) IN (SELECT owner, name FROM repos ORDER BY 1, 2 LIMIT 1)")
    # An incremental snapshot of repos, started by a signal, while changes to repos keep coming.
    with con, con.cursor() as cur:
        cur.execute("INSERT INTO debezium_signal (id, type, data) VALUES ('lakemv-test', 'execute-snapshot', "
                    "'{\"data-collections\": [\"public.repos\"], \"type\": \"incremental\"}')")  # fmt: skip
    load_state(con, workload)
    deadline = time.monotonic() + 90
    with con.cursor() as cur:
        cur.execute("SELECT count(*) FROM repos")
        repos = cur.fetchone()[0]
    while _incremental_reads(c.bootstrap, f"{c.topic_prefix}.public.repos") < repos // 2:
        assert time.monotonic() < deadline, "the incremental snapshot did not arrive"
        with con, con.cursor() as cur:
            cur.execute("UPDATE repos SET star_count = star_count + 1 WHERE (owner, name) IN (SELECT owner, name FROM repos ORDER BY random() LIMIT 3)")
        time.sleep(0.5)
    last = _sentinel(con, 3)
    deadline = time.monotonic() + 60
    ingested = ""
    while not _arrived(settings, last):
        assert time.monotonic() < deadline, f"the sentinel did not arrive:\n{ingested[-3000:]}"
        ingested += lakemv("--warehouse", str(warehouse), "ingest", "--kafka", c.bootstrap, "--once", env=env).stdout

    for name in TABLES:
        assert mirror_rows(settings, sources[name]) == postgres_rows(con, sources[name]), name
    for view in ("user_profile", "repo_summary"):
        assert {k: canonical(v) for k, v in view_rows(settings, view).items()} == postgres_view(con, view), view
    # the new column arrived with its values; the truncate emptied the mirror before the rows came back
    with con.cursor() as cur:
        cur.execute("SELECT email, nickname FROM users WHERE nickname IS NOT NULL")
        nicknames = dict(cur.fetchall())
    lake = {r["email"]: r["nickname"] for r in iceberg_rows(settings, MIRROR_NAMESPACE, "users", "email, nickname", "nickname IS NOT NULL")}
    assert lake == nicknames and len(lake) == 5
    assert "new column `nickname` (string) added to the mirror" in " ".join(ingested.split())
    assert _incremental_reads(c.bootstrap, f"{c.topic_prefix}.public.repos") >= repos // 2
    reasons = [r["reason"] for r in iceberg_rows(settings, "lakemv", "dead_letters", "reason")]
    assert not [r for r in reasons if "unknown op" in r or "unavailable" in r or "position" in r], reasons
    con.close()


# The same table captured by three connectors, each spelling numbers and times its own way.
VARIANTS = {
    "measures_string": {"decimal.handling.mode": "string", "time.precision.mode": "connect"},
    "measures_double": {"decimal.handling.mode": "double", "time.precision.mode": "adaptive_time_microseconds"},
    "measures_iso": {"decimal.handling.mode": "precise", "time.precision.mode": "isostring"},
}
MEASURES_DDL = "(id bigint PRIMARY KEY, amount numeric(12,2), day date, at time(6), stamp timestamp(6), moment timestamptz(6))"
MEASURES_TOML = """name = "{name}"
primary_key = ["id"]
columns = [
  {{ name = "id", type = "bigint" }},
  {{ name = "amount", type = "decimal(12,2)" }},
  {{ name = "day", type = "date" }},
  {{ name = "at", type = "time" }},
  {{ name = "stamp", type = "timestamp" }},
  {{ name = "moment", type = "timestamp" }},
]
"""
MEASURES_ROWS = [
    (1, "1234567890.12", "2024-01-15", "10:30:00.123456", "2024-01-15 10:30:00.123456", "2024-01-15 10:30:00.123456+02"),
    (2, "-0.05", "1969-12-31", "00:00:00", "1969-12-31 23:59:59.5", "1970-01-01 00:00:00+00"),
    (3, None, None, None, None, None),
]


def _register(stack: Stack, name: str, table: str, modes: dict[str, str]) -> None:
    """Register one more Debezium connector on the stack's Connect worker (its REST API)."""
    import urllib.request

    config = {k: v for k, v in stack.connector_config().items() if k != "signal.data.collection"}
    # Its own server name (two connectors of one name collide in Connect), its topic renamed into the stack's prefix.
    config.update({"topic.prefix": name, "slot.name": name, "publication.name": name, "table.include.list": f"public.{table}",
                   "provide.transaction.metadata": "false", "transforms": "route",
                   "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
                   "transforms.route.regex": rf"{name}\.public\.(.*)", "transforms.route.replacement": f"{stack.config.topic_prefix}.public.$1",
                   **modes})  # fmt: skip
    request = urllib.request.Request(
        f"{stack.config.connect_url}/connectors", json.dumps({"name": name, "config": config}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    urllib.request.urlopen(request, timeout=30).close()


def _unregister(stack: Stack, name: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{stack.config.connect_url}/connectors/{name}", method="DELETE"), timeout=30).close()


def _events(bootstrap: str, topic: str) -> int:
    return sum(1 for events in topic_events(bootstrap, topic).values() for e in events if e is not None)


def _expected_measures(con, table: str, millis: bool) -> list[tuple]:  # noqa: ANN001 - psycopg2
    """PostgreSQL's rows as the mirror should hold them: times as text, timestamps as epoch micros
    (time.precision.mode=connect carries a time and a timestamp in milliseconds: the rest is not sent;
    a timestamptz is ISO text in every mode)."""
    cut = "date_trunc('milliseconds', {})" if millis else "{}"
    with con.cursor() as cur:
        cur.execute(
            f"SELECT id, amount::text, day::text, to_char({cut.format('at')}, 'HH24:MI:SS.US'), "
            f"(extract(epoch FROM {cut.format('stamp')}) * 1000000)::bigint, (extract(epoch FROM moment) * 1000000)::bigint "
            f"FROM public.{table}"
        )
        return sorted(cur.fetchall())


@pytest.mark.slow(120)
def test_decimal_and_time_precision_modes_arrive_as_the_same_values(stack: Stack, tmp_path: Path):
    """decimal.handling.mode (precise, string, double) and time.precision.mode (adaptive,
    adaptive_time_microseconds, connect, isostring) as real connectors send them: a snapshot, then an
    insert, an update and a delete, all read back from the mirrors equal to PostgreSQL."""
    c = stack.config
    declared = tmp_path / "sources"
    declared.mkdir()
    (tmp_path / "views").mkdir()
    con = psycopg2.connect(c.postgres_url)
    with con, con.cursor() as cur:
        for table in VARIANTS:
            (declared / f"{table}.toml").write_text(MEASURES_TOML.format(name=table))
            cur.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} {MEASURES_DDL}")
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s)", MEASURES_ROWS)
    names = [f"lakemv_{table}" for table in VARIANTS]
    for name, (table, modes) in zip(names, VARIANTS.items(), strict=True):
        _register(stack, name, table, modes)
    try:
        deadline = time.monotonic() + 90
        while min(_events(c.bootstrap, f"{c.topic_prefix}.public.{t}") for t in VARIANTS) < 3:
            assert time.monotonic() < deadline, "the connectors' snapshots did not arrive"
            time.sleep(1)
        with con, con.cursor() as cur:  # streamed changes, after the snapshot
            for table in VARIANTS:
                cur.execute(f"INSERT INTO {table} VALUES (4, 99.99, '2100-02-28', '23:59:59.999999', "
                            "'2100-02-28 23:59:59.999999', '2100-02-28 23:59:59.999999-08')")  # fmt: skip
                cur.execute(f"UPDATE {table} SET amount = amount + 0.01, at = '12:00:00.000001', moment = moment + interval '1 microsecond' WHERE id = 1")
                cur.execute(f"DELETE FROM {table} WHERE id = 2")
        deadline = time.monotonic() + 90
        while min(_events(c.bootstrap, f"{c.topic_prefix}.public.{t}") for t in VARIANTS) < 6:  # 3 read, insert, update, delete
            assert time.monotonic() < deadline, "the streamed changes did not arrive"
            time.sleep(1)
    finally:
        for name in names:
            _unregister(stack, name)
    warehouse = tmp_path / "wh"
    env = {"LAKEMV_KAFKA_TOPIC_PREFIX": c.topic_prefix, "LAKEMV_SOURCES_DIRS": str(declared), "LAKEMV_VIEWS_DIR": str(tmp_path / "views"),
           "LAKEMV_KAFKA_TRANSACTIONS": "off"}  # fmt: skip
    lakemv("--warehouse", str(warehouse), "ingest", "--kafka", c.bootstrap, "--once", env=env)
    settings = LakeSettings(warehouse=warehouse)
    select = 'id, CAST(amount AS VARCHAR), CAST("day" AS VARCHAR), "at", epoch_us(stamp), epoch_us(moment)'
    for table, modes in VARIANTS.items():
        lake = sorted(tuple(r.values()) for r in iceberg_rows(settings, MIRROR_NAMESPACE, table, select, "NOT _lmv_deleted"))
        expected = _expected_measures(con, table, millis=modes["time.precision.mode"] == "connect")
        assert lake == expected, f"{table} ({modes})"
    letters = iceberg_rows(settings, "lakemv", "dead_letters", "reason")
    assert not letters, letters
    with con, con.cursor() as cur:
        for name in names:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active", (name,))
    con.close()
