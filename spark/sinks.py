"""Data products out: each view's change feed published to a Kafka topic and/or a Delta table.

A sink delivers the view's change feed (`<catalog>.views.<view>__changes`) snapshot by snapshot, in
commit order, and remembers how far it got *in the same atomic step* as what it delivers:

* **Kafka** (`kafka`): a compacted topic `<prefix>.<view>`; the key is the view key as JSON, the
  value the row as JSON (timestamps ISO-8601 UTC, decimals as text), a null value (tombstone) on
  delete. One Kafka transaction per feed snapshot holds its messages *and* the sink's progress record
  (topic `<prefix>._sinks`, keyed by sink), so a `read_committed` consumer sees each change exactly
  once whatever step a crash interrupts: an aborted transaction shows nothing, and the restarted sink
  goes on from the last committed progress. The transactional id fences a zombie producer.
* **Delta** (`delta`): a Delta table with Change Data Feed at `<delta_dir>/<view>`, each feed
  snapshot MERGEd with Delta's idempotent-write confs (`txnAppId` = the sink, `txnVersion` = the feed
  snapshot's sequence number): a repeated MERGE is skipped by Delta itself, and the table's own log
  says how far the sink got.

A sink that finds its progress outside the feed's history (a new sink, or a view rebuilt since)
publishes the whole view once: upserts of every row, deletes of every key it no longer has.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from catalog.errors import ConfigError
from catalog.settings import LakeSettings
from catalog.tables import TableNames
from flows.console import plain
from spark.faults import crash_point
from spark.literals import q
from spark.session import use_catalog
from spark.planner import ViewPlan
from spark.views import SINK_KINDS


@dataclass(frozen=True)
class Sink:
    """One data product of one view."""

    view: str
    kind: str  # kafka | delta
    target: str  # the topic, or the Delta table's path
    key: tuple[str, ...]
    columns: tuple[str, ...]
    catalog: str

    @property
    def id(self) -> str:
        return f"lakemv.{self.catalog}.{self.view}.{self.kind}"


@dataclass(frozen=True)
class FeedSnapshot:
    snapshot_id: int
    parent_id: int | None
    sequence: int
    committed_ms: int
    append: bool = True  # False: a compaction or the like, which adds no change


@dataclass(frozen=True)
class Progress:
    snapshot_id: int | None
    sequence: int


@dataclass
class Delivery:
    """What one `deliver` did for one sink."""

    sink: str
    snapshots: int = 0
    messages: int = 0
    resynced: bool = False
    error: str | None = None
    seconds: float = 0.0


@dataclass
class SinkLag:
    """How far a sink is behind its view's change feed."""

    sink: Sink
    pending: int  # feed snapshots not yet delivered
    oldest_pending: datetime | None
    delivered: int | None  # sequence number delivered up to
    error: str | None = None

    @property
    def lag_seconds(self) -> float:
        return 0.0 if self.oldest_pending is None else max(0.0, (datetime.now(UTC) - self.oldest_pending).total_seconds())

    def to_row(self) -> dict[str, Any]:
        return {
            "sink": self.sink.id, "view": self.sink.view, "type": self.sink.kind, "target": self.sink.target,
            "pending": self.pending, "lag_seconds": round(self.lag_seconds, 1), "delivered_sequence": self.delivered,
            "error": self.error,
        }  # fmt: skip


def declared_sinks(settings: LakeSettings, plans: Iterable[ViewPlan]) -> list[Sink]:
    """Sinks from the views' `@sink` headers and the `sinks` setting, one per (view, kind)."""
    plans = list(plans)
    by_name = {p.name: p for p in plans}
    wanted: dict[tuple[str, str], None] = {}
    for plan in plans:
        for kind in plan.definition.sinks:
            wanted[(plan.name, kind)] = None
    for view, kinds in settings.sinks:
        if view not in by_name:
            raise ConfigError(f"sink for unknown view {view!r}; views are {', '.join(sorted(by_name))}", "LAKEMV_SINKS")
        for kind in kinds:
            if kind not in SINK_KINDS:
                raise ConfigError(f"unknown sink {kind!r} for view {view}; known: {', '.join(SINK_KINDS)}", "LAKEMV_SINKS")
            wanted[(view, kind)] = None
    sinks = []
    for view, kind in wanted:
        plan = by_name[view]
        target = f"{settings.product_topic_prefix}.{view}" if kind == "kafka" else str(settings.delta_root / view)
        sinks.append(Sink(view, kind, target, tuple(plan.key_names), tuple(plan.columns), settings.catalog_name))
    return sinks


