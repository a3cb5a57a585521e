"""Who may write a view's main branch now: `maintain`, or a backfill that paused it.

The state is one table property of the view table, so it changes atomically with the catalog:

* absent - active: each batch maintains the view;
* `paused` - a backfill is writing the view to its own branch; batches skip the view (their mirror
  changes are covered by the backfill, which reads the mirrors after the pause);
* `resume` - the backfill published; the next batch first catches the view up from the mirror
  snapshots the backfill last read (`since`) to the current ones, then clears the state.

A catch-up derives the changed rows of each mirror by comparing two of its snapshots, so no change
between them is missed however many batches skipped the view.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pyspark.sql import SparkSession

from catalog.declarations import SourceTable
from catalog.tables import TableNames
from spark.mirror import live_rows_sql

STATE = "lakemv.maintenance"


@dataclass(frozen=True)
class ViewState:
    """The maintenance state of one view (see the module docstring)."""

    state: Literal["active", "paused", "resume"] = "active"
    since: Mapping[str, int | None] = field(default_factory=dict)  # mirror snapshots: paused at / caught up to
    by: str | None = None  # the backfill that paused the view
    branch: str | None = None
    published: bool = False
    at: str | None = None  # when the state was set (UTC, ISO)
    raw: str | None = None  # the property text: compared to notice a change of hands

    def to_json(self) -> str:
        body = {"state": self.state, "since": dict(self.since), "by": self.by, "branch": self.branch,
                "published": self.published, "at": self.at or datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
        return json.dumps(body, sort_keys=True)

    @classmethod
    def parse(cls, raw: str | None) -> ViewState:
        if not raw:
            return cls()
        body = json.loads(raw)
        return cls(
            state=body["state"],
            since={k: v for k, v in body.get("since", {}).items()},
            by=body.get("by"),
            branch=body.get("branch"),
            published=bool(body.get("published")),
            at=body.get("at"),
            raw=raw,
        )


def read_state(spark: SparkSession, table: str) -> ViewState:
    """The view table's maintenance state (fresh from the catalog: the catalog cache is off)."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    return ViewState.parse(next((r["value"] for r in rows if r["key"] == STATE), None))


def write_state(spark: SparkSession, table: str, state: ViewState) -> None:
    """Set (or, for `active`, remove) the state; a metadata-only commit that Iceberg retries itself."""
    if state.state == "active":
        spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES IF EXISTS ('{STATE}')")
    else:
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{STATE}' = '{state.to_json()}')")


def mirror_snapshots(spark: SparkSession, names: TableNames, tables: Iterable[str]) -> dict[str, int | None]:
    """The current snapshot id of each mirror (None: the mirror has none yet)."""
    found = {}
    for table in tables:
        rows = spark.sql(f"SELECT snapshot_id FROM {names.mirror(table)}.refs WHERE name = 'main'").collect()
        found[table] = int(rows[0][0]) if rows else None
    return found


def live_at_sql(names: TableNames, source: SourceTable, snapshot: int | None, columns: Sequence[str] | None = None) -> str:
    """The live rows of a mirror as of `snapshot` (no rows when None: the mirror was empty then)."""
    if snapshot is None:
        return f"{live_rows_sql(names, source, columns=columns)} AND FALSE"
    return live_rows_sql(names, source, snapshot, columns)


def changed_rows_sql(
    names: TableNames, source: SourceTable, old: int | None, new: int | None, columns: Sequence[str]
) -> str:
    """Old and new images of the live rows that differ between two snapshots of a mirror."""
    before = live_at_sql(names, source, old, columns)
    after = live_at_sql(names, source, new, columns)
    return f"(({before}) EXCEPT ALL ({after})) UNION ALL (({after}) EXCEPT ALL ({before}))"
