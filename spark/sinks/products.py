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

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError
from lakemv.core.planner import ViewPlan
from lakemv.core.planner.definitions import SINK_KINDS
from lakemv.spark.session import use_catalog
from lakemv.spark.sinks.delta import DeltaSinks
from lakemv.spark.sinks.feed import FeedSnapshot, Progress, Sink, feed_history, pending
from lakemv.spark.sinks.kafka import KafkaSinks, message_key, message_value

__all__ = [
    "Delivery", "FeedSnapshot", "Products", "Progress", "Publisher", "Sink", "SinkLag",
    "declared_sinks", "feed_history", "message_key", "message_value", "pending",
]  # fmt: skip


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
        target = f"{settings.product_topic_prefix}.{view}" if kind == "kafka" else (settings.delta_root / view).hadoop
        sinks.append(Sink(view, kind, target, tuple(plan.key_names), tuple(plan.columns), settings.catalog_name))
    return sinks


class Publisher:
    """Delivers every declared sink's pending feed snapshots; keeps Kafka producers between calls."""

    def __init__(self, spark: SparkSession | None, settings: LakeSettings, sinks: Sequence[Sink]):
        """Without a SparkSession it can only tell the sinks' lags (`lags`), as `lakemv status` does."""
        session = None
        if spark is not None:
            session = spark.newSession()  # Delta's idempotency confs are set per session: a session of its own
            use_catalog(session, settings)
        self.settings = settings
        self.sinks = list(sinks)
        self._progress: dict[str, Progress | None] = {}
        bootstrap = settings.product_bootstrap or settings.kafka_bootstrap
        if any(s.kind == "kafka" for s in self.sinks) and not bootstrap:
            raise ConfigError("a view has a kafka sink but no brokers are set: LAKEMV_PRODUCT_BOOTSTRAP or LAKEMV_KAFKA_BOOTSTRAP")
        self.kafka = KafkaSinks(session, settings, bootstrap)
        self.delta = DeltaSinks(session, settings)

    # ---- delivering ------------------------------------------------------------------------------
    def _progress_of(self, sink: Sink, history: Sequence[FeedSnapshot], *, fence: bool = True) -> Progress | None:
        if sink.id not in self._progress:
            if sink.kind == "kafka":
                self._progress.update(self.kafka.progress([s for s in self.sinks if s.kind == "kafka"], fence=fence))
            else:
                self._progress[sink.id] = self.delta.progress(sink, history)
        return self._progress.get(sink.id)

    def deliver(self, *, resync: bool = True) -> list[Delivery]:
        """Deliver every sink's pending feed snapshots; a sink that fails is reported, the others go on.
        Without `resync`, a sink that would publish its whole view waits (at start-up, the batch a crash
        cut short may still be replayed: the view is only whole after it)."""
        done = []
        histories: dict[str, list[FeedSnapshot]] = {}  # one catalog read per view, however many sinks it has
        for sink in self.sinks:
            started = time.perf_counter()
            delivery = Delivery(sink.id)
            try:
                target = self.kafka if sink.kind == "kafka" else self.delta
                if sink.kind == "delta":
                    self.delta.ensure(sink)
                if sink.view not in histories:
                    histories[sink.view] = feed_history(self.settings, sink.view)
                history = histories[sink.view]
                progress = self._progress_of(sink, history)
                todo, whole = pending(history, progress)
                if whole and not resync:
                    continue
                if whole:
                    latest = history[-1] if history else None
                    delivery.messages += target.resync(sink, latest)
                    delivery.resynced = True
                    self._progress[sink.id] = Progress(latest.snapshot_id if latest else None, latest.sequence if latest else 0)
                for snapshot in todo:
                    delivery.messages += target.deliver_snapshot(sink, snapshot)
                    delivery.snapshots += 1
                    self._progress[sink.id] = Progress(snapshot.snapshot_id, snapshot.sequence)
            except Exception as exc:  # noqa: BLE001 - a sink's failure must not stop the stream; it retries next batch
                from lakemv.core.failures import classify

                delivery.error = classify(exc).line
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
                progress = self._progress_of(sink, history, fence=False)
                todo, resync = pending(history, progress)
                if resync:
                    todo = [s for s in history if s.append]
                oldest = datetime.fromtimestamp(todo[0].committed_ms / 1000, UTC) if todo else None
                found.append(SinkLag(sink, len(todo), oldest, progress.sequence if progress else None))
            except Exception as exc:  # noqa: BLE001 - status reports, never fails
                from lakemv.core.failures import classify

                found.append(SinkLag(sink, 0, None, None, classify(exc).line))
        return found

    def close(self) -> None:
        self.kafka.close()


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

    def deliver(self, *, resync: bool = True) -> list[Delivery]:
        if self.publisher is None:
            return []
        done = self.publisher.deliver(resync=resync)
        self.deliveries.extend(done)
        if self.on_delivery is not None:
            for delivery in done:
                if delivery.messages or delivery.error:
                    self.on_delivery(delivery)
        return done

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
