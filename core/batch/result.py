"""What a batch did: the results a processed unit, its views and a whole ingest run return, for the CLI and the
flow's log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ViewResult:
    """What one maintenance step did to a view."""

    view: str
    keys: int | None  # view keys recomputed; None when every key was (a backfill)
    upserts: int = 0
    deletes: int = 0
    seconds: float = 0.0
    steps: Mapping[str, float] = field(default_factory=dict)  # seconds per step: keys, diff, feed, merge
    paused: bool = False  # a backfill holds the view: this batch left it alone
    note: str | None = None  # paused by whom, caught up after a backfill, superseded by a backfill
    held: int = 0  # keys whose recompute gave several rows (a unique violation): their rows were kept
    rows_read: int | None = None  # mirror rows the recompute read for the keys (the local state counts them)
    deferred: bool = False  # the keys wait in the local state for the view's freshness budget (lakemv.core.batch.deferral)
    plan: str | None = None  # 'incremental' or 'whole', as chosen by predicted cost (lakemv.core.batch.choice)
    reason: str | None = None  # why: the two predictions

    @property
    def way(self) -> str:
        """How the view was maintained: the plan chosen, or whole when every key was (a build, a backfill)."""
        return self.plan or ("whole" if self.keys is None else "incremental")

    def as_json(self) -> dict[str, object]:
        """What `describe` says, as JSON values (`keys` null: every key)."""
        return {
            "keys": self.keys, "upserts": self.upserts, "deletes": self.deletes, "plan": None if self.paused or self.deferred else self.way,
            "reason": self.reason, "note": self.note, "paused": self.paused, "deferred": self.deferred, "held": self.held,
            "rows_read": self.rows_read, "seconds": round(self.seconds, 3), "steps": {k: round(v, 3) for k, v in self.steps.items()},
        }  # fmt: skip

    def describe(self) -> str:
        if self.paused:
            return f"{self.view}: {self.note or 'paused'}"
        if self.deferred:
            return f"{self.view}: {self.keys} keys deferred ({self.note})"
        scope = "all keys" if self.keys is None else f"{self.keys} keys"
        note = f"; {self.note}" if self.note else f"; {self.reason}" if self.reason else ""
        if self.held:
            note += f"; {HELD.format(self.held)}"
        return f"{self.view}: {scope} -> {self.upserts} upserted, {self.deletes} deleted{note} ({self.seconds:.2f}s)"


# How a batch line reports keys left alone because their recompute gave several rows (lakemv.core.cdc.unique).
HELD = "{} keys held: several rows for one key (a declared unique key is violated), the previous row kept"


@dataclass(frozen=True)
class BatchResult:
    """What one batch did: lines read, events parsed, changes merged per table, rejects, time."""

    batch_id: int
    lines: int
    events: int
    merged: Mapping[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    unique_violations: int = 0  # values of declared unique keys several live rows hold (their changes are dead letters too)
    skipped: int = 0
    skip_reasons: Mapping[str, int] = field(default_factory=dict)
    letters: Mapping[str, int] = field(default_factory=dict)  # dead letters per source table ('' when no table is known)
    late: Mapping[str, int] = field(default_factory=dict)  # per event source: late events (counted, or among the dead letters)
    seconds: float = 0.0
    views: Mapping[str, ViewResult] = field(default_factory=dict)
    chunk: int = 0
    replayed: bool = False  # a crash interrupted an earlier attempt of this unit
    already_committed: bool = False  # ... which had finished: nothing was left to do
    conflicts_retried: int = 0
    notes: tuple[str, ...] = ()  # schema drift: columns added, columns missing, views affected
    steps: Mapping[str, float] = field(default_factory=dict)  # seconds per step (parse, plan, mirrors, views, ledger)
    set_wise: bool = False  # Spark parsed the unit's lines (lakemv.spark.bulk)
    waited: float = 0.0  # seconds the unit waited for a compaction turn to end (lakemv.catalog.writer.CommitTurns)
    idle: bool = False  # no lines: views whose freshness budget fell due between batches (lakemv.core.batch.deferral)

    def as_json(self) -> dict[str, object]:
        """The batch line as JSON values (`lakemv ingest --log-format json`): per table the changes
        merged, per event source its late events, per view what `ViewResult.as_json` gives."""
        return {
            "batch": self.batch_id, "chunk": self.chunk, "idle": self.idle, "replayed": self.replayed,
            "already_committed": self.already_committed, "set_wise": self.set_wise, "lines": self.lines, "events": self.events,
            "tables": dict(sorted(self.merged.items())), "dead_letters": self.dead_letters, "unique_violations": self.unique_violations,
            "skipped": self.skipped, "skip_reasons": dict(sorted(self.skip_reasons.items())), "late": dict(sorted(self.late.items())),
            "views": {name: v.as_json() for name, v in self.views.items()}, "conflicts_retried": self.conflicts_retried,
            "waited_seconds": round(self.waited, 3), "notes": list(self.notes), "seconds": round(self.seconds, 3),
            "steps": {k: round(v, 3) for k, v in self.steps.items()},
        }  # fmt: skip

    def describe(self) -> str:
        name = f"batch {self.batch_id}" + (f".{self.chunk}" if self.chunk else "")
        if self.idle:
            return "between batches, due: " + "; ".join(v.describe() for v in self.views.values()) + f", {self.seconds:.2f}s"
        if self.already_committed:
            return f"{name}: replayed, already committed ({self.lines} lines), {self.seconds:.2f}s"
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.merged.items())) or "no changes"
        views = "".join(
            f"; {v.view} {v.note}" if v.paused
            else f"; {v.view} {v.keys} keys deferred ({v.note})" if v.deferred
            else f"; {v.view} {v.keys} keys -> {v.upserts} upserts, {v.deletes} deletes" + (f" ({v.note or v.reason})" if v.note or v.reason else "")
            for v in self.views.values()
        )  # fmt: skip
        extra = (" (set-wise)" if self.set_wise else "") + (" (replayed)" if self.replayed else "") + (
            f", {self.conflicts_retried} commit conflicts retried" if self.conflicts_retried else ""
        ) + (f", waited {self.waited:.1f}s for compaction" if self.waited >= 0.1 else "")
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.skip_reasons.items()))
        skipped = f"{self.skipped} skipped" + (f" ({reasons})" if reasons else "")
        unique = f" ({self.unique_violations} unique violations)" if self.unique_violations else ""
        late = "; late events: " + ", ".join(f"{t} {n}" for t, n in sorted(self.late.items())) if self.late else ""
        return (
            f"{name}{extra}: {self.lines} lines, {self.events} events -> {tables}; "
            f"{self.dead_letters} dead letters{unique}, {skipped}{late}{views}, {self.seconds:.2f}s"
        )


@dataclass
class IngestResult:
    """Totals over the units one ingest run processed."""

    batches: list[BatchResult] = field(default_factory=list)
    behind: Mapping[str, int] = field(default_factory=dict)  # per source table: records its stream holds beyond what was read

    @property
    def events(self) -> int:
        return sum(b.events for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    @property
    def seconds(self) -> float:
        return sum(b.seconds for b in self.batches)

    @property
    def conflicts_retried(self) -> int:
        return sum(b.conflicts_retried for b in self.batches)
