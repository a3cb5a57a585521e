"""Which landing files a `once` run still has to drain (`lakemv.catalog.streams.unseen_files`): the
files Spark's file source would list, less those its source log (compactions and later batches) took."""

from __future__ import annotations

import json

from lakemv.catalog.storage import as_location
from lakemv.catalog.streams import seen_files, unseen_files


def _log(checkpoint, name: str, *paths: str) -> None:
    folder = checkpoint / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("v1\n" + "".join(json.dumps({"path": p, "timestamp": 0, "batchId": 0}) + "\n" for p in paths))


def test_files_no_batch_took_are_unseen_as_spark_lists_them(tmp_path):
    landing, checkpoint = tmp_path.resolve() / "landing", tmp_path / "checkpoint"
    hidden = ("users/_tmp.json", "users/.part.crc", "_spark_metadata/0", "users/f.json._COPYING_")
    for name in ("users/a.json", "users/b.json", "users/c d.json", "stars/e.json", *hidden):
        (landing / name).parent.mkdir(parents=True, exist_ok=True)
        (landing / name).write_text("{}\n")
    assert seen_files(as_location(checkpoint)) == []
    everything = {str(landing.resolve() / n) for n in ("users/a.json", "users/b.json", "users/c d.json", "stars/e.json")}
    assert unseen_files(landing, as_location(checkpoint)) == everything
    # a compaction holds everything before it; a delta logged before it is not read again
    _log(checkpoint, "8", (landing / "stars/e.json").as_uri())
    _log(checkpoint, "9.compact", f"file:{landing / 'users/a.json'}")  # Hadoop's spelling
    _log(checkpoint, "10", (landing / "users/c d.json").as_uri())  # (spelled %20 in the URI)
    assert sorted(seen_files(as_location(checkpoint))) == sorted([f"file:{landing / 'users/a.json'}", (landing / "users/c d.json").as_uri()])
    assert unseen_files(landing, as_location(checkpoint)) == {str(landing.resolve() / "users/b.json"), str(landing.resolve() / "stars/e.json")}
