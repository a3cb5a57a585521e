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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.sinks import FeedSnapshot, Progress, Sink, declared_sinks, feed_histories, pending, product_bootstrap
from lakemv.core.planner import ViewPlan
from lakemv.spark.session import use_catalog
from lakemv.spark.sinks.delta import DeltaSinks
from lakemv.spark.sinks.kafka import KafkaSinks


@dataclass
class Delivery:
    """What one `deliver` did for one sink."""

    sink: str
    snapshots: int = 0
    messages: int = 0
    resynced: bool = False
    error: str | None = None
    seconds: float = 0.0


class Publisher:
    """Delivers every declared sink's pending feed snapshots; keeps Kafka producers between calls."""

    def __init__(self, spark: SparkSession, settings: LakeSettings, sinks: Sequence[Sink]):
        session = spark.newSession()  # Delta's idempotency confs are set per session: a session of its own
        use_catalog(session, settings)
        self.settings = settings
        self.sinks = list(sinks)
        self._progress: dict[str, Progress | None] = {}
        self.kafka = KafkaSinks(session, settings, product_bootstrap(settings, self.sinks))
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
        histories: dict[str, list[FeedSnapshot]] = {}  # every sink's view's, from one read of the feeds table
        for sink in self.sinks:
            started = time.perf_counter()
            delivery = Delivery(sink.id)
            try:
                target = self.kafka if sink.kind == "kafka" else self.delta
                if sink.kind == "delta":
                    self.delta.ensure(sink)
                if not histories:
                    histories = feed_histories(self.settings, {s.view for s in self.sinks})
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
