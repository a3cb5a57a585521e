"""Declared unique keys: a join on one is planned as matching one row; ingest checks the constraint,
reports a violation (batch line, dead letters, `lakemv status`) and never writes two view rows for a
key nor drops one - the key keeps its previous row until a change resolves the violation."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from lakemv.core.batch import choice
from lakemv.core.cdc.unique import SOURCE_FILE
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.state.store import Store
from lakemv.duck.status import lake_status
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.directwrite import DirectWriter
from tests.cdc import at, dbz, user

# users.username is declared unique (catalog/sources/users.toml): each star meets at most one user.
VIEW = (
    "-- @key: username, repo_owner, repo_name\n"
    "SELECT s.username, s.repo_owner, s.repo_name, u.email FROM stars s LEFT JOIN users u ON u.username = s.username"
)


def star(username, owner, name):
    return {"username": username, "repo_owner": owner, "repo_name": name, "created_at": 1_700_000_000_000_000}


BATCHES = [
    [
        ("users", dbz("c", 10, user("ann@x", "ann", id=1))),
        ("users", dbz("c", 11, user("bob@x", "bob", id=2))),
        ("stars", dbz("c", 12, star("ann", "bob", "pond"))),
        ("stars", dbz("c", 13, star("bob", "ann", "lake"))),
    ],
    # carl takes the username ann still holds (the source's rename of ann arrives a batch later)
    [("users", dbz("c", 20, user("carl@x", "ann", id=3))), ("stars", dbz("c", 21, star("bob", "bob", "pond")))],
    [("users", dbz("u", 30, user("ann@x", "anna", id=1)))],
]


@pytest.mark.parametrize(("mode", "path"), [("scan", "incremental"), ("indexed", "incremental"), ("direct", "incremental"), ("scan", "full"), ("indexed", "full"), ("direct", "full")])
def test_a_violation_is_reported_and_holds_the_keys_it_reaches_until_it_is_resolved(lake, tmp_path, monkeypatch, mode, path):
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_WHOLE if path == "full" else choice.ALWAYS_INCREMENTAL)
    plan = plan_view(parse_view(VIEW, "star_emails"), lake.sources)
    store = Store(tmp_path / "state.sqlite") if mode != "scan" else None
    direct = DirectWriter(lake.spark, lake.settings) if mode == "direct" else None
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, [plan], store=store, direct=direct)
    assert bool(processor.indexed) == (mode != "scan")
    (maintainer,) = processor.maintainers

    def view_rows():
        return sorted(tuple(r) for r in lake.spark.table(maintainer.table).collect())

    def run(number):
        return processor.process_lines(number, [(line, at(table)) for table, line in BATCHES[number]])

    first = run(0)
    assert (first.dead_letters, first.unique_violations) == (0, 0)
    assert view_rows() == [("ann", "bob", "pond", "ann@x"), ("bob", "ann", "lake", "bob@x")]

    second = run(1)
    assert (second.dead_letters, second.unique_violations) == (1, 1)
    assert "1 dead letters (1 unique violations)" in second.describe()
    (result,) = second.views.values()
    assert result.held == 1 and "1 keys held" in result.describe(), result
    # ann's star keeps its row (not two rows, not none); bob's new star is written as usual
    assert view_rows() == [("ann", "bob", "pond", "ann@x"), ("bob", "ann", "lake", "bob@x"), ("bob", "bob", "pond", "bob@x")]
    (letter,) = lake.spark.table(lake.names.dead_letters).collect()
    assert (letter.source_table, letter.source_file, letter.batch_id) == ("users", SOURCE_FILE, 1)
    assert "unique violation: users.(username) is declared unique, but username='ann' is held by 2 live rows" in letter.reason
    assert "email='ann@x'; email='carl@x'" in letter.reason and '"email": "carl@x"' in letter.raw
    (users,) = [s for s in lake_status(lake.settings, lake.sources, {}).sources if s.table == "users"]
    assert (users.unique_violations, users.dead_letters) == (1, 1)

    third = run(2)  # ann is renamed: the violation is resolved, and the held key catches up
    assert (third.dead_letters, third.unique_violations) == (0, 0)
    assert view_rows() == [("ann", "bob", "pond", "carl@x"), ("bob", "ann", "lake", "bob@x"), ("bob", "bob", "pond", "bob@x")]
    assert_df_equality(lake.spark.table(maintainer.table), maintainer.recompute(), ignore_row_order=True, ignore_nullable=True)
    (users,) = [s for s in lake_status(lake.settings, lake.sources, {}).sources if s.table == "users"]
    assert users.unique_violations == 0
