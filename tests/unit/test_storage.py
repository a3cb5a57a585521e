"""lakemv's own durable files on a local disk (lakemv.catalog.storage); the same API over S3 is exercised
against a real S3 server in tests/e2e/test_scaleout.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakemv.catalog.storage import LocalLocation, S3Location, S3Options, as_location, location
from lakemv.core.batch.journal import BatchRef, Journal, TablePlan


def test_a_location_writes_whole_files_lists_and_removes(tmp_path: Path):
    root = location(tmp_path / "root")
    assert isinstance(root, LocalLocation) and not root.exists() and root.children() == []
    (root / "a" / "one.json").write_text('{"n": 1}')
    (root / "a" / "two.json").write_bytes(b"2")
    assert root.children() == ["a"] and (root / "a").children() == ["one.json", "two.json"]
    assert (root / "a" / "one.json").read_text() == '{"n": 1}'
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "root" / "a").iterdir()), "no temporary file is left"
    with pytest.raises(FileNotFoundError):
        (root / "missing").read_bytes()
    (root / "a" / "one.json").remove()
    (root / "a" / "one.json").remove()  # nothing there: nothing to do
    assert (root / "a").children() == ["two.json"]
    root.remove()
    assert not root.exists()


def test_locations_name_the_same_place_for_every_engine():
    s3 = location("s3a://lake/warehouse/", S3Options(endpoint="http://127.0.0.1:9000"))
    assert isinstance(s3, S3Location) and s3.uri == "s3://lake/warehouse"
    child = s3 / "_checkpoints" / "ingest-1"
    assert child.uri == "s3://lake/warehouse/_checkpoints/ingest-1"
    assert child.hadoop == "s3a://lake/warehouse/_checkpoints/ingest-1" and child.local is None and child.name == "ingest-1"
    assert location("file:///tmp/x%20y").local == Path("/tmp/x y")
    assert as_location(Path("/tmp/x")) == location("/tmp/x")
    assert S3Options(endpoint="https://s3.example:443").secure and S3Options(endpoint="https://s3.example:443").host == "s3.example:443"


def test_a_journal_entry_counts_only_with_its_manifest(tmp_path: Path):
    journal = Journal(tmp_path / "journal")
    ref = BatchRef("s", 3, 0)
    plan = {"users": TablePlan(pa.table({"id": [1, 2]}), None)}
    journal.save(ref, plan, {"page_views": 7})
    assert journal.load(ref)["users"].rows.to_pylist() == [{"id": 1}, {"id": 2}]
    assert journal.watermarks(ref) == {"page_views": 7} and journal.write_ids() == {"s:3.0"}
    assert journal.holds(ref) is False and journal.holds(BatchRef("s", 9, 0)) is None
    journal.save(BatchRef("s", 3, 1), plan, {}, hold=True)  # its views held their keys: a replay holds them too
    assert journal.holds(BatchRef("s", 3, 1)) is True
    # a crash part-way through the next save: its files, not its manifest
    (tmp_path / "journal" / BatchRef("s", 4, 0).entry_name).mkdir()
    (tmp_path / "journal" / BatchRef("s", 4, 0).entry_name / "users.rows.arrow").write_bytes(b"half")
    assert journal.load(BatchRef("s", 4, 0)) is None and journal.write_ids() == {"s:3.0", "s:3.1"}
    journal.forget_before(BatchRef("s", 4, 0))
    assert journal.load(ref) is None and not (tmp_path / "journal" / ref.entry_name).exists()
