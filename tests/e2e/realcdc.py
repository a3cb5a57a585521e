"""Helpers of the real-CDC tests: the running `lakemv ingest --kafka`, PostgreSQL's own view answers,
and readers of the lake, the data-product topics and the Delta tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import MIRROR_NAMESPACE, VIEW_NAMESPACE
from lakemv.core.values import plain
from lakemv.duck.query import connect_duckdb, lake_connection, metadata_location
from lakemv.workload.postgres import _from_postgres
from tests.conftest import LAKEMV

Row = dict[str, Any]


class Ingest:
    """`lakemv ingest --kafka` running as a stream in its own process group; its output is kept."""

    def __init__(self, warehouse: Path, bootstrap: str, env: Mapping[str, str]):
        self.args = [LAKEMV, "--warehouse", str(warehouse), "ingest", "--kafka", bootstrap, "--trigger-seconds", "1"]
        self.env = {**os.environ, "LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "2g",
                    "LAKEMV_SHUFFLE_PARTITIONS": "2", **env}  # fmt: skip
        self.lines: list[str] = []
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> Ingest:
        self.process = subprocess.Popen(
            self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        return self

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

    def batches(self) -> int:
        return sum(1 for line in self.lines if line.startswith("batch "))

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"ingest exited {self.process.returncode} while waiting for {what}:\n" + "\n".join(self.lines[-60:]))
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}; ingest said:\n" + "\n".join(self.lines[-60:]))

    def wait_exit(self, what: str, timeout: float = 240) -> int:
        """Wait for the process to end by itself (an armed crash point kills its own group)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"timed out waiting for {what}; ingest said:\n" + "\n".join(self.lines[-60:])) from None

    def kill(self) -> None:
        """SIGKILL the whole process group at once: lakemv and its JVM, mid-stream."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, as a user's Ctrl-C: the stream stops cleanly."""
        assert self.process is not None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


# ---- the lake, read with DuckDB -----------------------------------------------------------------------
def iceberg_rows(settings: LakeSettings, namespace: str, table: str, select: str = "*", where: str = "true") -> list[Row]:
    location = metadata_location(settings, namespace, table)
    if location is None:
        return []
    con = connect_duckdb(threads=1)
    try:
        relation = con.execute(f"SELECT {select} FROM iceberg_scan('{location}') WHERE {where}")
        names = [d[0] for d in relation.description]
        return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]
    finally:
        con.close()


def mirror_rows(settings: LakeSettings, source: SourceTable) -> list[tuple]:
    """The live rows of a mirror, timestamps as epoch micros, sorted."""
    columns = ", ".join(f'"{c}"' for c in source.column_names)
    rows = iceberg_rows(settings, MIRROR_NAMESPACE, source.name, columns, "NOT _lmv_deleted")
    return sorted(tuple(_from_postgres(c, r[c.name]) for c in source.columns) for r in rows)


def postgres_rows(con, source: SourceTable) -> list[tuple]:  # noqa: ANN001 - psycopg2
    """A source table in PostgreSQL, as `mirror_rows` gives a mirror."""
    with con.cursor() as cur:
        cur.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in source.column_names)} FROM public.{source.name}")
        return sorted(tuple(_from_postgres(c, v) for c, v in zip(source.columns, r, strict=True)) for r in cur.fetchall())


def view_rows(settings: LakeSettings, view: str) -> dict[str, Row]:
    """A view's rows as the data products render them (JSON-ready), by their key as JSON."""
    return {k: v for k, v in ((_key_json(settings, view, r), plain(r)) for r in iceberg_rows(settings, VIEW_NAMESPACE, view))}


_KEYS = {"user_profile": ("email",), "repo_summary": ("owner", "name")}


def _key_json(settings: LakeSettings, view: str, row: Row) -> str:
    return json.dumps({k: plain(row[k]) for k in _KEYS[view]}, ensure_ascii=False, separators=(",", ":"))


def feed_events(settings: LakeSettings, view: str) -> dict[str, list[Row | None]]:
    """The change feed, per key in commit order: the upserted row, or None for a delete."""
    con = lake_connection(settings, {})  # the view's rows of the one feeds table, as lakemv's DuckDB reads them
    try:
        relation = con.execute(f'SELECT * FROM "{view}__changes"')
        names = [d[0] for d in relation.description]
        rows = [dict(zip(names, row, strict=True)) for row in relation.fetchall()]
    finally:
        con.close()
    rows.sort(key=lambda r: (r["changed_at"], r["batch_id"] if r["batch_id"] is not None else -1))
    events: dict[str, list[Row | None]] = defaultdict(list)
    for r in rows:
        events[_key_json(settings, view, r)].append(plain(r["row"]) if r["op"] == "upsert" else None)
    return dict(events)