def feed_history(settings: LakeSettings, view: str) -> list[FeedSnapshot]:
    """The feed table's current snapshot and its ancestors, oldest first (pyiceberg: no Spark job)."""
    from catalog.lake import pyiceberg_catalog

    names = TableNames(settings.catalog_name)
    identifier = names.view_changes(view).split(".", 1)[1]
    table = pyiceberg_catalog(settings).load_table(identifier)
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    current = table.metadata.current_snapshot_id
    chain = []
    while current is not None and current in snapshots:
        s = snapshots[current]
        append = s.summary is None or s.summary.operation.value == "append"
        chain.append(FeedSnapshot(s.snapshot_id, s.parent_snapshot_id, s.sequence_number or 0, s.timestamp_ms, append))
        current = s.parent_snapshot_id
    return chain[::-1]


def pending(history: Sequence[FeedSnapshot], progress: Progress | None) -> tuple[list[FeedSnapshot], bool]:
    """(appends to deliver after `progress`, in order; whether the whole view must be published instead).
    `progress` with no snapshot means "published while the feed had none"."""
    if progress is None:
        return [], True
    if progress.snapshot_id is None:
        return [], bool(history)
    ids = [s.snapshot_id for s in history]
    if progress.snapshot_id not in ids:
        return [], True
    after = history[ids.index(progress.snapshot_id) + 1 :]
    return [s for s in after if s.append], False


def message_key(sink: Sink, row: Mapping[str, Any]) -> bytes:
    return json.dumps({k: plain(row[k]) for k in sink.key}, ensure_ascii=False, separators=(",", ":")).encode()


def message_value(sink: Sink, row: Mapping[str, Any] | None) -> bytes | None:
    if row is None:
        return None
    return json.dumps({c: plain(row[c]) for c in sink.columns}, ensure_ascii=False, separators=(",", ":")).encode()


