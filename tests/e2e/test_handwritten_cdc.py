"""End to end against hand-written Debezium files: three landing rounds in, exact live rows out.

The files under tests/fixtures/handwritten/ are written by hand (not by the workload generator), the
way a foreign Debezium/Kafka Connect deployment would have produced them. Each round is copied into
one landing folder and ingested with `lakemv ingest --once`; the streaming checkpoint must make every
later run pick up only the new files. After the third round the live rows of every table must equal
expected/<table>.json exactly (order aside). What each round exercises:

round1: snapshot reads (op r) for all five tables, creates, an update with before=null, a newer and an
        older update of the same key in different files of one batch, the same event twice in one
        file and again in another file, schema/payload-wrapped lines, a `null` line, a blank line, a
        malformed line, temporal values as epoch micros, epoch millis and ISO strings (Z and offsets).
round2: key-only deletes and deletes with a full before image, a primary-key change (users: delete
        old email + create new email), create-then-delete of a key, an update with a full before and
        an update whose after image omits a non-key column (becomes NULL), a delete that arrives
        before an older create/update of the same key, a replay of a round-1 event, duplicates in two
        files, wrapped lines.
round3: replays of old snapshot/create/delete/update events (a replayed create of a deleted key must
        not resurrect it), the late older update/create whose delete came in round 2, re-creation of
        deleted keys with higher LSNs, a truncated (malformed) line, ISO timestamps with +09:30.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LAKEMV, without_lake_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "handwritten"
ROUNDS = ("round1", "round2", "round3")
TABLES = ("users", "repos", "pull_requests", "stars", "payment_info")
# Declared TIMESTAMP columns (catalog/sources/*.toml), compared as instants rather than as text.
TIMESTAMP_COLUMNS = {
    "users": {"registered_at"},
    "repos": {"created_at", "updated_at"},
    "pull_requests": {"created_at"},
    "stars": {"created_at"},
    "payment_info": set(),
}
TIMEOUT = 300


def _env() -> dict[str, str]:
    """The caller's environment without lakemv settings, so only --warehouse decides where the lake is
    (the suite's JVM options stay: without them these three small runs took 146 s in CI)."""
    return without_lake_settings(os.environ)


def _lakemv(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [LAKEMV, *args], capture_output=True, text=True, timeout=TIMEOUT, env=_env(), check=False
    )
    command = " ".join(args)[:120]
    assert done.returncode == 0, f"lakemv {command} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, f"lakemv {command} printed a traceback:\n{done.stderr}"
    return done


def _land(round_name: str, landing: Path) -> int:
    """Copy one round's files into the landing folder; every file must be new there. Returns the count.

    shutil.copyfile (not copy2) so each landed file gets a fresh mtime, as a newly written file would.
    """
    copied = 0
    for source in sorted((FIXTURES / round_name).glob("*/*")):
        target = landing / source.parent.name / source.name
        assert not target.exists(), f"{round_name} would overwrite {target}: fixture file names must be unique"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied += 1
    return copied


def _instant(table: str, column: str, value: Any, where: str) -> datetime:
    assert isinstance(value, str), f"{where}: {table}.{column} should be an ISO-8601 string, got {value!r}"
    parsed = datetime.fromisoformat(value)
    assert parsed.tzinfo is not None, f"{where}: {table}.{column} = {value!r} carries no UTC offset"
    return parsed.astimezone(UTC)


def _normalized(table: str, row: dict[str, Any], where: str) -> tuple[tuple[str, str, Any], ...]:
    """A hashable, type-strict form of a row: timestamps as UTC datetimes, True never equal to 1."""
    items = []
    for column in sorted(row):
        value = row[column]
        if value is not None and column in TIMESTAMP_COLUMNS[table]:
            value = _instant(table, column, value, where)
        items.append((column, type(value).__name__, value))
    return tuple(items)


def _expected(table: str) -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "expected" / f"{table}.json").read_text())


def _sort_key(row: tuple[tuple[str, str, Any], ...]) -> str:
    return repr(row)


@pytest.mark.slow(115)
def test_handwritten_debezium_rounds_end_in_exact_live_rows(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh"

    for round_name in ROUNDS:
        assert _land(round_name, landing) > 0, f"no fixture files in {round_name}"
        _lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once")

    mismatches = []
    for table in TABLES:
        done = _lakemv("--warehouse", str(warehouse), "query", f"select * from {table}", "--format", "json")
        actual_rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        expected_rows = _expected(table)

        declared = set(expected_rows[0])
        for row in actual_rows:
            assert set(row) == declared, f"{table}: columns {sorted(row)} != declared {sorted(declared)}"

        actual = sorted((_normalized(table, r, "lake") for r in actual_rows), key=_sort_key)
        expected = sorted((_normalized(table, r, "expected") for r in expected_rows), key=_sort_key)
        if actual != expected:
            missing = [dict((c, v) for c, _, v in r) for r in expected if r not in actual]
            unexpected = [dict((c, v) for c, _, v in r) for r in actual if r not in expected]
            mismatches.append(
                f"{table}: {len(actual)} live rows, expected {len(expected)}\n"
                f"  expected but missing: {missing}\n  present but not expected: {unexpected}"
            )
    assert not mismatches, "live rows differ after three rounds:\n" + "\n".join(mismatches)
