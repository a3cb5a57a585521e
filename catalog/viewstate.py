"""Who may write a view's main branch now: `maintain`, or a backfill that paused it (the record;
lakemv.spark.views.state reads and writes it with Spark, lakemv.duck.verify reads it with pyiceberg).

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

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
