"""Running the real `lakemv` command, and comparing its JSON output with a model's truth."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from catalog.declarations import SourceTable
from spark.coerce import iso_to_micros
from tests.conftest import LAKEMV


def lakemv(*args: str, env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI; small Spark so tests stay light."""
    full_env = {**os.environ, "LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "2g", "LAKEMV_SHUFFLE_PARTITIONS": "2", **(env or {})}
    done = subprocess.run([LAKEMV, *args], capture_output=True, text=True, env=full_env, timeout=600)
    if check:
        assert done.returncode == 0, f"lakemv {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr
    return done


def queried_rows(warehouse: Path, source: SourceTable, env: Mapping[str, str] | None = None) -> list[tuple]:
    """`lakemv query "select * from <table>" --format json`, timestamps back to epoch micros, sorted."""
    out = lakemv("--warehouse", str(warehouse), "query", f"select * from {source.name}", "--format", "json", env=env).stdout
    temporal = {c.name for c in source.columns if c.type == "timestamp"}
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    for row in rows:
        assert list(row) == list(source.column_names), "exactly the declared columns, no bookkeeping"
    return sorted(
        tuple(iso_to_micros(r[c]) if c in temporal and r[c] is not None else r[c] for c in source.column_names) for r in rows
    )


def model_rows(rows: list[dict], source: SourceTable) -> list[tuple]:
    return sorted(tuple(r[c] for c in source.column_names) for r in rows)


def move_round(staging: Path, landing: Path, number: int) -> int:
    """Move the files of one generated round into the landing directory (as they would arrive)."""
    moved = 0
    for path in sorted(staging.glob(f"*/r{number:04d}-*.json")):
        target = landing / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
        moved += 1
    return moved