class Publisher:
    """Delivers every declared sink's pending feed snapshots; keeps Kafka producers between calls."""

    def __init__(self, spark: SparkSession | None, settings: LakeSettings, sinks: Sequence[Sink]):
        """Without a SparkSession it can only tell the sinks' lags (`lags`), as `lakemv status` does."""
        self.spark: SparkSession = None  # type: ignore[assignment]
        if spark is not None:
            self.spark = spark.newSession()  # Delta's idempotency confs are set per session: a session of its own
            use_catalog(self.spark, settings)
        self.settings = settings
        self.sinks = list(sinks)
        self.names = TableNames(settings.catalog_name)
        self._kafka: dict[str, Any] = {}
        self._progress: dict[str, Progress | None] = {}
        if any(s.kind == "kafka" for s in self.sinks) and not self.bootstrap:
            raise ConfigError("a view has a kafka sink but no brokers are set: LAKEMV_PRODUCT_BOOTSTRAP or LAKEMV_KAFKA_BOOTSTRAP")

    @property
    def bootstrap(self) -> str | None:
        return self.settings.product_bootstrap or self.settings.kafka_bootstrap

    @property
    def progress_topic(self) -> str:
        return f"{self.settings.product_topic_prefix}._sinks"

    # ---- the feed --------------------------------------------------------------------------------
    def _changes(self, sink: Sink, snapshot: FeedSnapshot) -> pa.Table:
        """The feed rows one append snapshot added."""
        feed = self.names.view_changes(sink.view)
        reader = self.spark.read.format("iceberg")
        if snapshot.parent_id is None:
            reader = reader.option("snapshot-id", str(snapshot.snapshot_id))
        else:
            reader = reader.option("start-snapshot-id", str(snapshot.parent_id)).option("end-snapshot-id", str(snapshot.snapshot_id))
        return reader.load(feed).select(*[q(k) for k in sink.key], "op", "row").toArrow()

    def _view_rows(self, sink: Sink) -> pa.Table:
        return self.spark.table(self.names.view(sink.view)).toArrow()

    # ---- Kafka -----------------------------------------------------------------------------------
    def _client_conf(self) -> dict[str, Any]:
        # librdkafka logs errors only: retries while the broker loads its coordinators are expected
        return {"bootstrap.servers": self.bootstrap or "", "log_level": 3, **dict(self.settings.kafka_options)}

    def _ensure_topics(self, topics: Sequence[str]) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self._client_conf())
        existing = set(admin.list_topics(timeout=10).topics)
        wanted = [
            NewTopic(t, num_partitions=self.settings.product_partitions, replication_factor=-1, config={"cleanup.policy": "compact"})
            for t in topics if t not in existing
        ]  # fmt: skip
        for topic, future in (admin.create_topics(wanted) if wanted else {}).items():
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS from a concurrent creator is fine
                if "already exists" not in str(exc).lower():
                    raise

    def _producer(self, sink: Sink):  # noqa: ANN202 - confluent_kafka.Producer
        producer = self._kafka.get(sink.id)
        if producer is None:
            from confluent_kafka import Producer

            self._ensure_topics([sink.target, self.progress_topic])
            producer = Producer(
                {
                    **self._client_conf(),
                    "transactional.id": sink.id,
                    "enable.idempotence": True,
                    "partitioner": "murmur2_random",  # the Java client's: the same key lands where Java puts it
                    "linger.ms": 5,
                }
            )
            producer.init_transactions(30)  # fences a previous producer of this sink, aborting its open transaction
            self._kafka[sink.id] = producer
        return producer

    def _latest_by_key(self, topic: str) -> dict[bytes, bytes | None]:
        """Each key's latest committed value in `topic` (None: a tombstone), read `read_committed` to its end."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({**self._client_conf(), "group.id": "lakemv-sinks-reader", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest"})  # fmt: skip
        latest: dict[bytes, bytes | None] = {}
        try:
            for number in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=10)
                if high <= low:
                    continue
                consumer.assign([TopicPartition(topic, number, low)])
                while consumer.position([TopicPartition(topic, number)])[0].offset < high:
                    message = consumer.poll(5.0)
                    if message is None:  # only transaction markers (or an open transaction) are left
                        break
                    if message.error():
                        raise KafkaException(message.error())
                    if message.key() is not None:
                        latest[message.key()] = message.value()
        finally:
            consumer.close()
        return latest

    def kafka_progress(self, sinks: Sequence[Sink]) -> dict[str, Progress | None]:
        """Each Kafka sink's last committed progress record, from the progress topic."""
        self._ensure_topics([self.progress_topic])
        records = self._latest_by_key(self.progress_topic)
        found: dict[str, Progress | None] = {}
        for sink in sinks:
            value = records.get(sink.id.encode())
            data = json.loads(value) if value else None
            found[sink.id] = Progress(data.get("snapshot"), int(data.get("sequence", 0))) if data else None
        return found

    def _send(self, sink: Sink, messages: Iterable[tuple[bytes, bytes | None]], progress: Progress) -> int:
        producer = self._producer(sink)
        producer.begin_transaction()
        count = 0
        try:
            for key, value in messages:
                while True:
                    try:
                        producer.produce(sink.target, key=key, value=value)
                        break
                    except BufferError:
                        producer.poll(0.1)
                count += 1
            record = {"snapshot": progress.snapshot_id, "sequence": progress.sequence, "at": datetime.now(UTC).isoformat()}
            producer.produce(self.progress_topic, key=sink.id.encode(), value=json.dumps(record).encode())
            producer.flush(60)
            crash_point("sink_produced", progress.sequence)  # messages sent, the transaction still open
            producer.commit_transaction(60)
            crash_point("sink_committed", progress.sequence)
        except BaseException:
            try:
                producer.abort_transaction(30)
            except Exception:  # noqa: BLE001 - a fenced or broken producer: rebuilt on the next call
                self._kafka.pop(sink.id, None)
            raise
        return count

    def _kafka_snapshot(self, sink: Sink, snapshot: FeedSnapshot) -> int:
        changes = self._changes(sink, snapshot).to_pylist()
        messages = [(message_key(sink, c), message_value(sink, c["row"] if c["op"] == "upsert" else None)) for c in changes]
        return self._send(sink, messages, Progress(snapshot.snapshot_id, snapshot.sequence))

    def _kafka_resync(self, sink: Sink, at: FeedSnapshot | None) -> int:
        """Publish the whole view: every row, and a tombstone for every key the topic holds that the view has not."""
        rows = self._view_rows(sink).to_pylist()
        keys = {message_key(sink, r) for r in rows}
        stale = [k for k in self._topic_keys(sink) if k not in keys]
        messages = [(message_key(sink, r), message_value(sink, r)) for r in rows] + [(k, None) for k in stale]
        return self._send(sink, messages, Progress(at.snapshot_id if at else None, at.sequence if at else 0))

    def _topic_keys(self, sink: Sink) -> set[bytes]:
        """Keys whose latest committed message in the sink's topic is not a tombstone."""
        return {key for key, value in self._latest_by_key(sink.target).items() if value is not None}

    # ---- Delta -----------------------------------------------------------------------------------
    def delta_progress(self, sink: Sink, history: Sequence[FeedSnapshot]) -> Progress | None:
        """Delta's own record of the sink: the feed sequence number its last MERGE carried."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            version = DeltaTable(sink.target).transaction_version(sink.id)
        except TableNotFoundError:
            return None
        if version is None:
            return None
        match = [s.snapshot_id for s in history if s.sequence == version]
        if match:
            return Progress(match[-1], version)
        return Progress(None, version) if version == 0 else Progress(-1, version)  # -1: not in the history: resync

    def _ensure_delta(self, sink: Sink) -> None:
        if (Path(sink.target) / "_delta_log").is_dir():
            return
        Path(sink.target).parent.mkdir(parents=True, exist_ok=True)
        view = self.names.view(sink.view)
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.`{sink.target}` USING delta "
            "TBLPROPERTIES (delta.enableChangeDataFeed = true, delta.appendOnly = false) "
            f"AS SELECT * FROM {view} WHERE false"
        )

    def _delta_merge(self, sink: Sink, source_sql: str, version: int, *, delete_missing: bool) -> None:
        on = " AND ".join(f"t.{q(k)} <=> s.{q(k)}" for k in sink.key)
        values = [c for c in sink.columns if c not in sink.key]
        columns = ", ".join(q(c) for c in sink.columns)
        clauses = ["WHEN MATCHED AND s._lmv_op = 'delete' THEN DELETE"]
        if values:
            clauses.append("WHEN MATCHED THEN UPDATE SET " + ", ".join(f"t.{q(c)} = s.{q(c)}" for c in values))
        clauses.append(f"WHEN NOT MATCHED AND s._lmv_op = 'upsert' THEN INSERT ({columns}) VALUES ({', '.join(f's.{q(c)}' for c in sink.columns)})")
        if delete_missing:
            clauses.append("WHEN NOT MATCHED BY SOURCE THEN DELETE")
        conf = self.spark.conf
        conf.set("spark.databricks.delta.write.txnAppId", sink.id)
        conf.set("spark.databricks.delta.write.txnVersion", str(version))
        try:
            crash_point("delta_merging", version)
            self.spark.sql(f"MERGE INTO delta.`{sink.target}` t USING ({source_sql}) s ON {on} " + " ".join(clauses))
            crash_point("delta_merged", version)
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")

    def _delta_snapshot(self, sink: Sink, snapshot: FeedSnapshot) -> int:
        feed = self.names.view_changes(sink.view)
        if snapshot.parent_id is None:
            options = f"'snapshot-id' = '{snapshot.snapshot_id}'"
        else:
            options = f"'start-snapshot-id' = '{snapshot.parent_id}', 'end-snapshot-id' = '{snapshot.snapshot_id}'"
        keys = ", ".join(f"{q(k)}" for k in sink.key)
        values = ", ".join(f"row.{q(c)} AS {q(c)}" for c in sink.columns if c not in sink.key)
        select = f"SELECT op AS _lmv_op, {keys}{', ' + values if values else ''} FROM {feed} WITH ({options})"
        count = self.spark.sql(f"SELECT count(*) FROM ({select})").first()[0]
        self._delta_merge(sink, select, snapshot.sequence, delete_missing=False)
        return int(count)

    def _delta_resync(self, sink: Sink, at: FeedSnapshot | None) -> int:
        view = self.names.view(sink.view)
        select = f"SELECT 'upsert' AS _lmv_op, {', '.join(q(c) for c in sink.columns)} FROM {view}"
        count = self.spark.table(view).count()
        self._delta_merge(sink, select, at.sequence if at else 0, delete_missing=True)
        return int(count)

    # ---- delivering ------------------------------------------------------------------------------
    def _progress_of(self, sink: Sink, history: Sequence[FeedSnapshot]) -> Progress | None:
        if sink.id not in self._progress:
            if sink.kind == "kafka":
                self._progress.update(self.kafka_progress([s for s in self.sinks if s.kind == "kafka"]))
            else:
                self._progress[sink.id] = self.delta_progress(sink, history)
        return self._progress.get(sink.id)

    def deliver(self) -> list[Delivery]:
        """Deliver every sink's pending feed snapshots; a sink that fails is reported, the others go on."""
        done = []
        for sink in self.sinks:
            started = time.perf_counter()
            delivery = Delivery(sink.id)
            try:
                if sink.kind == "delta":
                    self._ensure_delta(sink)
                history = feed_history(self.settings, sink.view)
                progress = self._progress_of(sink, history)
                todo, resync = pending(history, progress)
                if resync:
                    latest = history[-1] if history else None
                    send = self._kafka_resync if sink.kind == "kafka" else self._delta_resync
                    delivery.messages += send(sink, latest)
                    delivery.resynced = True
                    self._progress[sink.id] = Progress(latest.snapshot_id if latest else None, latest.sequence if latest else 0)
                for snapshot in todo:
                    send = self._kafka_snapshot if sink.kind == "kafka" else self._delta_snapshot
                    delivery.messages += send(sink, snapshot)
                    delivery.snapshots += 1
                    self._progress[sink.id] = Progress(snapshot.snapshot_id, snapshot.sequence)
            except Exception as exc:  # noqa: BLE001 - a sink's failure must not stop the stream; it retries next batch
                from spark.commits import first_line

                delivery.error = first_line(exc)
                self._progress.pop(sink.id, None)  # read again next time
            delivery.seconds = time.perf_counter() - started
            done.append(delivery)
        return done

    def lags(self) -> list[SinkLag]:
        """How far each sink is behind its feed (for `lakemv status`)."""
        found = []
        for sink in self.sinks:
            try:
                history = feed_history(self.settings, sink.view)
                progress = self._progress_of(sink, history)
                todo, resync = pending(history, progress)
                if resync:
                    todo = [s for s in history if s.append]
                oldest = datetime.fromtimestamp(todo[0].committed_ms / 1000, UTC) if todo else None
                found.append(SinkLag(sink, len(todo), oldest, progress.sequence if progress else None))
            except Exception as exc:  # noqa: BLE001 - status reports, never fails
                from spark.commits import first_line

                found.append(SinkLag(sink, 0, None, None, first_line(exc)))
        return found

    def close(self) -> None:
        for producer in self._kafka.values():
            producer.flush(10)
        self._kafka.clear()


@dataclass
class Products:
    """The publisher an ingest run calls after each unit (none when no view has a sink)."""

    publisher: Publisher | None = None
    on_delivery: Callable[[Delivery], None] | None = None
    deliveries: list[Delivery] = field(default_factory=list)

    @classmethod
    def of(
        cls, spark: SparkSession, settings: LakeSettings, plans: Sequence[ViewPlan], on_delivery: Callable[[Delivery], None] | None = None
    ) -> Products:
        sinks = declared_sinks(settings, plans)
        return cls(Publisher(spark, settings, sinks) if sinks else None, on_delivery)

    def deliver(self) -> list[Delivery]:
        if self.publisher is None:
            return []
        done = self.publisher.deliver()
        self.deliveries.extend(done)
        if self.on_delivery is not None:
            for delivery in done:
                if delivery.messages or delivery.error:
                    self.on_delivery(delivery)
        return done

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
