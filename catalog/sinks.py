"""The data products a lake declares, and how far each has got - read by the publisher
(`lakemv.spark.sinks.products`) and by `lakemv status`, which needs no Spark for it.

A sink publishes its view's change feed (`<catalog>.views.<view>__changes`: its rows of the feeds
table, lakemv.core.sql.feedsql) snapshot by snapshot of that table. Its
progress is kept where it delivers, in the same atomic step: a Kafka sink's in a record of the progress
topic `<prefix>._sinks` (written in the transaction that holds the messages), a Delta sink's in the
Delta table's own log (the `txnVersion` of its last MERGE under the sink's `txnAppId`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lakemv.catalog.lake import delta_rs_options, pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import TableNames
from lakemv.core.errors import ConfigError
from lakemv.core.planner import ViewPlan
from lakemv.core.planner.definitions import SINK_KINDS
from lakemv.core.sql.feedsql import feed_column, views_of
from lakemv.core.values import plain


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
        target = f"{settings.product_topic_prefix}.{view}" if kind == "kafka" else (settings.delta_root / view).hadoop
        sinks.append(Sink(view, kind, target, tuple(plan.key_names), tuple(plan.columns), settings.catalog_name))
    return sinks


def product_bootstrap(settings: LakeSettings, sinks: Sequence[Sink]) -> str | None:
    """The brokers the Kafka sinks publish to (a Kafka sink with none set is a configuration error)."""
    bootstrap = settings.product_bootstrap or settings.kafka_bootstrap
    if any(s.kind == "kafka" for s in sinks) and not bootstrap:
        raise ConfigError("a view has a kafka sink but no brokers are set: LAKEMV_PRODUCT_BOOTSTRAP or LAKEMV_KAFKA_BOOTSTRAP")
    return bootstrap


# ---- the change feed's history ------------------------------------------------------------------
def feed_histories(settings: LakeSettings, views: Iterable[str]) -> dict[str, list[FeedSnapshot]]:
    """Per view, the feeds table's current snapshot and its ancestors, oldest first, from one read of
    the table (pyiceberg: no Spark job); an append counts for a view when it holds rows of it (its
    summary names it)."""
    table = pyiceberg_catalog(settings).load_table(_feeds(settings))
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    current = table.metadata.current_snapshot_id
    chain = []
    while current is not None and current in snapshots:
        chain.append(snapshots[current])
        current = snapshots[current].parent_snapshot_id
    chain.reverse()
    appended = [views_of(s.summary) if s.summary is not None and s.summary.operation.value == "append" else frozenset() for s in chain]
    return {
        view: [FeedSnapshot(s.snapshot_id, s.parent_snapshot_id, s.sequence_number or 0, s.timestamp_ms, view in held) for s, held in zip(chain, appended, strict=True)]
        for view in views
    }  # fmt: skip


def feed_history(settings: LakeSettings, view: str) -> list[FeedSnapshot]:
    """`feed_histories` of one view."""
    return feed_histories(settings, [view])[view]


def pending(history: Sequence[FeedSnapshot], progress: Progress | None) -> tuple[list[FeedSnapshot], bool]:
    """(appends to deliver after `progress`, in order; whether the whole view must be published instead).
    `progress` with no snapshot means "published while the feed had none of the view's"."""
    if progress is None:
        return [], True
    if progress.snapshot_id is None:
        return [], any(s.append for s in history)
    ids = [s.snapshot_id for s in history]
    if progress.snapshot_id not in ids:
        return [], True
    after = history[ids.index(progress.snapshot_id) + 1 :]
    return [s for s in after if s.append], False


def feed_uuid(settings: LakeSettings, view: str) -> str:
    """The feed of `view`: the feeds table's UUID and its column's field id (a view whose columns
    changed has a new column, and a feeds table created again is another table)."""
    table = pyiceberg_catalog(settings).load_table(_feeds(settings))
    field = table.schema().find_field(feed_column(view))
    return f"{table.metadata.table_uuid}:{field.field_id}"


def _feeds(settings: LakeSettings) -> str:
    return TableNames(settings.catalog_name).feeds.split(".", 1)[1]


# ---- Kafka: messages, and the progress topic ----------------------------------------------------
def message_key(sink: Sink, row: Mapping[str, Any]) -> bytes:
    return json.dumps({k: plain(row[k]) for k in sink.key}, ensure_ascii=False, separators=(",", ":")).encode()


def message_value(sink: Sink, row: Mapping[str, Any] | None) -> bytes | None:
    if row is None:
        return None
    return json.dumps({c: plain(row[c]) for c in sink.columns}, ensure_ascii=False, separators=(",", ":")).encode()


class KafkaProgress:
    """The Kafka sinks' progress records, read `read_committed` (nothing is created or fenced here)."""

    def __init__(self, settings: LakeSettings, bootstrap: str | None):
        self.settings = settings
        self.bootstrap = bootstrap

    @property
    def progress_topic(self) -> str:
        return f"{self.settings.product_topic_prefix}._sinks"

    def client_conf(self) -> dict[str, Any]:
        # librdkafka logs errors only: retries while the broker loads its coordinators are expected
        return {"bootstrap.servers": self.bootstrap or "", "log_level": 3, **dict(self.settings.kafka_options)}

    def _topic_exists(self, topic: str) -> bool:
        from confluent_kafka.admin import AdminClient

        return topic in AdminClient(self.client_conf()).list_topics(timeout=10).topics

    def latest_by_key(self, topic: str) -> dict[bytes, bytes | None]:
        """Each key's latest committed value in `topic` (None: a tombstone), read `read_committed` to its end."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        consumer = Consumer({**self.client_conf(), "group.id": "lakemv-sinks-reader", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.partition.eof": True})  # fmt: skip
        latest: dict[bytes, bytes | None] = {}
        try:
            for number in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=10)
                if high <= low:
                    continue
                consumer.assign([TopicPartition(topic, number, low)])
                while True:  # to the partition's end as read_committed sees it (markers are never returned)
                    message = consumer.poll(30.0)
                    if message is None:
                        raise KafkaException(f"reading {topic}[{number}] to its end timed out (an open transaction?)")
                    if message.error():
                        if message.error().code() == KafkaError._PARTITION_EOF:
                            break
                        raise KafkaException(message.error())
                    if message.key() is not None:
                        latest[message.key()] = message.value()
        finally:
            consumer.close()
        return latest

    def records(self, sinks: Sequence[Sink]) -> dict[str, Progress | None]:
        """Each sink's last committed progress record (None: it has published nothing yet)."""
        records = self.latest_by_key(self.progress_topic)
        found: dict[str, Progress | None] = {}
        for sink in sinks:
            value = records.get(sink.id.encode())
            data = json.loads(value) if value else None
            found[sink.id] = Progress(data.get("snapshot"), int(data.get("sequence", 0))) if data else None
        return found

    def progress(self, sinks: Sequence[Sink]) -> dict[str, Progress | None]:
        """`records`, or nothing delivered when the progress topic does not exist yet."""
        if not self._topic_exists(self.progress_topic):
            return {sink.id: None for sink in sinks}
        return self.records(sinks)


