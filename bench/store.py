"""The local state's store, measured on the operations a batch and a backlog make of it.

    .venv/bin/python -m bench.store --rows 150000 1500000      # stars at 100k and 1M users

Side by side, on the same rows of `stars` (primary key username, repo_name, repo_owner; looked up
by username and by (repo_owner, repo_name), as `user_profile` and `repo_summary` do):
- lakemv's store (`lakemv.core.state.store.Store`: SQLite, a marshal blob per row, one B-tree per
  index), driven through its own API with the values it is given today (Python tuples);
- DuckDB as a set-wise candidate: the same columns as a table with a primary key and the two
  secondary indexes, fed and queried with Arrow tables (`INSERT OR REPLACE ... SELECT`, semi joins).

Per store and size: loading the rows; a backlog unit (50k changed rows: read what the store holds for
their keys, then write them); a batch (1k changed rows: the same, then the rows of 1k usernames and
of 1k repositories, as the lookups of a view's walk). Writes bench/results/store-<time>.json and
prints a table. Each operation is timed `--repeat` times on fresh keys; the report gives medians.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.core.state.layout import MirrorPart
from lakemv.core.state.store import Store

RESULTS = PROJECT_ROOT / "bench" / "results"
COLUMNS = ("username", "repo_name", "repo_owner", "created_at")
PK = ("username", "repo_name", "repo_owner")
BY_USER, BY_REPO = ("username",), ("repo_owner", "repo_name")
PART = MirrorPart(
    table="stars",
    primary_key=PK,
    columns=(("username", "string"), ("repo_name", "string"), ("repo_owner", "string"), ("created_at", "timestamp")),
    indexes=(tuple(sorted(BY_REPO)), BY_USER),
)


def generate(rows: int, seed: int) -> pa.Table:
    """`rows` stars of rows/1.5 users over rows/3 repositories (the generator's proportions)."""
    rng = random.Random(seed)
    users, repos = max(1, int(rows / 1.5)), max(1, rows // 3)
    seen: set[tuple[str, str, str]] = set()
    out: dict[str, list] = {c: [] for c in COLUMNS}
    while len(seen) < rows:
        repo = rng.randrange(repos)
        key = (f"user{rng.randrange(users):07d}", f"repo{repo:07d}", f"user{repo % users:07d}")
        if key in seen:
            continue
        seen.add(key)
        for column, value in zip(COLUMNS, (*key, 1_700_000_000_000_000 + len(seen)), strict=True):
            out[column].append(value)
    return pa.table({**out, "_pos": pa.array(range(rows), pa.int64()), "_del": pa.array([False] * rows)})


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


class SqliteStore:
    """lakemv's store through its API: tuples in, tuples out."""

    name = "sqlite (lakemv's store)"

    def __init__(self, folder: Path):
        self.store = Store(folder / "state.sqlite")
        self.store.attach_mirror(PART)

    def load(self, table: pa.Table) -> None:
        self.store.drop_indexes("stars")
        self.store.put_rows("stars", self._rows(table))
        self.store.rebuild_indexes("stars")

    @staticmethod
    def _rows(table: pa.Table) -> list:
        values = zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True)
        return list(zip(values, table.column("_pos").to_pylist(), table.column("_del").to_pylist(), strict=True))

    def unit(self, changed: pa.Table) -> int:
        keys = list(zip(*(changed.column(c).to_pylist() for c in PK), strict=True))
        found = self.store.stored("stars", keys)
        self.store.put_rows("stars", self._rows(changed))
        return len(found)

    def lookup(self, columns: tuple[str, ...], values: pa.Table) -> int:
        wanted = list(zip(*(values.column(c).to_pylist() for c in columns), strict=True))
        return len(self.store.lookup("stars", columns, wanted, (False,) * len(columns)))

    def close(self) -> None:
        self.store.close()


class DuckStore:
    """DuckDB: Arrow in, Arrow out; the rows as typed columns."""

    name = "duckdb (set-wise)"

    def __init__(self, folder: Path):
        self.db = duckdb.connect(str(folder / "state.duckdb"))
        self.db.execute("SET threads = 2")
        self.db.execute(
            "CREATE TABLE stars (username VARCHAR, repo_name VARCHAR, repo_owner VARCHAR, created_at BIGINT, _pos BIGINT, "
            "_del BOOLEAN, PRIMARY KEY (username, repo_name, repo_owner))"
        )

    def load(self, table: pa.Table) -> None:
        self.db.register("incoming", table)
        self.db.execute("INSERT INTO stars SELECT * FROM incoming")
        self.db.unregister("incoming")
        self.db.execute("CREATE INDEX ix_user ON stars (username)")
        self.db.execute("CREATE INDEX ix_repo ON stars (repo_owner, repo_name)")
        self.db.execute("CHECKPOINT")

    def unit(self, changed: pa.Table) -> int:
        self.db.register("incoming", changed)
        self.db.execute("BEGIN")
        found = self.db.execute("SELECT s.* FROM stars s SEMI JOIN incoming i USING (username, repo_name, repo_owner)").to_arrow_table()
        self.db.execute("INSERT OR REPLACE INTO stars SELECT * FROM incoming")
        self.db.execute("COMMIT")
        self.db.unregister("incoming")
        return found.num_rows

    def lookup(self, columns: tuple[str, ...], values: pa.Table) -> int:
        self.db.register("wanted", values.select(list(columns)))
        rows = self.db.execute(f"SELECT s.* FROM stars s SEMI JOIN wanted w USING ({', '.join(columns)}) WHERE NOT s._del").to_arrow_table()
        self.db.unregister("wanted")
        return rows.num_rows

    def close(self) -> None:
        self.db.close()


def changed_rows(base: pa.Table, rng: random.Random, count: int, position: int) -> pa.Table:
    """`count` rows of `base` (existing keys; a tenth are new keys) with a new position and time."""
    picked = base.take(pa.array(rng.sample(range(base.num_rows), count)))
    fresh = count // 10
    names = picked.column("username").to_pylist()
    names[:fresh] = [f"new{position + i:09d}" for i in range(fresh)]
    return picked.set_column(0, "username", pa.array(names)).set_column(
        4, "_pos", pa.array(range(position, position + count), pa.int64())
    )


def measure(kind: type, rows: int, repeat: int, folder: Path) -> dict:
    base = generate(rows, seed=rows)
    rng = random.Random(7)
    store = kind(folder)
    result: dict = {"store": kind.name, "rows": rows, "load_s": round(timed(lambda: store.load(base)), 3)}
    size = sum(p.stat().st_size for p in folder.iterdir())
    result["disk_mib"] = round(size / 2**20, 1)
    position = rows
    for label, count in (("unit_50k", 50_000), ("batch_1k", 1_000)):
        runs = []
        for _ in range(repeat):
            changed = changed_rows(base, rng, min(count, rows), position)
            position += changed.num_rows
            runs.append(timed(lambda c=changed: store.unit(c)))
        result[f"{label}_s"] = round(statistics.median(runs), 4)
        result[f"{label}_runs_s"] = [round(r, 4) for r in runs]
    for label, columns in (("by_user_1k", BY_USER), ("by_repo_1k", BY_REPO)):
        runs = []
        for _ in range(repeat):
            wanted = base.take(pa.array(rng.sample(range(rows), min(1_000, rows)))).select(list(columns))
            runs.append(timed(lambda w=wanted, c=columns: store.lookup(c, w)))
        result[f"{label}_s"] = round(statistics.median(runs), 4)
        result[f"{label}_runs_s"] = [round(r, 4) for r in runs]
    store.close()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[150_000, 1_500_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    results = []
    for rows in args.rows:
        for kind in (SqliteStore, DuckStore):
            folder = Path(tempfile.mkdtemp(prefix="lakemv-store-"))
            try:
                results.append(measure(kind, rows, args.repeat, folder))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            print(json.dumps(results[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"store-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"at": datetime.now(UTC).isoformat(), "cpus": os.cpu_count(), "results": results}, indent=2))
    header = ("store", "rows", "load_s", "disk_mib", "unit_50k_s", "batch_1k_s", "by_user_1k_s", "by_repo_1k_s")
    print(" | ".join(header))
    for r in results:
        print(" | ".join(str(r[h]) for h in header))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
