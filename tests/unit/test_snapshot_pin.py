"""Snapshot expiry by hours stays exactly-once: what a stream's replay may need is kept. Pure (no JVM)."""

from __future__ import annotations

import time


def test_snapshot_expiry_keeps_what_a_streams_replay_may_need(tmp_path):
    """The oldest unit any journal still holds pins expiry: its replay looks for its earlier commits."""
    import pyarrow as pa

    from lakemv.catalog.storage import location
    from lakemv.core.batch.journal import BatchRef, Journal, TablePlan
    from lakemv.spark.compaction import pinned_since

    checkpoints = location(str(tmp_path / "_checkpoints"))
    assert pinned_since(checkpoints) is None
    before = time.time()
    saved = []
    for stream, batch in (("a", 3), ("b", 9)):
        Journal(checkpoints / f"ingest-{stream}" / "lakemv-journal").save(BatchRef(stream, batch), {"users": TablePlan(pa.table({"id": [1]}), None)})
        saved.append(time.time())
        time.sleep(0.05)
    pinned = pinned_since(checkpoints)
    assert pinned is not None and before - 0.01 <= pinned.timestamp() <= saved[0]  # the older journal's, however slow the machine
    Journal(checkpoints / "ingest-a" / "lakemv-journal").forget_before(BatchRef("a", 4))  # stream a moved on
    assert pinned_since(checkpoints).timestamp() > pinned.timestamp()
