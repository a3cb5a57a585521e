"""Streaming ingest from Kafka: Debezium's topics through Spark's Kafka source, exactly once.

Each source table is read from its topic: the declaration's `topic`, else Debezium's
`<prefix>.<schema>.<table>` (settings `kafka_topic_prefix`, `kafka_schema`). Offsets live in the
streaming checkpoint; as for landing files, a micro-batch is applied in units of at most
`max_events_per_batch` records, each with its journal entry and write id, so a crash replays
exactly. Tombstones (null values) are skipped and counted; a bad record is a dead letter whose
`source_file` says `kafka:/<table>/<topic>@<partition>:<offset>`.

With Debezium's transaction metadata (`<prefix>.transaction`), a batch applies whole source
transactions only, in commit order (`lakemv.core.cdc.transactions`); what it holds back is saved with the
batch number beside the checkpoint, so a crash neither loses nor repeats it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import Location
from lakemv.core.batch.journal import BatchRef
from lakemv.core.batch.result import IngestResult, ViewResult
from lakemv.core.cdc.changeset import decode_lines
from lakemv.core.cdc.transactions import GateReport, Record, TransactionGate, units
from lakemv.core.errors import ConfigError
from lakemv.core.planner import ViewPlan
from lakemv.core.runtime import lifecycle
from lakemv.spark.batch.runner import BatchResult
from lakemv.spark.sinks.products import Delivery, Products
from lakemv.spark.stream.files import new_processor, run_stream, stream_id

_ADDRESS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d+(,[A-Za-z0-9_.\-\[\]:]+:\d+)*$")


@dataclass(frozen=True)
class KafkaTopics:
    """Which topic feeds which table, the data collections they are, and the transaction topic."""

    tables: Mapping[str, str]  # topic -> source table
    collections: Mapping[str, str]  # source table -> `<schema>.<table>` as Debezium names it
    transaction_topic: str | None

    @classmethod
    def of(cls, settings: LakeSettings, sources: Mapping[str, SourceTable]) -> KafkaTopics:
        tables, collections = {}, {}
        for name, source in sorted(sources.items()):
            # Debezium names a table's topic `<prefix>.<schema>.<table>`; an event stream's is its name
            topic = source.topic or (name if source.is_events else f"{settings.kafka_topic_prefix}.{settings.kafka_schema}.{name}")
            if topic in tables:
                raise ConfigError(f"topic {topic!r} is declared for both {tables[topic]} and {name}", "sources")
            tables[topic] = name
            parts = topic.split(".")
            collections[name] = ".".join(parts[-2:]) if len(parts) >= 2 else f"{settings.kafka_schema}.{name}"
        transactions = None
        if settings.kafka_transactions != "off":
            transactions = settings.kafka_transaction_topic or f"{settings.kafka_topic_prefix}.transaction"
        return cls(tables, collections, transactions)

    @property
    def pattern(self) -> str:
        """The subscribePattern: every data topic, and the transaction topic (topics may come later)."""
        names = sorted(self.tables) + ([self.transaction_topic] if self.transaction_topic else [])
        return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def check_bootstrap(bootstrap: str, where: str = "--kafka") -> str:
    """`HOST:PORT[,HOST:PORT...]`, or a usage error saying what was expected (and where it came from)."""
    text = bootstrap.strip()
    if not _ADDRESS.match(text):
        raise ConfigError(f"expected HOST:PORT (comma-separated for several brokers), got {bootstrap!r}", where)
    return text


def reach_brokers(bootstrap: str, options: Sequence[tuple[str, str]] = (), timeout: float = 10.0) -> None:
    """ConfigError unless a broker at `bootstrap` answers within `timeout` (Spark's Kafka source would
    wait for one forever)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": bootstrap, "log_level": 0, **dict(options)}  # its log lines would repeat our one
    try:
        AdminClient(conf).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ConfigError(
            f"no Kafka broker answered at {bootstrap} within {timeout:.0f} s ({exc.args[0].str() if exc.args else exc}): "
            "start Kafka (lakemv stack up), or fix --kafka / LAKEMV_KAFKA_BOOTSTRAP",
            "--kafka",
        ) from None


def kafka_checkpoint(settings: LakeSettings) -> Location:
    """One checkpoint per (catalog, topic prefix): the broker address may change, the offsets not."""
    digest = hashlib.sha1(f"{settings.catalog_name}:kafka:{settings.kafka_topic_prefix}".encode()).hexdigest()[:12]
    return settings.checkpoint_root / f"kafka-{digest}"


def consumed_offsets(checkpoint: Location) -> dict[tuple[str, int], int]:
    """Per topic partition, the offset the stream has consumed up to: the end offsets of its last
    committed batch, from Spark's checkpoint (empty before the first)."""
    committed = [int(n) for n in (checkpoint / "commits").children() if n.isdigit()]
    if not committed:
        return {}
    lines = (checkpoint / "offsets" / str(max(committed))).read_text().splitlines()
    source = json.loads(lines[2]) if len(lines) > 2 else {}  # v1, the batch's metadata, then the Kafka source's offsets
    return {(topic, int(p)): int(o) for topic, parts in source.items() for p, o in parts.items()}


