"""Every shape of `workload/shapes.py` under random CDC histories, and checked by DuckDB.

The property of `test_view_properties` over the whole suite of shapes at once: a random history
(the same strategy, with usernames kept unique as `users` declares them) is fed batch by batch to one
processor maintaining every shape; after each batch, for each shape:

* view table == lakemv's own full recompute == the SQL run verbatim over the live mirrors;
* the change feed rows of the batch are exactly the view rows that changed or vanished;

and after the last batch `lakemv verify`'s check (the SQL transpiled to DuckDB by sqlglot, run over
the mirrors by DuckDB's iceberg reader) finds each view equal to its recompute (test_view_shapes runs
the same check after its hand-written batches). A last test shows `verify`'s plain refusal for a
construct DuckDB lacks.

Budget: 1 example in `make test`, a random history of 2 or 3 batches over one shape of each kind of
link and key (`KIND_SHAPES`, 13 of the 31; test_view_shapes' hand-written batches build and check all
31 the default way, with DuckDB's verify). One-batch histories are passed over, so the simplest history
Hypothesis always tries first costs nothing. A longer run, every shape in every history:
`LAKEMV_SHAPE_EXAMPLES=20 .venv/bin/pytest tests/integration/test_shape_properties.py` (more than one
example draws all 31; `LAKEMV_ALL_SHAPES=1` does so for one).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from lakemv.core.errors import QueryError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.duck.verify import verify_view
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.workload.shapes import SHAPES
from tests.cdc import at
from tests.integration.test_view_properties import (
    History,
    assert_feed_is_the_diff,
    assert_views_are_fresh,
    examples,
    fresh_lake,
    histories,
)
from tests.integration.test_view_shapes import KIND_SHAPES, assert_duckdb_agrees, shape_processor

EXAMPLES = int(os.environ.get("LAKEMV_SHAPE_EXAMPLES", "1"))
PROPERTY_SHAPES = tuple(SHAPES) if EXAMPLES > 1 or os.environ.get("LAKEMV_ALL_SHAPES") else KIND_SHAPES


@pytest.mark.slow(70)
@examples(EXAMPLES)
@given(history=histories(unique_usernames=True, later_batches=2), mode=st.sampled_from(["scan", "indexed", "direct"]))
def test_every_shape_equals_its_recomputes_after_every_random_batch(spark, tmp_path, sources, history, mode):
    assume(len(history.batches) > 1)  # rejected before any work: not counted as an example
    note(history.describe() + f"\nlookups and writes: {mode}")
    lake = fresh_lake(spark, tmp_path, sources)
    processor = shape_processor(lake, lake.settings.local_root, mode, PROPERTY_SHAPES)
    views = assert_views_are_fresh(lake, processor)
    for batch_id, batch in enumerate(history.batches):
        result = processor.process_lines(batch_id, [(e.line, at(e.table, f"b{batch_id}.json")) for e in batch])
        assert result.dead_letters == 0 and not any(v.held for v in result.views.values()), result
        fresh = assert_views_are_fresh(lake, processor)
        for m in processor.maintainers:
            assert_feed_is_the_diff(lake, m, batch_id, views[m.plan.name], fresh[m.plan.name])
        views = fresh
    assert_duckdb_agrees(lake, [m.plan for m in processor.maintainers])


def test_duckdb_names_what_it_cannot_translate(lake):
    """`verify`'s plain refusal for a construct DuckDB lacks (the shapes it checks: test_view_shapes)."""
    sounds = plan_view(parse_view("-- @key: email\nSELECT u.email, soundex(u.username) AS sound FROM users u", "sounds"), lake.sources)
    BatchProcessor(lake.spark, lake.names, lake.sources, [sounds])  # builds the view
    with pytest.raises(QueryError, match="cannot translate the view's SQL to DuckDB: SOUNDEX is not supported in DuckDB"):
        verify_view(lake.settings, lake.sources, "sounds", sounds.definition.sql, sounds.key_names)


def test_usernames_stay_unique_in_the_histories_of_this_suite():
    """The generator keeps usernames unique when asked (otherwise unique-key joins hold keys)."""
    from hypothesis import find
    from hypothesis.errors import NoSuchExample

    def duplicated(history: History) -> bool:
        live: dict[tuple, str] = {}
        for event in history.events:
            if event.table == "users" and event.replay_of is None:
                if event.after is None:
                    live.pop(event.key, None)
                else:
                    live[event.key] = event.after["username"]
                if len(set(live.values())) < len(live):
                    return True
        return False

    assert find(histories(), duplicated)  # the plain strategy does produce shared usernames
    with pytest.raises(NoSuchExample):
        find(histories(unique_usernames=True), duplicated, settings=settings(max_examples=300))
