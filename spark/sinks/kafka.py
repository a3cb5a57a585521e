"""The Kafka data products (`lakemv.spark.sinks.products`): a compacted topic per view, one producer transaction per
feed snapshot holding its messages and the sink's progress record, read back `read_committed`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.sinks import FeedSnapshot, KafkaProgress, Progress, Sink, message_key, message_value
from lakemv.catalog.tables import TableNames
from lakemv.core.runtime.faults import crash_point
from lakemv.spark.views.feeds import snapshot_rows


def feed_changes(spark: SparkSession, names: TableNames, sink: Sink, snapshot: FeedSnapshot) -> pa.Table:
    """The feed rows of the sink's view (key columns, `op`, `row`) one append snapshot added."""
    return snapshot_rows(spark, names, sink.view, sink.key, snapshot.parent_id, snapshot.snapshot_id).toArrow()


class KafkaSinks(KafkaProgress):
    """Kafka delivery for every Kafka sink of one publisher; keeps a transactional producer per sink."""

    def __init__(self, spark: SparkSession, settings: LakeSettings, bootstrap: str | None):
        super().__init__(settings, bootstrap)
        self.spark = spark
        self.names = TableNames(settings.catalog_name)
        self._producers: dict[str, Any] = {}

    def ensure_topics(self, topics: Sequence[str]) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.client_conf())
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

    def producer(self, sink: Sink):  # noqa: ANN202 - confluent_kafka.Producer
        producer = self._producers.get(sink.id)
        if producer is None:
            from confluent_kafka import Producer

            self.ensure_topics([sink.target, self.progress_topic])
            producer = Producer(
                {
                    **self.client_conf(),
                    "transactional.id": sink.id,
                    "enable.idempotence": True,
                    "partitioner": "murmur2_random",  # the Java client's: the same key lands where Java puts it
                    "linger.ms": 5,
                    "transaction.timeout.ms": 600_000,  # a resync of a large view is one transaction
                }
            )
            producer.init_transactions(30)  # fences a previous producer of this sink, aborting its open transaction
            self._producers[sink.id] = producer
        return producer

    def progress(self, sinks: Sequence[Sink], *, fence: bool = True) -> dict[str, Progress | None]:
        """Each Kafka sink's last committed progress record, from the progress topic.

        With `fence` (a deliverer), each sink's producer is made first: that fences a previous one (a
        crashed run, a commit that timed out) and settles its open transaction, so no commit lands
        after the progress is read. Without (`lakemv status`, beside a running stream) nothing is
        fenced or created."""
        if not fence:
            return super().progress(sinks)
        for sink in sinks:
            self.producer(sink)
        self.ensure_topics([self.progress_topic])
        return self.records(sinks)

    def send(self, sink: Sink, messages: Iterable[tuple[bytes, bytes | None]], progress: Progress) -> int:
        producer = self.producer(sink)
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
            producer.flush(600)
            crash_point("sink_produced", progress.sequence)  # messages sent, the transaction still open
            producer.commit_transaction(600)
            crash_point("sink_committed", progress.sequence)
        except BaseException:
            try:
                producer.abort_transaction(30)
            except Exception:  # noqa: BLE001 - a fenced or broken producer: rebuilt on the next call
                self._producers.pop(sink.id, None)
            raise
        return count

    def deliver_snapshot(self, sink: Sink, snapshot: FeedSnapshot) -> int:
        changes = feed_changes(self.spark, self.names, sink, snapshot).to_pylist()
        messages = [(message_key(sink, c), message_value(sink, c["row"] if c["op"] == "upsert" else None)) for c in changes]
        return self.send(sink, messages, Progress(snapshot.snapshot_id, snapshot.sequence))

    def resync(self, sink: Sink, at: FeedSnapshot | None) -> int:
        """Publish the whole view: every row, and a tombstone for every key the topic holds that the view has not."""
        rows = self.spark.table(self.names.view(sink.view)).toArrow().to_pylist()
        keys = {message_key(sink, r) for r in rows}
        stale = [k for k in self.topic_keys(sink) if k not in keys]
        messages = [(message_key(sink, r), message_value(sink, r)) for r in rows] + [(k, None) for k in stale]
        return self.send(sink, messages, Progress(at.snapshot_id if at else None, at.sequence if at else 0))

    def topic_keys(self, sink: Sink) -> set[bytes]:
        """Keys whose latest committed message in the sink's topic is not a tombstone."""
        return {key for key, value in self.latest_by_key(sink.target).items() if value is not None}

    def close(self) -> None:
        for producer in self._producers.values():
            producer.flush(10)
        self._producers.clear()
