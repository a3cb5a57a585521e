"""Pure pieces of the batch fast path: MERGE key pre-filters and the driver-side content diff."""

from __future__ import annotations

import datetime

import pyarrow as pa

from lakemv.core.sql.diff import content_diff
from lakemv.core.sql.quote import MAX_LITERALS, key_filter, literal
from lakemv.core.sql.viewsql import DIFF_OP


def test_literals_escape_strings_and_leave_unknown_types_unfiltered():
    assert literal(42) == "42"
    assert literal("o'neil\\x") == "'o\\'neil\\\\x'"
    assert literal(datetime.date(2026, 1, 2)) == "DATE'2026-01-02'"
    assert literal(None) is None and literal(True) is None and literal(1.5) is None


def test_key_filter_lists_each_column_and_skips_what_it_cannot_render():
    assert key_filter("t", {"id": [3, 1, 3]}) == "t.`id` IN (1, 3)"
    both = key_filter("t", {"owner": ["a", "b"], "name": ["x"]})
    assert both == "t.`owner` IN ('a', 'b') AND t.`name` IN ('x')"
    assert key_filter("t", {"owner": ["a"], "score": [1.5]}) == "t.`owner` IN ('a')"  # the float column is not filtered
    assert key_filter("t", {"id": []}) is None
    assert key_filter("t", {"id": range(MAX_LITERALS + 1)}) is None  # a big batch joins the whole table


def test_content_diff_upserts_changed_and_new_rows_and_deletes_vanished_keys():
    schema = pa.schema([("email", pa.string(), False), ("repos", pa.list_(pa.struct([("name", pa.string())])), False)])
    old = pa.Table.from_pylist(
        [{"email": "a", "repos": [{"name": "x"}]}, {"email": "b", "repos": []}, {"email": "gone", "repos": []}], schema=schema
    )
    new = pa.Table.from_pylist(
        [{"email": "a", "repos": [{"name": "x"}]}, {"email": "b", "repos": [{"name": "y"}]}, {"email": "c", "repos": []}],
        schema=schema,
    )
    diff = content_diff(new, old, ["email"], schema).to_pylist()
    assert diff == [
        {"email": "b", "repos": [{"name": "y"}], DIFF_OP: "upsert"},
        {"email": "c", "repos": [], DIFF_OP: "upsert"},
        {"email": "gone", "repos": None, DIFF_OP: "delete"},
    ]
