"""Debezium's placeholder for unchanged TOASTed values is never data, and undecodable bytes are dead
letters: the parse rules, pure Python (the real stack's TOAST case is in tests/e2e/test_real_cdc.py)."""

from __future__ import annotations

import base64
import json

from lakemv.core.cdc.changeset import build_changeset, decode_lines, printable, utf8_error
from lakemv.core.cdc.envelope import parse_envelope
from lakemv.core.cdc.unavailable import PLACEHOLDER, is_placeholder

REPOS = "file:///landing/repos/part-1.json"


def repo(owner: str, name: str, description: str, stars: int = 1) -> dict:
    return {"name": name, "owner": owner, "description": description, "star_count": stars, "fork_count": 0, "created_at": 0, "updated_at": 0}


def line(op: str, lsn: int, after: dict | None, before: dict | None = None) -> str:
    return json.dumps({"op": op, "before": before, "after": after, "source": {"lsn": lsn, "ts_ms": 1000}})


def stored(rows: dict) -> callable:
    asked = []

    def lookup(table, keys):
        asked.append((table, list(keys)))
        return {k: rows[k] for k in keys if k in rows}

    lookup.asked = asked
    return lookup


def row(owner, name, description, stars=1):
    return (name, owner, description, stars, 0, 0, 0)


def test_the_placeholder_in_every_spelling_debezium_uses():
    assert is_placeholder(PLACEHOLDER)
    assert is_placeholder(base64.b64encode(PLACEHOLDER.encode()).decode())  # bytea, binary.handling.mode=base64
    assert is_placeholder(PLACEHOLDER.encode().hex())  # binary.handling.mode=hex
    assert is_placeholder([PLACEHOLDER])  # an array column
    assert not is_placeholder("a description") and not is_placeholder([]) and not is_placeholder(None) and not is_placeholder(5)


def test_an_update_keeps_the_stored_value_of_an_unavailable_column(sources):
    lookup = stored({("o", "r"): row("o", "r", "x" * 5000, stars=1)})
    batch = build_changeset([(line("u", 10, repo("o", "r", PLACEHOLDER, stars=2)), REPOS)], sources, lookup=lookup)
    (change,) = batch.changes["repos"]
    assert change.row == row("o", "r", "x" * 5000, stars=2) and change.unavailable == ()
    assert lookup.asked == [("repos", [("o", "r")])]
    assert not batch.dead_letters


def test_an_earlier_image_in_the_same_batch_wins_over_the_stored_row(sources):
    lookup = stored({("o", "r"): row("o", "r", "old")})
    lines = [
        (line("u", 11, repo("o", "r", PLACEHOLDER, stars=3)), REPOS),  # out of order: applied after lsn 10
        (line("u", 10, repo("o", "r", "new text", stars=2)), REPOS),
    ]
    batch = build_changeset(lines, sources, lookup=lookup)
    (change,) = batch.changes["repos"]
    assert change.row == row("o", "r", "new text", stars=3)
    assert lookup.asked == []  # nothing left to look up


def test_a_moved_row_takes_the_values_of_the_row_its_change_deleted(sources):
    """A primary-key change: delete(old key) + create(new key) of one WAL record, so one LSN."""
    lookup = stored({("o", "old"): row("o", "old", "long text", stars=7)})
    lines = [
        (line("d", 20, None, before={"owner": "o", "name": "old"}), REPOS),
        (line("c", 20, repo("o", "new", PLACEHOLDER, stars=7)), REPOS),
    ]
    batch = build_changeset(lines, sources, lookup=lookup)
    moved = next(c for c in batch.changes["repos"] if not c.is_delete)
    assert moved.key == ("o", "new") and moved.row == row("o", "new", "long text", stars=7)
    # A replay after the mirror merge finds the row at its new key: the same values.
    replay = build_changeset(lines, sources, lookup=stored({("o", "new"): row("o", "new", "long text", stars=7)}))
    assert next(c for c in replay.changes["repos"] if not c.is_delete).row == moved.row


def test_a_moved_row_updated_earlier_in_the_batch_takes_that_image(sources):
    lines = [
        (line("u", 19, repo("o", "old", "edited", stars=1)), REPOS),
        (line("d", 20, None, before={"owner": "o", "name": "old"}), REPOS),
        (line("c", 20, repo("o", "new", PLACEHOLDER)), REPOS),
    ]
    batch = build_changeset(lines, sources, lookup=stored({}))
    assert next(c for c in batch.changes["repos"] if c.key == ("o", "new")).row[2] == "edited"


def test_the_before_image_of_replica_identity_full_fills_it(sources):
    change = parse_envelope(line("u", 5, repo("o", "r", PLACEHOLDER), before=repo("o", "r", "from before")), sources["repos"])
    assert change.row[2] == "from before" and change.unavailable == ()


