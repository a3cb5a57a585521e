"""Declared unique keys on ingest (lakemv.core.cdc.unique) and keys held by a violation in a view's diff."""

from __future__ import annotations

import json

import pyarrow as pa

from lakemv.catalog.tables import DELETED
from lakemv.core.cdc.unique import SOURCE_FILE, unique_violations, violation_letters
from lakemv.core.sql.diff import content_diff, duplicated_keys
from lakemv.core.sql.viewsql import DIFF_OP


def _user(email, username, deleted=False):
    return {"email": email, "username": username, "id": 1, "registered_at": None, DELETED: deleted}


def _stored(rows):
    """A lookup over `rows` as the live mirror: the rows whose columns hold one of the values."""
    def lookup(columns, values):
        return [r for r in rows if tuple(r[c] for c in columns) in set(values)]
    return lookup


def test_a_value_held_by_a_stored_row_and_a_changed_row_is_a_violation(sources):
    users = sources["users"]
    (violation,) = unique_violations(users, [_user("carl@x", "ann")], _stored([_user("ann@x", "ann"), _user("bob@x", "bob")]))
    assert (violation.columns, violation.value, violation.holders) == (("username",), ("ann",), (("ann@x",), ("carl@x",)))
    (letter,) = violation_letters(users, [violation])
    assert (letter.table, letter.source_file) == ("users", SOURCE_FILE)
    assert json.loads(letter.raw)["email"] == "carl@x"
    assert letter.reason.startswith("unique violation: users.(username) is declared unique, but username='ann' is held by 2 live rows")


def test_rows_the_batch_replaces_or_deletes_do_not_count_and_nulls_never_collide(sources):
    users = sources["users"]
    stored = _stored([_user("ann@x", "ann"), _user("bob@x", "bob"), _user("n1@x", None)])
    # ann gives up her name in the same batch carl takes it: a swap, no violation
    assert unique_violations(users, [_user("carl@x", "ann"), _user("ann@x", "anna")], stored) == []
    assert unique_violations(users, [_user("carl@x", "ann"), _user("ann@x", "ann", deleted=True)], stored) == []
    assert unique_violations(users, [_user("n2@x", None)], stored) == []  # SQL UNIQUE lets NULLs repeat
    # two changed rows of one batch taking the same new name
    (violation,) = unique_violations(users, [_user("carl@x", "dee"), _user("dan@x", "dee")], stored)
    assert violation.holders == (("carl@x",), ("dan@x",)) and len(violation.changes) == 2
    assert len(violation_letters(users, [violation])) == 2


def test_a_key_with_several_recomputed_rows_is_held_neither_upserted_nor_deleted():
    schema = pa.schema([("k", pa.string()), ("v", pa.string())])
    old = pa.Table.from_pylist([{"k": "a", "v": "1"}, {"k": "b", "v": "1"}], schema=schema)
    new = pa.Table.from_pylist([{"k": "a", "v": "2"}, {"k": "a", "v": "3"}, {"k": "b", "v": "2"}], schema=schema)
    held = duplicated_keys(new, ["k"])
    assert held == {("a",)}
    assert content_diff(new, old, ["k"], schema, held).to_pylist() == [{"k": "b", "v": "2", DIFF_OP: "upsert"}]
