"""How long the lake keeps what: the defaults of `lakemv compact`, its Prefect flow and its Iceberg
procedures (`lakemv.spark.compaction`), stated once."""

from __future__ import annotations

from datetime import timedelta

# A stream commits every few seconds: days of snapshots make every commit rewrite a metadata file that
# lists them all. A replayed batch finds its earlier appends by the write ids in snapshot summaries,
# so expiry also keeps every snapshot since the oldest unit a journal may still replay (`pinned_since`).
DEFAULT_RETENTION = timedelta(hours=1)
MIN_RETENTION = timedelta(minutes=15)
PIN_MARGIN = timedelta(minutes=10)  # a unit's first commits come after its journal entry; clocks differ
# Iceberg's own default: a file younger than this may belong to a commit still in flight.
DEFAULT_ORPHAN_AGE = timedelta(days=3)
MIN_ORPHAN_AGE = timedelta(hours=1)
# Tombstones guard against replays of old events (a replayed create must not resurrect a deleted
# row); keep them longer than the change stream's own retention (Kafka's default is 7 days).
DEFAULT_TOMBSTONE_RETENTION = timedelta(days=7)
MIN_TOMBSTONE_RETENTION = timedelta(hours=1)


def hours(span: timedelta) -> float:
    return span.total_seconds() / 3600
