"""The contract lakemv's JVM operator keeps over Spark's internal state store API (KeyedState.java): it
fails here, not in a batch, when Spark changes under it."""

from __future__ import annotations

import pytest
from lakemv.spark.frames import local_frame
from lakemv.spark.engine.keyed import KeyedStore
from pyspark.sql import functions as F


def _changes(spark, rows):
    return local_frame(spark, rows, "space INT, a STRING, b STRING, v STRING").select(
        "space",
        F.col("a").cast("binary").alias("a"),
        F.coalesce(F.col("b"), F.lit("")).cast("binary").alias("b"),
        F.col("v").cast("binary").alias("v"),
    )


def _asked(spark, rows):
    return local_frame(spark, rows, "space INT, a STRING, tag STRING").select(
        "space",
        F.col("a").cast("binary").alias("a"),
        F.col("tag").cast("binary").alias("tag"),
    )


def _text(rows, *columns):
    return sorted(tuple(None if r[c] is None else (r[c] if isinstance(r[c], int) else bytes(r[c]).decode()) for c in columns) for r in rows)


@pytest.fixture
def store(spark, tmp_path):
    return KeyedStore(spark, str(tmp_path / "state"), partitions=3)


def test_entries_are_found_by_space_and_a_every_b_of_them_and_a_miss_says_so(spark, store):
    written = store.update(_changes(spark, [(1, "alice", None, "row-a"), (11, "al", "alice", "row-a"), (11, "al", "albert", "row-b"),
                                            (11, "bo", "bob", "row-c"), (12, "al", "x", "other space")]), 0).collect()  # fmt: skip
    assert _text(written, "space", "a", "old") == [
        (1, "alice", None),
        (11, "al", None),
        (11, "al", None),
        (11, "bo", None),
        (12, "al", None),
    ]
    # a request whose a is NULL (a value compared where the link is not null-safe) asks nothing: no row
    found = store.lookup(_asked(spark, [(11, "al", "t1"), (1, "alice", "t2"), (11, "zed", "t3"), (11, None, "t9")]), 1).collect()
    assert _text(found, "space", "a", "tag", "b", "v") == [
        (1, "alice", "t2", "", "row-a"), (11, "al", "t1", "albert", "row-b"), (11, "al", "t1", "alice", "row-a"), (11, "zed", "t3", None, None)
    ]  # fmt: skip
    assert store.counts(1) == {1: 1, 11: 3, 12: 1}
    # a repeated request is answered once; the same (space, a) under another tag is answered for it too
    again = store.lookup(_asked(spark, [(11, "al", "t1"), (11, "al", "t1"), (11, "al", "t2"), (1, "alice", None), (1, "alice", None)]), 1).collect()
    assert _text(again, "space", "a", "tag", "b") == [
        (1, "alice", None, ""), (11, "al", "t1", "albert"), (11, "al", "t1", "alice"), (11, "al", "t2", "albert"), (11, "al", "t2", "alice")
    ]  # fmt: skip
    # grouped: one row per entry found, with every distinct tag that asked for its (space, a); a miss keeps its tags
    grouped = store.lookup(
        _asked(spark, [(11, "al", "t1"), (11, "al", "t2"), (11, "al", "t1"), (1, "alice", "t3"), (11, "zed", "t4"), (11, None, "t9")]),
        1,
        grouped=True,
    )
    assert sorted(
        (r["space"], bytes(r["a"]).decode(), sorted(bytes(t).decode() for t in r["tags"]), *[None if r[c] is None else bytes(r[c]).decode() for c in ("b", "v")])
        for r in grouped.collect()
    ) == [
        (1, "alice", ["t3"], "", "row-a"), (11, "al", ["t1", "t2"], "albert", "row-b"), (11, "al", ["t1", "t2"], "alice", "row-a"), (11, "zed", ["t4"], None, None)
    ]  # fmt: skip


def test_an_update_reports_what_it_replaced_and_a_null_value_deletes(spark, store):
    store.update(_changes(spark, [(1, "alice", None, "v1"), (1, "bob", None, "v1")]), 0).collect()
    replaced = store.update(
        _changes(
            spark,
            [
                (1, "alice", None, "v2"),
                (1, "bob", None, None),
                (1, "carol", None, "v1"),
            ],
        ),
        1,
    ).collect()
    assert _text(replaced, "a", "v", "old") == [
        ("alice", "v2", "v1"),
        ("bob", None, "v1"),
        ("carol", "v1", None),
    ]
    assert _text(store.lookup(_asked(spark, [(1, "alice", ""), (1, "bob", ""), (1, "carol", "")]), 2).collect(), "a", "v") == [
        ("alice", "v2"), ("bob", None), ("carol", "v1")
    ]  # fmt: skip
    assert _text(store.lookup(_asked(spark, [(1, "alice", "")]), 1).collect(), "v") == [("v1",)]  # an older version still reads


