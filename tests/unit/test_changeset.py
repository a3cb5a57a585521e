"""Batch rules: dedupe per key by source position, table routing, tombstone rows. Pure Python."""

from __future__ import annotations

import json

import pyarrow as pa

from lakemv.catalog.tables import DELETED, POSITION
from lakemv.core.cdc.changeset import build_changeset, changes_to_arrow, latest_per_key, table_of
from lakemv.core.cdc.envelope import Change


def ev(op, lsn, email="a@x.io", username="ann", before=None):
    after = None if op == "d" else {"id": 1, "email": email, "username": username, "registered_at": 0}
    return json.dumps({"op": op, "before": before or ({"email": email} if op == "d" else None), "after": after, "source": {"lsn": lsn, "ts_ms": 1000 + lsn}})


USERS_FILE = "file:///landing/users/part-1.json"


def test_highest_position_wins_regardless_of_arrival_order(sources):
    batch = build_changeset([(ev("u", 30, username="c"), USERS_FILE), (ev("c", 10), USERS_FILE), (ev("u", 20, username="b"), USERS_FILE)], sources)
    (change,) = batch.changes["users"]
    assert change.position == 30 and change.row[2] == "c"
    assert batch.events == 3


def test_delete_newer_than_update_wins(sources):
    batch = build_changeset([(ev("d", 40), USERS_FILE), (ev("u", 35, username="z"), USERS_FILE)], sources)
    (change,) = batch.changes["users"]
    assert change.is_delete and change.position == 40


def test_equal_positions_keep_the_later_line():
    first = Change("users", "u", ("k",), 5, None, ("first",))
    second = Change("users", "u", ("k",), 5, None, ("second",))
    assert latest_per_key([first, second]) == [second]


def test_primary_key_change_is_two_keys(sources):
    lines = [(ev("d", 50, email="old@x.io"), USERS_FILE), (ev("c", 51, email="new@x.io"), USERS_FILE)]
    changes = {c.key: c.op for c in build_changeset(lines, sources).changes["users"]}
    assert changes == {("old@x.io",): "d", ("new@x.io",): "c"}


def test_unknown_table_folder_and_bad_lines_become_dead_letters_without_losing_good_ones(sources):
    lines = [
        (ev("c", 1), "file:///landing/issues/x.json"),
        ("{oops", USERS_FILE),
        (ev("c", 2, email="b@x.io"), USERS_FILE),
        ("", USERS_FILE),
    ]
    batch = build_changeset(lines, sources)
    assert [(d.table, d.reason.split(":")[0]) for d in batch.dead_letters] == [("issues", "unknown table folder 'issues'"), ("users", "malformed JSON")]
    assert [c.key for c in batch.changes["users"]] == [("b@x.io",)]
    assert batch.skipped == {"blank line": 1}


def test_table_of_handles_uris_and_plain_paths():
    assert table_of("file:///a/landing/pull_requests/x%20y.json") == "pull_requests"
    assert table_of("file:/a/landing/stars/f.json") == "stars"
    assert table_of("/a/landing/users/f") == "users"


def test_tombstone_rows_carry_only_the_key(sources):
    source = sources["stars"]
    delete = Change("stars", "d", ("ann", "lake", "bob"), 9, 1_000, None)
    table = changes_to_arrow(source, [delete], batch_id=3, ingested_at_micros=0)
    row = table.to_pylist()[0]
    assert (row["username"], row["repo_name"], row["repo_owner"], row["created_at"]) == ("ann", "lake", "bob", None)
    assert row[DELETED] is True and row[POSITION] == 9
    assert table.schema.field("created_at").type == pa.timestamp("us", tz="UTC")


def test_a_lone_surrogate_escape_in_a_text_value_is_a_dead_letter_and_a_pair_is_its_character(sources):
    """JSON may escape half a surrogate pair alone (`\\ud800`): no UTF-8 text holds it, so the line is a
    dead letter with its reason (it had crashed the batch where the rows became Arrow). A whole pair is
    the one character it spells, and lands."""
    lone, pair = ev("c", 1).replace("a@x.io", "a\\ud800b@x"), ev("c", 2).replace("a@x.io", "\\ud83d\\ude00@x").replace('"id": 1', '"id": 2')
    batch = build_changeset([(lone, USERS_FILE), (pair, USERS_FILE)], sources)
    assert [d.reason for d in batch.dead_letters] == ["column 'email': a lone surrogate escape (\\ud800) is not Unicode text"]
    (change,) = batch.changes["users"]
    assert change.row[1] == "\U0001f600@x"
    assert changes_to_arrow(sources["users"], batch.changes["users"], 1, 0).column("email").to_pylist() == ["\U0001f600@x"]
