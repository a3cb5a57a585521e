"""The Kafka data products (`lakemv.spark.sinks.products`): a compacted topic per view, one producer transaction per
feed snapshot holding its messages and the sink's progress record, read back `read_committed`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import TableNames
from lakemv.core.runtime.faults import crash_point
from lakemv.core.values import plain
from lakemv.spark.sinks.feed import FeedSnapshot, Progress, Sink, feed_changes


def message_key(sink: Sink, row: Mapping[str, Any]) -> bytes:
    return json.dumps({k: plain(row[k]) for k in sink.key}, ensure_ascii=False, separators=(",", ":")).encode()


def message_value(sink: Sink, row: Mapping[str, Any] | None) -> bytes | None:
    if row is None:
        return None
    return json.dumps({c: plain(row[c]) for c in sink.columns}, ensure_ascii=False, separators=(",", ":")).encode()


class KafkaSinks:
    """Kafka delivery for every Kafka sink of one publisher; keeps a transactional producer per sink."""

    def __init__(self, spark: SparkSession | None, settings: LakeSettings, bootstrap: str | None):
        self.spark = spark
        self.settings = settings
        self.bootstrap = bootstrap
        self.names = TableNames(settings.catalog_name)
        self._producers: dict[str, Any] = {}

    @property
    def progress_topic(self) -> str:
        return f"{self.settings.product_topic_prefix}._sinks"

    def client_conf(self) -> dict[str, Any]:
        # librdkafka logs errors only: retries while the broker loads its coordinators are expected
        return {"bootstrap.servers": self.bootstrap or "", "log_level": 3, **dict(self.settings.kafka_options)}

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

    def _topic_exists(self, topic: str) -> bool:
        from confluent_kafka.admin import AdminClient

        return topic in AdminClient(self.client_conf()).list_topics(timeout=10).topics

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

    def progress(self, sinks: Sequence[Sink], *, fence: bool = True) -> dict[str, Progress | None]:
        """Each Kafka sink's last committed progress record, from the progress topic.

        With `fence` (a deliverer), each sink's producer is made first: that fences a previous one (a
        crashed run, a commit that timed out) and settles its open transaction, so no commit lands
        after the progress is read. Without (`lakemv status`, beside a running stream) nothing is
        fenced or created."""
        if fence:
            for sink in sinks:
                self.producer(sink)
            self.ensure_topics([self.progress_topic])
        elif not self._topic_exists(self.progress_topic):
            return {sink.id: None for sink in sinks}
        records = self.latest_by_key(self.progress_topic)
        found: dict[str, Progress | None] = {}
        for sink in sinks:
            value = records.get(sink.id.encode())
            data = json.loads(value) if value else None
            found[sink.id] = Progress(data.get("snapshot"), int(data.get("sequence", 0))) if data else None
        return found

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
