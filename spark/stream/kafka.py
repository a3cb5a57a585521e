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

import json
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress

from lakemv.catalog.brokers import check_bootstrap
from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError
from lakemv.catalog.streams import KafkaTopics, kafka_checkpoint
from lakemv.core.batch.result import BatchResult, IngestResult, ViewResult
from lakemv.core.batch.units import KafkaCutter, Unit
from lakemv.core.cdc.transactions import GateReport
from lakemv.core.planner import ViewPlan
from lakemv.spark.sinks.products import Delivery
from lakemv.spark.stream.loop import Hooks, run_source


class KafkaSource:
    """Debezium's topics (and the transaction topic) through Spark's Kafka source, from the earliest offsets."""

    name = "kafka"

    def __init__(
        self, settings: LakeSettings, sources: Mapping[str, SourceTable], bootstrap: str, on_gate: Callable[[GateReport], None] | None = None
    ):
        if settings.engine_state:
            raise ConfigError("the engine state (LAKEMV_ENGINE_STATE) reads landing files only yet, not Kafka", "LAKEMV_ENGINE_STATE")
        self.settings = settings
        self.bootstrap = bootstrap
        self.topics = KafkaTopics.of(settings, sources)
        self.checkpoint = kafka_checkpoint(settings)
        events = {t for t, s in sources.items() if s.is_events}
        self.cutter = KafkaCutter(
            self.topics.tables, self.topics.collections.values(), self.topics.transaction_topic, events,
            self.checkpoint / "lakemv-transactions", settings.max_events_per_batch, on_gate,
        )  # fmt: skip

    def frame(self, spark: SparkSession) -> DataFrame:
        options = {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribePattern": self.topics.pattern,
            "startingOffsets": "earliest",
            "failOnDataLoss": "true",
            "maxOffsetsPerTrigger": str(self.settings.max_events_per_batch * 4),
            "kafka.metadata.max.age.ms": "5000",  # topics Debezium creates later are found within seconds
            **{f"kafka.{k}": v for k, v in self.settings.kafka_options},
        }
        return spark.readStream.format("kafka").options(**options).load().selectExpr("topic", "partition", "offset", "value")

    def start(self, once: bool) -> None:
        """A run starts (a once run's end offsets are Spark's: nothing to note here)."""

    def more(self, batch_id: int) -> bool:
        """Whether more of the run's backlog follows this batch: not known here (its units still hold
        their views for its last one: up to four units per batch)."""
        return False

    def units(self, frame: DataFrame, batch_id: int) -> list[Unit]:
        return self.cutter.units(frame.toArrow(), batch_id)

    def behind(self, progress: StreamingQueryProgress) -> dict[str, int]:
        """Per source table, the records its topic's partitions hold beyond the micro-batch's end offsets
        (the latest offsets Spark saw when it planned the batch; the transaction topic left out)."""
        return kafka_lag(progress, self.topics.tables)


def kafka_lag(progress: StreamingQueryProgress, tables: Mapping[str, str]) -> dict[str, int]:
    """Per table (topic -> table), the sum over its topic's partitions of latest minus end offset. (Read
    from the progress's JSON: PySpark's `SourceProgress` fields hold the Python repr of the offsets.)"""
    lag = dict.fromkeys(tables.values(), 0)
    for source in json.loads(progress.json).get("sources", []):
        latest, end = (json.loads(o) if isinstance(o, str) else (o or {}) for o in (source.get("latestOffset"), source.get("endOffset")))
        for topic, partitions in latest.items():
            if topic in tables and isinstance(partitions, dict):
                done = end.get(topic, {}) if isinstance(end, dict) else {}
                lag[tables[topic]] += sum(max(0, int(n) - int(done.get(p, 0))) for p, n in partitions.items())
    return lag


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
    on_behind: Callable[[Mapping[str, int]], None] | None = None,
) -> IngestResult:
    """Ingest Debezium topics from `bootstrap` and maintain `views`; with `once`, what the topics hold now."""
    bootstrap = check_bootstrap(bootstrap)
    if settings.kafka_bootstrap != bootstrap:  # the brokers read from are the default for the data products too
        settings = settings.model_copy(update={"kafka_bootstrap": bootstrap})
    source = KafkaSource(settings, sources, bootstrap, on_gate)
    hooks = Hooks(on_batch, on_build, on_ready, on_delivery, on_behind)
    return run_source(spark, settings, sources, views, source, once=once, trigger_seconds=trigger_seconds, hooks=hooks)