def records_behind(bootstrap: str, pattern: str, consumed: Mapping[tuple[str, int], int], options: Sequence[tuple[str, str]] = ()) -> int:
    """Records in the stream's topics past what it consumed (a topic it has not read yet counts whole)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakemv-status", "enable.auto.commit": False, "log_level": 0, **dict(options)})
    try:
        matching = re.compile(pattern)
        behind = 0
        for topic, meta in consumer.list_topics(timeout=5).topics.items():
            if not matching.match(topic):
                continue
            for partition in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
                behind += max(0, high - max(low, consumed.get((topic, partition), low)))
        return behind
    finally:
        consumer.close()


def mode_path(checkpoint: Location) -> Location:
    """Where the stream records which transaction mode it ran in (read by `lakemv status`)."""
    return checkpoint / "lakemv-transactions" / "mode.json"


def run_kafka_ingest(
    spark: SparkSession,
    settings: LakeSettings,
    sources: Mapping[str, SourceTable],
    bootstrap: str,
    *,
    once: bool,
    trigger_seconds: float = 2.0,
    on_batch: Callable[[BatchResult], None] | None = None,
    views: Sequence[ViewPlan] = (),
    on_build: Callable[[ViewResult], None] | None = None,
    on_ready: Callable[[], None] | None = None,
    on_gate: Callable[[GateReport], None] | None = None,
    on_delivery: Callable[[Delivery], None] | None = None,
) -> IngestResult:
    """Ingest Debezium topics from `bootstrap` and maintain `views`; with `once`, what the topics hold now."""
    bootstrap = check_bootstrap(bootstrap)
    if settings.kafka_bootstrap != bootstrap:  # the brokers read from are the default for the data products too
        settings = settings.model_copy(update={"kafka_bootstrap": bootstrap})
    topics = KafkaTopics.of(settings, sources)
    checkpoint = kafka_checkpoint(settings)
    processor = new_processor(spark, settings, sources, views, checkpoint)
    for built in processor.built:
        if on_build is not None:
            on_build(built)
    products = Products.of(spark, settings, views, on_delivery)
    result = IngestResult()
    gates = checkpoint / "lakemv-transactions"
    collections = set(topics.collections.values())
    identity: list[str] = []

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        lifecycle.check()
        if not identity:
            identity.append(stream_id(checkpoint))
        table = frame.toArrow().sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        topic_of, partition, offset = (table.column(c).to_pylist() for c in ("topic", "partition", "offset"))
        value = decode_lines(table.column("value").to_pylist())  # bytes: a record that is not UTF-8 is a dead letter
        records, boundaries = [], []
        for i in range(table.num_rows):
            if topics.transaction_topic is not None and topic_of[i] == topics.transaction_topic:
                boundaries.append(value[i])
                continue
            name = topics.tables.get(topic_of[i], topic_of[i].rsplit(".", 1)[-1])  # a topic no longer declared: a dead letter
            records.append(Record(f"kafka:/{name}/{topic_of[i]}@{partition[i]}:{offset[i]}", name, value[i]))
        cuts = list(range(1, len(records) + 1))  # without transactions: any record ends a unit
        if topics.transaction_topic is None and gates.is_dir():  # switched off: what was held is applied first
            gate = TransactionGate.load(gates, batch_id, collections)
            held = gate.drain()
            if held:
                records = held + records
                cuts = list(range(1, len(records) + 1))
            TransactionGate.save(gates, batch_id, gate)
        if topics.transaction_topic is not None:
            # An event stream has no source transactions (and an event's own `transaction` field is
            # not Debezium's): its records pass the gate, after the changes it releases.
            streams = {t for t, s in sources.items() if s.is_events}
            events = [r for r in records if r.table in streams]
            records = [r for r in records if r.table not in streams]
            gate = TransactionGate.load(gates, batch_id, collections)
            records, report = gate.admit(records, boundaries)
            cuts = [*report.cuts, *range(len(records) + 1, len(records) + len(events) + 1)]
            records = records + events
            TransactionGate.save(gates, batch_id, gate)  # before any unit: a replay recomputes the same
            _record_mode(checkpoint, gate, report)
            if on_gate is not None:
                on_gate(report)
        if not records:  # nothing, or every change held for its transaction
            return
        spans = list(units(len(records), cuts, settings.max_events_per_batch))
        for chunk, (start, end) in enumerate(spans):
            lines = [(r.value, r.origin) for r in records[start:end]]
            outcome = processor.process(BatchRef(identity[0], batch_id, chunk), lines, last=chunk == len(spans) - 1)
            result.batches.append(outcome)
            if on_batch is not None:
                on_batch(outcome)
            products.deliver()

    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": topics.pattern,
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "maxOffsetsPerTrigger": str(settings.max_events_per_batch * 4),
        "kafka.metadata.max.age.ms": "5000",  # topics Debezium creates later are found within seconds
        **{f"kafka.{k}": v for k, v in settings.kafka_options},
    }
    stream = (
        spark.readStream.format("kafka").options(**options).load()
        .selectExpr("topic", "partition", "offset", "value")
    )  # fmt: skip
    name = f"lakemv_kafka_{settings.catalog_name}"
    run_stream(stream, each_batch, checkpoint, name, processor, products, once=once, trigger_seconds=trigger_seconds, on_ready=on_ready)
    return result


def _record_mode(checkpoint: Location, gate: TransactionGate, report: GateReport) -> None:
    path = mode_path(checkpoint)
    mode = {
        "mode": "whole transactions" if gate.seen_metadata else "per change (no transaction metadata seen yet)",
        "held_changes": report.held,
        "waiting_transactions": report.waiting,
        "oldest_waiting": report.oldest_waiting,
        "oldest_waiting_seconds": report.oldest_seconds,
    }
    path.write_text(json.dumps(mode))
