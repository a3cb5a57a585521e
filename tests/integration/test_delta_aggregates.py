"""Aggregates by delta: a grouped view and a total over one table follow a batch's signed rows (old
images subtracted, new ones added) instead of reading their groups, and equal their SQL run in full
after every batch of a random history, through retracted extremes, deletes of whole groups, replays
and units that die after the view's commit.

The history is seeded (three seeds, eight batches each, on a domain of 3 statuses, 4 authors and 12
pull requests, so groups gain, lose, empty and refill); the full runs are Spark's of the user's SQL
(chispa, exact: counts, integer sums and averages, timestamps and strings for the extremes) and
DuckDB's verify. Decimal sums and averages by delta are checked by the TPC-H test (Q1, Q6).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from chispa import assert_df_equality

from lakemv.catalog.tables import live_rows_sql
from lakemv.core.batch.journal import BatchRef, Journal
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.store import Store
from lakemv.duck.verify import verify_plan
from lakemv.spark.batch.runner import BatchProcessor
from tests.cdc import at, dbz
from tests.crashes import crashing_at

VIEWS = {
    "pr_status": """-- @key: status
SELECT status, count(*) AS prs, count(author) AS authored, count_if(title = 'fix') AS fixes, sum(`index`) AS total,
       avg(`index`) AS mean, min(created_at) AS first, max(created_at) AS last, max(title) AS top_title, sum(`index`) * 2 - count(*) AS mixed
FROM pull_requests WHERE repo <> 'skip' GROUP BY status""",
    "pr_all": """-- @key: scope
SELECT 'all' AS scope, count(*) AS prs, sum(`index`) AS total, avg(`index`) AS mean, min(author) AS first_author FROM pull_requests""",
}
STATUSES, AUTHORS, TITLES = ("open", "merged", None), ("ann", "bob", "cy", None), ("fix", "feat", None)
TIMES = ("2024-03-01T12:00:00Z", "2024-03-02T12:00:00Z", "2024-03-03T12:00:00Z", None)


def plans(sources) -> list:
    return [plan_view(parse_view(text, name), sources) for name, text in VIEWS.items()]


def processor(lake, folder: Path) -> BatchProcessor:
    store, journal = Store(folder / "state.sqlite"), Journal(folder / "journal")
    return BatchProcessor(lake.spark, lake.names, lake.sources, plans(lake.sources), journal=journal, store=store, view_workers=1)


def pr(repo: str, index: int, rng: random.Random) -> dict:
    return {"title": rng.choice(TITLES), "repo": repo, "repo_owner": "o", "index": index, "author": rng.choice(AUTHORS),
            "status": rng.choice(STATUSES), "created_at": rng.choice(TIMES)}  # fmt: skip


def batches(seed: int, count: int = 8) -> list[list[tuple[str, str]]]:
    """A random history: creates, updates of every column, deletes, re-creates and replays."""
    rng, live, lsn, sent, out = random.Random(seed), {}, 100, [], []
    keys = [(repo, i) for repo in ("a", "b", "skip") for i in range(1, 5)]
    for _ in range(count):
        lines = []
        for _ in range(rng.randint(1, 7)):
            key = rng.choice(keys)
            lsn += 1
            if key in live and rng.random() < 0.35:
                line = dbz("d", lsn, None, live.pop(key))
            else:
                row = pr(*key, rng)
                line = dbz("u" if key in live else "c", lsn, row, live.get(key))
                live[key] = row
            lines.append((line, at("pull_requests")))
            sent.append(lines[-1])
        if sent and rng.random() < 0.3:
            lines.append(rng.choice(sent))  # a replay changes nothing
        out.append(lines)
    return out


def assert_fresh(lake) -> None:
    spark = lake.spark
    spark.sql(live_rows_sql(lake.names, lake.sources["pull_requests"])).createOrReplaceTempView("pull_requests")
    try:
        for plan in plans(lake.sources):
            expected = spark.sql(plan.definition.sql)
            actual = spark.table(lake.names.view(plan.name)).select(*expected.columns)
            assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    finally:
        spark.catalog.dropTempView("pull_requests")
    for plan in plans(lake.sources):
        verified = verify_plan(lake.settings, lake.sources, plan)
        assert not isinstance(verified, str) and verified.ok, verified


@pytest.mark.slow(90)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_aggregates_by_delta_equal_their_full_runs_through_a_random_history(lake, tmp_path, seed):
    p = processor(lake, tmp_path)
    by_delta = 0
    for number, lines in enumerate(batches(seed), start=1):
        result = p.process_lines(number, lines)
        by_delta += sum(1 for v in result.views.values() if (v.reason or "").startswith("aggregates by delta"))
        assert_fresh(lake)
    assert by_delta >= 8, by_delta  # (the first batch builds the states from the mirror)
    p.close()



@pytest.mark.slow(60)
@pytest.mark.parametrize("point", ["view:pr_status", "state:pr_status"])
def test_a_unit_that_dies_after_the_view_commit_adds_its_deltas_once(lake, tmp_path, point):
    history = batches(7, 4)
    p = processor(lake, tmp_path)
    for number, lines in enumerate(history[:3], start=1):
        p.process_lines(number, lines)
    assert_fresh(lake)

    crashing_at(p, point, 4, history[3])
    p = processor(lake, tmp_path)
    again = p.process(BatchRef("local", 4), history[3])
    assert again.replayed, again
    assert_fresh(lake)
    more = p.process_lines(5, batches(8, 1)[0])
    assert (more.views["pr_status"].reason or "").startswith("aggregates by delta"), more.views
    assert_fresh(lake)
    p.close()