def test_a_value_nothing_holds_is_a_dead_letter_never_data(sources):
    text = line("u", 10, repo("o", "r", PLACEHOLDER))
    batch = build_changeset([(text, REPOS), (line("u", 11, repo("o", "s", "fine")), REPOS)], sources, lookup=stored({}))
    assert [c.key for c in batch.changes["repos"]] == [("o", "s")]
    (letter,) = batch.dead_letters
    assert letter.raw == text and letter.table == "repos" and letter.source_file == REPOS
    assert "unavailable value in description" in letter.reason and "REPLICA IDENTITY FULL" in letter.reason
    assert batch.events == 1
    # A later change of the same row that leans on it is lost with it, not applied half-filled.
    lines = [(text, REPOS), (line("u", 12, repo("o", "r", PLACEHOLDER, stars=9)), REPOS)]
    assert build_changeset(lines, sources, lookup=stored({})).changes["repos"] == []


def test_a_placeholder_in_a_key_or_a_new_column_is_not_data(sources):
    batch = build_changeset([(line("u", 1, repo("o", PLACEHOLDER, "d")), REPOS)], sources)
    assert "primary-key field 'name' holds Debezium's placeholder" in batch.dead_letters[0].reason
    batch = build_changeset([(line("u", 2, {**repo("o", "r", "d"), "readme": PLACEHOLDER}), REPOS)], sources)
    assert batch.new_fields["repos"] == {"readme": None}  # no type is guessed from a placeholder


def test_bytes_that_are_not_utf8_are_a_dead_letter_that_says_where(sources):
    good = line("c", 1, repo("o", "r", "d")).encode()
    bad = b'{"op": "c", "after": {"name": "caf\xe9"}}'
    texts = decode_lines([good, bad, None])
    assert texts[0] == good.decode() and texts[2] is None
    assert utf8_error(texts[1]) == "not valid UTF-8: byte 0xe9 at byte offset 34"
    assert utf8_error("café") is None
    assert printable(texts[1]) == '{"op": "c", "after": {"name": "caf\\xe9"}}'
    batch = build_changeset(list(zip(texts, [REPOS] * 3)), sources)
    assert [c.key for c in batch.changes["repos"]] == [("o", "r")]
    (letter,) = batch.dead_letters
    assert letter.reason.startswith("not valid UTF-8") and "\\xe9" in letter.raw
    assert batch.skipped["tombstone (null value)"] == 1


def test_an_incremental_snapshots_read_takes_the_place_of_the_change_before_it(sources):
    """Debezium sends an incremental snapshot's reads with no LSN (source.snapshot = "incremental"): a
    read stands after every change before it in the stream and before every change after it."""

    def read(name, description):
        return json.dumps({"op": "r", "after": repo("o", name, description), "source": {"lsn": None, "ts_ms": 99_999_999_999, "snapshot": "incremental"}})

    lines = [
        (line("u", 500, repo("o", "a", "before the window")), REPOS),
        (read("a", "as read"), REPOS),  # newer than lsn 500
        (read("b", "as read"), REPOS),
        (line("u", 700, repo("o", "b", "after the window")), REPOS),  # newer than the read
    ]
    batch = build_changeset(lines, sources, applied=lambda: 300)
    rows = {c.key: (c.position, c.row[2]) for c in batch.changes["repos"]}
    assert rows == {("o", "a"): (500, "as read"), ("o", "b"): (700, "after the window")}
    # The first read of a unit stands after what the lake already holds.
    asked = []
    batch = build_changeset([(read("c", "x"), REPOS)], sources, applied=lambda: asked.append(1) or 1234)
    assert [c.position for c in batch.changes["repos"]] == [1234] and asked == [1]


def test_a_truncate_deletes_every_row_the_table_held_before_it(sources):
    """Debezium's `op: t` (with skipped.operations not naming it): the lake's live rows and the unit's
    earlier rows are deleted at its position; a row created after it stays."""
    truncate = json.dumps({"op": "t", "before": None, "after": None, "source": {"lsn": 50, "ts_ms": 1000}})
    lines = [
        (line("c", 40, repo("o", "made-earlier", "x")), REPOS),
        (truncate, REPOS),
        (line("c", 60, repo("o", "made-after", "y")), REPOS),
    ]
    batch = build_changeset(lines, sources, live_keys=lambda table: [("o", "stored")] if table == "repos" else [])
    changes = {c.key: (c.op, c.position) for c in batch.changes["repos"]}
    assert changes == {("o", "made-earlier"): ("d", 50), ("o", "stored"): ("d", 50), ("o", "made-after"): ("c", 60)}
    assert batch.events == 3 and not batch.dead_letters