def test_a_blind_update_writes_and_deletes_without_reading_what_it_replaces(spark, store):
    """An index's moves never read what they replace: a blind update puts and deletes as told, gives no
    old value, and refuses an order or a kept prefix (which would need the entry read)."""
    from pyspark.errors import IllegalArgumentException

    store.update(_changes(spark, [(1, "alice", None, "v1"), (1, "bob", None, "v1")]), 0).collect()
    blind = store.update(_changes(spark, [(1, "alice", None, "v2"), (1, "bob", None, None), (1, "carol", None, None)]), 1, blind=True).collect()
    assert _text(blind, "a", "v", "old") == [("alice", "v2", None), ("bob", None, None), ("carol", None, None)]
    assert _text(store.scan(2).collect(), "a", "v") == [("alice", "v2")]
    ordered = _changes(spark, [(1, "alice", None, "v3")]).withColumn("s", F.lit(5).cast("bigint"))
    with pytest.raises(IllegalArgumentException, match="a blind write has no order"):
        store.update(ordered, 2, blind=True)


def test_a_replayed_version_is_written_again_and_what_followed_is_gone(spark, store):
    store.update(_changes(spark, [(1, "k", None, "first")]), 0).collect()
    store.update(_changes(spark, [(1, "k", None, "second")]), 1).collect()
    store.update(_changes(spark, [(1, "k", None, "third")]), 2).collect()
    replayed = store.update(_changes(spark, [(1, "k", None, "second, again")]), 1).collect()  # a crash after 2: the batch of 1 again
    assert _text(replayed, "old") == [("first",)]
    assert _text(store.lookup(_asked(spark, [(1, "k", "")]), 2).collect(), "v") == [("second, again",)]


def test_the_state_survives_its_process_losing_it(spark, store, tmp_path):
    store.update(_changes(spark, [(1, f"key{i}", None, f"value{i}") for i in range(50)]), 0).collect()
    store.update(_changes(spark, [(1, "key7", None, "changed")]), 1).collect()
    spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()  # every loaded store unloaded
    again = KeyedStore(spark, store.location, partitions=3, operator=0)
    assert again.counts(2) == {1: 50}
    assert _text(
        again.lookup(_asked(spark, [(1, "key7", ""), (1, "key8", "")]), 2).collect(),
        "v",
    ) == [("changed",), ("value8",)]


def test_a_round_applies_its_writes_before_its_reads_and_answers_a_repeated_read_once(spark, store):
    store.update(_changes(spark, [(1, "alice", None, "v1"), (11, "al", "alice", "v1")]), 0).collect()
    ops = _changes(spark, [(1, "alice", None, "v2"), (11, "al", "albert", "v9"), (11, "al", "alice", None)]).select(
        "*", F.lit(None).cast("binary").alias("tag"), F.lit(False).alias("read")
    )
    reads = _asked(spark, [(11, "al", "t1"), (1, "alice", "t2"), (1, "nobody", "t3"), (11, "al", "t1")]).select(
        "space", "a", F.lit(None).cast("binary").alias("b"), F.lit(None).cast("binary").alias("v"), "tag", F.lit(True).alias("read")
    )
    done = store.round(reads.unionByName(ops), 1).collect()
    assert _text([r for r in done if not r["read"]], "space", "a", "b", "v", "old") == [
        (1, "alice", "", "v2", "v1"), (11, "al", "albert", "v9", None), (11, "al", "alice", None, "v1")
    ]  # fmt: skip
    assert _text([r for r in done if r["read"]], "space", "a", "tag", "b", "v") == [
        (1, "alice", "t2", "", "v2"), (1, "nobody", "t3", None, None), (11, "al", "t1", "albert", "v9")
    ]  # fmt: skip
    assert store.counts(2) == {1: 1, 11: 1}


def test_rows_already_placed_by_space_and_a_are_not_shuffled_again(spark, store):
    """A grouping by (space, a) into the state's partition count places rows as the state does: the round
    reads them where they are (one shuffle, not two), and every entry still lands where lookups find it."""
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    changes = _changes(spark, [(1, f"k{i % 50}", None, f"v{i}") for i in range(200)])
    latest = changes.groupBy("space", "a").agg(F.max("v").alias("v")).select("space", "a", F.lit(b"").cast("binary").alias("b"), "v")
    written = store.update(latest, 0)
    assert written._jdf.queryExecution().toRdd().toDebugString().count("ShuffledRowRDD") == 1
    assert len(written.collect()) == 50
    found = store.lookup(_asked(spark, [(1, f"k{i}", None) for i in range(50)]), 1).collect()
    assert all(r["v"] is not None for r in found) and len(found) == 50


