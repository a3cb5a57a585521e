"""Query output formats: one JSON object per line, CSV with header, UTC timestamps."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa

from lakemv.flows.console import render

TABLE = pa.table(
    {
        "email": ["a@x.io", "b@x.io"],
        "at": pa.array([datetime(2024, 3, 1, 12, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
        "tags": [["x", "y"], []],
    }
)


def test_json_is_one_object_per_line():
    lines = render(TABLE, "json").splitlines()
    assert [json.loads(x) for x in lines] == [
        {"email": "a@x.io", "at": "2024-03-01T12:00:00Z", "tags": ["x", "y"]},
        {"email": "b@x.io", "at": None, "tags": []},
    ]


def test_csv_has_a_header_and_json_encoded_lists():
    assert render(TABLE, "csv").splitlines() == ["email,at,tags", 'a@x.io,2024-03-01T12:00:00Z,"[""x"", ""y""]"', "b@x.io,,[]"]


def test_table_shows_nulls_and_count():
    text = render(TABLE, "table")
    assert "NULL" in text and "2 rows" in text


def test_table_shows_data_that_looks_like_markup_verbatim():
    assert "[red]x[/red]" in render(pa.table({"t": ["[red]x[/red]"]}), "table")