# ---- the data products --------------------------------------------------------------------------------
def topic_events(bootstrap: str, topic: str) -> dict[str, list[Row | None]]:
    """Every message a read_committed consumer sees in `topic`, per key in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{time.time_ns()}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})  # fmt: skip
    events: dict[str, list[Row | None]] = defaultdict(list)
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for number in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=10)
            consumer.assign([TopicPartition(topic, number, low)])
            while consumer.position([TopicPartition(topic, number)])[0].offset < high:
                message = consumer.poll(5.0)
                if message is None:
                    break
                assert message.error() is None, message.error()
                value = message.value()
                events[message.key().decode()].append(_json_or_text(value))
    finally:
        consumer.close()
    return dict(events)


def _json_or_text(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return value.decode(errors="replace")  # what a broken producer wrote


def delta_rows(path: str, key: tuple[str, ...]) -> dict[str, Row]:
    from deltalake import DeltaTable

    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    return {json.dumps({k: plain(r[k]) for k in key}, ensure_ascii=False, separators=(",", ":")): plain(r) for r in rows}


def duckdb_delta_rows(path: str) -> int:
    """Rows DuckDB's own Delta reader (the offline `delta` extension wheel) finds in the table."""
    import duckdb
    import duckdb_extensions

    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        duckdb_extensions.import_extension("delta", con=con)
        con.execute("LOAD delta")
        return int(con.execute(f"SELECT count(*) FROM delta_scan('{path}')").fetchone()[0])
    finally:
        con.close()


def delta_cdf_events(path: str, key: tuple[str, ...]) -> dict[str, list[Row | None]]:
    """Delta's Change Data Feed per key in commit order (pre-images left out): the row, or None for a delete."""
    from deltalake import DeltaTable

    table = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all()).to_pylist()
    table.sort(key=lambda r: r["_commit_version"])
    events: dict[str, list[Row | None]] = defaultdict(list)
    for r in table:
        kind = r.pop("_change_type")
        for meta in ("_commit_version", "_commit_timestamp"):
            r.pop(meta, None)
        if kind == "update_preimage":
            continue
        k = json.dumps({c: plain(r[c]) for c in key}, ensure_ascii=False, separators=(",", ":"))
        events[k].append(None if kind == "delete" else plain(r))
    return dict(events)


def normalise(value: Any) -> Any:
    """JSON numbers and text as one kind, so a decimal's text equals its number."""
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, Decimal):
        return str(value)
    return value


# ---- PostgreSQL's own answers ----------------------------------------------------------------------
USER_PROFILE_SQL = """
SELECT u.email, u.username,
       coalesce((SELECT json_agg(json_build_object('repo_owner', s.repo_owner, 'repo_name', s.repo_name, 'description', r.description))
                 FROM stars s LEFT JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name
                 WHERE s.username = u.username), '[]'::json) AS starred_repos,
       coalesce((SELECT json_agg(json_build_object('repo_owner', p.repo_owner, 'repo', p.repo, 'index', p.index, 'title', p.title,
                                                   'status', p.status, 'created_at', to_char(p.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
                 FROM pull_requests p WHERE p.author = u.username), '[]'::json) AS pull_requests,
       coalesce((SELECT bool_or(p.verified) FROM payment_info p WHERE p.user_id = u.id), false) AS payment_verified
FROM users u
"""

REPO_SUMMARY_SQL = """
SELECT r.owner, r.name, r.description,
       (SELECT min(u.email) FROM users u WHERE u.username = r.owner) AS owner_email,
       (SELECT count(*) FROM stars s WHERE s.repo_owner = r.owner AND s.repo_name = r.name) AS stars,
       (SELECT count(*) FROM pull_requests p WHERE p.repo_owner = r.owner AND p.repo = r.name AND p.status = 'open') AS open_pull_requests,
       coalesce((SELECT json_agg(DISTINCT p.author) FROM pull_requests p
                 WHERE p.repo_owner = r.owner AND p.repo = r.name AND p.author IS NOT NULL), '[]'::json) AS contributors
FROM repos r
"""


def _sorted_list(values: list) -> list:
    return sorted(values, key=lambda v: json.dumps(v, sort_keys=True, default=str))


def postgres_view(con, view: str) -> dict[str, Row]:  # noqa: ANN001 - psycopg2
    """PostgreSQL's evaluation of a view, rendered as the lake renders it (lists compared as multisets)."""
    sql = {"user_profile": USER_PROFILE_SQL, "repo_summary": REPO_SUMMARY_SQL}[view]
    with con.cursor() as cur:
        cur.execute(sql)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    return {json.dumps({k: plain(r[k]) for k in _KEYS[view]}, separators=(",", ":")): canonical(plain(r)) for r in rows}


def canonical(row: Row) -> Row:
    """A row with its list columns sorted (Spark's array_sort and PostgreSQL's json_agg order differ
    only in where NULLs go), numbers as Python ints."""
    return {k: _sorted_list(v) if isinstance(v, list) else v for k, v in row.items()}