def test_a_scan_reads_every_entry_of_a_version(spark, store):
    store.update(_changes(spark, [(1, "alice", None, "v1"), (11, "al", "alice", "v1"), (1, "bob", None, "b1")]), 0).collect()
    store.update(_changes(spark, [(1, "bob", None, None), (1, "carol", None, "c1")]), 1).collect()
    assert _text(store.scan(1).collect(), "space", "a", "b", "v") == [(1, "alice", "", "v1"), (1, "bob", "", "b1"), (11, "al", "alice", "v1")]
    assert _text(store.scan(2).collect(), "space", "a", "b", "v") == [(1, "alice", "", "v1"), (1, "carol", "", "c1"), (11, "al", "alice", "v1")]


def test_an_ordered_change_older_than_its_entry_is_not_written_and_a_delete_leaves_a_tombstone(spark, store):
    """A change with an order (`s`: its source position) is written only over an entry no newer than it:
    a snapshot's read of a row changed since, or a replayed stretch of the stream, leaves the newer row."""

    def ordered(rows):
        return local_frame(spark, rows, "a STRING, v STRING, s BIGINT").select(
            F.lit(1).alias("space"),
            F.col("a").cast("binary").alias("a"),
            F.lit(b"").cast("binary").alias("b"),
            F.col("v").cast("binary").alias("v"),
            "s",
        )

    store.update(ordered([("alice", "a@10", 10), ("bob", "b@10", 10)]), 0).collect()
    done = store.update(ordered([("alice", "a@5", 5), ("bob", "b@20", 20), ("carol", "c@1", 1)]), 1).collect()
    # the stale change gives the entry's value as both v and old: nothing moved
    assert _text(done, "a", "v", "old") == [("alice", "a@10", "a@10"), ("bob", "b@20", "b@10"), ("carol", "c@1", None)]
    gone = store.update(ordered([("bob", None, 30)]), 2).collect()
    assert _text(gone, "a", "v", "old") == [("bob", None, "b@20")]
    late = store.update(ordered([("bob", "b@25", 25), ("alice", "a@10", 10)]), 3).collect()  # older than bob's delete; alice replayed
    assert _text(late, "a", "v", "old") == [("alice", "a@10", "a@10"), ("bob", None, None)]
    found = store.lookup(_asked(spark, [(1, "alice", None), (1, "bob", None)]), 4).collect()
    assert _text(found, "a", "v") == [("alice", "a@10"), ("bob", None)]  # the tombstone holds no row
    again = store.update(ordered([("bob", "b@31", 31)]), 4).collect()  # newer than the delete: the row is back
    assert _text(again, "a", "v", "old") == [("bob", "b@31", None)]
    # a change without an order is written whatever the entry's order, and its delete removes the entry
    plain = store.update(_changes(spark, [(1, "bob", None, "plain"), (1, "alice", None, None)]), 5).collect()
    assert _text(plain, "a", "v", "old") == [("alice", None, "a@10"), ("bob", "plain", "b@31")]
    assert _text(store.scan(6).collect(), "space", "a", "v") == [(1, "bob", "plain"), (1, "carol", "c@1")]


def test_a_change_marked_p_whose_value_begins_the_entry_keeps_the_entry(spark, store):
    """A view row's entry is its digest, then its place in the view's table: a diff writes the digest
    alone with `p`, and an entry that already begins with it keeps its place; another digest replaces it,
    and the old value (with its place) comes back for the row's delete."""

    def marked(rows, p=True):
        return local_frame(spark, rows, "a STRING, v STRING").select(
            F.lit(1).alias("space"),
            F.col("a").cast("binary").alias("a"),
            F.lit(b"").cast("binary").alias("b"),
            F.col("v").cast("binary").alias("v"),
            F.lit(p).alias("p"),
        )

    store.update(marked([("alice", "d1|f1:0"), ("bob", "d2|f1:1")], p=False), 0).collect()
    done = store.update(marked([("alice", "d1|"), ("bob", "d9|"), ("carol", "d3|"), ("dave", None)]), 1).collect()
    assert _text(done, "a", "v", "old") == [("alice", "d1|f1:0", "d1|f1:0"), ("bob", "d9|", "d2|f1:1"), ("carol", "d3|", None), ("dave", None, None)]
    # without p the same value is written as it is
    plain = store.update(marked([("alice", "d1|")], p=False), 2).collect()
    assert _text(plain, "a", "v", "old") == [("alice", "d1|", "d1|f1:0")]
    assert _text(store.scan(3).collect(), "a", "v") == [("alice", "d1|"), ("bob", "d9|"), ("carol", "d3|")]
