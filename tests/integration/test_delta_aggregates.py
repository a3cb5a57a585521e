"""Aggregates by delta: a grouped view and a total over one table, and two grouped views over a join
(pull requests joined to their authors by the unique username: grouped by status, and by author, whose
pull requests fan out, so the pull requests are its grain), follow a batch's signed rows (old images
subtracted, new ones added; for the join, each reached pull request's joined row as it was and as it
is) instead of reading their groups, and equal their SQL run in full after every batch of a
random history, through renamed and deleted authors, retracted extremes, deletes of whole groups,
replays and units that die after the view's commit.

The history is seeded (one seed in `make test`, more with `LAKEMV_DELTA_SEEDS="1 2 3 4 5"`; eight
batches each, on a domain of 3 statuses, 4 authors and 12 pull requests, so groups gain, lose, empty
and refill); the full runs are Spark's of the user's SQL
(chispa, exact: counts, integer sums and averages, timestamps and strings for the extremes; sums and
averages of doubles within the error of summation order) and DuckDB's verify. Decimal sums and
averages by delta are checked by the TPC-H test (Q1, Q6).
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest
from chispa import assert_approx_df_equality, assert_df_equality

from lakemv.catalog.tables import live_rows_sql
from lakemv.core.batch import choice
from lakemv.core.batch.journal import BatchRef, Journal
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.store import Store
from lakemv.duck.verify import FLOAT_TOLERANCE, verify_plan
from lakemv.spark.batch.runner import BatchProcessor
from tests.cdc import at, dbz
from tests.crashes import crashing_at
from tests.conftest import points

VIEWS = {
    "pr_status": """-- @key: status
SELECT status, count(*) AS prs, count(author) AS authored, count_if(title = 'fix') AS fixes, sum(`index`) AS total,
       avg(`index`) AS mean, min(created_at) AS first, max(created_at) AS last, max(title) AS top_title, sum(`index`) * 2 - count(*) AS mixed
FROM pull_requests WHERE repo <> 'skip' GROUP BY status""",
    "pr_all": """-- @key: scope
SELECT 'all' AS scope, count(*) AS prs, sum(`index`) AS total, avg(`index`) AS mean, min(author) AS first_author,
       sum(CAST(`index` - 2 AS DOUBLE) * 1e308 * 10) AS blown
FROM pull_requests""",
    "pr_authors": """-- @key: status
SELECT p.status, count(*) AS prs, sum(u.id) AS ids, max(u.registered_at) AS newest, count_if(u.username = 'ann') AS anns
FROM pull_requests p JOIN users u ON u.username = p.author WHERE p.repo <> 'skip' GROUP BY p.status""",
    # sums and averages of doubles: compensated sums, equal to the full run within the error of
    # summation order (pr_all's `blown`, an infinite or NaN sum of infinities of both signs, recomputes its group)
    "pr_floats": """-- @key: status
SELECT status, sum(`index` / 3) AS thirds, avg(`index` * 0.1D) AS tenths, count(*) AS prs FROM pull_requests GROUP BY status""",
    # keyed by the author, whose pull requests fan out: by delta over the pull requests (its grain)
    "author_prs": """-- @key: username
