"""Running the real `lakemv` command, and comparing its JSON output with a model's truth."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import LEDGER, OPS_NAMESPACE
from lakemv.core.cdc.coerce import iso_to_micros
from lakemv.duck.query import connect_duckdb, metadata_location
from tests.conftest import LAKEMV


def cli_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment with a small Spark (tests stay light), then `env`."""
    return {**os.environ, "LAKEMV_SPARK_MASTER": "local[2]", "LAKEMV_DRIVER_MEMORY": "2g", "LAKEMV_SHUFFLE_PARTITIONS": "2", **(env or {})}


def lakemv(*args: str, env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI; small Spark so tests stay light."""
    done = subprocess.run([LAKEMV, *args], capture_output=True, text=True, env=cli_env(env), timeout=600)
    if check:
        assert done.returncode == 0, f"lakemv {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
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


def _ordered(value: Any) -> Any:
    """A sortable stand-in for a key value (None first, never compared with a value)."""
    return (0, "") if value is None else (1, value)


def assert_same_rows(name: str, got: list[dict[str, Any]], expected: list[dict[str, Any]], key: Sequence[str], context: str = "") -> None:
    """Compare as sets keyed by `key` (lists inside rows in their given order); a short message on mismatch."""

    def by_key(rows: list[dict[str, Any]], side: str) -> dict[tuple, dict[str, Any]]:
        keyed: dict[tuple, dict[str, Any]] = {}
        for row in rows:
            k = tuple(row[c] for c in key)
            assert k not in keyed, f"{name}{context}: {side} has key {k} twice:\n  {keyed[k]}\n  {row}"
            keyed[k] = row
        return keyed

    lake, model = by_key(got, "lake"), by_key(expected, "model")
    if lake == model:
        return
    ordered = sorted(set(lake) | set(model), key=lambda k: tuple(_ordered(v) for v in k))
    missing = [k for k in ordered if k not in lake]
    extra = [k for k in ordered if k not in model]
    differing = [k for k in ordered if k in lake and k in model and lake[k] != model[k]]
    lines = [f"{name}{context}: {len(lake)} rows in the lake, {len(model)} in the model; "
             f"{len(missing)} missing, {len(extra)} extra, {len(differing)} differ"]
    if missing:
        lines.append(f"first missing key {missing[0]}: model row {model[missing[0]]}")
    if extra:
        lines.append(f"first extra key {extra[0]}: lake row {lake[extra[0]]}")
    if differing:
        k = differing[0]
        columns = [c for c in model[k] if lake[k].get(c) != model[k].get(c)]
        lines.append(f"first differing key {k}, columns {columns}:")
        for c in columns:
            lines.append(f"  {c}:\n    lake : {lake[k].get(c)!r}\n    model: {model[k].get(c)!r}")
    raise AssertionError("\n".join(lines))


def ledger_sum(settings: LakeSettings, column: str) -> int:
    """Sum of a ledger column over the committed units (lines applied, conflicts retried)."""
    location = metadata_location(settings, OPS_NAMESPACE, LEDGER)
    if location is None:
        return 0
    con = connect_duckdb(threads=1)
    try:
        return int(con.execute(f"SELECT coalesce(sum({column}), 0) FROM iceberg_scan('{location}')").fetchone()[0])
    finally:
        con.close()
