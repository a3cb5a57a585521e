"""The indexed state in Spark's state stores, through lakemv's JVM operator
(`jvm/java/dev/lakemv/state/KeyedState.java`): one RocksDB store per partition, on the executors.

Every index lives in one store, told apart by its space (an int): entries `(space, a, b) -> v`, looked up
by `(space, a)`. A round is one shuffle of its requests by `(space, a)` into the state's partitions (fixed
when the state is made) and one pass over each partition's store: `lookup` reads version N, `update`
writes N+1 over N (a replay at N writes the same N+1 again). Python composes rounds; rows stay in the JVM.

The store's own configuration: RocksDB with changelog checkpoints (a commit uploads a small delta;
snapshots in the background) and its memory bounded (`STATE_CONF`; in `local[*]` the executors are the
driver's JVM).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "500",
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
}
_RUNS: dict[str, str] = {}  # state location -> the run id this process loads it under (one per process and location)


def configure(spark: SparkSession, conf: Mapping[str, str] = STATE_CONF) -> None:
    """The state store's configuration in `spark`'s SQL conf, and the coordinator the executors report to."""
    for key, value in conf.items():
        spark.conf.set(key, value)
    spark.streams  # noqa: B018 - creates the state store coordinator (the executors report their stores to it)


class KeyedStore:
    """One keyed store at `location`: `partitions` RocksDB stores, versioned by the caller's sequence."""

    def __init__(self, spark: SparkSession, location: str, partitions: int, operator: int = 0):
        configure(spark)
        self.spark = spark
        self.location = location
        self.partitions = partitions
        run = _RUNS.setdefault(f"{location}#{operator}", str(uuid.uuid4()))
        self._state = spark.sparkContext._jvm.dev.lakemv.state.KeyedState(location, run, operator, partitions)  # type: ignore[union-attr]

    def lookup(self, requests: DataFrame, version: int, grouped: bool = False) -> DataFrame:
        """Every entry each request `(space int, a binary, tag binary)` names, at `version`: the
        request's columns with the entry's `b` and `v` (both null when none matches). `grouped`: one
        row per entry found, its `tags` (an array) every distinct tag that asked for its `(space, a)`."""
        return DataFrame(
            self._state.lookup(self.spark._jsparkSession, requests._jdf, version, grouped),
            self.spark,
        )

    def update(self, changes: DataFrame, version: int, blind: bool = False) -> DataFrame:
        """Writes `changes` `(space int, a binary, b binary, v binary: null deletes)` over `version`,
        committing `version + 1`; each change with the value it replaced (`old`). `blind`: the entries
        replaced are not read (`old` null; no order `s`, no kept prefix `p`), for writes whose caller never
        reads them. Lazy: runs when the result is evaluated, once."""
        return DataFrame(
            self._state.update(self.spark._jsparkSession, changes._jdf, version, blind),
            self.spark,
        )

    def round(self, ops: DataFrame, version: int) -> DataFrame:
        """One round of writes and reads `(space int, a binary, b binary, v binary, tag binary, read
        boolean)` over `version`, committing `version + 1`; every read sees the round's writes. A write
        gives `(read=false, space, a, b, v, old, tag)`, a read every entry under `(space, a)` as `(read=true,
        space, a, b, v, old=null, tag)` (one row with b and v null when none). Lazy, like `update`."""
        return DataFrame(self._state.round(self.spark._jsparkSession, ops._jdf, version), self.spark)

    def scan(self, version: int) -> DataFrame:
        """Every entry `(space, a, b, v)` at `version`, read on the executors that hold it (a full scan)."""
        return DataFrame(self._state.scan(self.spark._jsparkSession, version), self.spark)

    def counts(self, version: int) -> dict[int, int]:
        """Entries per space at `version` (a full scan)."""
        return {int(r["space"]): int(r["entries"]) for r in DataFrame(self._state.count(self.spark._jsparkSession, version), self.spark).collect()}
