"""Relations materialised for a step (`lakemv.spark.materialise`): held while the step reads them,
never recomputed, and their blocks freed when it ends, not when the JVM next collects garbage."""

from __future__ import annotations

import pytest

from lakemv.spark.materialise import materialise, materialised, release


def _persisted(spark) -> set[int]:
    """The ids of the RDDs whose blocks Spark holds."""
    return set(spark.sparkContext._jsc.getPersistentRDDs().keys())


def test_a_materialised_relation_is_held_while_the_step_runs_and_freed_after(spark):
    before = _persisted(spark)
    with materialised(spark.range(1000).selectExpr("id", "id * 2 AS twice"), "_lmv_test_kept") as kept:
        assert len(_persisted(spark) - before) == 1
        assert spark.sql("SELECT sum(twice) FROM _lmv_test_kept").first()[0] == 999_000
        assert kept.filter("id < 10").count() == 10
    assert _persisted(spark) - before == set()
    assert not spark.catalog.tableExists("_lmv_test_kept")
    with pytest.raises(Exception):  # its blocks are gone: reading it fails, it is never recomputed
        kept.count()


def test_a_released_relation_frees_its_blocks_even_if_a_step_failed(spark):
    before = _persisted(spark)
    with pytest.raises(ZeroDivisionError):
        with materialised(spark.range(10), "_lmv_test_failed"):
            1 / 0
    assert _persisted(spark) - before == set()
    assert not spark.catalog.tableExists("_lmv_test_failed")
    held = materialise(spark.range(10))
    assert len(_persisted(spark) - before) == 1
    release(held)
    assert _persisted(spark) - before == set()
