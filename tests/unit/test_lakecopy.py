"""The benchmark's kept lake: a restore puts back the warehouse, its SQLite catalog (under a connection
left open, as the JVM's is) and the local states exactly as they were kept."""

import sqlite3
from pathlib import Path

from bench import lakecopy


def _lake(root: Path) -> tuple[Path, Path]:
    warehouse, state = root / "warehouse", root / "state-many"
    (warehouse / "views" / "v" / "metadata").mkdir(parents=True)
    (warehouse / "views" / "v" / "data").mkdir(parents=True)
    (warehouse / "views" / "v" / "metadata" / "00001.metadata.json").write_text("v1")
    (warehouse / "views" / "v" / "data" / "a.parquet").write_text("rows a")
    (warehouse / "_lakemv").mkdir()
    (warehouse / "_lakemv" / "jvm.log").write_text("log")
    with sqlite3.connect(warehouse / "catalog.db") as db:
        db.execute("CREATE TABLE tables (name TEXT, location TEXT)")
        db.execute("INSERT INTO tables VALUES ('v', '00001.metadata.json')")
    state.mkdir()
    (state / "state.sqlite").write_text("digests at the start")
    return warehouse, state


def test_a_restore_undoes_commits_catalog_changes_and_state_writes(tmp_path: Path):
    warehouse, state = _lake(tmp_path)
    kept = tmp_path / "kept"
    lakecopy.keep(warehouse, kept, [state])
    # the catalog stays open across the restore, as the JVM's connection does
    catalog = sqlite3.connect(warehouse / "catalog.db")
    metadata = warehouse / "views" / "v" / "metadata"
    (metadata / "00002.metadata.json").write_text("v2")
    (warehouse / "views" / "v" / "data" / "b.parquet").write_text("rows b")
    (warehouse / "views" / "w" / "data").mkdir(parents=True)  # a table created after the copy
    (warehouse / "views" / "w" / "data" / "c.parquet").write_text("rows c")
    (warehouse / "views" / "v" / "data" / "a.parquet").unlink()  # expired by a later commit
    catalog.execute("UPDATE tables SET location = '00002.metadata.json'")
    catalog.commit()
    (state / "state.sqlite").write_text("digests after a batch")

    lakecopy.restore(kept, warehouse, [state])

    assert sorted(p.name for p in metadata.iterdir()) == ["00001.metadata.json"]
    assert (warehouse / "views" / "v" / "data" / "a.parquet").read_text() == "rows a"
    assert not (warehouse / "views" / "v" / "data" / "b.parquet").exists()
    assert not (warehouse / "views" / "w").exists()
    assert catalog.execute("SELECT location FROM tables").fetchall() == [("00001.metadata.json",)]
    assert (state / "state.sqlite").read_text() == "digests at the start"
    catalog.close()


def test_iceberg_files_are_linked_not_copied(tmp_path: Path):
    warehouse, state = _lake(tmp_path)
    kept = tmp_path / "kept"
    lakecopy.keep(warehouse, kept, [state])
    data = Path("views") / "v" / "data" / "a.parquet"
    assert (kept / "warehouse" / data).stat().st_ino == (warehouse / data).stat().st_ino
    log = Path("_lakemv") / "jvm.log"  # anything else is copied: it may be written in place
    assert (kept / "warehouse" / log).stat().st_ino != (warehouse / log).stat().st_ino
