"""The Delta data products (`lakemv.spark.sinks.products`): a Delta table with Change Data Feed per view, each feed
snapshot MERGEd with Delta's idempotent-write confs (`txnAppId` = the sink, `txnVersion` = the feed
snapshot's sequence number), so a repeated MERGE is skipped and Delta's log says how far a sink got."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.sinks import DeltaProgress, FeedSnapshot, Sink
from lakemv.catalog.storage import location
from lakemv.catalog.tables import TableNames
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.quote import q
from lakemv.core.sql.viewsql import DIFF_OP
from lakemv.spark.views.feeds import snapshot_rows


class DeltaSinks(DeltaProgress):
    """Delta delivery in a session of the publisher's own (the idempotency confs are per session)."""

    def __init__(self, spark: SparkSession, settings: LakeSettings):
        super().__init__(settings)
        self.spark = spark
        self.names = TableNames(settings.catalog_name)

    def ensure(self, sink: Sink) -> None:
        if (location(sink.target, self.settings.s3) / "_delta_log").is_dir():
            return
        if not self.settings.remote:
            Path(sink.target).parent.mkdir(parents=True, exist_ok=True)
        view = self.names.view(sink.view)
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.{q(sink.target)} USING delta "
            "TBLPROPERTIES (delta.enableChangeDataFeed = true, delta.appendOnly = false) "
            f"AS SELECT * FROM {view} WHERE false"
        )

    def _merge(self, sink: Sink, source_sql: str, version: int, *, delete_missing: bool) -> None:
        on = " AND ".join(f"t.{q(k)} <=> s.{q(k)}" for k in sink.key)
        values = [c for c in sink.columns if c not in sink.key]
        columns = ", ".join(q(c) for c in sink.columns)
        clauses = [f"WHEN MATCHED AND s.{DIFF_OP} = 'delete' THEN DELETE"]
        if values:
            clauses.append("WHEN MATCHED THEN UPDATE SET " + ", ".join(f"t.{q(c)} = s.{q(c)}" for c in values))
        clauses.append(f"WHEN NOT MATCHED AND s.{DIFF_OP} = 'upsert' THEN INSERT ({columns}) VALUES ({', '.join(f's.{q(c)}' for c in sink.columns)})")
        if delete_missing:
            clauses.append("WHEN NOT MATCHED BY SOURCE THEN DELETE")
        conf = self.spark.conf
        conf.set("spark.databricks.delta.write.txnAppId", self.app_id(sink))
        conf.set("spark.databricks.delta.write.txnVersion", str(version))
        try:
            crash_point("delta_merging", version)
            self.spark.sql(f"MERGE INTO delta.{q(sink.target)} t USING ({source_sql}) s ON {on} " + " ".join(clauses))
            crash_point("delta_merged", version)
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")

    def deliver_snapshot(self, sink: Sink, snapshot: FeedSnapshot) -> int:
        relation = f"_lmv_feed_{sink.view}"
        rows = snapshot_rows(self.spark, self.names, sink.view, sink.key, snapshot.parent_id, snapshot.snapshot_id)
        rows.createOrReplaceTempView(relation)
        try:
            keys = ", ".join(f"{q(k)}" for k in sink.key)
            values = ", ".join(f"row.{q(c)} AS {q(c)}" for c in sink.columns if c not in sink.key)
            select = f"SELECT op AS {DIFF_OP}, {keys}{', ' + values if values else ''} FROM {relation}"
            count = self.spark.sql(f"SELECT count(*) FROM ({select})").first()[0]
            self._merge(sink, select, snapshot.sequence, delete_missing=False)
        finally:
            self.spark.catalog.dropTempView(relation)
        return int(count)

    def resync(self, sink: Sink, at: FeedSnapshot | None) -> int:
        view = self.names.view(sink.view)
        select = f"SELECT 'upsert' AS {DIFF_OP}, {', '.join(q(c) for c in sink.columns)} FROM {view}"
        count = self.spark.table(view).count()
        self._merge(sink, select, at.sequence if at else 0, delete_missing=True)
        return int(count)