# ---- Delta: the table's own transaction record --------------------------------------------------
class DeltaProgress:
    """A Delta sink's progress: the feed sequence number its last MERGE carried, read by delta-rs."""

    def __init__(self, settings: LakeSettings):
        self.settings = settings
        self._uuids: dict[str, str] = {}

    def app_id(self, sink: Sink) -> str:
        """Delta's `txnAppId` of a sink: per feed table, whose sequence numbers are its txnVersions
        (a feed created again starts them again, and must not be taken for one already delivered)."""
        if sink.view not in self._uuids:  # a feed is replaced in place; it is created anew only between runs
            self._uuids[sink.view] = feed_uuid(self.settings, sink.view)
        return f"{sink.id}@{self._uuids[sink.view]}"

    def progress(self, sink: Sink, history: Sequence[FeedSnapshot]) -> Progress | None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            version = DeltaTable(sink.target, storage_options=delta_rs_options(self.settings)).transaction_version(self.app_id(sink))
        except TableNotFoundError:
            return None
        if version is None:
            return None
        match = [s.snapshot_id for s in history if s.sequence == version]
        if match:
            return Progress(match[-1], version)
        return Progress(None, version) if version == 0 else Progress(-1, version)  # -1: not in the history: resync


# ---- lags, for `lakemv status` ------------------------------------------------------------------
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


def sink_lags(settings: LakeSettings, sinks: Sequence[Sink]) -> list[SinkLag]:
    """How far each sink is behind its feed, read beside a running stream: nothing is created or fenced,
    and a sink whose progress cannot be read is reported with the reason, the others still are."""
    kafka = KafkaProgress(settings, product_bootstrap(settings, sinks))
    delta = DeltaProgress(settings)
    kafka_progress: dict[str, Progress | None] | None = None
    histories: dict[str, list[FeedSnapshot]] = {}
    found = []
    for sink in sinks:
        try:
            if not histories:  # one read of the feeds table for every sink
                histories = feed_histories(settings, {s.view for s in sinks})
            history = histories[sink.view]
            if sink.kind == "kafka":
                if kafka_progress is None:  # one read of the progress topic for every Kafka sink
                    kafka_progress = kafka.progress([s for s in sinks if s.kind == "kafka"])
                progress = kafka_progress.get(sink.id)
            else:
                progress = delta.progress(sink, history)
            todo, resync = pending(history, progress)
            if resync:
                todo = [s for s in history if s.append]
            oldest = datetime.fromtimestamp(todo[0].committed_ms / 1000, UTC) if todo else None
            found.append(SinkLag(sink, len(todo), oldest, progress.sequence if progress else None))
        except Exception as exc:  # noqa: BLE001 - status reports, never fails
            from lakemv.core.failures import classify

            kafka_progress = None if sink.kind == "kafka" else kafka_progress
            found.append(SinkLag(sink, 0, None, None, classify(exc).line))
    return found
