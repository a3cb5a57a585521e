"""How a batch is reported: its text line, its JSON form (`ingest --log-format json`), and the report
that writes either to the terminal and to the run's logger."""

from __future__ import annotations

import io
import json
import logging

from rich.console import Console

from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.flows.progress import report, terminal

BATCH = BatchResult(
    7, lines=12, events=10, merged={"users": 4, "page_views": 5}, dead_letters=2, skipped=1, skip_reasons={"late event": 1},
    late={"page_views": 2}, seconds=1.23456,
    views={
        "user_profile": ViewResult("user_profile", 3, upserts=2, deletes=1, seconds=0.5, plan="incremental", reason="incremental 3 keys < whole"),
        "daily": ViewResult("daily", 4, deferred=True, note="within 30 seconds"),
    },
)  # fmt: skip


def test_the_json_form_says_what_the_line_says():
    line = BATCH.describe()
    assert "late events: page_views 2" in line and "user_profile 3 keys -> 2 upserts, 1 deletes" in line
    form = json.loads(json.dumps(BATCH.as_json()))  # plain JSON values only
    assert (form["batch"], form["lines"], form["events"], form["dead_letters"], form["seconds"]) == (7, 12, 10, 2, 1.235)
    assert form["tables"] == {"page_views": 5, "users": 4} and form["late"] == {"page_views": 2}
    assert form["views"]["user_profile"] | {"steps": None} == {
        "keys": 3, "upserts": 2, "deletes": 1, "plan": "incremental", "reason": "incremental 3 keys < whole", "note": None,
        "paused": False, "deferred": False, "held": 0, "rows_read": None, "seconds": 0.5, "steps": None,
    }  # fmt: skip
    assert form["views"]["daily"]["deferred"] and form["views"]["daily"]["plan"] is None  # not maintained in this batch


def _reported(form: str, caplog) -> tuple[list[str], list[str]]:
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="lakemv"), terminal(Console(file=out, width=40)), report.lines(form):
        report.record("batch", BATCH.as_json(), BATCH.describe())
        report.info("schema drift: users: column `x` added", style="yellow")
    return out.getvalue().splitlines(), [r.getMessage() for r in caplog.records]


def test_json_lines_are_one_object_a_line_on_the_terminal_and_in_the_log(caplog):
    shown, logged = _reported("json", caplog)
    assert len(shown) == 2  # a narrow terminal wraps no JSON
    batch, drift = (json.loads(line) for line in shown)
    assert batch["event"] == "batch" and batch["late"] == {"page_views": 2}
    assert drift == {"level": "warning", "message": "schema drift: users: column `x` added"}
    assert [json.loads(m) for m in logged] == [batch, drift]
    assert not report.json_lines  # only while inside


def test_text_lines_are_the_batch_line(caplog):
    shown, logged = _reported("text", caplog)
    assert logged == [BATCH.describe(), "schema drift: users: column `x` added"]
    assert "".join(shown).startswith("batch 7: 12 lines")
