"""Hostile input through the real `lakemv ingest`: every bad line ends as a dead letter with its reason
or as a counted skip, the valid lines of the same batch all land, and the stream goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import DEAD_LETTERS, OPS_NAMESPACE
from lakemv.duck.query import connect_duckdb, metadata_location
from tests.cdc import dbz, user
from tests.e2e.cli import lakemv
from tests.e2e.crash_harness import ingest, ingest_env

TEN_MB = 10 * 1024 * 1024
# (line, table folder, expected reason fragment)
HOSTILE = [
    ('{"op": "c", "after": {"id": 1', "users", "malformed JSON"),
    ("[1, 2, 3]", "users", "not a Debezium envelope: expected a JSON object"),
    ('{"before": null, "after": {"id": 1}}', "users", "no 'op' field"),
    (json.dumps({"op": "x", "after": user("x@x", "x"), "source": {"lsn": 1}}), "users", "unknown op 'x'"),
    (json.dumps({"op": "c", "after": {"id": 9, "username": "nokey"}, "source": {"lsn": 2}}), "users", "missing primary-key field 'email'"),
    (json.dumps({"op": "c", "after": {**user("t@x", "t"), "id": "12"}, "source": {"lsn": 3}}), "users", "column 'id': expected BIGINT, got string '12'"),
    (json.dumps({"op": "c", "after": user("old@x", "old", registered_at=10**20), "source": {"lsn": 4}}), "users", "outside years 0001-9999"),
    (json.dumps({"op": "c", "after": {**user("big@x", "big"), "username": "y" * TEN_MB}, "source": {"lsn": 5}}), "users", "is over the limit"),
    (dbz("c", 6, user("nope@x", "nope")), "nope", "unknown table folder 'nope'"),
]


def _dead_letters(warehouse: Path) -> list[dict]:
    location = metadata_location(LakeSettings(warehouse=warehouse), OPS_NAMESPACE, DEAD_LETTERS)
    con = connect_duckdb(threads=1)
    try:
        rows = con.execute(f"SELECT raw_chars, source_table, reason, batch_id FROM iceberg_scan('{location}')").fetchall()
    finally:
        con.close()
    return [dict(zip(("raw_chars", "source_table", "reason", "batch_id"), r, strict=True)) for r in rows]


@pytest.mark.slow(80)
def test_each_kind_of_bad_input_is_a_dead_letter_or_a_counted_skip_and_good_lines_land(tmp_path):
    landing, warehouse = tmp_path / "landing", tmp_path / "wh"
    (landing / "users").mkdir(parents=True)
    (landing / "nope").mkdir()
    good = [dbz("c", 100 + i, user(f"u{i}@x", f"u{i}", id=i)) for i in range(5)]
    lines = [good[0], good[1], *(line for line, folder, _ in HOSTILE if folder == "users"), "", "null", good[2], good[3], good[4]]
    (landing / "users" / "a.json").write_text("\n".join(lines) + "\n")
    # Bytes that are not UTF-8 in one line of a file: that line's dead letter, its neighbours land.
    not_utf8 = b'{"op": "c", "after": {"username": "caf\xe9"}}'
    (landing / "users" / "bytes.json").write_bytes(dbz("c", 150, user("b1@x", "b1", id=11)).encode() + b"\n" + not_utf8 + b"\n")
    # A name that reads as a glob is taken literally: `we[ir]d.json` must not read `weid.json` again.
    (landing / "users" / "we[ir]d.json").write_text(dbz("c", 160, user("w@x", "w", id=12)) + "\n")
    (landing / "users" / "weid.json").write_text(json.dumps({"op": "q", "after": user("q@x", "q"), "source": {"lsn": 170}}) + "\n")
    (landing / "nope" / "x.json").write_text(HOSTILE[-1][0] + "\n")
    (landing / "users" / "empty.json").write_text("")
    gone = landing / "users" / "gone.json"
    gone.write_text(dbz("c", 200, user("gone@x", "gone", id=99)) + "\n")

    # Spark lists gone.json into batch 0, the process is killed after reading, the file disappears, and the
    # restarted process replays batch 0 without it: a counted skip, not a crash.
    signal = tmp_path / "signal"
    reached = ingest(warehouse, landing, ingest_env(100, {"LAKEMV_CRASH_AT": "parsed@0", "LAKEMV_CRASH_SIGNAL": str(signal)}), signal)
    assert reached == "parsed@0"
    gone.unlink()
    log = tmp_path / "wh-ingest.log"
    log.write_text("")
    assert ingest(warehouse, landing, ingest_env(100)) is None
    output = " ".join(log.read_text().split())  # undo the console's line wrapping
    assert "Traceback" not in output and "error:" not in output, output[-2000:]
    for reason in ("1 blank line", "1 empty file", "1 file gone before it was read", "1 tombstone (null value)"):
        assert reason in output, (reason, output[-2000:])

    letters = _dead_letters(warehouse)
    assert len(letters) == len(HOSTILE) + 2, letters
    assert [d["reason"] for d in letters if d["reason"].startswith("not valid UTF-8")] == ["not valid UTF-8: byte 0xe9 at byte offset 38"]
    assert len([d for d in letters if d["reason"].startswith("unknown op 'q'")]) == 1  # read once
    for line, folder, fragment in HOSTILE:
        matching = [d for d in letters if fragment in d["reason"]]
        assert len(matching) == 1, (fragment, [d["reason"] for d in letters])
        assert matching[0]["source_table"] == folder and matching[0]["batch_id"] == 0
        assert matching[0]["raw_chars"] == len(line)

    # Nothing valid was lost, and the stream goes on with the next file; its batch reported as JSON lines.
    (landing / "users" / "b.json").write_text(dbz("c", 300, user("late@x", "late", id=7)) + "\n")
    said = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once", "--log-format", "json").stdout
    reports = [json.loads(line) for line in said.splitlines() if line.strip()]  # every line one object, none wrapped
    (batch,) = [r for r in reports if r.get("event") == "batch"]
    assert (batch["lines"], batch["events"], batch["tables"], batch["dead_letters"]) == (1, 1, {"users": 1}, 0), batch
    assert reports[-1] | {"seconds": 0} == {"event": "ingested", "events": 1, "batches": 1, "dead_letters": 0, "conflicts_retried": 0, "seconds": 0}
    # The dead letters by their plain name, as any table of the lake.
    out = lakemv("--warehouse", str(warehouse), "query", "select count(*) as n from dead_letters", "--format", "json").stdout
    assert json.loads(out)["n"] == len(HOSTILE) + 2
    out = lakemv("--warehouse", str(warehouse), "query", "select email from users order by email", "--format", "json").stdout
    emails = [json.loads(line)["email"] for line in out.splitlines() if line.strip()]
    assert emails == sorted([f"u{i}@x" for i in range(5)] + ["late@x", "b1@x", "w@x"])


@pytest.mark.slow(45)
def test_a_new_column_on_a_fresh_lake_is_added_and_every_later_start_works(tmp_path):
    """Schema drift in the first line a lake ever sees (the mirror was created a moment before, without
    the column), then a restart after the file is gone: both runs end cleanly, the column holds its value."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh"
    (landing / "users").mkdir(parents=True)
    first = landing / "users" / "a.json"
    first.write_text(dbz("c", 10, {**user("n@x", "n", id=1), "nickname": "nick"}) + "\n")
    done = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once")
    said = " ".join(done.stdout.split())
    assert "new column `nickname` (string) added to the mirror" in said and "error" not in said.lower(), said
    first.unlink()
    (landing / "users" / "b.json").write_text(dbz("c", 20, user("m@x", "m", id=2)) + "\n")
    for _ in range(2):  # a later start, and one more: the local state reloads the evolved mirror each time
        done = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once")
        assert "error" not in " ".join(done.stdout.split()).lower(), done.stdout
    out = lakemv("--warehouse", str(warehouse), "query", "select email, nickname from users order by email", "--format", "json").stdout
    assert [json.loads(line) for line in out.splitlines() if line.strip()] == [
        {"email": "m@x", "nickname": None}, {"email": "n@x", "nickname": "nick"}
    ]