SELECT u.username, count(*) AS prs, sum(p.`index`) AS total, max(p.created_at) AS last, count_if(p.status = 'open') AS opened
FROM users u JOIN pull_requests p ON p.author = u.username GROUP BY u.username""",
}
STATUSES, AUTHORS, TITLES = ("open", "merged", None), ("ann", "bob", "cy", None), ("fix", "feat", None)
TIMES = ("2024-03-01T12:00:00Z", "2024-03-02T12:00:00Z", "2024-03-03T12:00:00Z", None)
EMAILS, STAMPS = ("a@x.io", "b@x.io", "c@x.io"), (1_709_294_400_000_000, 1_709_380_800_000_000, None)


def plans(sources) -> list:
    return [plan_view(parse_view(text, name), sources) for name, text in VIEWS.items()]


def processor(lake, folder: Path) -> BatchProcessor:
    store, journal = Store(folder / "state.sqlite"), Journal(folder / "journal")
    return BatchProcessor(lake.spark, lake.names, lake.sources, plans(lake.sources), journal=journal, store=store, view_workers=1)


def pr(repo: str, index: int, rng: random.Random) -> dict:
    return {"title": rng.choice(TITLES), "repo": repo, "repo_owner": "o", "index": index, "author": rng.choice(AUTHORS),
            "status": rng.choice(STATUSES), "created_at": rng.choice(TIMES)}  # fmt: skip


def author(email: str, rng: random.Random, users: dict) -> dict | None:
    """A user row for `email` whose username no other live user has (usernames are unique), or None."""
    taken = {u["username"] for e, u in users.items() if e != email}
    free = [n for n in AUTHORS if n is not None and n not in taken]
    if not free:
        return None
    return {"id": rng.randint(1, 9), "email": email, "username": rng.choice(free), "registered_at": rng.choice(STAMPS)}


def batches(seed: int, count: int = 8) -> list[list[tuple[str, str]]]:
    """A random history: creates, updates of every column, deletes, re-creates and replays, of pull
    requests and (one change in four) of their authors: renamed, deleted, created again."""
    rng, live, lsn, sent, out, users = random.Random(seed), {}, 100, [], [], {}
    keys = [(repo, i) for repo in ("a", "b", "skip") for i in range(1, 5)]
    for _ in range(count):
        lines = []
        for _ in range(rng.randint(1, 7)):
            key = rng.choice(keys)
            lsn += 1
            if rng.random() < 0.25:  # an author
                email = rng.choice(EMAILS)
                if email in users and rng.random() < 0.3:
                    line = dbz("d", lsn, None, users.pop(email))
                elif (row := author(email, rng, users)) is not None:
                    line = dbz("u" if email in users else "c", lsn, row, users.get(email))
                    users[email] = row
                else:
                    continue
                lines.append((line, at("users")))
                sent.append(lines[-1])
                continue
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
    for table in ("pull_requests", "users"):
        spark.sql(live_rows_sql(lake.names, lake.sources[table])).createOrReplaceTempView(table)
    try:
        for plan in plans(lake.sources):
            expected = spark.sql(plan.definition.sql)
            actual = spark.table(lake.names.view(plan.name)).select(*expected.columns)
            if plan.name == "pr_floats":  # (doubles: within the error of summation order)
                assert_approx_df_equality(actual, expected, FLOAT_TOLERANCE, ignore_row_order=True, ignore_nullable=True)
            else:  # (pr_all's `blown` may be NaN, equal to itself here)
                assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)
    finally:
        for table in ("pull_requests", "users"):
            spark.catalog.dropTempView(table)
    for plan in plans(lake.sources):
        verified = verify_plan(lake.settings, lake.sources, plan)
        assert not isinstance(verified, str) and verified.ok, verified


@pytest.mark.slow(90)
@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("LAKEMV_DELTA_SEEDS", "2").split()])
def test_aggregates_by_delta_equal_their_full_runs_through_a_random_history(lake, tmp_path, seed, monkeypatch):
    monkeypatch.setattr(choice, "DELTA_OVER_GROUPS", math.inf)  # by delta however small the groups (tiny here)
    p = processor(lake, tmp_path)
    by_delta: dict[str, int] = {}
    for number, lines in enumerate(batches(seed), start=1):
        result = p.process_lines(number, lines)
        for name, v in result.views.items():
            by_delta[name] = by_delta.get(name, 0) + (v.reason or "").startswith("aggregates by delta")
        assert_fresh(lake)
    assert sum(by_delta.values()) >= 8 and by_delta.get("pr_authors") and by_delta.get("author_prs") and by_delta.get("pr_floats"), by_delta  # (the first batch builds the states)
    p.close()



@pytest.mark.slow(60)
@pytest.mark.parametrize("point", points(("view:pr_status", "state:pr_authors"), ("state:pr_status", "state:author_prs")))
def test_a_unit_that_dies_after_the_view_commit_adds_its_deltas_once(lake, tmp_path, point, monkeypatch):
    monkeypatch.setattr(choice, "DELTA_OVER_GROUPS", math.inf)
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)  # the path under test, however a loaded machine measures
    history = batches(7, 3)  # pull requests only: no author joins yet
    p = processor(lake, tmp_path)
    # (such batches are checked by the random histories above; a wrong row they left would still be wrong below)
    for number, lines in enumerate(history, start=1):
        p.process_lines(number, lines)
    # the authors arrive (their pull requests join them: pr_authors changes) and a pull request opens
    opened = {"title": "fix", "repo": "a", "repo_owner": "o", "index": 9, "author": "ann", "status": "open", "created_at": TIMES[0]}
    authors = [{"id": i, "email": e, "username": n, "registered_at": STAMPS[0]} for i, (e, n) in enumerate(zip(EMAILS, AUTHORS), start=1)]
    arrive = [(dbz("c", 900 + i, row), at("users")) for i, row in enumerate(authors)] + [(dbz("c", 910, opened), at("pull_requests"))]
    crashing_at(p, point, 4, arrive)
    p = processor(lake, tmp_path)
    again = p.process(BatchRef("local", 4), arrive)
    assert again.replayed, again
    assert_fresh(lake)
    closed = [(dbz("u", 911, {**opened, "status": "merged"}, opened), at("pull_requests")), (dbz("d", 912, None, authors[0]), at("users"))]
    more = p.process_lines(5, closed)
    assert all((more.views[v].reason or "").startswith("aggregates by delta") for v in ("pr_status", "pr_authors", "author_prs")), more.views
    assert_fresh(lake)
    p.close()
